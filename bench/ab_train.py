#!/usr/bin/python3
"""Interleaved A/B timing of `xylem train` variants (and optionally the PyTorch peers) on a shared machine.

Each repetition runs every variant once, in order, so that a change in the machine's load hits all
of them alike; the report is the median (and the best) ms per training step of each variant over
the repetitions, and each variant's ratio to the reference variant's median.

  bench/ab_train.py --config examples/gpt_char.toml --steps 60 --reps 5 \\
      --variant "before:XYLEM_PLUGIN_PATH=/tmp/plug_head" --variant "after:" \\
      --torch "bench/torch_gpt.py --threads 1 --sample-tokens 0" --reference torch

A variant is NAME:ENV... (space-separated NAME=VALUE words for the environment, e.g.
XYLEM_NATIVE_ISA=avx2, XYLEM_PLUGIN_PATH=DIR). xylem's ms per step is its metrics.json epoch
"seconds" over "steps" (training only: validation and start-up excluded). --torch NAME=CMD adds
a PyTorch peer (NAME=VALUE environment words, then bench/torch_gpt.py or bench/torch_char_rnn.py
and their flags, e.g. "torch2=OMP_WAIT_POLICY=PASSIVE bench/torch_gpt.py --threads 2"; --iters/--max-steps
is set from --steps): its ms per step is the "final" row's "seconds" over its iterations (the
clock paused during validation). --reference NAME picks the ratios' denominator (default: the
first variant).

--cpu-base S0 also reports CPU time per step, which the machine's load changes far less than the
wall clock (a process that waits for a CPU is not charged for it): each variant runs again with
S0 steps in the same repetition, and (CPU seconds of the --steps run - those of the S0 run) /
(steps - S0) is its CPU ms per step, start-up and validation cancelled out (validation's windows
do not depend on the steps). With one thread (XYLEM_NUM_THREADS=1, torch --threads 1) that is
the step's own work; with more it also counts the workers' spinning.
"""
import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_xylem(xylem, config, steps, env_words, extra):
    env = dict(os.environ)
    for w in env_words:
        k, _, v = w.partition("=")
        env[k] = v
    with tempfile.TemporaryDirectory() as out:
        cmd = [xylem, "train", "--config", config, "--backend", "native", "--epochs", "1", "--max-steps",
               str(steps), "--out", out] + extra
        r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
        with open(os.path.join(out, "metrics.json")) as f:
            m = json.load(f)
    e = m["epochs"][0]
    return 1000.0 * e["seconds"] / e["steps"], e.get("train_loss")


def run_torch(cmd, steps):
    words = shlex.split(cmd)
    env = dict(os.environ)
    while words and "=" in words[0] and not words[0].startswith("-"):  # leading NAME=VALUE words
        k, _, v = words.pop(0).partition("=")
        env[k] = v
    script = words[0]
    flag = "--iters" if "gpt" in os.path.basename(script) else "--max-steps"
    args = ["/usr/bin/python3", os.path.join(ROOT, script)] + words[1:] + [flag, str(steps)]
    if "gpt" in os.path.basename(script):
        args += ["--eval-every", "1000000", "--print-every", str(steps)]
    else:
        args += ["--epochs", "1"]
    r = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{r.stderr[-2000:]}")
    final = None
    for line in r.stdout.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if row.get("kind") == "final" or ("seconds" in row and "steps" in row):
            final = row
    if final is None:
        raise RuntimeError(f"no final row from {' '.join(args)}:\n{r.stdout[-2000:]}")
    iters = final.get("iters") or final.get("steps")
    return 1000.0 * final["seconds"] / iters, final.get("train_loss")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--xylem", default=os.path.join(ROOT, "build", "bin", "xylem"))
    p.add_argument("--variant", action="append", default=[], help="NAME:ENV=VALUE ...")
    p.add_argument("--torch", action="append", default=[], help="NAME=SCRIPT FLAGS (bench/torch_*.py)")
    p.add_argument("--reference", default=None)
    p.add_argument("--extra", default="", help="extra xylem train flags")
    p.add_argument("--cpu-base", type=int, default=0, help="also CPU ms per step, from a second run of S0 steps")
    a = p.parse_args()
    variants = []
    for v in a.variant:
        name, _, env = v.partition(":")
        variants.append(("xylem", name, env.split()))
    for t in a.torch:
        name, _, cmd = t.partition("=")
        variants.append(("torch", name, cmd))
    times = {name: [] for _, name, _ in variants}
    cpu = {name: [] for _, name, _ in variants}

    def run(kind, what, steps):
        before = child_cpu()
        if kind == "xylem":
            ms, loss = run_xylem(a.xylem, a.config, steps, what, shlex.split(a.extra))
        else:
            ms, loss = run_torch(what, steps)
        return ms, loss, child_cpu() - before

    losses = {}
    print(f"machine: {os.uname().nodename}, nproc {os.cpu_count()}, load at start {os.getloadavg()}", flush=True)
    for rep in range(a.reps):
        for kind, name, what in variants:
            ms, loss, cpu_s = run(kind, what, a.steps)
            times[name].append(ms)
            losses[name] = loss
            note = ""
            if a.cpu_base:
                _, _, cpu0 = run(kind, what, a.cpu_base)
                cpu[name].append(1000.0 * (cpu_s - cpu0) / (a.steps - a.cpu_base))
                note = f", CPU {cpu[name][-1]:.2f} ms/step"
            print(f"rep {rep + 1} {name}: {ms:.2f} ms/step{note} (train loss {loss}), load {os.getloadavg()[0]:.1f}",
                  flush=True)
    ref = a.reference or variants[0][1]
    ref_med = statistics.median(times[ref])
    print(f"load at end {os.getloadavg()}")
    print(f"| variant | median ms/step | best | runs | vs {ref} (medians) |" +
          (f" CPU ms/step (median) | CPU vs {ref} |" if a.cpu_base else ""))
    print("|---|---:|---:|---|---:|" + ("---:|---:|" if a.cpu_base else ""))
    for _, name, _ in variants:
        t = times[name]
        line = (f"| {name} | {statistics.median(t):.2f} | {min(t):.2f} | {', '.join(f'{x:.1f}' for x in t)} | "
                f"{statistics.median(t) / ref_med:.3f}x |")
        if a.cpu_base:
            line += f" {statistics.median(cpu[name]):.2f} | {statistics.median(cpu[name]) / statistics.median(cpu[ref]):.3f}x |"
        print(line)


if __name__ == "__main__":
    sys.exit(main())

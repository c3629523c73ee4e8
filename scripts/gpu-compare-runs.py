#!/usr/bin/env python3
"""Compares two `xylem train` runs of the same config and seed (scripts/gpu-check.sh): the cuda run
against the native one, or a captured / resident cuda run against the eager one.

    gpu-compare-runs.py LABEL RUN_A RUN_B [--same] [--loss-rtol X] [--acc-tol P]

Reads each run's metrics.json (per epoch: train_loss, test_accuracy or val_loss, transfers_per_step)
and log.csv (the loss every print_every steps). Prints one line: the last epoch's numbers of both,
the largest relative difference of the logged losses, and RUN_A's host<->device transfers per step.
--same: the runs must give the same losses bit for bit (capture and resident data change where the
work is issued and where the data lives, not the arithmetic). Otherwise (two backends, different
GEMM and reduction orders) float noise grows over training: the last logged loss must be within
--loss-rtol (default 0.02) relative, so must the validation loss where there is one, and the test
accuracy within --acc-tol points (default 1.0).
Exit status 1 when they differ by more.
"""
import argparse
import csv
import json
import os
import sys


def load(run):
    with open(os.path.join(run, "metrics.json")) as f:
        metrics = json.load(f)
    with open(os.path.join(run, "log.csv")) as f:
        losses = [float(r["loss"]) for r in csv.DictReader(f) if r.get("kind", "interval") == "interval" and r["loss"]]
    return metrics, losses


def main():
    p = argparse.ArgumentParser()
    p.add_argument("label")
    p.add_argument("run_a")
    p.add_argument("run_b")
    p.add_argument("--same", action="store_true")
    p.add_argument("--loss-rtol", type=float, default=0.02)
    p.add_argument("--acc-tol", type=float, default=1.0)
    args = p.parse_args()
    try:
        (ma, la), (mb, lb) = load(args.run_a), load(args.run_b)
    except (OSError, KeyError, ValueError) as e:
        print(f"FAIL {args.label}: cannot read the runs: {e}")
        return 1
    ea, eb = ma["epochs"][-1], mb["epochs"][-1]
    n = min(len(la), len(lb))
    diffs = [abs(a - b) / max(abs(b), 1e-12) for a, b in zip(la[:n], lb[:n])]
    worst = max(diffs, default=float("nan"))
    last = diffs[-1] if diffs else float("nan")

    def acc(e):
        return 100.0 * e["test_accuracy"] if e.get("test_accuracy") is not None else None

    if args.same:
        ok = n > 0 and len(la) == len(lb) and worst == 0.0
    else:
        ok = n > 0 and last <= args.loss_rtol
        if acc(ea) is not None and acc(eb) is not None:
            ok = ok and abs(acc(ea) - acc(eb)) <= args.acc_tol
        if ea.get("val_loss") is not None and eb.get("val_loss") is not None:
            ok = ok and abs(ea["val_loss"] - eb["val_loss"]) <= args.loss_rtol * abs(eb["val_loss"])
    fmt = lambda v, f: "-" if v is None else f % v  # noqa: E731
    print(f"{'ok  ' if ok else 'FAIL'} {args.label}: {len(ma['epochs'])} epoch(s), {n} logged losses; "
          f"last loss {fmt(la[-1] if la else None, '%.6f')} vs {fmt(lb[-1] if lb else None, '%.6f')} "
          f"(rel. diff last {last:.2e}, worst {worst:.2e}); train loss {fmt(ea.get('train_loss'), '%.6f')} vs "
          f"{fmt(eb.get('train_loss'), '%.6f')}; test acc {fmt(acc(ea), '%.2f%%')} vs {fmt(acc(eb), '%.2f%%')}; "
          f"val loss {fmt(ea.get('val_loss'), '%.5f')} vs {fmt(eb.get('val_loss'), '%.5f')}; "
          f"transfers/step {fmt(ea.get('transfers_per_step'), '%.2f')} vs {fmt(eb.get('transfers_per_step'), '%.2f')}; "
          f"seconds {sum(e.get('seconds', 0) for e in ma['epochs']):.2f} vs {sum(e.get('seconds', 0) for e in mb['epochs']):.2f}",
          flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

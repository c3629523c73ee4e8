#!/usr/bin/env python3
"""Forward time of an imported model on xylem's native backend against ONNX Runtime's CPU provider,
same machine, same run, same thread count (docs/benchmarks.md, "ONNX import vs ONNX Runtime").

Exports torchvision's ResNet-18 and MobileNetV2 (random weights, eval mode, opset 17) and times,
interleaved per repetition: ORT's session.run (after 3 warm-up runs) and `xylem run`'s second
forward pass (the first includes the warm-up), XYLEM_NUM_THREADS and ORT's intra-op threads both
--threads. Prints the median and the minimum of each, and xylem's --profile split of one run.

  build/onnx-venv/bin/python tests/onnx/bench_vs_ort.py --xylem build/bin/xylem --work /tmp/bench [--threads 2]
"""
import argparse
import os
import re
import statistics
import subprocess
import time

import numpy as np
import torch
import torchvision


def export(name, batch, work):
    torch.manual_seed(1)
    model = getattr(torchvision.models, name)(weights=None).eval()
    path = os.path.join(work, f"{name}.onnx")
    if not os.path.exists(path):
        torch.onnx.export(model, torch.randn(1, 3, 224, 224), path, opset_version=17, input_names=["x"],
                          output_names=["logits"], dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
    x = np.random.default_rng(1).standard_normal((batch, 3, 224, 224)).astype(np.float32)
    xin = os.path.join(work, f"{name}_b{batch}.npy")
    np.save(xin, x)
    return path, x, xin


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--xylem", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--cases", default="resnet18:1,resnet18:16,mobilenet_v2:1,mobilenet_v2:16")
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    import onnxruntime as ort
    env = dict(os.environ, XYLEM_NUM_THREADS=str(args.threads))
    print(f"threads {args.threads}, onnxruntime {ort.__version__}, {args.reps} interleaved repetitions")
    for case in args.cases.split(","):
        name, batch = case.split(":")
        path, x, xin = export(name, int(batch), args.work)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = args.threads
        opts.inter_op_num_threads = 1
        s = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        for _ in range(3):
            s.run(None, {"x": x})
        t_ort, t_xy = [], []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            s.run(None, {"x": x})
            t_ort.append(time.perf_counter() - t0)
            r = subprocess.run([args.xylem, "run", path, "--input", xin, "--out", args.work, "--backend", "native"],
                               capture_output=True, text=True, env=env, check=True)
            t_xy.append(float(re.search(r"\(first\), ([0-9.]+) s \(second\)", r.stdout).group(1)))
        mo, mx = statistics.median(t_ort), statistics.median(t_xy)
        print(f"{name:12s} batch {batch:>2s}: ORT median {mo * 1e3:8.1f} ms (min {min(t_ort) * 1e3:8.1f}), "
              f"xylem median {mx * 1e3:8.1f} ms (min {min(t_xy) * 1e3:8.1f}): xylem / ORT {mx / mo:.2f}x", flush=True)
        r = subprocess.run([args.xylem, "run", path, "--input", xin, "--out", args.work, "--backend", "native", "--profile"],
                           capture_output=True, text=True, env=env, check=True)
        lines = r.stdout.splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith("op "))
        end = next(i for i, line in enumerate(lines) if "ms in ops" in line)
        print("\n".join("    " + line for line in lines[start:end + 1]), flush=True)  # the per-op split


if __name__ == "__main__":
    main()

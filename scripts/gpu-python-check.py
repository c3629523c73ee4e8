#!/usr/bin/env python3
"""The Python package on cuda (scripts/gpu-check.sh; PYTHONPATH = the package scripts/gpu-bundle.sh
built for the GPU image's python3): the Fashion MLP of examples/fashion_mlp.toml fitted for one
epoch from NumPy arrays on cuda and on native with the same seed, then evaluate and predict on both.

    PYTHONPATH=... python3 scripts/gpu-python-check.py [--out DIR] [--epochs N]

Passes when cuda's losses follow native's within float noise (the last history loss within 2%
relative, the test accuracy within a point) and cuda's predictions are finite; the largest
difference of the two models' probabilities on 1000 test images is printed (two trainings' float
noise, not a bar). Exit status 1 otherwise.
"""
import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "python"))

import xylem  # noqa: E402
from fashion_data import load  # noqa: E402


def run(backend, data, epochs, out):
    x_train, y_train, x_test, y_test = data
    model = xylem.Model.from_config(os.path.join(HERE, "..", "examples", "fashion_mlp.toml"), backend=backend)
    t0 = time.time()
    history = model.fit(x_train, y_train, epochs=epochs, verbose=0)
    fit_s = time.time() - t0
    result = model.evaluate(x_test, y_test)
    t0 = time.time()
    prob = model.predict(x_test[:1000])
    predict_s = time.time() - t0
    model.save(os.path.join(out, f"mlp-{backend}.safetensors"))
    loss = history["loss"]
    print(f"{backend:6s}: fit {epochs} epoch(s) {fit_s:.2f} s, loss per epoch {[round(v, 5) for v in loss]}, "
          f"evaluate {result}, predict 1000 images {predict_s * 1000:.1f} ms, output {list(prob.shape)}", flush=True)
    return loss, result, prob


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="gpu-python")
    p.add_argument("--epochs", type=int, default=1)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    print("xylem", xylem.__file__)
    print("backends:", xylem.backends())
    data = load()
    cuda = run("cuda", data, args.epochs, args.out)
    native = run("native", data, args.epochs, args.out)
    loss_rel = abs(cuda[0][-1] - native[0][-1]) / abs(native[0][-1])
    acc_diff = 100.0 * abs(cuda[1]["accuracy"] - native[1]["accuracy"])
    ok = loss_rel <= 0.02 and acc_diff <= 1.0 and np.all(np.isfinite(cuda[2]))
    print(f"{'ok' if ok else 'FAIL'}: last loss rel. diff {loss_rel:.2e}, test accuracy diff {acc_diff:.2f} points, "
          f"max |p_cuda - p_native| over 1000 images {float(np.max(np.abs(cuda[2] - native[2]))):.2e}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

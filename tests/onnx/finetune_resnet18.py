#!/usr/bin/env python3
"""Fine-tuning an imported ResNet-18 with `xylem train` (issue 28; ctest onnx.finetune_resnet18).

torchvision's ResNet-18 with a 10-class head and random weights, exported by torch 1.13 in training
mode with its BatchNormalization nodes kept (training=PRESERVE, no constant folding: what
docs/onnx.md says to do for fine-tuning) at opset 17 for [N, 3, 28, 28] input; Fashion-MNIST images
repeated over three channels (4-dim IDX files, as data.dir takes an RGB model's data); then

    xylem import MODEL.onnx --out IMP
    xylem train --config IMP/MODEL.toml --init IMP/MODEL.safetensors --max-steps N
    xylem export --config IMP/MODEL.toml --checkpoint RUN/model.safetensors --out RE.onnx

The logged training loss must fall (the mean of the last three logged losses, every 5 steps, below
0.8x the first),
the fine-tuned weights must differ from the imported ones, and ONNX Runtime on the re-exported
model must give xylem's outputs for it (`xylem run` of RE.onnx) within 1e-4 relative, and differ
from the imported model's.
Runs in the venv with onnxruntime over Debian's torch and torchvision (scripts/test.sh makes it).
"""
import argparse
import csv
import gzip
import os
import sys

import numpy as np

from xylem_cli import rel_err, xylem  # beside this script

DATA = "/usr/share/datasets/fashion-mnist"


def idx(path, type_code, dims, payload):
    """An IDX file: magic (0, 0, type, ndim), big-endian dims, the payload."""
    with open(path, "wb") as f:
        f.write(bytes([0, 0, type_code, len(dims)]) + b"".join(int(d).to_bytes(4, "big") for d in dims) + payload)


def fashion(stem, count):
    with gzip.open(os.path.join(DATA, stem + ".gz")) as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    per = int(np.prod(dims[1:])) if ndim > 1 else 1
    start = 4 + 4 * ndim
    return np.frombuffer(raw, np.uint8, count=count * per, offset=start).reshape([count] + dims[1:])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--xylem", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--backend", default="native")
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    import torch
    import torchvision

    torch.manual_seed(1)
    model = torchvision.models.resnet18(num_classes=10).eval()
    onnx_path = os.path.join(args.work, "resnet18.onnx")
    torch.onnx.export(model, torch.randn(1, 3, 28, 28), onnx_path, opset_version=17, input_names=["x"],
                      output_names=["logits"], dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}},
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)

    # Fashion-MNIST as a 3-channel data set: each image repeated over the channels.
    data = os.path.join(args.work, "data")
    os.makedirs(data, exist_ok=True)
    for split, count in (("train", 2048), ("t10k", 256)):
        images = fashion(f"{split}-images-idx3-ubyte", count)
        rgb = np.repeat(images[:, None, :, :], 3, axis=1)
        idx(os.path.join(data, f"{split}-images-idx3-ubyte"), 0x08, rgb.shape, rgb.tobytes())
        labels = fashion(f"{split}-labels-idx1-ubyte", count)
        idx(os.path.join(data, f"{split}-labels-idx1-ubyte"), 0x08, labels.shape, labels.tobytes())

    imp = os.path.join(args.work, "imp")
    xylem(args, "import", onnx_path, "--out", imp)
    config, imported = os.path.join(imp, "resnet18.toml"), os.path.join(imp, "resnet18.safetensors")
    with open(config) as f:
        text = f.read()
    for old, new in ((f'dir = "{DATA}"', f'dir = "{data}"'), ("batch_size = 64", "batch_size = 32\nprint_every = 5")):
        if old not in text:
            print(f"FAIL the imported config has no '{old}'")
            return 1
        text = text.replace(old, new)
    with open(config, "w") as f:
        f.write(text)

    run = os.path.join(args.work, "run")
    r = xylem(args, "train", "--config", config, "--init", imported, "--backend", args.backend,
              "--max-steps", str(args.steps), "--out", run, check=False)
    if r.returncode != 0:
        print(f"FAIL xylem train: {r.stderr.strip()}")
        return 1
    with open(os.path.join(run, "log.csv")) as f:
        losses = [float(row["loss"]) for row in csv.DictReader(f) if row.get("kind", "interval") == "interval"]
    failures = []
    if len(losses) < 4:
        failures.append(f"only {len(losses)} logged losses")
    else:
        first, last = losses[0], np.mean(losses[-3:])
        print(f"{'ok  ' if last < 0.8 * first else 'FAIL'} loss over {args.steps} steps: {losses} "
              f"(first {first:.4f}, mean of the last three {last:.4f})")
        if not last < 0.8 * first:
            failures.append(f"the loss did not fall: {first:.4f} -> {last:.4f}")

    tuned = os.path.join(run, "model.safetensors")
    re_onnx = os.path.join(args.work, "resnet18_tuned.onnx")
    r = xylem(args, "export", "--config", config, "--checkpoint", tuned, "--out", re_onnx, check=False)
    if r.returncode != 0:
        print(f"FAIL xylem export: {r.stderr.strip()}")
        return 1
    import onnxruntime as ort

    x = (np.repeat(fashion("t10k-images-idx3-ubyte", 16)[:, None], 3, axis=1) / np.float32(255)).astype(np.float32)
    xin = os.path.join(args.work, "x.npy")
    np.save(xin, x)
    session = ort.InferenceSession(re_onnx, providers=["CPUExecutionProvider"])
    want = session.run(None, {session.get_inputs()[0].name: x})[0]
    before = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    untrained = before.run(None, {before.get_inputs()[0].name: x})[0]
    out = os.path.join(args.work, "run_out")
    r = xylem(args, "run", re_onnx, "--input", xin, "--out", out, "--backend", args.backend, check=False)
    if r.returncode != 0:
        print(f"FAIL xylem run of the re-export: {r.stderr.strip()}")
        return 1
    outputs = [f for f in os.listdir(out) if f.endswith(".npy")]  # one, named after the model's output
    if len(outputs) != 1:
        print(f"FAIL xylem run wrote {outputs}, not one output")
        return 1
    got = np.load(os.path.join(out, outputs[0]))
    err = rel_err(got, want) if got.shape == want.shape else float("inf")
    moved = rel_err(want, untrained)
    print(f"{'ok  ' if err <= 1e-4 else 'FAIL'} re-exported model: xylem run vs onnxruntime {err:.2e}; "
          f"outputs moved {moved:.2e} from the imported model's")
    if err > 1e-4:
        failures.append(f"re-export: xylem run vs onnxruntime {err:.3e}")
    if moved < 1e-3:
        failures.append("the fine-tuned model gives the imported model's outputs")
    if failures:
        print("\n".join(["failures:"] + failures))
        return 1
    print("fine-tuned and re-exported")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""ONNX import against ONNX Runtime (tests/CMakeLists.txt: onnx.parity; docs/onnx.md).

Exports the Fashion MLP (784-128-64-10 ReLU), LeNet (examples/fashion_lenet.toml), a small model
of every other op the importer maps (Mix) and torchvision's ResNet-18, MobileNetV2, SqueezeNet 1.1, DenseNet-121, MNASNet 0.5, EfficientNet-B0, MobileNetV3-Small and ShuffleNetV2 x0.5, each with random weights in eval mode, from torch 1.13 at opsets 13, 14 and 17; runs each
through `xylem run` on every backend asked for and through onnxruntime on the same random input;
the outputs must agree within --rtol relative to the output's largest magnitude
(max |xylem - ort| <= rtol * max |ort|). Then `xylem import` + `xylem predict` on Fashion-MNIST
test images gives ORT's classes and probabilities, and `xylem eval` its accuracy.

Runs in a venv with onnxruntime (scripts/test.sh makes it) over Debian's torch and torchvision.
Prints one line per model, opset and backend; exit status 1 on any disagreement.
"""
import argparse
import csv
import gzip
import os
import re
import sys
import time

import numpy as np

from xylem_cli import rel_err, xylem  # beside this script
import torch
from torch import nn

DATA = "/usr/share/datasets/fashion-mnist"


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))


def lenet():  # examples/fashion_lenet.toml
    return nn.Sequential(nn.Conv2d(1, 20, 5), nn.MaxPool2d(2), nn.Conv2d(20, 50, 5), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(800, 500), nn.ReLU(), nn.Linear(500, 10))


class Mix(nn.Module):
    """Every other op the importer maps, on Fashion-sized input: two pools joined by Concat, Add of
    Sigmoid and Tanh, GlobalAveragePool then Flatten, BatchNormalization after a Linear (torch folds
    only a Conv's), x.view(x.size(0), -1) (a Shape/Gather/Unsqueeze/Concat/Reshape subgraph), LogSoftmax."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.avg = nn.AvgPool2d(3, stride=2, padding=1)  # count_include_pad: torch's default, True
        self.max = nn.MaxPool2d(2)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Linear(8, 16)
        self.bn = nn.BatchNorm1d(16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x):
        r = torch.relu(self.conv(x))
        c = torch.cat([self.avg(r), self.max(r)], 1)
        h = torch.sigmoid(c) + torch.tanh(c)
        h = torch.flatten(self.gap(h), 1)
        h = self.bn(self.fc1(h))
        h = h.view(h.size(0), -1)
        return torch.log_softmax(self.fc2(h), dim=1)


def resnet18():
    import torchvision
    return torchvision.models.resnet18(weights=None)


def mobilenet_v2():
    import torchvision
    return torchvision.models.mobilenet_v2(weights=None)


def squeezenet():
    # Fire modules (Concat of two computed tensors on channels) and ceil-mode max pools, whose
    # windows tile the input exactly at 64x64 (and 224x224): floor mode's output, so imported.
    import torchvision
    return torchvision.models.squeezenet1_1(weights=None, num_classes=10)


def densenet121():
    # torch.cat of one tensor at each block's first layer (a Concat of one input), batch norms
    # before their convolutions (not folded), average pools.
    import torchvision
    return torchvision.models.densenet121(weights=None, num_classes=10)


def mnasnet():
    # Its head takes x.mean([2, 3]): ReduceMean over H and W, a global average pool.
    import torchvision
    return torchvision.models.mnasnet0_5(weights=None, num_classes=10)


def efficientnet_b0():
    # SiLU (Sigmoid, then Mul of the two computed tensors) and squeeze-and-excitation gates
    # (ReduceMean-free here: AdaptiveAvgPool, Conv 1x1s, Sigmoid, then Mul [N, C, 1, 1] by [N, C, H, W]).
    import torchvision
    return torchvision.models.efficientnet_b0(weights=None, num_classes=10)


def mobilenet_v3():
    # HardSwish (opset 14 on; x * HardSigmoid(x) before) and HardSigmoid gates.
    import torchvision
    return torchvision.models.mobilenet_v3_small(weights=None, num_classes=10)


def shufflenet():
    # Channel shuffles (Reshape to 5-D, Transpose [0, 2, 1, 3, 4], Reshape back) and channel
    # splits (Split into two halves).
    import torchvision
    return torchvision.models.shufflenet_v2_x0_5(weights=None, num_classes=10)


class RnnClassifier(nn.Module):
    """A 2-layer nn.LSTM (or nn.GRU), batch first, and a Linear on its last step: torch exports two
    ONNX LSTM (GRU) nodes between Transposes, zero initial states (ConstantOfShape of the batch,
    Slice) and Gather(axis 1, -1)."""

    def __init__(self, cell=nn.LSTM):
        super().__init__()
        self.rnn = cell(8, 16, num_layers=2, batch_first=True)
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.fc(y[:, -1])


class Affine(nn.Module):
    """Arithmetic with constants on the data: (x - mean) / std per feature, a Linear, x * 0.5 read
    twice (also the start of GELU's tanh form, so it must fall back to a scale layer), + a
    per-step constant."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.randn(8))
        self.register_buffer("std", torch.rand(8) + 0.5)
        self.register_buffer("shift", torch.randn(6, 5))
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        h = self.fc((x - self.mean) / self.std)
        half = h * 0.5
        return half + torch.relu(half) + self.shift


class TwoHeads(nn.Module):
    """Two inputs and two outputs: token ids [N, 6] through an embedding plus float features
    [N, 6, 8], then a Linear head (output "logits") and the summed sequence before it (output "out1",
    also read by the head): the importer's named model inputs and outputs."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 8)
        self.proj = nn.Linear(8, 8)
        self.head = nn.Linear(8, 5)

    def forward(self, ids, feats):
        h = torch.tanh(self.emb(ids) + self.proj(feats))
        return self.head(h), h


def gpt():
    """The GPT of examples/gpt_char.toml as bench/torch_gpt.py builds it (nanoGPT's model.py), smaller:
    vocabulary 50, context 16, 2 blocks of 4 heads, 32 channels. Every parameter random (layer norms
    included, so torch keeps one initializer each)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
    from torch_gpt import GPT
    model = GPT(50, block_size=16, n_layer=2, n_head=4, n_embd=32)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.empty_like(p).uniform_(-0.2, 0.2))
    return model


MODELS = {
    # name: (factory, input shape, fashion data for import/predict/eval)
    "mlp": (mlp, (8, 1, 28, 28), True),
    "lenet": (lenet, (8, 1, 28, 28), True),
    "mix": (Mix, (8, 1, 28, 28), True),
    "resnet18": (resnet18, (2, 3, 64, 64), False),
    # Exported for fine-tuning: no constant folding, so each BatchNormalization stays apart from
    # its Conv (docs/onnx.md, "Exporting from PyTorch").
    "resnet18_bn": (resnet18, (2, 3, 64, 64), False),
    "mobilenet_v2": (mobilenet_v2, (2, 3, 64, 64), False),
    "squeezenet": (squeezenet, (2, 3, 64, 64), False),
    "densenet121": (densenet121, (2, 3, 64, 64), False),
    "mnasnet": (mnasnet, (2, 3, 64, 64), False),
    "efficientnet_b0": (efficientnet_b0, (2, 3, 64, 64), False),
    "mobilenet_v3": (mobilenet_v3, (2, 3, 64, 64), False),
    "shufflenet": (shufflenet, (2, 3, 64, 64), False),
    "lstm": (RnnClassifier, (4, 7, 8), False),
    "gru": (lambda: RnnClassifier(nn.GRU), (4, 7, 8), False),
    "gpt": (gpt, (2, 16), False),  # token ids in [0, 50)
    "affine": (Affine, (4, 6, 8), False),
    "gelu_tanh": (lambda: nn.Sequential(nn.Linear(8, 16), nn.GELU(approximate="tanh"), nn.Linear(16, 4)), (4, 8), False),
    "two_heads": (TwoHeads, [((3, 6), "tokens"), ((3, 6, 8), "float")], False),
}


def model_inputs(name):
    """NAME's inputs as [(shape, kind)], kind "tokens" (ids in [0, 50)) or "float"."""
    shape = MODELS[name][1]
    if isinstance(shape, list):
        return shape
    return [(shape, "tokens" if name == "gpt" else "float")]


def random_inputs(name, make_int, make_float):
    return [make_int(0, 50, shape) if kind == "tokens" else make_float(shape) for shape, kind in model_inputs(name)]


def io_names(count, first, prefix):
    """ONNX names of COUNT inputs or outputs: FIRST alone ("x", "logits"), else FIRST then PREFIX1, PREFIX2, ..."""
    return [first] + [f"{prefix}{k}" for k in range(1, count)]


def export(name, opset, work):
    factory = MODELS[name][0]
    torch.manual_seed(1)
    model = factory().eval()
    if name in ("resnet18", "resnet18_bn", "mix", "mobilenet_v2", "densenet121", "mnasnet", "efficientnet_b0", "mobilenet_v3", "shufflenet"):  # random running statistics, so batch norm is not the identity
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
                    m.running_mean.uniform_(-0.1, 0.1)
                    m.running_var.uniform_(0.5, 1.5)
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.1, 0.1)
    path = os.path.join(work, f"{name}_op{opset}.onnx")
    xs = random_inputs(name, torch.randint, lambda shape: torch.randn(*shape))
    with torch.no_grad():
        y = model(*xs)
    ins = io_names(len(xs), "x", "x")
    outs = io_names(len(y) if isinstance(y, tuple) else 1, "logits", "out")
    kept = dict(training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False) if name.endswith("_bn") else {}
    torch.onnx.export(model, tuple(xs), path, opset_version=opset, input_names=ins, output_names=outs,
                      dynamic_axes={n: {0: "batch"} for n in ins + outs}, **kept)
    return path, model


def ort_run(path, x):
    """ORT's first output for one input X, or every output (a list) for a list of inputs."""
    import onnxruntime as ort
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    if isinstance(x, list):
        return s.run(None, {i.name: v for i, v in zip(s.get_inputs(), x)})
    return s.run(None, {s.get_inputs()[0].name: x})[0]


def fashion_images(count):
    with gzip.open(os.path.join(DATA, "t10k-images-idx3-ubyte.gz")) as f:
        raw = f.read()
    n, rows, cols = (int.from_bytes(raw[i:i + 4], "big") for i in (4, 8, 12))
    count = min(count, n)
    pixels = np.frombuffer(raw, dtype=np.uint8, offset=16, count=count * rows * cols)
    return raw[:4] + count.to_bytes(4, "big") + raw[8:16] + pixels.tobytes(), \
        (pixels.astype(np.float32) / 255.0).reshape(count, 1, rows, cols)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--xylem", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--backends", default="", help="comma-separated (default: native, and opencl where available)")
    p.add_argument("--models", default="mlp,lenet,mix,resnet18,resnet18_bn,mobilenet_v2,squeezenet,densenet121,mnasnet,efficientnet_b0,mobilenet_v3,shufflenet,lstm,gru,gpt,gelu_tanh,affine,two_heads")
    p.add_argument("--opsets", default="13,14,17")
    p.add_argument("--rtol", type=float, default=1e-4)
    p.add_argument("--images", type=int, default=500, help="Fashion-MNIST test images for import + predict")
    p.add_argument("--save", metavar="DIR", help="only export each model, its input and ORT's output into DIR "
                   "(for a machine without this torch or onnxruntime: scripts/gpu-bundle.sh carries them)")
    p.add_argument("--saved", metavar="DIR", help="compare against what --save wrote in DIR instead of exporting "
                   "(models whose files are missing there are skipped); no import + predict")
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    if args.save:
        return save(args)
    if not args.backends:
        listed = xylem(args, "backends", check=False).stdout
        args.backends = "native" + (",opencl" if re.search(r"^opencl .* available ", listed, re.M) else "")
        print(f"backends: {args.backends}")
    failures = []
    rng = np.random.default_rng(7)
    for name in args.models.split(","):
        for opset in (int(o) for o in args.opsets.split(",")):
            if args.saved:
                path, xins, wants = saved_case(args.saved, name, opset)
                if path is None:
                    continue
            else:
                path, xins, wants = case(args.work, name, opset, rng)
            for backend in args.backends.split(","):
                out = os.path.join(args.work, f"{name}_op{opset}_{backend}")
                t0 = time.time()
                flags = [a for xin in xins for a in ("--input", xin)]
                r = xylem(args, "run", path, *flags, "--out", out, "--backend", backend, check=False)
                if r.returncode != 0:
                    failures.append(f"{name} opset {opset} {backend}: xylem run failed: {r.stderr.strip()}")
                    print(f"FAIL {name:9s} opset {opset} {backend:7s}: {r.stderr.strip()}")
                    continue
                # Every output, as <name>.npy: the worst of them counts.
                err, got = 0.0, None
                for oname, want in zip(io_names(len(wants), "logits", "out"), wants):
                    g = np.load(os.path.join(out, oname + ".npy"))
                    got = g if got is None else got
                    err = max(err, rel_err(g, want) if g.shape == want.shape else float("inf"))
                timing = re.search(r"forward ([0-9.]+) s \(first\), ([0-9.]+) s", r.stdout)
                ok = err <= args.rtol
                print(f"{'ok  ' if ok else 'FAIL'} {name:9s} opset {opset} {backend:7s} output {list(got.shape)}"
                      f"{f' (+{len(wants) - 1} more)' if len(wants) > 1 else ''} "
                      f"max|diff|/max|ort| {err:.2e} (forward {timing.group(2) if timing else '?'} s, "
                      f"wall {time.time() - t0:.1f} s)", flush=True)
                if not ok:
                    failures.append(f"{name} opset {opset} {backend}: relative error {err:.3e} > {args.rtol}")
            if MODELS[name][2] and not args.saved:
                failures += import_predict(args, name, opset, path)
    if failures:
        print("\n".join(["", "failures:"] + failures))
        return 1
    print("all agree")
    return 0


def case(work, name, opset, rng):
    """Exports NAME at OPSET into WORK with random inputs beside it: (model, [input .npy], [ORT's outputs]).
    One input is <stem>_x.npy, several <stem>_x0.npy, <stem>_x1.npy, ..."""
    path, _ = export(name, opset, work)
    xs = random_inputs(name, rng.integers, lambda shape: rng.standard_normal(shape).astype(np.float32))
    stem = os.path.join(work, f"{name}_op{opset}_x")
    xins = [stem + ".npy"] if len(xs) == 1 else [f"{stem}{k}.npy" for k in range(len(xs))]
    for f, x in zip(xins, xs):
        np.save(f, x)
    return path, xins, ort_run(path, xs)


def save(args):
    """--save DIR: each model's .onnx, input and ORT output, for --saved elsewhere."""
    os.makedirs(args.save, exist_ok=True)
    rng = np.random.default_rng(7)
    for name in args.models.split(","):
        for opset in (int(o) for o in args.opsets.split(",")):
            path, xins, wants = case(args.save, name, opset, rng)
            for k, want in enumerate(wants):
                np.save(os.path.join(args.save, f"{name}_op{opset}_ort{k if k else ''}.npy"), want)
            print(f"saved {os.path.basename(path)}: inputs {', '.join(os.path.basename(x) for x in xins)}, "
                  f"ORT outputs {', '.join(str(list(w.shape)) for w in wants)}")
    return 0


def saved_case(folder, name, opset):
    """What --save wrote for NAME at OPSET: (model, [input .npy], [ORT's outputs]), or Nones if absent."""
    stem = os.path.join(folder, f"{name}_op{opset}")
    count = len(model_inputs(name))
    xins = [stem + "_x.npy"] if count == 1 else [f"{stem}_x{k}.npy" for k in range(count)]
    if not all(os.path.isfile(f) for f in [stem + ".onnx", stem + "_ort.npy"] + xins):
        return None, None, None
    wants = [np.load(stem + "_ort.npy")]
    while os.path.isfile(f"{stem}_ort{len(wants)}.npy"):
        wants.append(np.load(f"{stem}_ort{len(wants)}.npy"))
    return stem + ".onnx", xins, wants


def import_predict(args, name, opset, path):
    """`xylem import` then `xylem predict` and `xylem eval` against ORT on Fashion-MNIST test images."""
    failures = []
    out = os.path.join(args.work, f"{name}_op{opset}_import")
    xylem(args, "import", path, "--out", out)
    stem = f"{name}_op{opset}"
    config, checkpoint = os.path.join(out, stem + ".toml"), os.path.join(out, stem + ".safetensors")
    idx, images = fashion_images(args.images)
    idx_path = os.path.join(args.work, "fashion_test_head.idx")
    with open(idx_path, "wb") as f:
        f.write(idx)
    logits = ort_run(path, images).astype(np.float64)
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    prob = e / e.sum(axis=1, keepdims=True)
    csv_path = os.path.join(out, "predictions.csv")
    xylem(args, "predict", "--config", config, "--checkpoint", checkpoint, "--input", idx_path, "--top", "3",
          "--out", csv_path, "--backend", "native")
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    ranked = np.argsort(-logits, axis=1, kind="stable")
    wrong_class = worst_prob = 0
    for i, row in enumerate(rows):
        top1 = int(row["top1_class"])
        gap = logits[i, ranked[i, 0]] - logits[i, ranked[i, 1]]
        if top1 != ranked[i, 0] and gap > 1e-4 * np.abs(logits[i]).max():
            wrong_class += 1
        worst_prob = max(worst_prob, abs(float(row["top1_prob"]) - prob[i, top1]))
    ok = len(rows) == len(images) and wrong_class == 0 and worst_prob <= 1e-5
    print(f"{'ok  ' if ok else 'FAIL'} {name:9s} opset {opset} import+predict: {len(rows)} images, "
          f"{wrong_class} top-1 classes differ, max |p - p_ort| {worst_prob:.1e}", flush=True)
    if not ok:
        failures.append(f"{name} opset {opset}: import + predict disagrees with ORT")
    # eval over the whole test set: the accuracy ORT's logits give.
    r = xylem(args, "eval", "--config", config, "--checkpoint", checkpoint, "--backend", "native")
    m = re.search(r"test accuracy ([0-9.]+)%", r.stdout)
    _, all_images = fashion_images(10**6)
    with gzip.open(os.path.join(DATA, "t10k-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), dtype=np.uint8, offset=8)
    ort_acc = 100.0 * float(np.mean(np.argmax(ort_run(path, all_images), axis=1) == labels))
    got = float(m.group(1)) if m else float("nan")
    ok = abs(got - ort_acc) <= 0.02  # 2 images in 10000: a near-tie may round either way
    print(f"{'ok  ' if ok else 'FAIL'} {name:9s} opset {opset} import+eval: accuracy {got:.2f}% (ORT {ort_acc:.2f}%)",
          flush=True)
    if not ok:
        failures.append(f"{name} opset {opset}: import + eval accuracy {got} vs ORT {ort_acc}")
    return failures


if __name__ == "__main__":
    sys.exit(main())

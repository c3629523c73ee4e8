#!/usr/bin/python3
"""PyTorch peer (CPU or CUDA) of xylem's examples/fashion_resnet.toml, for benchmarking.

ResNet-20 in its CIFAR form (He et al. 2016) on Fashion-MNIST: a 3x3 conv, batch norm and ReLU
stem at 16 channels, three stages of three basic blocks at 16, 32 and 64 channels (the first
block of stages 2 and 3 at stride 2 with a 1x1 conv + batch norm projection shortcut, the others
an identity), global average pooling and a linear classifier; PyTorch's default initialisation,
as xylem's (U(+-1/sqrt(fan_in)) for conv and linear, batch norm weight 1 and bias 0). The module
names make state_dict()'s keys xylem's parameter names (conv1.weight, layer2.0.shortcut.0.weight,
bn1.running_mean, ...).

Recipe as the config: softmax cross-entropy (batch mean), SGD(lr 0.1, momentum 0.9, weight decay
5e-4 on every parameter), batch 128, 3 epochs, shuffled minibatches with the last partial batch
included, and the learning rate of [solver.schedule] type = "cosine", t_max = 3, unit "epoch":
constant within an epoch, lr * (1 + cos(pi * min(e, t_max) / t_max)) / 2 in epoch e = 0, 1, ...
(the closed form of xylem's solvers/schedule.cpp, and CosineAnnealingLR stepped once per epoch).
Pixels are scaled by 1/255 and nothing else, as xylem's IDX loader does.

Prints one JSON object per epoch (training seconds, images/s, the step time as torch_mlp.py's
"step_seconds", train loss, the test accuracy and the inference images/s over the 10k test images
at --eval-batch, evaluation not counted in the training time). --device, --step-window,
--max-steps and --warmup-steps: see torch_mlp.py. --threads N: torch.set_num_threads(N).

--save-init FILE writes the model as PyTorch initialised it (every parameter and batch-norm
buffer, not num_batches_tracked) as a safetensors file xylem reads as a checkpoint of
examples/fashion_resnet.toml (`xylem eval --checkpoint FILE` gives chance accuracy), before
training; with --epochs 0 nothing else runs.

--parity-fixture FILE writes the fixture of tests/layers/resnet_parity_test.cpp instead of
training (see parity_fixture below; tests/fixtures/resnet_parity.toml is its xylem config).

Run it with Debian's interpreter, /usr/bin/python3 (python3-torch 1.13), or on a GPU machine with
any Python whose torch has CUDA.
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_mlp import StepClock, add_common_args, device_info, eval_batches, eval_throughput, load, read_idx, sync, warm_up


class BasicBlock(nn.Module):
    """conv-bn-relu-conv-bn, plus the shortcut (identity, or a strided 1x1 conv + bn), then relu."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        project = stride != 1 or cin != cout
        # An empty nn.Sequential is the identity and adds no state_dict keys.
        self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                      nn.BatchNorm2d(cout)) if project else nn.Sequential()
        self.relu2 = nn.ReLU()

    def forward(self, x):
        y = self.relu1(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu2(y + self.shortcut(x))


class ResNet(nn.Module):
    """The stem, len(widths) stages of `blocks` basic blocks (stride 2 from the second stage on), pool, fc."""

    def __init__(self, widths=(16, 32, 64), blocks=3, in_channels=1, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, widths[0], 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU()
        cin = widths[0]
        for s, w in enumerate(widths):
            stage = []
            for b in range(blocks):
                stage.append(BasicBlock(cin, w, 2 if s > 0 and b == 0 else 1))
                cin = w
            setattr(self, f"layer{s + 1}", nn.Sequential(*stage))
        self.stages = len(widths)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        for s in range(self.stages):
            x = getattr(self, f"layer{s + 1}")(x)
        return self.fc(torch.flatten(self.pool(x), 1))


def cosine_lr(base, epoch, t_max):
    """xylem's cosine schedule with eta_min 0 for the epoch after `epoch` whole epochs."""
    return base * (1 + math.cos(math.pi * min(epoch, t_max) / t_max)) / 2


# ---- safetensors, written by hand (8-byte little-endian header length, JSON header, raw data) ----

_DTYPES = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32", np.dtype(np.uint8): "U8"}


def write_safetensors(path, tensors, metadata=None):
    """tensors: (name, numpy array) pairs, written in that order; metadata: str -> str."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, a in tensors:
        a = np.ascontiguousarray(a)
        if a.dtype not in _DTYPES:
            raise ValueError(f"{name}: dtype {a.dtype} not written")
        blob = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _DTYPES[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data start 8-aligned, as the reference writer pads
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def state_tensors(model, prefix=""):
    """The state_dict as xylem's checkpoint holds it: parameters and batch-norm statistics as float32."""
    return [(prefix + k, v.detach().cpu().float().numpy()) for k, v in model.state_dict().items()
            if not k.endswith("num_batches_tracked")]


# ---- the parity fixture ----

PARITY = {"widths": (8, 16, 32), "blocks": 1, "batch": 8, "steps": 20, "lr": 0.01, "momentum": 0.9,
          "weight_decay": 5e-4, "seed": 7}


def run_parity(model, images, labels, p):
    """Eval logits of batch 0, then `steps` SGD steps (train mode), then batch 0's eval logits
    again (the running statistics now those of training); returns (eval logits, train logits of
    step 0, the losses, final eval logits) and leaves the model trained."""
    dtype = next(model.parameters()).dtype
    x = torch.from_numpy(images).to(dtype) / 255.0  # xylem's IDX loader scales by 1/255
    y = torch.from_numpy(labels).long()
    b = p["batch"]
    opt = torch.optim.SGD(model.parameters(), lr=p["lr"], momentum=p["momentum"], weight_decay=p["weight_decay"])
    model.eval()
    with torch.no_grad():
        logits_eval = model(x[:b]).clone()
    model.train()
    losses, logits_train = [], None
    for s in range(p["steps"]):
        opt.zero_grad(set_to_none=True)
        out = model(x[s * b:(s + 1) * b])
        if s == 0:
            logits_train = out.detach().clone()
        loss = F.cross_entropy(out, y[s * b:(s + 1) * b])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        logits_eval_final = model(x[:b]).clone()
    return logits_eval, logits_train, losses, logits_eval_final


def max_diff(a, b):
    return max(float((x.double() - y.double()).abs().max()) for x, y in zip(a, b))


def parity_fixture(path, data_dir):
    """A small ResNet (one block per stage, tests/fixtures/resnet_parity.toml) initialised from a
    fixed seed, and what training it does, computed in float64 from the float32 initial values:
    init.<name> (every parameter and batch-norm buffer), images (u8 pixels) and labels (i32) of
    `steps` batches of `batch` training images in order (indices: which ones), logits_eval (batch
    0, eval mode, initial parameters), logits_train (batch 0, train mode: step 0's forward),
    losses (each step's batch-mean cross-entropy), final.<name> after the steps of SGD (constant
    lr, momentum, weight decay) and logits_eval_final (batch 0, eval mode, after the steps: the
    running statistics at work; at the start they are 0 and 1 and the logits are mostly fc.bias).
    The float32 run's distance from float64 is printed: the headroom the test's tolerance leaves.
    The lr is 0.01: from 0.05 up, the float32 run itself ends far from float64 (a ReLU input
    within rounding of 0 flips sign, and the trajectories part), so no float32 framework could
    match the reference to 1e-4."""
    p = PARITY
    torch.manual_seed(p["seed"])
    model = ResNet(p["widths"], p["blocks"])  # stays as initialised
    init = {k: v.clone() for k, v in model.state_dict().items()}
    n = p["steps"] * p["batch"]
    gen = torch.Generator().manual_seed(p["seed"])
    indices = torch.randperm(60000, generator=gen)[:n].numpy().astype(np.int32)
    all_images = read_idx(os.path.join(data_dir, "train-images-idx3-ubyte.gz"))
    all_labels = read_idx(os.path.join(data_dir, "train-labels-idx1-ubyte.gz"))
    images = all_images[indices].reshape(n, 1, 28, 28).astype(np.uint8)
    labels = all_labels[indices].astype(np.int32)

    results = {}
    for dtype in (torch.float64, torch.float32):
        m = ResNet(p["widths"], p["blocks"])
        m.load_state_dict(init)
        m.to(dtype)
        results[dtype] = (m,) + run_parity(m, images, labels, p)
    ref, ev, tr, losses, ev_final = results[torch.float64]
    f32 = results[torch.float32]
    print(json.dumps({
        "float32_vs_float64": {
            "logits_eval": max_diff([ev], [f32[1]]), "logits_train": max_diff([tr], [f32[2]]),
            "logits_eval_final": max_diff([ev_final], [f32[4]]),
            "final_state": max_diff(list(ref.state_dict().values()), list(f32[0].state_dict().values())),
            "losses": max(abs(a - b) for a, b in zip(losses, f32[3]))},
        "losses": losses}), flush=True)

    tensors = state_tensors(model, "init.") + [
        ("indices", indices), ("images", images), ("labels", labels),
        ("logits_eval", ev.float().numpy()), ("logits_train", tr.float().numpy()),
        ("losses", np.array(losses, dtype=np.float32)), ("logits_eval_final", ev_final.float().numpy())] + \
        state_tensors(ref, "final.")
    meta = {"producer": "bench/torch_resnet.py --parity-fixture", "torch": torch.__version__,
            "reference": "float64", **{k: json.dumps(v) for k, v in p.items()}}
    write_safetensors(path, tensors, meta)
    print(json.dumps({"wrote": path, "tensors": len(tensors)}), flush=True)


# ---- the benchmark ----

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--t-max", type=int, default=3, help="the cosine schedule's period in epochs (default 3)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads(N); 0 keeps PyTorch's default")
    p.add_argument("--eval-batch", type=eval_batches, default=[1000],
                   help="batch size(s) of the inference pass, e.g. 1000,250 (the fastest is reported)")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--save-init", metavar="FILE", help="write the initial parameters and buffers as safetensors")
    p.add_argument("--parity-fixture", metavar="FILE", help="write the parity test's fixture and exit")
    add_common_args(p)
    args = p.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.parity_fixture:
        parity_fixture(args.parity_fixture, args.data_dir)
        return 0
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"

    model = ResNet().to(dev)
    if args.save_init:
        write_safetensors(args.save_init, state_tensors(model),
                          {"format": "pt", "producer": "bench/torch_resnet.py", "torch": torch.__version__,
                           "seed": str(args.seed)})
    if args.epochs <= 0:
        return 0

    x_train, y_train = load(args.data_dir, "train")
    x_test, y_test = load(args.data_dir, "test")
    x_train = x_train.reshape(-1, 1, 28, 28).contiguous()
    x_test = x_test.reshape(-1, 1, 28, 28).contiguous()
    if cuda:
        x_train, y_train = x_train.to(dev), y_train.to(dev)
        x_test, y_test = x_test.to(dev), y_test.to(dev)
    n, bs = x_train.shape[0], args.batch_size
    warmup = args.warmup_steps if args.warmup_steps >= 0 else (3 if cuda else 0)

    loss_fn = nn.CrossEntropyLoss()
    opt_args = {"lr": args.lr, "momentum": args.momentum, "weight_decay": args.weight_decay}
    opt = torch.optim.SGD(model.parameters(), **opt_args)
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "batch_size": bs,
                      "parameters": sum(q.numel() for q in model.parameters()), "warmup_steps": warmup,
                      "max_steps": args.max_steps, **device_info(dev)}), flush=True)
    warm_up(model, loss_fn, opt_args, x_train, y_train, bs, warmup)

    for epoch in range(1, args.epochs + 1):
        lr = cosine_lr(args.lr, epoch - 1, args.t_max)
        for group in opt.param_groups:
            group["lr"] = lr
        model.train()
        perm = torch.randperm(n, device=dev)
        steps = seen = 0
        loss_sum = 0.0
        loss_dev = torch.zeros((), device=dev) if cuda else None
        clock = StepClock(dev, args.step_window)
        clock.start()
        for start in range(0, n, bs):
            idx = perm[start:start + bs]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x_train.index_select(0, idx)), y_train.index_select(0, idx))
            loss.backward()
            opt.step()
            if cuda:
                loss_dev += loss.detach() * idx.shape[0]  # no host read per step
            else:
                loss_sum += loss.item() * idx.shape[0]
            seen += idx.shape[0]
            steps += 1
            clock.after_step(steps)
            if steps == args.max_steps:
                break
        seconds = clock.stop()
        if cuda:
            loss_sum = loss_dev.item()
        inference = eval_throughput(model, x_test, y_test, args.eval_batch, dev)
        print(json.dumps({"epoch": epoch, "lr": lr, "seconds": seconds, "images_per_second": seen / seconds,
                          "steps": steps, "train_loss": loss_sum / seen, **inference, **clock.fields()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

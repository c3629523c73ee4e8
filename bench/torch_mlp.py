#!/usr/bin/python3
"""PyTorch peer (CPU or CUDA) of xylem's examples/fashion_mlp.toml, for benchmarking.

784-128-64-10 ReLU MLP, softmax cross-entropy, SGD(lr, momentum), shuffled
minibatches (the last, partial batch included, as xylem does). The data are
read from the same gzipped IDX files with numpy + gzip, scaled by 1/255 and
held as one tensor in memory (--device cuda: one tensor on the GPU, the
permutation too); each batch is gathered with an index tensor (no DataLoader).
Prints one JSON object per epoch on stdout:
  {"epoch", "seconds" (training only, evaluation excluded),
   "images_per_second", "train_loss", "test_accuracy", "steps",
   "step_seconds", "step_window", "step_windows", "step_window_seconds", ...}

Step time: the clock is read (after torch.cuda.synchronize() on cuda) every
--step-window steps; each full window gives a mean step time (forward, loss,
backward, update, batch gather); "step_seconds" is the median over the full
windows after the first (the first holds the warm-up; it is used only when it
is the only one). This is how bench/run_gpu_bench.sh reads xylem's log.csv,
whose rows are written every print_every (100) steps after a host read.
On cpu the loop is the one it always was (loss.item() every step); on cuda the
loss is summed on the device and read once per epoch, and --warmup-steps
(default 3 on cuda, 0 on cpu) steps run on a throwaway copy of the model before
the timed epoch, so cuBLAS/cuDNN initialisation is not timed (xylem creates
its handles with the device, before its timed epoch). --max-steps N stops
each epoch after N steps (quick runs).

Run it with Debian's interpreter, /usr/bin/python3 (python3-torch 1.13), or on
a GPU machine with any Python whose torch has CUDA (PYTHON=... in the scripts).
"""
import copy
import argparse
import gzip
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    return arr.reshape(dims)


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(x.reshape(x.shape[0], -1).astype(np.float32) / 255.0)
    y = torch.from_numpy(y.astype(np.int64))
    return x.contiguous(), y.contiguous()


def add_common_args(p):
    """Options shared by torch_mlp.py and torch_lenet.py (device, step timing, quick runs)."""
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--step-window", type=int, default=100,
                   help="read the clock every N steps for the step time (default 100)")
    p.add_argument("--max-steps", type=int, default=0, help="stop each epoch after N steps (0: whole epoch)")
    p.add_argument("--warmup-steps", type=int, default=-1,
                   help="untimed steps on a copy of the model first (default: 3 on cuda, 0 on cpu)")


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def eval_batches(text):
    """--eval-batch of torch_lenet.py and torch_resnet.py: one batch size or several, "1000,250"."""
    sizes = [int(b) for b in text.split(",")]
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"batch sizes must be positive integers, got {text!r}")
    return sizes


def eval_throughput(model, x_test, y_test, batches, dev):
    """Inference over the test images (the model in eval mode, under inference_mode) at each batch
    size of `batches` in turn, each after one untimed batch of its size (so that the first size
    timed does not bear PyTorch's first-call costs alone; xylem's eval gets no such warm-up): the
    JSON fields test_accuracy (at the first), eval_images_per_second and eval_batch (the fastest),
    and eval_by_batch. The benchmarks take PyTorch's fastest batch beside the one xylem's eval
    picks for its device (train::run_batch)."""
    by_batch, accuracy = {}, None
    model.eval()
    with torch.inference_mode():
        for batch in batches:
            model(x_test[:batch])
            sync(dev)
            t1 = time.perf_counter()
            correct = torch.zeros((), dtype=torch.int64, device=dev)
            for start in range(0, x_test.shape[0], batch):
                pred = model(x_test[start:start + batch]).argmax(dim=1)
                correct += (pred == y_test[start:start + batch]).sum()
            correct = correct.item()  # the one host read (synchronises)
            by_batch[batch] = x_test.shape[0] / (time.perf_counter() - t1)
            if accuracy is None:
                accuracy = correct / x_test.shape[0]
    best = max(by_batch, key=by_batch.get)
    return {"test_accuracy": accuracy, "eval_images_per_second": by_batch[best], "eval_batch": best,
            "eval_by_batch": {str(b): v for b, v in by_batch.items()}}


class StepClock:
    """Reads the clock (synchronised) every `window` steps; median step time of the steady windows."""

    def __init__(self, device, window):
        self.device, self.window = device, max(1, window)
        self.marks = []  # (step, seconds since t0)

    def start(self):
        sync(self.device)
        self.t0 = time.perf_counter()

    def after_step(self, step):  # step: 1-based count of steps done
        if step % self.window == 0:
            sync(self.device)
            self.marks.append((step, time.perf_counter() - self.t0))

    def stop(self):
        sync(self.device)
        return time.perf_counter() - self.t0

    def fields(self):
        per = []
        prev_s, prev_t = 0, 0.0
        for s_, t in self.marks:
            per.append((t - prev_t) / (s_ - prev_s))
            prev_s, prev_t = s_, t
        steady = per[1:] if len(per) > 1 else per
        return {"step_seconds": statistics.median(steady) if steady else None,
                "step_window": self.window, "step_windows": len(steady),
                "step_window_seconds": [round(v, 9) for v in per]}


def device_info(device):
    if device.type != "cuda":
        return {"device": "cpu"}
    return {"device": "cuda", "gpu": torch.cuda.get_device_name(device), "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "matmul_tf32": torch.backends.cuda.matmul.allow_tf32,
            "cudnn_tf32": torch.backends.cudnn.allow_tf32}


def warm_up(model, loss_fn, opt_args, x, y, bs, steps):
    """Runs `steps` training steps on a copy of the model (library init, kernel loading), untimed."""
    if steps <= 0:
        return
    m = copy.deepcopy(model)
    o = torch.optim.SGD(m.parameters(), **opt_args)
    for _ in range(steps):
        o.zero_grad(set_to_none=True)
        loss_fn(m(x[:bs]), y[:bs]).backward()
        o.step()
    sync(x.device)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=0,
                   help="torch.set_num_threads(N); 0 keeps PyTorch's default")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    add_common_args(p)
    args = p.parse_args()

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"

    x_train, y_train = load(args.data_dir, "train")
    x_test, y_test = load(args.data_dir, "test")
    if cuda:
        x_train, y_train = x_train.to(dev), y_train.to(dev)
        x_test, y_test = x_test.to(dev), y_test.to(dev)
    n = x_train.shape[0]
    bs = args.batch_size
    warmup = args.warmup_steps if args.warmup_steps >= 0 else (3 if cuda else 0)

    model = nn.Sequential(
        nn.Linear(784, 128), nn.ReLU(),
        nn.Linear(128, 64), nn.ReLU(),
        nn.Linear(64, 10),
    ).to(dev)
    loss_fn = nn.CrossEntropyLoss()
    opt_args = {"lr": args.lr, "momentum": args.momentum}
    opt = torch.optim.SGD(model.parameters(), **opt_args)

    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(),
                      "batch_size": bs, "lr": args.lr, "momentum": args.momentum,
                      "seed": args.seed, "warmup_steps": warmup, "max_steps": args.max_steps,
                      **device_info(dev)}), flush=True)
    warm_up(model, loss_fn, opt_args, x_train, y_train, bs, warmup)

    for epoch in range(1, args.epochs + 1):
        model.train()
        perm = torch.randperm(n, device=dev)
        loss_sum = 0.0
        loss_dev = torch.zeros((), device=dev) if cuda else None
        steps = 0
        seen = 0
        clock = StepClock(dev, args.step_window)
        clock.start()
        for start in range(0, n, bs):
            idx = perm[start:start + bs]
            xb = x_train.index_select(0, idx)
            yb = y_train.index_select(0, idx)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
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

        model.eval()
        with torch.inference_mode():
            pred = model(x_test).argmax(dim=1)
            acc = (pred == y_test).float().mean().item()
        print(json.dumps({"epoch": epoch, "seconds": seconds,
                          "images_per_second": seen / seconds, "steps": steps,
                          "train_loss": loss_sum / seen, "test_accuracy": acc,
                          **clock.fields()}),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

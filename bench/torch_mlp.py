#!/usr/bin/python3
"""PyTorch CPU peer of xylem's examples/fashion_mlp.toml, for benchmarking.

784-128-64-10 ReLU MLP, softmax cross-entropy, SGD(lr, momentum), shuffled
minibatches (the last, partial batch included, as xylem does). The data are
read from the same gzipped IDX files with numpy + gzip, scaled by 1/255 and
held as one tensor in memory; each batch is gathered with an index tensor
(no DataLoader). Prints one JSON object per epoch on stdout:
  {"epoch", "seconds" (training only, evaluation excluded),
   "images_per_second", "train_loss", "test_accuracy", ...}

Run it with Debian's interpreter, /usr/bin/python3 (python3-torch 1.13).
"""
import argparse
import gzip
import json
import os
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
    args = p.parse_args()

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    x_train, y_train = load(args.data_dir, "train")
    x_test, y_test = load(args.data_dir, "test")
    n = x_train.shape[0]
    bs = args.batch_size

    model = nn.Sequential(
        nn.Linear(784, 128), nn.ReLU(),
        nn.Linear(128, 64), nn.ReLU(),
        nn.Linear(64, 10),
    )
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)

    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(),
                      "batch_size": bs, "lr": args.lr, "momentum": args.momentum,
                      "seed": args.seed}), flush=True)

    for epoch in range(1, args.epochs + 1):
        model.train()
        perm = torch.randperm(n)
        loss_sum = 0.0
        steps = 0
        t0 = time.perf_counter()
        for start in range(0, n, bs):
            idx = perm[start:start + bs]
            xb = x_train.index_select(0, idx)
            yb = y_train.index_select(0, idx)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            loss_sum += loss.item() * idx.shape[0]
            steps += 1
        seconds = time.perf_counter() - t0

        model.eval()
        with torch.inference_mode():
            pred = model(x_test).argmax(dim=1)
            acc = (pred == y_test).float().mean().item()
        print(json.dumps({"epoch": epoch, "seconds": seconds,
                          "images_per_second": n / seconds, "steps": steps,
                          "train_loss": loss_sum / n, "test_accuracy": acc}),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""PyTorch CPU peer of xylem's examples/fashion_lenet.toml, for benchmarking.

conv 5x5 20ch, maxpool 2, conv 5x5 50ch, maxpool 2, fc 500, relu, fc 10; softmax
cross-entropy, SGD(lr, momentum), shuffled minibatches (last partial batch included).
Data as in torch_mlp.py: one in-memory tensor, batches gathered with an index tensor.
Prints one JSON object per epoch (training seconds, accuracy) and, at the end, the
inference throughput over the 10k test images at --eval-batch.
Run it with Debian's interpreter, /usr/bin/python3 (python3-torch 1.13).
"""
import argparse
import json
import sys
import time

import torch
import torch.nn as nn

from torch_mlp import load


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--eval-batch", type=int, default=1000)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    args = p.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    x_train, y_train = load(args.data_dir, "train")
    x_test, y_test = load(args.data_dir, "test")
    x_train = x_train.reshape(-1, 1, 28, 28).contiguous()
    x_test = x_test.reshape(-1, 1, 28, 28).contiguous()
    n, bs = x_train.shape[0], args.batch_size

    model = nn.Sequential(
        nn.Conv2d(1, 20, 5), nn.MaxPool2d(2),
        nn.Conv2d(20, 50, 5), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(800, 500), nn.ReLU(), nn.Linear(500, 10),
    )
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "batch_size": bs}), flush=True)

    for epoch in range(1, args.epochs + 1):
        model.train()
        perm = torch.randperm(n)
        t0 = time.perf_counter()
        for start in range(0, n, bs):
            idx = perm[start:start + bs]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x_train.index_select(0, idx)), y_train.index_select(0, idx))
            loss.backward()
            opt.step()
        seconds = time.perf_counter() - t0
        model.eval()
        with torch.inference_mode():
            t1 = time.perf_counter()
            correct = 0
            for start in range(0, x_test.shape[0], args.eval_batch):
                pred = model(x_test[start:start + args.eval_batch]).argmax(dim=1)
                correct += (pred == y_test[start:start + args.eval_batch]).sum().item()
            eval_seconds = time.perf_counter() - t1
        print(json.dumps({"epoch": epoch, "seconds": seconds, "images_per_second": n / seconds,
                          "test_accuracy": correct / x_test.shape[0],
                          "eval_images_per_second": x_test.shape[0] / eval_seconds}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

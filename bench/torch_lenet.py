#!/usr/bin/python3
"""PyTorch peer (CPU or CUDA) of xylem's examples/fashion_lenet.toml, for benchmarking.

conv 5x5 20ch, maxpool 2, conv 5x5 50ch, maxpool 2, fc 500, relu, fc 10; softmax
cross-entropy, SGD(lr, momentum), shuffled minibatches (last partial batch included).
Data as in torch_mlp.py: one in-memory tensor (--device cuda: on the GPU), batches
gathered with an index tensor.
Prints one JSON object per epoch (training seconds, accuracy, and the step time as in
torch_mlp.py: "step_seconds", the median over windows of --step-window steps after the
first) and, at the end, the inference throughput over the 10k test images at --eval-batch.
--device, --step-window, --max-steps and --warmup-steps: see torch_mlp.py.
Run it with Debian's interpreter, /usr/bin/python3 (python3-torch 1.13), or on a GPU
machine with any Python whose torch has CUDA.
"""
import argparse
import json
import sys
import time

import torch
import torch.nn as nn

from torch_mlp import StepClock, add_common_args, device_info, eval_batches, eval_throughput, load, sync, warm_up


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--eval-batch", type=eval_batches, default=[1000],
                   help="batch size(s) of the inference pass, e.g. 1000,250 (the fastest is reported)")
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
    x_train = x_train.reshape(-1, 1, 28, 28).contiguous()
    x_test = x_test.reshape(-1, 1, 28, 28).contiguous()
    if cuda:
        x_train, y_train = x_train.to(dev), y_train.to(dev)
        x_test, y_test = x_test.to(dev), y_test.to(dev)
    n, bs = x_train.shape[0], args.batch_size
    warmup = args.warmup_steps if args.warmup_steps >= 0 else (3 if cuda else 0)

    model = nn.Sequential(
        nn.Conv2d(1, 20, 5), nn.MaxPool2d(2),
        nn.Conv2d(20, 50, 5), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(800, 500), nn.ReLU(), nn.Linear(500, 10),
    ).to(dev)
    loss_fn = nn.CrossEntropyLoss()
    opt_args = {"lr": args.lr, "momentum": args.momentum}
    opt = torch.optim.SGD(model.parameters(), **opt_args)
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "batch_size": bs,
                      "warmup_steps": warmup, "max_steps": args.max_steps, **device_info(dev)}), flush=True)
    warm_up(model, loss_fn, opt_args, x_train, y_train, bs, warmup)

    for epoch in range(1, args.epochs + 1):
        model.train()
        perm = torch.randperm(n, device=dev)
        steps = seen = 0
        clock = StepClock(dev, args.step_window)
        clock.start()
        for start in range(0, n, bs):
            idx = perm[start:start + bs]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x_train.index_select(0, idx)), y_train.index_select(0, idx))
            loss.backward()
            opt.step()
            seen += idx.shape[0]
            steps += 1
            clock.after_step(steps)
            if steps == args.max_steps:
                break
        seconds = clock.stop()
        inference = eval_throughput(model, x_test, y_test, args.eval_batch, dev)
        print(json.dumps({"epoch": epoch, "seconds": seconds, "images_per_second": seen / seconds,
                          "steps": steps, **inference, **clock.fields()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""PyTorch peer (CPU, or CUDA with --device cuda) of xylem's examples/char_rnn.toml (Karpathy's char-rnn defaults), for benchmarking.

The same data, laid out the same way as xylem's [data] text (train/include/xylem/train/text_data.h):
  - the corpus: the regular files of each --text folder (not recursive, links followed) in sorted
    name order less those matching an --exclude glob (files named directly are taken as given),
    concatenated as bytes;
  - the vocabulary: the distinct byte values, sorted; token i is the i-th;
  - validation: the last round(--validation * chars) characters (at least 1);
  - batches: the training tokens cut into --batch-size contiguous streams of chunks*seq_len
    inputs (chunks = (n - 1) // (batch * seq_len)); batch k is columns [k*seq_len, (k+1)*seq_len)
    of every stream, the targets the next characters. Validation is laid out the same way.
The model: one-hot (or --input embedding) characters, nn.LSTM(--hidden, --layers, batch_first,
--dropout between layers), nn.Linear to the vocabulary; every parameter drawn from
U(-init, init), then --forget-bias added to the input-to-hidden bias of each layer's forget
gate, as xylem's lstm layer does (char-rnn sets its i2h forget bias to 1; the h2h bias keeps its
uniform draw either way). Cross-entropy, mean per
character; gradients clamped to +-clip (clip by value); torch.optim.RMSprop(lr, alpha, eps). The
hidden and cell state carry over between consecutive batches (detached: truncated BPTT) and are
zeroed at each epoch's start and before validation, which carries them along its own batches.

Prints one JSON object per line on stdout:
  {"kind": "data", "chars", "vocab", "train_chars", "validation_chars", "steps_per_epoch", ...}
  {"kind": "epoch", "epoch", "steps", "complete", "train_loss", "val_loss", "val_bpc",
   "seconds" (training only), "ms_per_iteration", "global_step", and torch_mlp.py's StepClock
   fields: "step_seconds" (median seconds per step over the epoch's windows of --step-window
   steps after the first), "step_window", "step_windows", "step_window_seconds"}   at every
   epoch end, and where --max-steps ends the run (as xylem's train.max_steps does; its
   metrics.json has the same rows)
--device cuda: the model and the whole laid-out text on the GPU (nn.LSTM runs cuDNN's LSTM), the
loss summed on the device and read once per epoch (on cpu: read every step, as before), the clock
read after torch.cuda.synchronize (at the epoch's start and end and every --step-window steps).
No untimed warm-up: the first window (cuDNN's set-up) is left out of step_seconds, not "seconds".
Run it with Debian's interpreter, /usr/bin/python3 (python3-torch), or on a GPU machine with any
Python whose torch has CUDA.
"""
import argparse
import fnmatch
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_mlp import StepClock, device_info


def corpus_files(paths, excludes):
    files = []
    for p in paths:
        if not os.path.exists(p):
            sys.exit(f"{p}: no such file or folder")
        if not os.path.isdir(p):
            files.append(p)
            continue
        names = sorted(n for n in os.listdir(p) if os.path.isfile(os.path.join(p, n))
                       and not any(fnmatch.fnmatchcase(n, e) for e in excludes))
        files.extend(os.path.join(p, n) for n in names)
    return files


def stream_layout(tokens, streams, seq_len):
    """(x, y) as [streams, chunks * seq_len] int64 tensors, or None when too short."""
    chunks = (len(tokens) - 1) // (streams * seq_len)
    if chunks <= 0:
        return None
    n = streams * chunks * seq_len
    t = torch.tensor(tokens[:n + 1], dtype=torch.int64)
    return t[:n].view(streams, -1), t[1:n + 1].view(streams, -1)


class CharRnn(nn.Module):
    def __init__(self, vocab, args):
        super().__init__()
        self.vocab = vocab
        self.embedding = nn.Embedding(vocab, args.embed_dim) if args.input == "embedding" else None
        features = args.embed_dim if self.embedding is not None else vocab
        self.lstm = nn.LSTM(features, args.hidden, args.layers, batch_first=True, dropout=args.dropout)
        self.out = nn.Linear(args.hidden, vocab)
        for p in self.parameters():
            nn.init.uniform_(p, -args.init, args.init)
        h = args.hidden
        with torch.no_grad():  # gates in PyTorch's order i, f, g, o: f is the second block
            for k in range(args.layers):
                getattr(self.lstm, f"bias_ih_l{k}")[h:2 * h] += args.forget_bias

    def forward(self, x, state):
        inp = self.embedding(x) if self.embedding is not None else F.one_hot(x, self.vocab).float()
        y, state = self.lstm(inp, state)
        return self.out(y), state


def evaluate(model, x, y, seq_len):
    model.eval()
    state, total, count = None, 0.0, 0
    with torch.no_grad():
        for k in range(x.shape[1] // seq_len):
            xb, yb = x[:, k * seq_len:(k + 1) * seq_len], y[:, k * seq_len:(k + 1) * seq_len]
            logits, state = model(xb, state)
            total += F.cross_entropy(logits.reshape(-1, model.vocab), yb.reshape(-1), reduction="sum").item()
            count += yb.numel()
    model.train()
    return total / count


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--text", nargs="+", default=["/usr/share/games/fortunes"])
    p.add_argument("--exclude", nargs="*", default=["*.dat", "*.u8"])
    p.add_argument("--validation", type=float, default=0.05)
    p.add_argument("--seq-len", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=50)
    p.add_argument("--input", choices=["one_hot", "embedding"], default="one_hot")
    p.add_argument("--embed-dim", type=int, default=128)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--init", type=float, default=0.08)
    p.add_argument("--forget-bias", type=float, default=1.0)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--alpha", type=float, default=0.95)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--clip", type=float, default=5.0)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=0, help="stop after N steps over the run (0: no limit)")
    p.add_argument("--seed", type=int, default=123)
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: PyTorch's default)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--step-window", type=int, default=100, help="read the clock every N steps for step_seconds")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"

    files = corpus_files(args.text, args.exclude)
    text = b"".join(open(f, "rb").read() for f in files)
    if not text:
        sys.exit("the text is empty")
    vocab = sorted(set(text))
    index = {b: i for i, b in enumerate(vocab)}
    tokens = [index[b] for b in text]
    held = max(1, int(math.floor(args.validation * len(text) + 0.5))) if args.validation > 0 else 0
    train = stream_layout(tokens[:len(tokens) - held], args.batch_size, args.seq_len)
    val = stream_layout(tokens[len(tokens) - held:], args.batch_size, args.seq_len) if held else None
    if train is None:
        sys.exit("the training text is too short for one batch")
    steps_per_epoch = train[0].shape[1] // args.seq_len
    if cuda:
        train = tuple(t.to(dev) for t in train)
        val = tuple(t.to(dev) for t in val) if val is not None else None
    print(json.dumps({"kind": "data", "files": len(files), "chars": len(text), "vocab": len(vocab),
                      "train_chars": len(text) - held, "validation_chars": held,
                      "steps_per_epoch": steps_per_epoch, "torch": torch.__version__,
                      "threads": torch.get_num_threads(), **device_info(dev)}), flush=True)

    model = CharRnn(len(vocab), args).to(dev)
    opt = torch.optim.RMSprop(model.parameters(), lr=args.lr, alpha=args.alpha, eps=args.eps)
    global_step = 0
    for epoch in range(1, args.epochs + 1):
        state, loss_sum, steps = None, 0.0, 0
        loss_dev = torch.zeros((), device=dev) if cuda else None
        clock = StepClock(dev, args.step_window)
        clock.start()
        for k in range(steps_per_epoch):
            xb = train[0][:, k * args.seq_len:(k + 1) * args.seq_len]
            yb = train[1][:, k * args.seq_len:(k + 1) * args.seq_len]
            if state is not None:
                state = tuple(s.detach() for s in state)
            logits, state = model(xb, state)
            loss = F.cross_entropy(logits.reshape(-1, len(vocab)), yb.reshape(-1))
            opt.zero_grad(set_to_none=False)
            loss.backward()
            torch.nn.utils.clip_grad_value_(model.parameters(), args.clip)
            opt.step()
            if cuda:
                loss_dev += loss.detach()  # no host read per step
            else:
                loss_sum += loss.item()
            steps += 1
            global_step += 1
            clock.after_step(steps)
            if args.max_steps and global_step >= args.max_steps:
                break
        seconds = clock.stop()
        if cuda:
            loss_sum = loss_dev.item()
        row = {"kind": "epoch", "epoch": epoch, "steps": steps, "complete": steps == steps_per_epoch,
               "global_step": global_step, "train_loss": loss_sum / steps, "seconds": seconds,
               "ms_per_iteration": 1000 * seconds / steps, **clock.fields()}
        if val is not None:
            row["val_loss"] = evaluate(model, val[0], val[1], args.seq_len)
            row["val_bpc"] = row["val_loss"] / math.log(2)
        print(json.dumps(row), flush=True)
        if args.max_steps and global_step >= args.max_steps:
            break


if __name__ == "__main__":
    main()

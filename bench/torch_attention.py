#!/usr/bin/python3
"""PyTorch peer of BUILD/bin/xylem-bench-attention: per-call forward and backward time of
torch.nn.functional.scaled_dot_product_attention on its shapes, float32.

Shapes (q, k and v [B, H, T, D], scale 1/sqrt(D), no dropout), as bench/src/attention_bench.cpp:
  gpt B12 H4 T64 D32 causal, B4 H4 T256 D64 causal, B1 H8 T1024 D64 causal, B1 H2 T1024 D64 full
Per shape and per SDPA backend: "default" (torch's own dispatch) and, where
torch.nn.attention.sdpa_kernel exists (torch >= 2.3), each of flash, efficient, cudnn and math
forced (a backend that cannot run fp32 here, e.g. flash, is reported as unavailable). Forward:
one call with autograd on (q, k and v require grad: what training runs, the log-sum-exp kept for
the backward, as xylem's attention_fwd writes its lse); backward: out.backward(dout, retain_graph=True) on one forward's graph (the gradients
of q, k and v). Each the median (--min: the fastest) of --reps timed calls after --warmup
untimed ones, each call followed by torch.cuda.synchronize (on cuda) and timed with perf_counter:
wall time with the launch overhead, as xylem-bench-attention's synced calls. Without
scaled_dot_product_attention (torch < 2.0, e.g. Debian's 1.13) the path is the composed one
(q @ k^T * scale, masked_fill, softmax, @ v), reported as backend "composed".

Prints one JSON object per line: {"kind": "env", torch, device, ...}, then per shape
{"kind": "shape", "name", "b", "h", "t", "d", "causal", "backends": {name: {"fwd_ms", "bwd_ms"}
or {"error"}}, "default_choice" (the backend torch's dispatch picks, where it can be asked),
"best": the backend with the smallest fwd_ms + bwd_ms, "fwd_ms", "bwd_ms" (the best's)}.
"""
import argparse
import contextlib
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

SHAPES = [
    ("gpt B12 H4 T64 D32 causal", 12, 4, 64, 32, True),
    ("B4 H4 T256 D64 causal", 4, 4, 256, 64, True),
    ("B1 H8 T1024 D64 causal", 1, 8, 1024, 64, True),
    ("B1 H2 T1024 D64 full", 1, 2, 1024, 64, False),
]

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


def composed(q, k, v, causal):
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))
    if causal:
        T, L = q.size(-2), k.size(-2)
        mask = torch.ones(T, L, dtype=torch.bool, device=q.device).tril()
        att = att.masked_fill(~mask, float("-inf"))
    return F.softmax(att, dim=-1) @ v


def attention(q, k, v, causal):
    if HAS_SDPA:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return composed(q, k, v, causal)


def backends():
    """(name, context factory) pairs: the default dispatch, then each forced backend torch knows."""
    out = [("default" if HAS_SDPA else "composed", contextlib.nullcontext)]
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return out
    for name, attr in (("flash", "FLASH_ATTENTION"), ("efficient", "EFFICIENT_ATTENTION"),
                       ("cudnn", "CUDNN_ATTENTION"), ("math", "MATH")):
        b = getattr(SDPBackend, attr, None)
        if b is not None:
            out.append((name, lambda b=b: sdpa_kernel(b)))
    return out


def default_choice(q, k, v, causal):
    """The backend torch's dispatch picks for these inputs (a private API; None where it is missing)."""
    try:
        from torch.nn.attention import SDPBackend
        c = torch._fused_sdp_choice(q, k, v, None, 0.0, causal)
        for b in SDPBackend.__members__.values():
            if int(b) == int(c):
                return b.name.lower()
        return str(c)
    except Exception:
        return None


class Timer:
    """Median (or min) milliseconds of `reps` calls, each followed by a device sync: wall time, as
    xylem-bench-attention's median_ms measures (launch overhead included)."""

    def __init__(self, dev):
        self.dev = dev

    def sync(self):
        if self.dev.type == "cuda":
            torch.cuda.synchronize(self.dev)

    def __call__(self, f, warmup, reps, use_min):
        for _ in range(warmup):
            f()
        self.sync()
        t = []
        for _ in range(reps):
            t0 = time.perf_counter()
            f()
            self.sync()
            t.append(1000 * (time.perf_counter() - t0))
        return min(t) if use_min else statistics.median(t)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--min", action="store_true", help="the fastest call instead of the median")
    p.add_argument("--filter", default="", help="only shapes whose name holds this")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads(N); 0 keeps PyTorch's default")
    args = p.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    env = {"kind": "env", "torch": torch.__version__, "device": args.device, "sdpa": HAS_SDPA,
           "threads": torch.get_num_threads(), "reps": args.reps, "stat": "min" if args.min else "median"}
    if dev.type == "cuda":
        env.update(gpu=torch.cuda.get_device_name(dev), cuda=torch.version.cuda,
                   matmul_tf32=torch.backends.cuda.matmul.allow_tf32)
    print(json.dumps(env), flush=True)
    timer = Timer(dev)
    gen = torch.Generator().manual_seed(7)
    for name, b, h, t, d, causal in SHAPES:
        if args.filter not in name:
            continue
        shape = (b, h, t, d)
        q, k, v, dout = (torch.empty(shape).uniform_(-1, 1, generator=gen).to(dev) for _ in range(4))
        for x in (q, k, v):
            x.requires_grad_(True)
        row = {"kind": "shape", "name": name, "b": b, "h": h, "t": t, "d": d, "causal": causal,
               "backends": {}, "default_choice": default_choice(q.detach(), k.detach(), v.detach(), causal)}
        for bname, ctx in backends():
            try:
                with ctx():
                    def fwd():  # with autograd on, as in training (the backward's saved state kept)
                        attention(q, k, v, causal)
                    fwd_ms = timer(fwd, args.warmup, args.reps, args.min)
                    out = attention(q, k, v, causal)

                    def bwd():
                        q.grad = k.grad = v.grad = None
                        out.backward(dout, retain_graph=True)
                    bwd_ms = timer(bwd, args.warmup, args.reps, args.min)
                    del out
                row["backends"][bname] = {"fwd_ms": fwd_ms, "bwd_ms": bwd_ms}
            except Exception as e:  # e.g. flash attention has no fp32 kernel
                row["backends"][bname] = {"error": str(e).strip().split("\n")[0][:160]}
        ok = {n: r for n, r in row["backends"].items() if "fwd_ms" in r}
        if ok:
            best = min(ok, key=lambda n: ok[n]["fwd_ms"] + ok[n]["bwd_ms"])
            row.update(best=best, fwd_ms=ok[best]["fwd_ms"], bwd_ms=ok[best]["bwd_ms"])
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Checks the float64 formulas of tests/support/reference.h (rmsprop_update, adamw_update,
clip_by_norm) against PyTorch's own optimizers, and prints the PyTorch numbers that
tests/solvers/solver_torch_test.cpp embeds. Run once by hand (Debian: apt-get install python3-torch);
no test runs python.  Usage: /usr/bin/python3 tests/solvers/torch_reference.py"""
import math

import torch

torch.set_default_dtype(torch.float64)

P0 = [0.5, -1.0, 2.0, 0.1, -0.25]
GRADS = [[0.3, -0.2, 0.05, 1.5, -0.7], [-0.1, 0.4, 0.2, -0.9, 0.0], [0.25, 0.25, -0.6, 0.3, 0.8]]


def rmsprop_formula(p, grads, lr, alpha, eps, wd, mom, centered):
    p = list(p)
    n = len(p)
    sq, buf, ga = [0.0] * n, [0.0] * n, [0.0] * n
    for g in grads:
        for i in range(n):
            gi = g[i] + wd * p[i]
            sq[i] = alpha * sq[i] + (1 - alpha) * gi * gi
            if centered:
                ga[i] = ga[i] + (1 - alpha) * (gi - ga[i])
                avg = math.sqrt(sq[i] - ga[i] * ga[i]) + eps
            else:
                avg = math.sqrt(sq[i]) + eps
            if mom > 0:
                buf[i] = mom * buf[i] + gi / avg
                p[i] -= lr * buf[i]
            else:
                p[i] -= lr * gi / avg
    return p, {"square_avg": sq, "momentum_buffer": buf, "grad_avg": ga}


def adamw_formula(p, grads, lr, b1, b2, eps, wd):
    p = list(p)
    n = len(p)
    m, v = [0.0] * n, [0.0] * n
    for t, g in enumerate(grads, start=1):
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        for i in range(n):
            p[i] *= 1 - lr * wd
            m[i] = b1 * m[i] + (1 - b1) * g[i]
            v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i]
            p[i] -= lr * (m[i] / bc1) / (math.sqrt(v[i] / bc2) + eps)
    return p, {"exp_avg": m, "exp_avg_sq": v}


def run_torch(make, grads):
    p = torch.tensor(P0, requires_grad=True)
    opt = make([p])
    for g in grads:
        p.grad = torch.tensor(g)
        opt.step()
    return p.detach().tolist(), {k: v.tolist() for k, v in opt.state[p].items() if k != "step"}


def worst(a, b):
    return max(abs(x - y) for x, y in zip(a, b))


def fmt(v):
    return "{" + ", ".join(repr(x) for x in v) + "}"


RMSPROP = [  # lr, alpha, eps, weight_decay, momentum, centered
    (0.01, 0.99, 1e-8, 0.0, 0.0, False),
    (0.01, 0.9, 1e-8, 0.1, 0.0, False),
    (0.005, 0.99, 1e-8, 0.0, 0.9, False),
    (0.01, 0.9, 1e-8, 0.0, 0.0, True),
    (0.005, 0.8, 1e-6, 0.01, 0.5, True),
]
ADAMW = [  # lr, beta1, beta2, eps, weight_decay
    (0.001, 0.9, 0.999, 1e-8, 0.01),
    (0.05, 0.8, 0.95, 1e-6, 0.5),
]

print("torch", torch.__version__)
for lr, alpha, eps, wd, mom, centered in RMSPROP:
    tp, ts = run_torch(lambda ps: torch.optim.RMSprop(ps, lr=lr, alpha=alpha, eps=eps, weight_decay=wd,
                                                       momentum=mom, centered=centered), GRADS)
    fp, fs = rmsprop_formula(P0, GRADS, lr, alpha, eps, wd, mom, centered)
    err = max([worst(tp, fp)] + [worst(ts[k], fs[k]) for k in ts])
    assert err < 1e-12, err
    print(f"rmsprop lr={lr} alpha={alpha} eps={eps} wd={wd} momentum={mom} centered={centered}: "
          f"formula vs torch {err:.1e}; state {sorted(ts)}\n  param {fmt(tp)}")
for lr, b1, b2, eps, wd in ADAMW:
    tp, ts = run_torch(lambda ps: torch.optim.AdamW(ps, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd), GRADS)
    fp, fs = adamw_formula(P0, GRADS, lr, b1, b2, eps, wd)
    err = max([worst(tp, fp)] + [worst(ts[k], fs[k]) for k in ts])
    assert err < 1e-12, err
    print(f"adamw lr={lr} betas=({b1}, {b2}) eps={eps} wd={wd}: formula vs torch {err:.1e}; state {sorted(ts)}\n"
          f"  param {fmt(tp)}")

# clip_grad_norm_ over two tensors, and clamp_ by value.
for max_norm in (0.5, 100.0):
    a, b = torch.tensor(GRADS[0]), torch.tensor(GRADS[1])
    pa, pb = torch.zeros(5, requires_grad=True), torch.zeros(5, requires_grad=True)
    pa.grad, pb.grad = a.clone(), b.clone()
    total = torch.nn.utils.clip_grad_norm_([pa, pb], max_norm)
    norm = math.sqrt(sum(x * x for x in GRADS[0] + GRADS[1]))
    coef = min(1.0, max_norm / (norm + 1e-6))
    err = max(worst(pa.grad.tolist(), [x * coef for x in GRADS[0]]), worst(pb.grad.tolist(), [x * coef for x in GRADS[1]]))
    assert err < 1e-12 and abs(total.item() - norm) < 1e-12, err
    print(f"clip_grad_norm_ max_norm={max_norm}: total_norm {total.item()!r}, formula vs torch {err:.1e}")

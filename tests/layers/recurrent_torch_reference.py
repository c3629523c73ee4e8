#!/usr/bin/python3
"""Prints the PyTorch numbers that tests/layers/recurrent_torch_test.cpp embeds: nn.LSTM and
nn.GRU (batch_first, 2 layers) with weights set by a formula, run on two consecutive batches with
the state carried (detached) from the first into the second, then J = sum(r * y) of the second
batch backpropagated: y, dJ/dx and dJ/d(every parameter), in float64. Run once by hand (Debian:
apt-get install python3-torch); no test runs python.
Usage: /usr/bin/python3 tests/layers/recurrent_torch_reference.py > /tmp/numbers.inc"""
import math

import torch

torch.set_default_dtype(torch.float64)
BATCH, TIME, FEATURES, HIDDEN, LAYERS = 2, 3, 3, 2, 2


# The same formulas as the C++ test's (recurrent_torch_test.cpp).
def param_value(p, k):
    return 0.5 * math.sin(0.7 * k + 1.3 * p + 0.1)


def x_value(batch, k):
    return 1.5 * math.sin(0.9 * k + 0.5) if batch == 0 else 1.5 * math.cos(0.45 * k + 0.2)


def r_value(k):
    return math.sin(1.1 * k)


def emit(name, values):
    print("const std::vector<double> %s = {%s};" % (name, ", ".join("%.10g" % v for v in values)))


for kind, cls in (("lstm", torch.nn.LSTM), ("gru", torch.nn.GRU)):
    m = cls(FEATURES, HIDDEN, LAYERS, batch_first=True)
    names = [n for n, _ in m.named_parameters()]
    with torch.no_grad():
        for p, (_, t) in enumerate(m.named_parameters()):
            flat = t.view(-1)
            for k in range(flat.numel()):
                flat[k] = param_value(p, k)
    n = BATCH * TIME * FEATURES
    x1 = torch.tensor([x_value(0, k) for k in range(n)]).view(BATCH, TIME, FEATURES)
    x2 = torch.tensor([x_value(1, k) for k in range(n)]).view(BATCH, TIME, FEATURES).requires_grad_()
    _, state = m(x1)
    state = tuple(s.detach() for s in state) if kind == "lstm" else state.detach()
    y, _ = m(x2, state)
    r = torch.tensor([r_value(k) for k in range(y.numel())]).view_as(y)
    (y * r).sum().backward()
    print("// %s: parameters in order %s" % (kind, ", ".join(names)))
    emit("k%sY" % kind.capitalize(), y.detach().reshape(-1).tolist())
    emit("k%sDx" % kind.capitalize(), x2.grad.reshape(-1).tolist())
    print("const std::vector<std::vector<double>> k%sDparams = {" % kind.capitalize())
    for _, t in m.named_parameters():
        print("    {%s}," % ", ".join("%.10g" % v for v in t.grad.reshape(-1).tolist()))
    print("};")

#!/usr/bin/env python3
"""Writes the checked-in seed models for the ONNX importer's fuzz target (fuzz/seeds/onnx).

Run once by hand with Debian's torch (/usr/bin/python3 fuzz/seeds/make_onnx_seeds.py); the models
are tiny and checked in, so scripts/fuzz.sh needs neither Python nor torch. Between them they hold
every op the importer maps (docs/onnx.md), at opsets 13 and 17: a Conv net, one of gates (HardSwish,
squeeze-and-excitation, SiLU), an LSTM and GRU sequence model with Clip, a tiny GPT (layer norm, GELU and attention patterns, embeddings)
and a graph of two inputs (token ids and features) and two outputs.
"""
import os

import torch
from torch import nn

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "onnx")


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, padding=1)
        self.avg = nn.AvgPool2d(3, stride=2, padding=1)
        self.max = nn.MaxPool2d(2)
        self.fc = nn.Linear(4, 3)
        self.bn = nn.BatchNorm1d(3)
        self.out = nn.Linear(3, 2)

    def forward(self, x):
        r = torch.relu(self.conv(x))
        c = torch.cat([self.avg(r), self.max(r)], 1)
        h = torch.sigmoid(c) + torch.tanh(c)
        h = torch.flatten(nn.functional.adaptive_avg_pool2d(h, 1), 1)
        h = self.bn(self.fc(h))
        return torch.log_softmax(self.out(h.view(h.size(0), -1)), dim=1)


class Sequence(nn.Module):
    """An LSTM and a GRU (batch first) into the last step, through ReLU6 (Clip)."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 4, batch_first=True)
        self.gru = nn.GRU(4, 4, batch_first=True)
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        y, _ = self.lstm(x)
        y, _ = self.gru(y)
        return self.fc(nn.functional.relu6(y[:, -1]))


class Gates(nn.Module):
    """MobileNetV3's and EfficientNet's forms: HardSwish, a squeeze-and-excitation gate (x.mean over
    H and W, a 1x1 Conv, HardSigmoid, Mul by the map), SiLU (Sigmoid, Mul), a ceil-mode max pool
    that tiles its map, torch.cat of one tensor."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, padding=1)
        self.squeeze = nn.Conv2d(2, 2, 1)
        self.pool = nn.MaxPool2d(3, stride=2, ceil_mode=True)  # 5x5 -> 2x2: the windows tile it
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        h = nn.functional.hardswish(self.conv(x))
        h = h * nn.functional.hardsigmoid(self.squeeze(h.mean([2, 3], keepdim=True)))
        h = torch.cat([self.pool(nn.functional.silu(h))], 1)
        return self.fc(torch.flatten(h, 1))


class TwoInTwoOut(nn.Module):
    """Token ids and features in, logits and the hidden state (also read by the head) out."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.proj = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, ids, feats):
        h = torch.tanh(self.emb(ids) + self.proj(feats))
        return self.head(h), h


def tiny_gpt():
    """bench/torch_gpt.py's GPT, tiny: embeddings, layer norm, attention, GELU's erf form."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
    from torch_gpt import GPT
    return GPT(10, block_size=4, n_layer=1, n_head=2, n_embd=8)


def main():
    os.makedirs(HERE, exist_ok=True)
    torch.manual_seed(0)
    models = {
        "mlp": (nn.Sequential(nn.Flatten(), nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2), nn.Softmax(dim=1)), (1, 1, 2, 2)),
        "tiny": (Tiny(), (1, 1, 4, 4)),
    }
    models["sequence"] = (Sequence(), (1, 3, 3))
    models["gpt"] = (tiny_gpt(), None)
    models["gates"] = (Gates(), (1, 1, 5, 5))  # last: the models before it keep their random weights
    for name, (model, shape) in models.items():
        for opset in (13, 17):
            x = torch.randint(0, 10, (1, 4)) if shape is None else torch.randn(*shape)
            torch.onnx.export(model.eval(), x, os.path.join(HERE, f"{name}_op{opset}.onnx"),
                              opset_version=opset, input_names=["x"], output_names=["y"],
                              dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    names = ["ids", "feats", "logits", "hidden"]
    for opset in (13, 17):
        torch.onnx.export(TwoInTwoOut().eval(), (torch.randint(0, 10, (1, 3)), torch.randn(1, 3, 4)),
                          os.path.join(HERE, f"two_io_op{opset}.onnx"), opset_version=opset, input_names=names[:2],
                          output_names=names[2:], dynamic_axes={n: {0: "batch"} for n in names})


if __name__ == "__main__":
    main()

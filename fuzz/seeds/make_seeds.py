#!/usr/bin/env python3
"""Writes the checked-in seed inputs for the fuzz targets (fuzz/seeds/{idx,safetensors}).

Run once by hand (python3 fuzz/seeds/make_seeds.py); the outputs are tiny and checked in, so
scripts/fuzz.sh needs neither Python nor the dataset. The IDX seeds are real Fashion-MNIST
records (the first test images and labels); the safetensors seeds follow the layout xylem's
and the reference writer produce (JSON header padded with spaces to 8 bytes, F32 tensors
in layout order, string __metadata__). The config seeds are examples/*.toml, copied at run time.
"""
import gzip
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = "/usr/share/datasets/fashion-mnist"


def idx(dims, payload):
    return bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + payload


def first_records(name, header, count, record):
    with gzip.open(os.path.join(DATA, name), "rb") as f:
        f.read(header)
        return f.read(count * record)


def safetensors(tensors, metadata=None):
    header, buffer = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(buffer), len(buffer) + len(data)]}
        buffer += data
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + buffer


def write(sub, name, data):
    with open(os.path.join(HERE, sub, name), "wb") as f:
        f.write(data)


labels = first_records("t10k-labels-idx1-ubyte.gz", 8, 16, 1)
images = first_records("t10k-images-idx3-ubyte.gz", 16, 2, 28 * 28)
write("idx", "labels-16.idx1", idx([16], labels))
write("idx", "labels-16.idx1.gz", gzip.compress(idx([16], labels), mtime=0))
write("idx", "images-2.idx3.gz", gzip.compress(idx([2, 28, 28], images), mtime=0))
write("idx", "images-2x4x4.idx3", idx([2, 4, 4], bytes(range(0, 255, 8))))
# Two gzip members back to back (what `cat a.gz b.gz` makes), then bytes that are not a third.
whole = idx([16], labels)
write("idx", "labels-16-two-members.idx1.gz",
      gzip.compress(whole[:10], mtime=0) + gzip.compress(whole[10:], mtime=0) + b"\0\0\x1f")

f32 = lambda *v: struct.pack("<%df" % len(v), *v)
write("safetensors", "mlp.safetensors", safetensors(
    [("fc1.weight", "F32", [2, 3], f32(0.5, -1, 2, 0.25, 0, -3)), ("fc1.bias", "F32", [2], f32(1, -1)),
     ("fc2.weight", "F32", [1, 2], f32(0.125, 4)), ("fc2.bias", "F32", [1], f32(0))],
    {"xylem.config": "fashion_mlp.toml", "xylem.epochs": "1"}))
write("safetensors", "dtypes.safetensors", safetensors(
    [("f64", "F64", [1], struct.pack("<d", 1.5)), ("i64", "I64", [2], struct.pack("<2q", -1, 7)),
     ("u8", "U8", [3], b"\x00\x7f\xff"), ("f16", "F16", [1], b"\x00\x3c"), ("bf16", "BF16", [1], b"\x80\x3f"),
     ("i32", "I32", [0], b""), ("scalar", "F32", [], f32(2))]))

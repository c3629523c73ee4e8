"""Shared fixtures: small configs, Fashion-MNIST read with NumPy, the xylem program for the parity test."""
import gzip
import os
import pathlib
import shutil

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
FASHION = pathlib.Path("/usr/share/datasets/fashion-mnist")

# A small MLP over 28x28 images: the tests' model unless they need another.
MLP = """
backend = "native"
[[model.layers]]
type = "flatten"
[[model.layers]]
type = "linear"
out = 32
[[model.layers]]
type = "relu"
[[model.layers]]
type = "linear"
out = 10
[loss]
type = "cross_entropy"
[solver]
type = "sgd"
lr = 0.05
momentum = 0.9
[train]
epochs = 1
batch_size = 32
seed = 7
"""


def read_idx(path):
    """An IDX file (plain or gzipped) as a NumPy array, read independently of xylem."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def fashion_file(stem):
    for name in (stem, stem + ".gz"):
        if (FASHION / name).exists():
            return FASHION / name
    pytest.skip(f"Debian's dataset-fashion-mnist is not installed ({FASHION}/{stem}[.gz])")


@pytest.fixture(scope="session")
def fashion():
    """(x_train, y_train, x_test, y_test): images as float32 in [0, 1] the way xylem scales them (v / 255)."""
    def images(stem):
        return (read_idx(fashion_file(stem)).astype(np.float32) / np.float32(255.0))
    def labels(stem):
        return read_idx(fashion_file(stem)).astype(np.int32)
    return (images("train-images-idx3-ubyte"), labels("train-labels-idx1-ubyte"),
            images("t10k-images-idx3-ubyte"), labels("t10k-labels-idx1-ubyte"))


@pytest.fixture(scope="session")
def xylem_cli():
    """The xylem program of the same build: XYLEM_CLI (scripts/test.sh sets it), else build/bin/xylem."""
    path = os.environ.get("XYLEM_CLI") or str(REPO / "build" / "bin" / "xylem")
    if not os.access(path, os.X_OK):
        pytest.skip(f"no xylem program at {path} (set XYLEM_CLI)")
    return path


@pytest.fixture
def small_data():
    """200 random 28x28 samples whose class is which quarter of the image is brightest (learnable)."""
    rng = np.random.default_rng(0)
    x = rng.random((200, 28, 28), dtype=np.float32) * 0.2
    y = rng.integers(0, 4, 200).astype(np.int32)
    for i, c in enumerate(y):
        r, q = divmod(int(c), 2)
        x[i, r * 14:(r + 1) * 14, q * 14:(q + 1) * 14] += 0.8
    return x, y

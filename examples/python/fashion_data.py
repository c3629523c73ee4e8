"""Fashion-MNIST from Debian's dataset-fashion-mnist as NumPy arrays (the examples' data helper)."""
import gzip
import os

import numpy as np

FASHION = "/usr/share/datasets/fashion-mnist"


def _idx(stem):
    path = os.path.join(FASHION, stem)
    opener = open if os.path.exists(path) else gzip.open
    with opener(path if os.path.exists(path) else path + ".gz", "rb") as f:
        data = f.read()
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(data[3])]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * data[3]).reshape(dims)


def images(stem):
    return _idx(stem).astype(np.float32) / np.float32(255)


def load_test():
    """(x_test, y_test) only."""
    return images("t10k-images-idx3-ubyte"), _idx("t10k-labels-idx1-ubyte").astype(np.int32)


def load():
    """(x_train, y_train, x_test, y_test): images float32 in [0, 1] [N, 28, 28], labels int32."""
    return (images("train-images-idx3-ubyte"), _idx("train-labels-idx1-ubyte").astype(np.int32), *load_test())

"""How the API takes NumPy arrays: the one place that converts or refuses a caller's array.

Samples (x) become float32, or int32 token ids for a model whose first layer takes tokens; labels
(y) become int32. Any other float type (float64, float16) is converted to float32, a copy; so is a
non-contiguous (sliced, transposed) or Fortran-ordered array. A float32 C-contiguous array is used
as it is. Bool, complex, object and string arrays are refused, as are float labels, token ids or
labels that do not fit int32: each a ValueError naming the argument.
"""
import numpy as np


def _refuse_kind(a, what):
    if a.dtype.kind not in "fiu":
        raise ValueError(f"{what}: arrays of dtype {a.dtype} are not numbers xylem takes (float or integer)")


def samples(x, tokens, what="x"):
    a = np.asarray(x)
    _refuse_kind(a, what)
    if tokens:
        return token_ids(a, what)
    if a.ndim < 2:
        raise ValueError(f"{what}: expected samples along the first dimension, got shape {a.shape}")
    return np.ascontiguousarray(a, dtype=np.float32)


def token_ids(a, what):
    if a.dtype.kind == "f":
        raise ValueError(f"{what}: the model takes int32 token ids, got {a.dtype}")
    if a.size and (a.min() < 0 or a.max() > np.iinfo(np.int32).max):
        raise ValueError(f"{what}: token ids must lie in [0, 2**31), got values in [{a.min()}, {a.max()}]")
    return np.ascontiguousarray(a, dtype=np.int32)


def labels(y, what="y"):
    a = np.asarray(y)
    _refuse_kind(a, what)
    if a.dtype.kind == "f":
        raise ValueError(f"{what}: class labels must be integers, got {a.dtype} (use y.astype(np.int32) if they are whole)")
    if a.size and (a.min() < 0 or a.max() > np.iinfo(np.int32).max):
        raise ValueError(f"{what}: class labels must lie in [0, 2**31), got values in [{a.min()}, {a.max()}]")
    return np.ascontiguousarray(a, dtype=np.int32)

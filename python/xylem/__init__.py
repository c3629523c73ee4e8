"""xylem from Python: the same configs, checkpoints, plugins, training loop and errors as the
`xylem` program, over NumPy arrays. See docs/python.md.

    import xylem
    print(xylem.backends())
    model = xylem.Model.from_config("examples/fashion_mlp.toml")
    history = model.fit(x_train, y_train, epochs=5, validation_split=0.1)
    probabilities = model.predict(x_test)
"""
from ._xylem import Tensor, auto_choice
from ._xylem import _tensor
from ._xylem import backends as _backends
from .callbacks import Callback, EarlyStopping, ModelCheckpoint
from .model import History, Model

__all__ = ["Model", "Tensor", "tensor", "History", "Callback", "ModelCheckpoint", "EarlyStopping", "backends", "auto_choice"]
__version__ = "0.1.0"


def backends(plugin_path=()):
    """Every plugin file found, probed in a child process, as `xylem backends` lists them: a list of
    dicts (name, version, abi, available, reason, path, detail, devices). Searched: plugin_path, then
    XYLEM_PLUGIN_PATH, then the plugins installed inside this package."""
    return _backends(list(plugin_path))


def tensor(array, device="native"):
    """A Tensor on `device` ("native", "opencl:0", ...) holding a copy of `array` (float arrays as
    float32, integer ones as int32, as the Model API converts them)."""
    import numpy as np
    a = np.asarray(array)
    if a.dtype.kind not in "fiu":
        raise ValueError(f"xylem.tensor: arrays of dtype {a.dtype} are not numbers xylem takes (float or integer)")
    a = np.ascontiguousarray(a, dtype=np.float32 if a.dtype.kind == "f" else np.int32)
    return _tensor(a, str(device))

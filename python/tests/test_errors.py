"""Errors from Python: each a clear exception with xylem's message, and the interpreter goes on."""
import numpy as np
import pytest

import xylem
from conftest import MLP


def test_bad_config_is_value_error():
    with pytest.raises(ValueError, match="solver"):
        xylem.Model.from_config(MLP.replace('type = "sgd"', 'type = "sgdd"'))
    with pytest.raises(ValueError, match="bogus"):
        xylem.Model.from_config(MLP.replace("seed = 7", "seed = 7\nbogus = 1"))
    with pytest.raises(ValueError, match="no config file"):
        xylem.Model.from_config("/nonexistent/model.toml")


def test_missing_backend_is_runtime_error():
    with pytest.raises(RuntimeError, match="nosuch"):
        xylem.Model.from_config(MLP, backend="nosuch")


def test_wrong_shapes_and_dtypes(small_data):
    x, y = small_data
    model = xylem.Model.from_config(MLP)
    with pytest.raises(ValueError, match="y has shape"):
        model.fit(x, y[:10], verbose=0)
    with pytest.raises(ValueError, match="integers"):
        model.fit(x, y.astype(np.float32), verbose=0)
    with pytest.raises(ValueError, match="not numbers"):
        model.predict(x.astype(np.complex64))
    with pytest.raises(ValueError, match="first dimension"):
        model.predict(np.zeros(5, dtype=np.float32))
    with pytest.raises(ValueError, match="out of range"):
        model.fit(x, y + 10, verbose=0)
    model.predict(x)
    with pytest.raises(ValueError, match="built for samples of shape"):
        model.predict(np.zeros((3, 14, 14), dtype=np.float32))
    with pytest.raises(ValueError, match="validation_split"):
        model.fit(x, y, validation_split=1.5, verbose=0)
    with pytest.raises(ValueError, match="verbose"):
        model.fit(x, y, verbose=3)
    # After every error the model still works.
    assert model.predict(x).shape == (200, 10)


def test_a_layer_that_does_not_fit_is_value_error():
    bad = MLP.replace('type = "flatten"\n', 'type = "conv2d"\nout = 4\nkernel = 3\n', 1)
    model = xylem.Model.from_config(bad)
    with pytest.raises(ValueError):
        model.predict(np.zeros((2, 28), dtype=np.float32).reshape(2, 28))


def test_a_diverging_run_is_runtime_error(small_data):
    x, y = small_data
    model = xylem.Model.from_config(MLP.replace("lr = 0.05", "lr = 1e30"))
    with pytest.raises(RuntimeError, match="the loss became (NaN|infinite)"):
        model.fit(x * 1e6, y, epochs=2, verbose=0)
    assert model.predict(x).shape == (200, 10)  # the interpreter and the model go on


def test_token_ids_outside_the_vocabulary_are_a_value_error_naming_the_array():
    # fit, evaluate and predict check the ids against the embedding before they reach the device
    # (the op's own check raised a RuntimeError naming neither the array nor the layer).
    cfg = """
[[model.layers]]
type = "embedding"
name = "emb"
vocab = 10
dim = 4
[[model.layers]]
type = "linear"
out = 3
[loss]
type = "cross_entropy"
[solver]
type = "sgd"
lr = 0.1
[train]
batch_size = 4
"""
    model = xylem.Model.from_config(cfg, backend="native")
    ids = np.arange(40, dtype=np.int32).reshape(8, 5) % 10
    y = np.zeros((8, 5), dtype=np.int32)
    model.fit(ids, y, verbose=0)
    bad = ids.copy()
    bad[3, 2] = 10
    where = r"token id 10 at flat index 17 is outside the vocabulary of model layer 'emb' \(embedding\), \[0, 10\)"
    for call, what in ((lambda: model.predict(bad), "predict: x"), (lambda: model.evaluate(bad, y), "evaluate: x"),
                       (lambda: model.fit(bad, y, verbose=0), "fit: x"),
                       (lambda: model.fit(ids, y, validation_data=(bad, y), verbose=0), "validation_data: x")):
        with pytest.raises(ValueError, match=what + ": " + where):
            call()
    assert model.predict(ids).shape == (8, 5, 3)  # still usable


def test_epochs_and_batch_size_must_be_positive_integers(small_data):
    # 0 or a negative number used to mean the config's value, a fraction was truncated: silently.
    x, y = small_data
    model = xylem.Model.from_config(MLP, backend="native")
    for call, name, bad in ((lambda v: model.fit(x, y, epochs=v, verbose=0), "epochs", (0, -1, 1.5, True)),
                            (lambda v: model.fit(x, y, batch_size=v, verbose=0), "batch_size", (0, -8, 2.5)),
                            (lambda v: model.predict(x, batch_size=v), "batch_size", (0, -1)),
                            (lambda v: model.evaluate(x, y, batch_size=v), "batch_size", (0, -1))):
        for v in bad:
            with pytest.raises(ValueError, match=f"{name} must be a positive integer"):
                call(v)
    assert model.predict(x, batch_size=np.int64(7)).shape[0] == len(x)

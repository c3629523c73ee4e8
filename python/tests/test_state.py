"""Parameters as NumPy arrays, checkpoints, summary, Tensor, ModelCheckpoint and EarlyStopping."""
import json
import os

import numpy as np
import pytest

import xylem
from conftest import MLP


def test_state_dict_round_trip_and_pytorch_names(small_data, tmp_path):
    x, y = small_data
    model = xylem.Model.from_config(MLP, input_shape=(28, 28))
    sd = model.state_dict()
    assert {k: v.shape for k, v in sd.items()} == {"1.weight": (32, 784), "1.bias": (32,), "3.weight": (10, 32), "3.bias": (10,)}
    assert all(v.dtype == np.float32 for v in sd.values())
    model.fit(x, y, epochs=1, verbose=0)
    trained = model.state_dict()
    assert not np.array_equal(trained["1.weight"], sd["1.weight"])
    model.load_state_dict(sd)
    assert all(np.array_equal(model.state_dict()[k], sd[k]) for k in sd)
    other = xylem.Model.from_config(MLP.replace("seed = 7", "seed = 8"))
    other.predict(x)
    other.load_state_dict({k: v.astype(np.float64) for k, v in trained.items()})
    model.load_state_dict(trained)
    assert np.array_equal(other.predict(x), model.predict(x))


def test_load_state_dict_checks_before_changing_anything():
    model = xylem.Model.from_config(MLP, input_shape=(28, 28))
    before = model.state_dict()
    bad = dict(before)
    bad["3.bias"] = np.zeros(11, np.float32)
    bad["1.weight"] = before["1.weight"] + 1
    with pytest.raises(ValueError, match="'3.bias' has shape"):
        model.load_state_dict(bad)
    assert np.array_equal(model.state_dict()["1.weight"], before["1.weight"])
    with pytest.raises(ValueError, match="no parameter 'nope'"):
        model.load_state_dict({**before, "nope": np.zeros(1, np.float32)})
    with pytest.raises(ValueError, match="missing"):
        model.load_state_dict({"1.weight": before["1.weight"]})
    model.load_state_dict({"1.weight": before["1.weight"]}, strict=False)
    # Not a mapping, or a name that is no str: a TypeError; a 0-d value keeps its shape ().
    with pytest.raises(TypeError, match="mapping"):
        model.load_state_dict([1, 2])
    with pytest.raises(TypeError, match="names must be str"):
        model.load_state_dict({3: before["3.bias"]}, strict=False)
    with pytest.raises(ValueError, match=r"\(\)|\[\]"):
        model.load_state_dict({"3.bias": np.float32(1.0)}, strict=False)


def test_save_and_load(small_data, tmp_path):
    x, y = small_data
    model = xylem.Model.from_config(MLP)
    model.fit(x, y, epochs=1, verbose=0)
    path = tmp_path / "m.safetensors"
    model.save(path)
    header = json.loads(path.read_bytes()[8:8 + int.from_bytes(path.read_bytes()[:8], "little")])
    assert header["1.weight"]["shape"] == [32, 784] and header["1.weight"]["dtype"] == "F32"
    again = xylem.Model.load(path, MLP)
    assert np.array_equal(again.predict(x), model.predict(x))
    with pytest.raises(RuntimeError, match="missing.safetensors"):
        xylem.Model.load(tmp_path / "missing.safetensors", MLP).predict(x)


def test_summary_lists_the_layers():
    s = xylem.Model.from_config(MLP, input_shape=(28, 28)).summary()
    assert "linear" in s and "flatten" in s
    with pytest.raises(ValueError, match="not built yet"):
        xylem.Model.from_config(MLP).summary()


def test_tensor_round_trip():
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    t = xylem.tensor(a)
    assert t.shape == (3, 4) and t.dtype == "float32" and t.device == "native:0"
    assert np.array_equal(t.numpy(), a.astype(np.float32))
    i = xylem.tensor(np.arange(5))
    assert i.dtype == "int32" and np.array_equal(i.to("native:0").numpy(), np.arange(5))
    assert "Tensor" in repr(t)
    with pytest.raises(RuntimeError, match="nosuch"):
        xylem.tensor(a, device="nosuch")
    with pytest.raises(ValueError, match="NAME:INDEX"):
        xylem.tensor(a, device="native:x")


def test_model_checkpoint_and_early_stopping(small_data, tmp_path):
    x, y = small_data
    model = xylem.Model.from_config(MLP)
    h = model.fit(x, y, epochs=30, validation_split=0.2, verbose=0,
                  callbacks=[xylem.ModelCheckpoint(tmp_path, monitor="val_loss"),
                             xylem.EarlyStopping(monitor="val_accuracy", patience=2)])
    assert len(h["loss"]) < 30 and "early stopping" in h.finish_reason
    for f in ("last.safetensors", "best.safetensors", "model.safetensors"):
        assert os.path.exists(tmp_path / f), f
    assert h.best_checkpoint.endswith("best.safetensors")
    with pytest.raises(ValueError, match="needs validation data"):
        model.fit(x, y, callbacks=[xylem.EarlyStopping(monitor="val_loss")], verbose=0)
    with pytest.raises(ValueError, match="monitor must be"):
        model.fit(x, y, callbacks=[xylem.EarlyStopping(monitor="acc")], verbose=0)


def test_callback_hooks_see_the_metrics(small_data):
    x, y = small_data
    calls = []

    class Record(xylem.Callback):
        def on_train_batch_end(self, batch, logs):
            calls.append(("batch", batch))

        def on_validation_end(self, epoch, logs):
            calls.append(("val", epoch, sorted(logs)))

        def on_epoch_end(self, epoch, logs):
            calls.append(("epoch", epoch, logs["loss"] > 0))

    xylem.Model.from_config(MLP).fit(x, y, epochs=2, batch_size=40, validation_split=0.2, callbacks=[Record()], verbose=0)
    batches = [c for c in calls if c[0] == "batch"]
    assert len(batches) == 8 and batches[:4] == [("batch", i) for i in range(4)]
    assert ("epoch", 1, True) in calls
    val = [c for c in calls if c[0] == "val"]
    assert len(val) == 2 and "val_accuracy" in val[0][2]
    assert calls.index(val[0]) < calls.index(("epoch", 0, True))


def test_resume_continues_bit_for_bit(small_data, tmp_path):
    x, y = small_data
    whole = xylem.Model.from_config(MLP)
    whole.fit(x, y, epochs=3, batch_size=20, verbose=0)

    class StopMidway(xylem.Callback):
        def on_train_batch_end(self, batch, logs):
            if batch == 4 and not hasattr(self, "done"):
                self.done = True
                self.model.stop_training = True

    first = xylem.Model.from_config(MLP)
    h = first.fit(x, y, epochs=3, batch_size=20, verbose=0, callbacks=[StopMidway(), xylem.ModelCheckpoint(tmp_path)])
    assert h.stopped_at == (1, 5)
    resumed = xylem.Model.from_config(MLP)
    h2 = resumed.fit(x, y, epochs=3, batch_size=20, verbose=0, resume=tmp_path)
    assert len(h2["loss"]) == 3
    a, b = whole.state_dict(), resumed.state_dict()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    with pytest.raises(ValueError, match="samples"):
        xylem.Model.from_config(MLP).fit(x[:100], y[:100], epochs=3, batch_size=20, verbose=0, resume=tmp_path)

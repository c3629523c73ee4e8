"""Multi-channel images [N, C, H, W]: fit, evaluate and predict take them as they take one channel,
and a fit on the arrays is `xylem train` on the same values in 4-dim IDX files, bit for bit."""
import json
import struct
import subprocess

import numpy as np
import pytest

import xylem

# A tiny conv model over 3-channel 8x8 images.
CONV = """
backend = "native"
[[model.layers]]
type = "conv2d"
out = 8
kernel = 3
padding = 1
[[model.layers]]
type = "relu"
[[model.layers]]
type = "global_avgpool"
[[model.layers]]
type = "linear"
out = 3
[loss]
type = "cross_entropy"
[solver]
type = "adam"
lr = 0.02
[train]
epochs = 1
batch_size = 16
seed = 3
"""


def three_channel_data(n=96, seed=0):
    """Random [N, 3, 8, 8] images whose class is their brightest channel (learnable by a conv)."""
    rng = np.random.default_rng(seed)
    x = rng.random((n, 3, 8, 8), dtype=np.float32) * 0.5
    y = rng.integers(0, 3, n).astype(np.int32)
    x[np.arange(n), y] += 0.5
    return x, y


def test_fit_evaluate_predict_on_three_channels():
    x, y = three_channel_data()
    model = xylem.Model.from_config(CONV)
    history = model.fit(x, y, epochs=8, verbose=0, validation_split=0.25)
    assert model.built
    assert history["loss"][-1] < 0.7 * history["loss"][0], history["loss"]
    assert len(history["val_accuracy"]) == 8
    assert model.state_dict()["0.weight"].shape == (8, 3, 3, 3)  # three input channels
    scores = model.evaluate(x, y)
    out = model.predict(x)
    assert out.shape == (96, 3) and out.dtype == np.float32
    assert (out.argmax(1) == y).mean() == pytest.approx(scores["accuracy"])
    assert scores["accuracy"] > 0.8, scores
    # The held-out tail scores as evaluate scores it.
    assert model.evaluate(x[72:], y[72:])["accuracy"] == pytest.approx(history["val_accuracy"][-1])
    # A model built for three channels refuses one, naming both shapes.
    with pytest.raises(ValueError, match=r"built for samples of shape \(3, 8, 8\), got samples of shape \(1, 8, 8\)"):
        model.evaluate(x[:, 0], y)
    with pytest.raises(ValueError, match=r"\(1, 8, 8\)"):
        model.predict(x[:, :1])


def test_one_channel_forms_are_the_same_samples():
    x, y = three_channel_data(32, seed=1)
    gray = x[:, 0]
    a = xylem.Model.from_config(CONV)
    a.fit(gray, y, verbose=0)
    b = xylem.Model.from_config(CONV)
    b.fit(gray[:, None], y, verbose=0)  # [N, 1, H, W] is [N, H, W]
    for name, value in a.state_dict().items():
        assert np.array_equal(value, b.state_dict()[name]), name


def write_idx(path, array):
    """An IDX file: unsigned bytes (0x08) or big-endian float32 (0x0D)."""
    kind = 0x08 if array.dtype == np.uint8 else 0x0D
    data = array if kind == 0x08 else array.astype(">f4")
    path.write_bytes(bytes([0, 0, kind, array.ndim]) + b"".join(struct.pack(">I", d) for d in array.shape) +
                     data.tobytes())


def test_fit_on_three_channels_matches_xylem_train(tmp_path, xylem_cli):
    rng = np.random.default_rng(4)
    pixels = rng.integers(0, 256, (80, 3, 8, 8), dtype=np.uint8)
    labels = rng.integers(0, 3, 80).astype(np.uint8)
    data = tmp_path / "data"
    data.mkdir()
    write_idx(data / "train-images-idx3-ubyte", pixels)
    write_idx(data / "train-labels-idx1-ubyte", labels)
    write_idx(data / "t10k-images-idx3-ubyte", pixels[:20].astype(np.float32) / np.float32(255.0))  # float32 file
    write_idx(data / "t10k-labels-idx1-ubyte", labels[:20])
    cfg = tmp_path / "conv.toml"
    cfg.write_text(CONV.replace('backend = "native"\n', f'backend = "native"\n[data]\ndir = "{data}"\n'))
    out = tmp_path / "run"
    subprocess.run([xylem_cli, "train", "--config", str(cfg), "--out", str(out)], check=True, capture_output=True)
    cli = xylem.Model.load(out / "model.safetensors", cfg, input_shape=(3, 8, 8)).state_dict()

    model = xylem.Model.from_config(cfg)
    history = model.fit(pixels.astype(np.float32) / np.float32(255.0), labels.astype(np.int32), verbose=0)
    ours = model.state_dict()
    assert sorted(ours) == sorted(cli)
    for name in cli:
        assert np.array_equal(ours[name], cli[name]), name
    metrics = json.loads((out / "metrics.json").read_text())
    assert history["loss"][0] == metrics["epochs"][0]["train_loss"]
    # eval's accuracy on the float32 test file is evaluate's on the same values.
    ev = subprocess.run([xylem_cli, "eval", "--config", str(cfg), "--checkpoint", str(out / "model.safetensors")],
                        check=True, capture_output=True, text=True).stdout
    acc = model.evaluate(pixels[:20].astype(np.float32) / np.float32(255.0), labels[:20].astype(np.int32))["accuracy"]
    assert f"test accuracy {100 * acc:.2f}%" in ev, ev

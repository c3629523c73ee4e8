"""Every API call of priority one: backends, from_config, fit with History, evaluate, predict."""
import os
import subprocess
import sys

import numpy as np
import pytest

import xylem
from conftest import MLP


def test_backends_lists_native_from_the_package():
    found = xylem.backends()
    native = [b for b in found if b["name"] == "native"]
    assert native and native[0]["available"], found
    package = os.path.dirname(xylem.__file__)
    assert native[0]["path"].startswith(package), (native[0]["path"], package)
    assert native[0]["devices"][0]["kind"] == "CPU"
    assert "native" in xylem.auto_choice()


def test_installed_package_finds_its_plugins_from_another_directory(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "XYLEM_PLUGIN_PATH"}
    code = ("import os, xylem; b = [r for r in xylem.backends() if r['name'] == 'native'][0]; "
            "assert b['available'] and b['path'].startswith(os.path.dirname(xylem.__file__)), b; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


def test_fit_returns_history_and_learns(small_data):
    x, y = small_data
    model = xylem.Model.from_config(MLP)
    assert model.backend == "native" and not model.built
    history = model.fit(x, y, epochs=3, batch_size=20, verbose=0)
    assert model.built
    assert len(history.history["loss"]) == 3 and history.epochs[2]["epoch"] == 3
    assert history["loss"][-1] < history["loss"][0]
    scores = model.evaluate(x, y)
    assert set(scores) == {"loss", "accuracy"} and scores["accuracy"] > 0.9
    out = model.predict(x)
    assert out.shape == (200, 10) and out.dtype == np.float32
    assert (out.argmax(1) == y).mean() == pytest.approx(scores["accuracy"])


def test_validation_split_and_data(small_data):
    x, y = small_data
    model = xylem.Model.from_config(MLP)
    h = model.fit(x, y, epochs=2, validation_split=0.25, verbose=0)
    assert len(h["val_loss"]) == 2 and 0 <= h["val_accuracy"][-1] <= 1
    h2 = model.fit(x[:150], y[:150], epochs=1, validation_data=(x[150:], y[150:]), verbose=0)
    assert len(h2["val_accuracy"]) == 1
    # The held-out tail is the same 50 samples both times: the scores of the same weights agree.
    assert model.evaluate(x[150:], y[150:])["accuracy"] == pytest.approx(h2["val_accuracy"][0])


def test_config_from_a_file_and_flat_samples(tmp_path):
    path = tmp_path / "mlp.toml"
    path.write_text(MLP)
    model = xylem.Model.from_config(path)
    x = np.random.default_rng(1).random((64, 784), dtype=np.float32)
    assert model.predict(x).shape == (64, 10)  # [N, F] is a 1 x F image; flatten takes it
    assert model.config_source == str(path)


def test_verbose_prints_progress(small_data, capfd):
    x, y = small_data
    xylem.Model.from_config(MLP).fit(x, y, epochs=1, verbose=2)
    assert "epoch 1: loss" in capfd.readouterr().out
    xylem.Model.from_config(MLP).fit(x, y, epochs=1, verbose=1)
    assert "epoch 1" in capfd.readouterr().out
    xylem.Model.from_config(MLP).fit(x, y, epochs=1, verbose=0)
    assert capfd.readouterr().out == ""


def test_progress_goes_to_sys_stdout(small_data, capsys, monkeypatch):
    """verbose=1 writes through sys.stdout (capsys swaps only that, as a notebook kernel does), and a
    stream that says it is a terminal gets the live line rewritten in place with carriage returns."""
    import io
    x, y = small_data
    xylem.Model.from_config(MLP).fit(x, y, epochs=1, verbose=1)
    out = capsys.readouterr().out
    assert "epoch 1/1  step" in out and "\r" not in out  # not a terminal: whole lines

    class Terminal(io.StringIO):
        def isatty(self):
            return True
    term = Terminal()
    monkeypatch.setattr("sys.stdout", term)
    xylem.Model.from_config(MLP).fit(x, y, epochs=1, verbose=1)
    monkeypatch.undo()
    assert "\repoch 1/1  step" in term.getvalue()


def test_arrays_are_converted_where_documented(small_data):
    x, y = small_data
    model = xylem.Model.from_config(MLP)
    ref = model.predict(x)
    assert np.array_equal(model.predict(x.astype(np.float64)), ref)  # float64: converted to float32
    xt = np.ascontiguousarray(x.transpose(0, 2, 1)).transpose(0, 2, 1)  # same values, Fortran-ordered samples
    assert not xt.flags.c_contiguous
    assert np.array_equal(model.predict(xt), ref)
    # A strided view: copied. Other batches may round differently (GEMM blocking by batch size).
    assert np.allclose(model.predict(x[::2]), ref[::2], rtol=1e-5, atol=1e-6)
    model.fit(x, y.astype(np.int64), epochs=1, verbose=0)  # int64 labels: converted

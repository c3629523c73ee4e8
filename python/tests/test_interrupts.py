"""Ctrl-C, callbacks that stop or raise, and the GIL released during training steps."""
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import xylem
from conftest import MLP

# SIGINT's handler when this module was collected, before any test's fit: Python's own, or
# SIG_IGN where the run was started with SIGINT ignored (a background job without job control).
SIGINT_BEFORE_ANY_FIT = signal.getsignal(signal.SIGINT)


def test_ctrl_c_stops_after_the_step_with_a_checkpoint(tmp_path):
    # In a child interpreter: SIGINT arrives mid-fit, fit writes last.safetensors and raises
    # KeyboardInterrupt, and the interpreter goes on to print and exit normally.
    script = textwrap.dedent(f"""
        import os, signal, threading, numpy as np, xylem
        cfg = {MLP!r}.replace("epochs = 1", "epochs = 1000")
        m = xylem.Model.from_config(cfg)
        x = np.random.default_rng(0).random((2000, 28, 28), dtype=np.float32); y = (x.sum((1, 2)) > 392).astype(np.int32)
        class Kick:
            def on_train_batch_end(self, batch, logs):
                if batch == 5 and not hasattr(self, "sent"):
                    self.sent = True
                    os.kill(os.getpid(), signal.SIGINT)
        try:
            m.fit(x, y, callbacks=[Kick(), xylem.ModelCheckpoint({str(tmp_path)!r})], verbose=0)
        except KeyboardInterrupt as e:
            print("interrupted:", e)
        print("alive", m.predict(x[:3]).shape, os.path.exists({str(tmp_path / 'last.safetensors')!r}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "interrupted: fit stopped by SIGINT at epoch 1 step 6" in out.stdout, out.stdout
    assert "alive (3, 10) True" in out.stdout, out.stdout
    # This process's Ctrl-C handling (Python's own, unless started with SIGINT ignored) is back after
    # the in-process fits of the tests before.
    assert signal.getsignal(signal.SIGINT) is SIGINT_BEFORE_ANY_FIT


def test_a_callback_raising_ends_fit_and_is_raised(small_data):
    x, y = small_data

    class Boom:
        def on_train_batch_end(self, batch, logs):
            if batch == 2:
                raise ArithmeticError("boom at batch 2")

    model = xylem.Model.from_config(MLP)
    with pytest.raises(ArithmeticError, match="boom at batch 2"):
        model.fit(x, y, epochs=5, batch_size=10, callbacks=[Boom()], verbose=0)
    assert model.predict(x).shape == (200, 10)
    model.fit(x, y, epochs=1, verbose=0)  # and it trains again


def test_stop_training_from_a_callback(small_data):
    x, y = small_data
    seen = []

    class StopAtTwo(xylem.Callback):
        def on_epoch_end(self, epoch, logs):
            seen.append(epoch)
            if epoch == 1:
                self.model.stop_training = True

    h = xylem.Model.from_config(MLP).fit(x, y, epochs=10, callbacks=[StopAtTwo()], verbose=0)
    assert seen == [0, 1] and len(h["loss"]) == 2

    class StopBatch(xylem.Callback):
        def on_train_batch_end(self, batch, logs):
            if batch == 3:
                self.model.stop_training = True

    h = xylem.Model.from_config(MLP).fit(x, y, epochs=10, batch_size=10, callbacks=[StopBatch()], verbose=0)
    # Mid-epoch: fit ends after the step; the unfinished epoch has no metrics (as with Ctrl-C).
    assert h.epochs == [] and h.stopped_at == (1, 4)


def test_the_gil_is_released_during_steps(fashion):
    x_train, y_train, _, _ = fashion
    ticks = []
    done = threading.Event()

    def tick():
        while not done.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.005)

    model = xylem.Model.from_config(MLP.replace("batch_size = 32", "batch_size = 64"))
    t = threading.Thread(target=tick)
    t.start()
    t0 = time.monotonic()
    model.fit(x_train, y_train, epochs=10, verbose=0)
    elapsed = time.monotonic() - t0
    done.set()
    t.join()
    during = [s for s in ticks if t0 < s < t0 + elapsed]
    # With the GIL held through fit the thread could not tick at all until fit returned (fit runs no
    # Python code to switch at); released, it ticks about every 5 ms (60% to 80% of that here,
    # under load: the steps use the CPUs too).
    assert elapsed > 0.1 and len(during) > elapsed / 0.005 * 0.15, (elapsed, len(during))

"""The Python API's cost over the program's (issue 29): fit against `xylem train` and predict against
`xylem predict` on examples/fashion_mlp.toml, interleaved round by round on one machine.

    VENV/bin/python python/bench/overhead.py XYLEM_PROGRAM [ROUNDS] [EPOCHS]

Per round: `xylem train --epochs E` (its metrics.json epoch seconds, timed by train::fit, and the
process's wall time), then Model.fit on the same arrays (the same epoch timer, and the fit call's
wall time), silent, and again with the program's progress report and checkpoints; then `xylem predict` on the 10,000 test images (process wall time) and a Python process
doing the same (import, Model.load, read the IDX file, predict), plus the predict call alone, and
`xylem eval`'s own timing of the same forward passes (the program does not time its predict).
Medians over the rounds are printed. Run it from the repository root.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python"))
import xylem  # noqa: E402
from fashion_data import load  # noqa: E402

CONFIG = "examples/fashion_mlp.toml"
PREDICT = """
import sys, time; t0 = time.perf_counter()
sys.path.insert(0, "examples/python")
import xylem
from fashion_data import load_test
x, _ = load_test()
m = xylem.Model.load(sys.argv[1], "examples/fashion_mlp.toml", input_shape=(28, 28))
t1 = time.perf_counter(); p = m.predict(x); t2 = time.perf_counter()
print(p.argmax(1)[:5], f"predict {t2 - t1:.4f} s", f"setup {t1 - t0:.4f} s")
"""


def main():
    program = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    epochs = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    x, y, x_test, _ = load()
    out = {k: [] for k in ("cli_epoch", "py_epoch", "py_epoch_report", "cli_train_wall", "py_fit_wall", "cli_predict_wall",
                           "py_predict_wall", "py_predict_call", "py_predict_setup", "cli_eval_call")}
    tmp = tempfile.mkdtemp()
    for r in range(rounds):
        run = os.path.join(tmp, f"cli{r}")
        t0 = time.perf_counter()
        subprocess.run([program, "train", "--config", CONFIG, "--epochs", str(epochs), "--out", run], check=True,
                       capture_output=True)
        out["cli_train_wall"].append(time.perf_counter() - t0)
        cli_epochs = json.load(open(os.path.join(run, "metrics.json")))["epochs"]
        out["cli_epoch"].append(statistics.median(e["seconds"] for e in cli_epochs))

        model = xylem.Model.from_config(CONFIG)
        t0 = time.perf_counter()
        h = model.fit(x, y, epochs=epochs, verbose=0)
        out["py_fit_wall"].append(time.perf_counter() - t0)
        out["py_epoch"].append(statistics.median(e["seconds"] for e in h.epochs))

        # The same work as the program's run: its progress report (to a pipe, as here) and checkpoints.
        model = xylem.Model.from_config(CONFIG)
        saved, null = os.dup(1), os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        try:
            h = model.fit(x, y, epochs=epochs, verbose=1, callbacks=[xylem.ModelCheckpoint(os.path.join(tmp, f"py{r}"))])
        finally:
            os.dup2(saved, 1)
            os.close(null)
        out["py_epoch_report"].append(statistics.median(e["seconds"] for e in h.epochs))

        ckpt = os.path.join(run, "model.safetensors")
        t0 = time.perf_counter()
        subprocess.run([program, "predict", "--config", CONFIG, "--checkpoint", ckpt, "--out",
                        os.path.join(tmp, "p.csv")], check=True, capture_output=True)
        out["cli_predict_wall"].append(time.perf_counter() - t0)
        ev = subprocess.run([program, "eval", "--config", CONFIG, "--checkpoint", ckpt], check=True, capture_output=True,
                            text=True).stdout  # "test accuracy ...% (10000 images, backend native, 0.031 s, ...)"
        out["cli_eval_call"].append(float(ev.split(", ")[2].split()[0]))
        t0 = time.perf_counter()
        res = subprocess.run([sys.executable, "-c", PREDICT, ckpt], check=True, capture_output=True, text=True)
        out["py_predict_wall"].append(time.perf_counter() - t0)
        out["py_predict_call"].append(float(res.stdout.split("predict ")[1].split()[0]))
        out["py_predict_setup"].append(float(res.stdout.split("setup ")[1].split()[0]))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.3f}" for k, v in out.items()), flush=True)
    med = {k: statistics.median(v) for k, v in out.items()}
    print("medians (s): " + ", ".join(f"{k} {v:.3f}" for k, v in med.items()))
    print(f"fit epoch / xylem train epoch: {med['py_epoch'] / med['cli_epoch']:.3f} (verbose=0), "
          f"{med['py_epoch_report'] / med['cli_epoch']:.3f} (verbose=1 and ModelCheckpoint, as the program runs)")
    print(f"fit call / xylem train process: {med['py_fit_wall'] / med['cli_train_wall']:.3f}")
    print(f"python predict process / xylem predict process: {med['py_predict_wall'] / med['cli_predict_wall']:.3f}")
    print(f"Model.predict call / xylem eval's timed forward passes (10k images, batch 1000): "
          f"{med['py_predict_call'] / med['cli_eval_call']:.3f}")


if __name__ == "__main__":
    main()

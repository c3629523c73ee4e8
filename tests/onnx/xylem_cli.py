"""What the ONNX check scripts (check_models.py, check_export.py) share: running the xylem program
and the error measure every comparison with ONNX Runtime uses."""
import subprocess

import numpy as np


def xylem(args, *argv, check=True):
    """`args.xylem ARGV...`, its output captured; a failure raises with both streams unless check is False."""
    r = subprocess.run([args.xylem, *argv], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"xylem {' '.join(argv)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def rel_err(got, want):
    """max |got - want| / max |want|, in float64."""
    return float(np.max(np.abs(got.astype(np.float64) - want)) / max(np.max(np.abs(want)), 1e-30))

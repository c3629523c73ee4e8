#!/usr/bin/env bash
# The Python package's tests (python/tests, docs/python.md), run by scripts/test.sh after ctest:
# the package built by scikit-build-core into build/py-venv over Debian's NumPy 1.24, its pytest
# suite, then the same suite in build/py-venv-numpy2 with NumPy 2 and pytest from PyPI only. Both venvs install
# from one CMake tree, build/python, kept between runs: a rerun rebuilds only what changed, and
# the second venv's install rebuilds nothing (XYLEM_PY_TEST_DIR: another folder than build/). The CUDA plugin is left out of this build (nothing
# here runs it, and it is the slowest part of a build; the main build still compiles it).
# Where PyPI cannot be reached the Python tests are skipped with a warning, as the ONNX parity
# test is; any other failure (build, install, a test) fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${XYLEM_PY_TEST_DIR:-build}"  # where the venvs and the build folder go
export XYLEM_PY_BUILD_DIR="$dir/python" XYLEM_PY_DEFINES="XYLEM_BUILD_CUDA=OFF ${XYLEM_PY_DEFINES:-}"
export XYLEM_CLI="${XYLEM_CLI:-$PWD/build/bin/xylem}"  # the bit-for-bit tests compare with this program's runs
run_suite() {  # VENV EXTRA_PACKAGES SYSTEM_SITE
  local rc=0
  XYLEM_PY_EXTRA="$2" XYLEM_PY_SYSTEM_SITE="$3" scripts/install-python.sh "$1" || rc=$?
  if [ "$rc" = 3 ]; then
    echo "warning: PyPI could not be reached: the Python tests in $1 are skipped" >&2
    return 0
  fi
  [ "$rc" = 0 ] || return "$rc"
  echo "python tests ($1, NumPy $("$1/bin/python" -c 'import numpy; print(numpy.__version__)'))"
  # pytest exits 5 when it collects no test: that fails here like any other non-zero status.
  (cd python/tests && "../../$1/bin/python" -m pytest -q -p no:cacheprovider .)
}
run_suite "$dir/py-venv" "pytest==8.3.5" 1
# Without Debian's packages: its scipy, scikit-learn and torch are built against NumPy 1 (their
# tests skip here, saying so).
run_suite "$dir/py-venv-numpy2" "pytest==8.3.5 numpy==2.2.6" 0

#!/usr/bin/env bash
# Installs the Debian packages xylem needs to build, test and run; only missing ones, so a
# second run is instant. Used by demo.sh and test.sh.
#   scripts/install-deps.sh [fuzz]    fuzz: also clang and libFuzzer, for scripts/fuzz.sh only
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libopenblas-dev libboost-dev libboost-filesystem-dev libtomlplusplus-dev nlohmann-json3-dev zlib1g-dev
  googletest libgtest-dev
  ocl-icd-opencl-dev opencl-headers pocl-opencl-icd libclblast-dev
  libopenmpi-dev openmpi-bin   # data-parallel training: mpirun -np N xylem train (optional at build time)
  dataset-fashion-mnist
  python3-matplotlib   # xylem plot draws with it (scripts/xylem-plot.py)
  fortunes             # the char-rnn example's corpus (examples/char_rnn.toml): /usr/share/games/fortunes
  libonnx-dev libprotobuf-dev   # ONNX import: xylem run/import (optional at build time, like MPI; docs/onnx.md)
  libonnx-testdata   # ONNX's own node tests, run through the importer (tests/onnx/node_tests.cpp)
  python3-torch python3-torchvision python3-venv   # the ONNX tests export models with torch (tests/onnx/check_models.py)
  python3-sklearn    # the Python API trains scikit-learn's digits (python/tests/test_digits.py)
)
# Fuzzing is optional (not part of CI): its compiler is installed only when asked for.
[ "${1:-}" = fuzz ] && packages+=(clang libclang-rt-dev)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing: ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"

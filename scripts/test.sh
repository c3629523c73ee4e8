#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# PoCL compiles each OpenCL program on first use (minutes for CLBlast's GEMM on 2 cores) and
# caches the binaries: keep that cache in one stable place so later runs start warm.
export POCL_CACHE_DIR="${POCL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/xylem/pocl}"
mkdir -p "$POCL_CACHE_DIR"
scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
# The SDK as an outsider uses it: install, build examples/third_party_plugin against it, train.
scripts/test-sdk.sh build

#!/usr/bin/env bash
# Installs what is missing, builds, lists the backends, and trains the Fashion-MNIST MLP on
# the best available backend (see examples/fashion_mlp.toml; pass extra flags through).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
XYLEM_BUILD_TESTS=OFF scripts/build.sh
build/bin/xylem backends
echo
build/bin/xylem train --config examples/fashion_mlp.toml --out runs/fashion_mlp "$@"

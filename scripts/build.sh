#!/usr/bin/env bash
# Configures (Release) and builds xylem into build/. Incremental on a second run.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DXYLEM_BUILD_TESTS="${XYLEM_BUILD_TESTS:-ON}" >/dev/null
cmake --build build -j"$(nproc)"

#!/usr/bin/env bash
# Step fusion benchmark: xylem-bench-fusion (bench/src/fusion_bench.cpp) on the native and OpenCL
# backends: an 8-op pointwise chain on 10k and 1M floats and the Fashion-MNIST MLP and LeNet
# training steps, each fused (fusion::StepFusion) and unfused, then the one-line summaries
#   fusion BACKEND N floats: fused F ms (L1 launches), unfused U ms (L2 launches), speedup S
#
#   bench/run_fusion_bench.sh [--build DIR] [--backends "native opencl"] [--reps N] [--no-models]
#
# --build picks the build folder (default build; the target is built there if missing). A backend
# that is not available here is reported and skipped. Full output goes to
# DIR/bench/fusion-<date>/BACKEND.txt.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build"
BACKENDS="native opencl"
ARGS=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --build) BUILD="$(realpath "$2")"; shift 2 ;;
        --backends) BACKENDS="$2"; shift 2 ;;
        --reps) ARGS+=(--reps "$2"); shift 2 ;;
        --no-models) ARGS+=(--no-models); shift ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
BENCH="$BUILD/bin/xylem-bench-fusion"
if [[ ! -x "$BENCH" ]]; then
    echo "building xylem-bench-fusion in $BUILD ..." >&2
    cmake --build "$BUILD" -j2 --target xylem-bench-fusion xylem_native xylem_opencl >/dev/null
fi
export POCL_CACHE_DIR="${POCL_CACHE_DIR:-$HOME/.cache/xylem/pocl}"
OUT="$BUILD/bench/fusion-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$OUT"
echo "repo_rev: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty tree)')"
echo "cpu: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1), nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg)"

STATUS=0
for b in $BACKENDS; do
    echo
    echo "== $b"
    if "$BENCH" "$b" "${ARGS[@]}" > "$OUT/$b.txt" 2>&1; then
        grep -v '^fusion ' "$OUT/$b.txt"
    else
        cat "$OUT/$b.txt"
        echo "xylem-bench-fusion $b failed (see $OUT/$b.txt)"
        STATUS=1
    fi
done
echo
cat "$OUT"/*.txt | grep '^fusion ' || true
exit $STATUS

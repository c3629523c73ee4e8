#!/usr/bin/env bash
# OpenCL (PoCL on this machine's CPU) next to native, same binary, same configs:
#
#   bench/run_opencl_bench.sh [--reps N] [--lenet-steps N] [--build DIR]
#
# Per repetition (interleaved): fashion_mlp 1 epoch on native and on opencl; fashion_lenet for
# --lenet-steps steps on each (a full LeNet epoch on PoCL takes many minutes; the epoch time is
# extrapolated from the per-step time and says so). Then the per-op launch overhead of each
# backend (xylem-bench-overhead: tiny ops enqueued back to back vs a sync after each).
# Prints medians; raw output goes to <build>/bench/opencl-<date>/.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPS=3
LENET_STEPS=100
BUILD="$ROOT/build"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --reps) REPS="$2"; shift 2 ;;
        --lenet-steps) LENET_STEPS="$2"; shift 2 ;;
        --build) BUILD="$(realpath "$2")"; shift 2 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
export POCL_CACHE_DIR="${POCL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/xylem/pocl}"
OUT="$BUILD/bench/opencl-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$OUT"
cd "$ROOT"
PY=/usr/bin/python3
XYLEM="$BUILD/bin/xylem"
PLAIN=(env -u XYLEM_NUM_THREADS -u OPENBLAS_NUM_THREADS -u XYLEM_BACKEND)
metric() { "$PY" -c "import json,sys; e=json.load(open(sys.argv[1]))['epochs'][-1]; print(e['$2'], e['steps'])" "$1"; }

"$XYLEM" backends > "$OUT/backends.txt"
# Warm PoCL's kernel cache so no timed run pays for compilation.
"${PLAIN[@]}" "$XYLEM" train --config examples/fashion_lenet.toml --backend opencl --epochs 1 --max-steps 2 \
    --out "$OUT/warm" > /dev/null
for r in $(seq 1 "$REPS"); do
    for b in native opencl; do
        "${PLAIN[@]}" "$XYLEM" train --config examples/fashion_mlp.toml --backend $b --epochs 1 --out "$OUT/mlp-$b-$r" > /dev/null
        echo "mlp_$b $(metric "$OUT/mlp-$b-$r/metrics.json" seconds)" >> "$OUT/raw"
        "${PLAIN[@]}" "$XYLEM" train --config examples/fashion_lenet.toml --backend $b --epochs 1 \
            --max-steps "$LENET_STEPS" --out "$OUT/lenet-$b-$r" > /dev/null
        echo "lenet_$b $(metric "$OUT/lenet-$b-$r/metrics.json" seconds)" >> "$OUT/raw"
    done
done
for b in native opencl; do "$BUILD/bin/xylem-bench-overhead" $b 4000 > "$OUT/overhead-$b.txt"; done

"$PY" - "$OUT" <<'PYEOF'
import statistics, sys
out = sys.argv[1]
vals = {}
for line in open(f"{out}/raw"):
    k, secs, steps = line.split()
    vals.setdefault(k, []).append((float(secs), int(steps)))
med = lambda k: statistics.median(s for s, _ in vals[k])
steps = lambda k: vals[k][0][1]
lenet_epoch_steps = 938  # 60000 / 64, rounded up
print(f"fashion_mlp 1 epoch: native {med('mlp_native'):.2f} s, opencl {med('mlp_opencl'):.2f} s, "
      f"opencl/native {med('mlp_opencl') / med('mlp_native'):.1f}x")
for b in ("native", "opencl"):
    per = med(f"lenet_{b}") / steps(f"lenet_{b}")
    print(f"fashion_lenet {b}: {1000 * per:.1f} ms/step over {steps(f'lenet_{b}')} steps, "
          f"epoch ~{per * lenet_epoch_steps:.0f} s (extrapolated)")
print(f"fashion_lenet opencl/native: {med('lenet_opencl') / med('lenet_native'):.1f}x")
for b in ("native", "opencl"):
    print(open(f"{out}/overhead-{b}.txt").read().rstrip())
PYEOF
echo "raw results: $OUT"

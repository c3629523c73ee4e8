#!/usr/bin/env bash
# Data-parallel training on one machine: 1 process against `mpirun -np 2`, one BLAS thread each.
#
#   bench/run_distributed_bench.sh [--reps N] [--lenet-steps N] [--xylem PATH] [--out DIR]
#
# Interleaved repetitions (default 3) of, on the native backend with XYLEM_NUM_THREADS=1:
#   mlp    examples/fashion_mlp.toml, one epoch (938 steps of global batch 64)
#   lenet  examples/fashion_lenet.toml, --lenet-steps steps (default 300) of global batch 64
# each as 1 process and as 2 ranks (mpirun -np 2 --bind-to core). Prints, per case, the median
# training img/s (metrics.json: the epoch's images over its training time, evaluation excluded;
# global images for 2 ranks) and, for 2 ranks, the median time per step spent in the gradient
# allreduce (the run's last line: starting the sums, waiting for them, and the copies if any).
# Raw outputs go to --out (default build/bench/dist-<date>).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPS=3
LENET_STEPS=300
XYLEM="$ROOT/build/bin/xylem"
OUT=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --reps) REPS="$2"; shift 2 ;;
        --lenet-steps) LENET_STEPS="$2"; shift 2 ;;
        --xylem) XYLEM="$(realpath "$2")"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
OUT="${OUT:-$ROOT/build/bench/dist-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$OUT"
command -v mpirun >/dev/null || { echo "mpirun not found (scripts/install-deps.sh installs Open MPI)" >&2; exit 1; }
MPIRUN=(mpirun -np 2 --bind-to core --mca btl_vader_single_copy_mechanism none)
[[ "$(id -u)" -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
export XYLEM_NUM_THREADS=1

run() {  # run NAME RANKS CONFIG FLAGS...
    local name="$1" ranks="$2" cfg="$3"; shift 3
    local dir="$OUT/$name" cmd=("$XYLEM" train --config "$ROOT/examples/$cfg.toml" --backend native --out "$OUT/$name" "$@")
    [[ "$ranks" -eq 2 ]] && cmd=("${MPIRUN[@]}" -x XYLEM_NUM_THREADS "${cmd[@]}")
    "${cmd[@]}" > "$dir.log" 2>&1 || { echo "failed: ${cmd[*]} (see $dir.log)" >&2; exit 1; }
    /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["epochs"][0]["images_per_second"])' \
        "$dir/metrics.json" >> "$OUT/$name.ips"
    grep -o 'gradient allreduce: [0-9.]* ms' "$dir.log" | awk '{print $3}' >> "$OUT/$name.ar" || true
}

for ((r = 1; r <= REPS; ++r)); do
    run "mlp-1" 1 fashion_mlp --epochs 1
    run "mlp-2" 2 fashion_mlp --epochs 1
    run "lenet-1" 1 fashion_lenet --max-steps "$LENET_STEPS"
    run "lenet-2" 2 fashion_lenet --max-steps "$LENET_STEPS"
done

median() { sort -g "$1" | awk '{a[NR]=$1} END {if (NR) print (NR % 2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$(mpirun --version | head -1), XYLEM_NUM_THREADS=1, median of $REPS"
printf '| %-6s | %12s | %12s | %7s | %18s |\n' model "1 process" "2 ranks" speedup "allreduce ms/step"
for m in mlp lenet; do
    one="$(median "$OUT/$m-1.ips")" two="$(median "$OUT/$m-2.ips")" ar="$(median "$OUT/$m-2.ar")"
    printf '| %-6s | %8.0f img/s | %8.0f img/s | %6.2fx | %18s |\n' "$m" "$one" "$two" "$(awk -v a="$two" -v b="$one" 'BEGIN {print a / b}')" "$ar"
done
echo "raw: $OUT"

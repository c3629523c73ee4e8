#!/usr/bin/env bash
# ResNet-20 (examples/fashion_resnet.toml): xylem native against PyTorch CPU in the same run.
#
#   bench/run_resnet_bench.sh [--reps N] [--steps N] [--xylem PATH] [--threads "1 2"] [--out-dir DIR]
#
# Per repetition, interleaved: xylem trains N steps of the first epoch (batch 128, lr 0.1, as the
# config) and PyTorch the same number of steps (bench/torch_resnet.py) at each --threads setting;
# both report images/s over those steps, from which an epoch (469 steps) is projected. Then
# inference over the 10k test images: `xylem eval` (in the batch it picks for the device,
# train::run_batch) against torch_resnet.py's eval at batches of 1000 and of xylem's size, the
# faster one taken. Then one `--profile` run: where a step's time goes.
# Prints medians; raw output goes to build/bench/resnet-<date>/ (--out-dir DIR: DIR/resnet-<date>/).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPS=3
STEPS=60
THREADS="1 2"
XYLEM="$ROOT/build/bin/xylem"
OUT_DIR="$ROOT/build/bench"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --reps) REPS="$2"; shift 2 ;;
        --steps) STEPS="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        --xylem) XYLEM="$(realpath "$2")"; shift 2 ;;
        --out-dir) OUT_DIR="$2"; shift 2 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
OUT="$OUT_DIR/resnet-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$OUT"
cd "$ROOT"
PY=/usr/bin/python3
TUNED=(env OPENBLAS_NUM_THREADS=1 GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184)
PLAIN=(env -u XYLEM_NUM_THREADS -u OPENBLAS_NUM_THREADS -u GLIBC_TUNABLES -u XYLEM_BACKEND)
metric() { "$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['epochs'][-1]['$2'])" "$1"; }

uptime | tee "$OUT/load"
for r in $(seq 1 "$REPS"); do
    "${PLAIN[@]}" "$XYLEM" train --config examples/fashion_resnet.toml --backend native --epochs 1 --max-steps "$STEPS" \
        --out "$OUT/xylem-$r" > "$OUT/xylem-$r.log"
    echo "xylem_train $(metric "$OUT/xylem-$r/metrics.json" images_per_second)" >> "$OUT/raw"
    "${PLAIN[@]}" "$XYLEM" eval --config examples/fashion_resnet.toml --backend native \
        --checkpoint "$OUT/xylem-$r/model.safetensors" > "$OUT/eval-$r.log"
    echo "xylem_infer $(sed -n 's/.* \([0-9]*\) images\/s.*/\1/p' "$OUT/eval-$r.log")" >> "$OUT/raw"
    eval_batch=$(sed -n 's/.* at batch \([0-9]*\)).*/\1/p' "$OUT/eval-$r.log")
    for t in $THREADS; do
        (cd bench && "${TUNED[@]}" "$PY" torch_resnet.py --threads "$t" --epochs 1 --max-steps "$STEPS" \
            --eval-batch "1000,$eval_batch" | tail -1) > "$OUT/torch-$t-$r.json"
        "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print('torch_train_$t', d['images_per_second']); print('torch_infer_$t', d['eval_images_per_second'])" \
            "$OUT/torch-$t-$r.json" >> "$OUT/raw"
    done
done
"${PLAIN[@]}" "$XYLEM" train --config examples/fashion_resnet.toml --backend native --epochs 1 --max-steps 30 --profile \
    --out "$OUT/profile" > "$OUT/profile.log"
uptime | tee -a "$OUT/load"

"$PY" - "$OUT" "$THREADS" <<'PYEOF'
import statistics, sys
out, threads = sys.argv[1], sys.argv[2].split()
vals = {}
for line in open(f"{out}/raw"):
    k, v = line.split()
    vals.setdefault(k, []).append(float(v))
med = lambda k: statistics.median(vals[k])
steps_per_epoch = 469  # 60000 images at batch 128
xt, xi = med("xylem_train"), med("xylem_infer")
best_t = max(threads, key=lambda t: med(f"torch_train_{t}"))
best_i = max(threads, key=lambda t: med(f"torch_infer_{t}"))
tt, ti = med(f"torch_train_{best_t}"), med(f"torch_infer_{best_i}")
print(f"training images/s: xylem {xt:.0f} {sorted(vals['xylem_train'])}, PyTorch {tt:.0f} at {best_t} thread(s) "
      + ", ".join(f"{t}: {sorted(vals['torch_train_' + t])}" for t in threads))
print(f"epoch (60000 images) projected: xylem {60000 / xt:.1f} s, PyTorch {60000 / tt:.1f} s -> {tt / xt:.2f}x PyTorch's time")
print(f"inference images/s: xylem {xi:.0f} {sorted(vals['xylem_infer'])}, PyTorch {ti:.0f} at {best_i} thread(s), "
      f"its faster batch of 1000 and xylem's -> {xi / ti:.2f}x")
print(f"profile: {out}/profile.log")
PYEOF

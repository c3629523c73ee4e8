#!/usr/bin/env bash
# Convolutional benchmarks: xylem (native) against PyTorch CPU in the same run.
#
#   bench/run_conv_bench.sh [--reps N] [--xylem PATH] [--out-dir DIR]
#
# Per repetition (interleaved): LeNet 1 epoch at batch 64 with xylem (no tuning variables) and
# with PyTorch tuned (OPENBLAS_NUM_THREADS=1, GLIBC_TUNABLES=..., 2 threads); the conv-as-MLP
# network (examples/conv_mlp.toml) and fashion_mlp, 1 epoch each on xylem; inference over the
# 10k test images (xylem eval in the batch it picks for the device, train::run_batch, vs PyTorch
# at batches of 1000 and of xylem's size, the faster one). Then the Flux #558 check: the share of
# each conv layer's backward pass spent in the bias gradient (--profile) at batch 64 and 256; where
# the backend computes it inside conv2d_bwd_filter (ABI 1.9), what that op takes longer with it
# (xylem-bench-conv, batch 64) against the layer's backward ops.
# Prints medians; raw output goes to build/bench/conv-<date>/ (--out-dir DIR: DIR/conv-<date>/).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPS=3
XYLEM="$ROOT/build/bin/xylem"
OUT_DIR="$ROOT/build/bench"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --reps) REPS="$2"; shift 2 ;;
        --xylem) XYLEM="$(realpath "$2")"; shift 2 ;;
        --out-dir) OUT_DIR="$2"; shift 2 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
OUT="$OUT_DIR/conv-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$OUT"
cd "$ROOT"
PY=/usr/bin/python3
TUNED=(env OPENBLAS_NUM_THREADS=1 GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184)
PLAIN=(env -u XYLEM_NUM_THREADS -u OPENBLAS_NUM_THREADS -u GLIBC_TUNABLES -u XYLEM_BACKEND)

# seconds field of the last epoch in a metrics.json
metric() { "$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['epochs'][-1]['$2'])" "$1"; }

for r in $(seq 1 "$REPS"); do
    "${PLAIN[@]}" "$XYLEM" train --config examples/fashion_lenet.toml --backend native --epochs 1 \
        --out "$OUT/lenet-$r" > "$OUT/lenet-$r.log"
    echo "xylem_lenet $(metric "$OUT/lenet-$r/metrics.json" seconds) $(metric "$OUT/lenet-$r/metrics.json" test_accuracy)" >> "$OUT/raw"
    "${PLAIN[@]}" "$XYLEM" eval --config examples/fashion_lenet.toml --backend native \
        --checkpoint "$OUT/lenet-$r/model.safetensors" > "$OUT/eval-$r.log"
    echo "xylem_infer $(sed -n 's/.* \([0-9]*\) images\/s.*/\1/p' "$OUT/eval-$r.log")" >> "$OUT/raw"
    eval_batch=$(sed -n 's/.* at batch \([0-9]*\)).*/\1/p' "$OUT/eval-$r.log")
    (cd bench && "${TUNED[@]}" "$PY" torch_lenet.py --threads 2 --eval-batch "1000,$eval_batch" | tail -1) > "$OUT/torch-$r.json"
    "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print('torch_lenet', d['seconds'], d['test_accuracy']); print('torch_infer', d['eval_images_per_second'])" "$OUT/torch-$r.json" >> "$OUT/raw"
    for net in conv_mlp fashion_mlp; do
        "${PLAIN[@]}" "$XYLEM" train --config examples/$net.toml --backend native --epochs 1 --out "$OUT/$net-$r" > /dev/null
        echo "xylem_$net $(metric "$OUT/$net-$r/metrics.json" seconds)" >> "$OUT/raw"
    done
done

"${PLAIN[@]}" XYLEM_BENCH_MIN=1 "$(dirname "$XYLEM")/xylem-bench-conv" native 21 lenet > "$OUT/bench-conv-lenet.log"
for b in 64 256; do
    "${PLAIN[@]}" "$XYLEM" train --config examples/fashion_lenet.toml --backend native --epochs 1 --max-steps 150 \
        --batch-size "$b" --profile --out "$OUT/profile-$b" > "$OUT/profile-$b.log"
done

"$PY" - "$OUT" <<'PYEOF'
import re, statistics, sys
out = sys.argv[1]
vals = {}
for line in open(f"{out}/raw"):
    k, *v = line.split()
    vals.setdefault(k, []).append([float(x) for x in v])
med = lambda k, i=0: statistics.median(v[i] for v in vals[k])
print(f"LeNet epoch (batch 64): xylem {med('xylem_lenet'):.2f} s, PyTorch tuned {med('torch_lenet'):.2f} s, "
      f"ratio {med('xylem_lenet') / med('torch_lenet'):.2f}x (bar <= 1.0x)")
print(f"LeNet test accuracy after 1 epoch: xylem {100 * med('xylem_lenet', 1):.2f}%, PyTorch {100 * med('torch_lenet', 1):.2f}%")
print(f"Inference, 10k images (xylem's batch; PyTorch's faster of 1000 and xylem's): xylem {med('xylem_infer'):.0f} img/s, PyTorch {med('torch_infer'):.0f} img/s, "
      f"ratio {med('xylem_infer') / med('torch_infer'):.2f}x (bar >= 1.0x)")
print(f"Conv-as-MLP epoch: {med('xylem_conv_mlp'):.3f} s vs Linear MLP {med('xylem_fashion_mlp'):.3f} s, "
      f"ratio {med('xylem_conv_mlp') / med('xylem_fashion_mlp'):.2f}x (bar <= 1.15x)")
inside = False
for b in (64, 256):
    for line in open(f"{out}/profile-{b}.log"):
        m = re.match(r"(model layer \d+ \(conv2d\) backward)\s+([\d.]+)\s+(.*)", line)
        if m:
            bias = re.search(r"bias_grad ([\d.]+)", m.group(3))
            if not bias:
                inside = True
                continue
            share = 100 * float(bias.group(1)) / float(m.group(2))
            print(f"batch {b}: {m.group(1)}: {float(m.group(2)):.1f} ms, bias_grad {share:.1f}% (bar <= 10%)")
if inside:  # the bias gradient inside conv2d_bwd_filter: its extra time per call, from the microbenchmark
    for line in open(f"{out}/bench-conv-lenet.log"):
        f = line.split()
        if line.startswith("lenet") and len(f) == 8:
            data, filt, extra = float(f[5]), float(f[6]), float(f[7])
            share = 100 * extra / (data + filt)
            print(f"batch 64: {' '.join(f[:4])}: bias gradient inside conv2d_bwd_filter, +{extra:.0f} us on "
                  f"{data + filt:.0f} us of backward ops, {share:.1f}% (bar <= 10%)")
PYEOF
echo "raw results: $OUT"

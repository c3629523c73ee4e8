#!/usr/bin/env bash
# Native backend speed per instruction-set level, two xylem builds side by side, against PyTorch
# CPU in the same run (issue 23: the determinism and XYLEM_NATIVE_ISA changes must not cost speed
# on AVX-512 or on AVX2 machines).
#
#   bench/run_isa_bench.sh --before PATH [--after PATH] [--before-avx2-plugins DIR] [--reps N]
#                          [--char-steps N] [--out DIR]
#
# --before / --after: xylem binaries (default --after build/bin/xylem); e.g. a worktree of the
# previous revision built with `cmake --build B --target xylem xylem_native`. Per repetition,
# interleaved: fashion_mlp 1 epoch, fashion_lenet 1 epoch, char_rnn --char-steps iterations
# (default 200) for each build at the machine's own level and capped at AVX2 (XYLEM_NATIVE_ISA=avx2
# for a build that has the switch; a build without it gets OPENBLAS_CORETYPE=Haswell, which caps
# OpenBLAS only: its own kernels stay at the CPU's level; --before-avx2-plugins DIR runs that row
# with XYLEM_PLUGIN_PATH=DIR instead, a build of the previous revision whose clones and narrow
# GEMM were limited to AVX2, for a faithful AVX2 emulation), then PyTorch's scripts (tuned as in
# run_mlp_bench.sh: OPENBLAS_NUM_THREADS=1, 2 threads; char-rnn one thread, its fastest here).
# Prints medians (seconds per epoch, ms per char-rnn iteration) and ratios to PyTorch; raw lines
# go to OUT/raw (default build/bench/isa-<date>). Skips the avx2 rows on a CPU without AVX2.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BEFORE="" AFTER="$ROOT/build/bin/xylem" BEFORE_AVX2_PLUGINS="" REPS=2 CHAR_STEPS=200 OUT=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --before) BEFORE="$(realpath "$2")"; shift 2 ;;
        --after) AFTER="$(realpath "$2")"; shift 2 ;;
        --before-avx2-plugins) BEFORE_AVX2_PLUGINS="$(realpath "$2")"; shift 2 ;;
        --reps) REPS="$2"; shift 2 ;;
        --char-steps) CHAR_STEPS="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
[ -n "$BEFORE" ] || { echo "--before PATH is required" >&2; exit 2; }
OUT="${OUT:-$ROOT/build/bench/isa-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
cd "$ROOT"
PY=/usr/bin/python3  # Debian's interpreter, with python3-torch
"$PY" -c "import torch" 2>/dev/null || { echo "PyTorch missing: apt-get install python3-torch" >&2; exit 1; }
TUNED=(env OPENBLAS_NUM_THREADS=1 GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184)
PLAIN=(env -u XYLEM_NUM_THREADS -u OPENBLAS_NUM_THREADS -u OPENBLAS_CORETYPE -u XYLEM_NATIVE_ISA -u XYLEM_BACKEND)
metric() { "$PY" -c "import json,sys; e=json.load(open(sys.argv[1]))['epochs'][-1]; print($2)" "$1"; }

levels=(own)
grep -qw avx2 /proc/cpuinfo && levels+=(avx2)
{
    echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) CPUs, flags: $(grep -m1 -ow 'avx512f' /proc/cpuinfo || echo no-avx512) $(grep -m1 -ow 'avx2' /proc/cpuinfo || echo no-avx2)"
    echo "# before $BEFORE; after $AFTER; $(date -u)"
} > "$OUT/machine"
cat "$OUT/machine"

for r in $(seq 1 "$REPS"); do
    for build in before after; do
        bin=$BEFORE; [ $build = after ] && bin=$AFTER
        for level in "${levels[@]}"; do
            cap=()
            if [ "$level" = avx2 ]; then
                if strings "$bin" "$(dirname "$bin")/../plugins/libxylem_native.so" 2>/dev/null | grep -q XYLEM_NATIVE_ISA; then
                    cap=(XYLEM_NATIVE_ISA=avx2)
                else
                    cap=(OPENBLAS_CORETYPE=Haswell)
                    [ -n "$BEFORE_AVX2_PLUGINS" ] && cap+=(XYLEM_PLUGIN_PATH="$BEFORE_AVX2_PLUGINS")
                fi
            fi
            tag="${build}_${level}"
            for net in fashion_mlp fashion_lenet; do
                "${PLAIN[@]}" "${cap[@]}" "$bin" train --config examples/$net.toml --backend native --epochs 1 \
                    --out "$OUT/$tag-$net-$r" > /dev/null
                echo "$tag $net $(metric "$OUT/$tag-$net-$r/metrics.json" "e['seconds']")" >> "$OUT/raw"
            done
            "${PLAIN[@]}" "${cap[@]}" "$bin" train --config examples/char_rnn.toml --backend native \
                --max-steps "$CHAR_STEPS" --out "$OUT/$tag-char_rnn-$r" > /dev/null
            echo "$tag char_rnn $(metric "$OUT/$tag-char_rnn-$r/metrics.json" "1000*e['seconds']/e['steps']")" >> "$OUT/raw"
        done
    done
    (cd bench && "${TUNED[@]}" "$PY" torch_mlp.py --threads 2 | tail -1) > "$OUT/torch-mlp-$r.json"
    echo "torch fashion_mlp $("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['seconds'])" "$OUT/torch-mlp-$r.json")" >> "$OUT/raw"
    (cd bench && "${TUNED[@]}" "$PY" torch_lenet.py --threads 2 | tail -1) > "$OUT/torch-lenet-$r.json"
    echo "torch fashion_lenet $("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['seconds'])" "$OUT/torch-lenet-$r.json")" >> "$OUT/raw"
    "${TUNED[@]}" "$PY" bench/torch_char_rnn.py --max-steps "$CHAR_STEPS" --threads 1 | grep '"epoch"' | tail -1 > "$OUT/torch-char-$r.json"
    echo "torch char_rnn $("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['ms_per_iteration'])" "$OUT/torch-char-$r.json")" >> "$OUT/raw"
done

"$PY" - "$OUT/raw" <<'PYEOF'
import statistics, sys
vals = {}
for line in open(sys.argv[1]):
    tag, net, v = line.split()
    vals.setdefault((tag, net), []).append(float(v))
med = {k: statistics.median(v) for k, v in vals.items()}
tags = sorted({t for t, _ in med if t != "torch"}, key=lambda t: (t.split("_")[1], t))
print("| variant | fashion_mlp epoch (s) | vs PyTorch | LeNet epoch (s) | vs PyTorch | char-rnn (ms/it) | vs PyTorch |")
print("|---|---:|---:|---:|---:|---:|---:|")
for t in tags + ["torch"]:
    row = [t]
    for net in ("fashion_mlp", "fashion_lenet", "char_rnn"):
        v = med.get((t, net))
        ref = med.get(("torch", net))
        row += [f"{v:.3f}" if v else "-", f"{v / ref:.2f}x" if v and ref else "-"]
    print("| " + " | ".join(row) + " |")
PYEOF
echo "raw results: $OUT"

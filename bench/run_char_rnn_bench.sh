#!/usr/bin/env bash
# char-rnn benchmark (issue 15): xylem (native, opencl) against PyTorch CPU on Debian's fortunes,
# the recipe of examples/char_rnn.toml (2-layer LSTM of 128, one-hot input, seq 50, batch 50,
# RMSprop lr 2e-3 alpha 0.95, clip by value 5, U(-0.08, 0.08), forget bias 1), in one run.
#
#   bench/run_char_rnn_bench.sh [--steps N] [--opencl-steps N] [--threads "1 2"] [--xylem PATH]
#                               [--backends "native opencl"] [--fusion-off ARGS] [--one-thread ARGS] [--out DIR]
#                               [--config FILE]   (default examples/char_rnn.toml; PyTorch's recipe is fixed)
#                               [--summary-only]  (the table again from an earlier --out DIR's results)
#
# Each variant trains --steps iterations (default 1000) with --epochs 2, so that metrics.json
# (xylem) and the script's JSON lines (PyTorch, bench/torch_char_rnn.py) hold two rows: the full
# first epoch (979 steps on fortunes 1.99.1: the validation loss after a full epoch) and the run's
# end at --steps (the validation loss after N iterations). ms per iteration is each row's training
# time over its steps (validation excluded). The native run is repeated with step fusion off
# (--fusion-off: extra arguments or NAME=VALUE environment words, default XYLEM_FUSION=0; "" skips
# it), and again on one thread (--one-thread, default XYLEM_NUM_THREADS=1: OpenBLAS and the
# plugin's pool both at one thread, to compare with PyTorch's one-thread run; "" skips it). Two
# 3-step --profile runs on native give the kernel launches per training step with fusion on and
# off. PyTorch runs once per --threads count (default "1 $(nproc)"): on a machine
# that others use, its OpenMP threads spin against them (1.2 s per iteration with 2 threads at
# load 4 on 2 CPUs, against 79 ms with one), so the reference for the ratios is the fastest
# PyTorch run, and its losses are those of the first. Then `xylem sample` prints text from the
# native run's checkpoint.
# Results: a markdown summary on stdout and in OUT/summary.md (default build/bench/char-rnn-<date>).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STEPS=1000
OPENCL_STEPS=""
THREADS="1 $(nproc)"
XYLEM="$ROOT/build/bin/xylem"
BACKENDS="native opencl"
FUSION_OFF="XYLEM_FUSION=0"
ONE_THREAD="XYLEM_NUM_THREADS=1"
OUT=""
SUMMARY_ONLY=0
CONFIG="$ROOT/examples/char_rnn.toml"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --steps) STEPS="$2"; shift 2 ;;
        --opencl-steps) OPENCL_STEPS="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        --xylem) XYLEM="$(realpath "$2")"; shift 2 ;;
        --backends) BACKENDS="$2"; shift 2 ;;
        --fusion-off) FUSION_OFF="$2"; shift 2 ;;
        --one-thread) ONE_THREAD="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --config) CONFIG="$(realpath "$2")"; shift 2 ;;
        --summary-only) SUMMARY_ONLY=1; shift ;;
        -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
OPENCL_STEPS="${OPENCL_STEPS:-$STEPS}"
OUT="${OUT:-$ROOT/build/bench/char-rnn-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$OUT"
PY=/usr/bin/python3
export POCL_CACHE_DIR="${POCL_CACHE_DIR:-$HOME/.cache/xylem/pocl}"
[[ -d /usr/share/games/fortunes ]] || { echo "no corpus: apt-get install fortunes (scripts/install-deps.sh)" >&2; exit 1; }
[[ -x "$XYLEM" ]] || { echo "no xylem at $XYLEM (build it, or pass --xylem)" >&2; exit 1; }
cd "$ROOT"

if [[ $SUMMARY_ONLY -eq 0 ]]; then
{
    echo "date_utc: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "repo_rev: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (dirty tree)')"
    echo "cpu: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1), nproc $(nproc)"
    echo "torch: $("$PY" -c 'import torch; print(torch.__version__)'), thread counts $THREADS"
    echo "fortunes: $(dpkg-query -W -f='${Version}' fortunes 2>/dev/null || echo unknown)"
    echo "loadavg_start: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/machine.txt"

# xylem_run NAME BACKEND STEPS [EXTRA...]: one training run into OUT/NAME (EXTRA: flags or NAME=VALUE env words).
xylem_run() {
    local name="$1" backend="$2" steps="$3" envs=() flags=()
    shift 3
    for w in "$@"; do [[ "$w" == *=* && "$w" != -* ]] && envs+=("$w") || flags+=("$w"); done
    echo "running $name ($backend, $steps steps) ..." >&2
    env "${envs[@]}" "$XYLEM" train --config "$CONFIG" --backend "$backend" --epochs 2 --max-steps "$steps" \
        --out "$OUT/$name" "${flags[@]}" > "$OUT/$name.log" 2>&1 || echo "  $name failed: see $OUT/$name.log" >&2
}

for b in $BACKENDS; do
    steps="$STEPS"; [[ "$b" == opencl ]] && steps="$OPENCL_STEPS"
    xylem_run "xylem-$b" "$b" "$steps"
done
if [[ -n "$FUSION_OFF" ]]; then
    # shellcheck disable=SC2086
    xylem_run "xylem-native-fusion-off" native "$STEPS" $FUSION_OFF
fi
if [[ -n "$ONE_THREAD" ]]; then
    # shellcheck disable=SC2086
    xylem_run "xylem-native-one-thread" native "$STEPS" $ONE_THREAD
fi
# launches_of NAME [EXTRA...]: a 3-step --profile run on native; prints its launches per training step.
launches_of() {
    local name="$1" envs=() flags=()
    shift
    for w in "$@"; do [[ "$w" == *=* && "$w" != -* ]] && envs+=("$w") || flags+=("$w"); done
    env "${envs[@]}" "$XYLEM" train --config "$CONFIG" --backend native --epochs 1 --max-steps 3 --profile \
        --out "$OUT/$name" "${flags[@]}" > "$OUT/$name.log" 2>&1 || true
    sed -n 's/.*launches per training step: \([0-9]*\).*/\1/p' "$OUT/$name.log" | tail -1
}
if [[ -n "$FUSION_OFF" ]]; then
    echo "counting launches per step (fusion on, off) ..." >&2
    # shellcheck disable=SC2086
    echo "{\"on\": \"$(launches_of launches-on)\", \"off\": \"$(launches_of launches-off $FUSION_OFF)\"}" > "$OUT/launches.json"
fi
for t in $THREADS; do
    echo "running torch ($STEPS steps, $t threads) ..." >&2
    "$PY" "$ROOT/bench/torch_char_rnn.py" --epochs 2 --max-steps "$STEPS" --threads "$t" --seed 123 \
        > "$OUT/torch-t$t.jsonl" 2> "$OUT/torch-t$t.log" || echo "  torch failed: see $OUT/torch-t$t.log" >&2
done
if [[ -f "$OUT/xylem-native/model.safetensors" ]]; then
    "$XYLEM" sample --config "$CONFIG" --checkpoint "$OUT/xylem-native/model.safetensors" --backend native \
        --prime "The " --length 400 --seed 1 > "$OUT/sample.txt" 2>&1 || true
fi
echo "loadavg_end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
fi

"$PY" - "$OUT" "$BACKENDS" "$FUSION_OFF" "$THREADS" "$ONE_THREAD" <<'PYEOF' | tee "$OUT/summary.md"
import json, math, os, sys
out, backends, fusion_off, threads, one_thread = sys.argv[1], sys.argv[2].split(), sys.argv[3], sys.argv[4].split(), sys.argv[5]
try:
    launch_counts = json.load(open(os.path.join(out, "launches.json")))
except Exception:
    launch_counts = {}
def xylem_rows(name):
    try:
        return json.load(open(os.path.join(out, name, "metrics.json")))["epochs"]
    except Exception:
        return None
def torch_rows(t):
    try:
        return [json.loads(l) for l in open(os.path.join(out, f"torch-t{t}.jsonl")) if '"kind": "epoch"' in l] or None
    except Exception:
        return None
variants = [(f"xylem {b}", xylem_rows(f"xylem-{b}")) for b in backends]
if fusion_off:
    variants.append(("xylem native, fusion off", xylem_rows("xylem-native-fusion-off")))
if one_thread:
    variants.append(("xylem native, one thread", xylem_rows("xylem-native-one-thread")))
torch_runs = [(f"pytorch cpu, {t} thread(s)", torch_rows(t)) for t in threads]
variants += torch_runs
def ms(r):
    if "ms_per_iteration" in r:
        return r["ms_per_iteration"]
    return 1000 * r["seconds"] / r["steps"]
timed = [(ms(rows[0]), name) for name, rows in torch_runs if rows]
ref_ms, ref_name = min(timed) if timed else (None, None)
ref = next((rows for name, rows in torch_runs if rows), None)  # losses: the first PyTorch run
print(f"reference for the ratios: {ref_name or 'none'} (the fastest PyTorch run)\n")
print("| variant | ms/iteration (epoch 1) | vs PyTorch | val loss, full epoch (nats/char, bpc) | steps | val loss at the last step (nats/char, bpc) | launches/step |")
print("|---|---:|---:|---|---:|---|---:|")
for name, rows in variants:
    if not rows:
        print(f"| {name} | failed | | | | | |")
        continue
    first, last = rows[0], rows[-1]
    f = lambda r: f"{r['val_loss']:.4f} ({r['val_loss'] / math.log(2):.3f})" if "val_loss" in r else "n/a"
    ratio = f"{ms(first) / ref_ms:.2f}x" if ref_ms else "n/a"
    steps = last.get("global_step", sum(r["steps"] for r in rows))
    launches = launch_counts.get("off" if "fusion off" in name else "on", "") if name == "xylem native" or "fusion off" in name else ""
    print(f"| {name} | {ms(first):.1f} | {ratio} | {f(first) if first.get('complete', not first.get('partial')) else 'n/a (run ended first)'} "
          f"| {steps} | {f(last)} | {launches} |")
x = dict(variants).get("xylem native")
if x and ref:
    r = ms(x[0]) / ref_ms
    print(f"\nspeed goal (native <= 0.5x PyTorch): {r:.2f}x {'PASS' if r <= 0.5 else 'FAIL'}")
    one = dict(variants).get("xylem native, one thread")
    t1 = next((rows for name, rows in torch_runs if name.startswith("pytorch cpu, 1 thread")), None)
    if one and t1:
        print(f"one thread each (xylem XYLEM_NUM_THREADS=1 vs PyTorch --threads 1): {ms(one[0]) / ms(t1[0]):.2f}x")
    if "val_loss" in x[-1] and "val_loss" in ref[-1]:
        d = x[-1]["val_loss"] - ref[-1]["val_loss"]
        print(f"loss goal (within 0.05 nats/char of PyTorch after the run's steps): {d:+.4f} {'PASS' if abs(d) <= 0.05 else 'FAIL'}")
on, off = launch_counts.get("on", ""), launch_counts.get("off", "")
if on and off:
    print(f"\nlaunches per training step (native, --profile): fusion on {on}, off {off}: {int(off) / int(on):.1f}x fewer "
          f"with it on (goal >= 3x: {'PASS' if int(off) >= 3 * int(on) else 'FAIL'})")
sample = os.path.join(out, "sample.txt")
if os.path.exists(sample):
    print("\nsample (xylem native, --prime \"The \" --length 400 --seed 1):\n\n```\n" + open(sample, errors="replace").read().rstrip() + "\n```")
PYEOF
echo "raw results: $OUT"

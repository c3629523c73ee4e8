#!/usr/bin/env bash
# Character GPT benchmark (issue 27): xylem (native, opencl) against PyTorch CPU on Debian's
# fortunes with examples/gpt_char.toml's recipe (nanoGPT's shakespeare_char CPU configuration: 4
# pre-LN blocks, 4 heads, 128 channels, context 64, batch 12, AdamW, warm-up + cosine, clip 1.0), in
# one run.
#
#   bench/run_gpt_bench.sh [--steps N] [--opencl-steps N] [--threads "1 2"] [--xylem PATH]
#                          [--backends "native opencl"] [--sample-tokens N] [--out DIR] [--summary-only]
#
# - Training: each variant trains --steps iterations (default 2000, the recipe's whole run; the
#   OpenCL run --opencl-steps, default 200, for its speed only). ms per iteration: xylem's
#   metrics.json (training seconds over steps, validation excluded), PyTorch's median step window
#   (bench/torch_gpt.py). The validation loss is each run's at its last step, over the same
#   non-overlapping windows of the held-out text. PyTorch runs once per --threads count (default
#   "1 $(nproc)") with OMP_WAIT_POLICY=PASSIVE (its OpenMP threads otherwise spin against anything
#   else on the machine); the reference for the ratios is the fastest.
# - Launches: a 3-step --profile run on native: attention launches per layer and pass, launches per
#   training step.
# - Sampling: `xylem sample` of --sample-tokens characters (default 500, top-k 10) from the native
#   run's checkpoint, timed (the process's wall time, model load included), against PyTorch's
#   batch-1 generation without and with a key/value cache (torch_gpt.py's sample row).
# - Memory: peak RSS (/usr/bin/time) of 3 training steps at batch 1 with a context of 256 and of
#   1,024 (the position table and block_size raised; everything else the recipe's): attention
#   memory should grow linearly with the sequence (the native attention op keeps no [T, T] buffer).
# Results: a markdown summary on stdout and in OUT/summary.md (default build/bench/gpt-<date>).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STEPS=2000
OPENCL_STEPS=200
THREADS="1 $(nproc)"
XYLEM="$ROOT/build/bin/xylem"
BACKENDS="native opencl"
SAMPLE_TOKENS=500
OUT=""
SUMMARY_ONLY=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --steps) STEPS="$2"; shift 2 ;;
        --opencl-steps) OPENCL_STEPS="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        --xylem) XYLEM="$(realpath "$2")"; shift 2 ;;
        --backends) BACKENDS="$2"; shift 2 ;;
        --sample-tokens) SAMPLE_TOKENS="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --summary-only) SUMMARY_ONLY=1; shift ;;
        -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
OUT="${OUT:-$ROOT/build/bench/gpt-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$OUT"
PY=/usr/bin/python3
CONFIG="$ROOT/examples/gpt_char.toml"
export POCL_CACHE_DIR="${POCL_CACHE_DIR:-$HOME/.cache/xylem/pocl}"
[[ -d /usr/share/games/fortunes ]] || { echo "no corpus: apt-get install fortunes (scripts/install-deps.sh)" >&2; exit 1; }
[[ -x "$XYLEM" ]] || { echo "no xylem at $XYLEM (build it, or pass --xylem)" >&2; exit 1; }
cd "$ROOT"

if [[ $SUMMARY_ONLY -eq 0 ]]; then
{
    echo "date_utc: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "repo_rev: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (dirty tree)')"
    echo "cpu: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1), nproc $(nproc), $(grep -q avx512f /proc/cpuinfo && echo AVX-512 || echo AVX2)"
    echo "torch: $("$PY" -c 'import torch; print(torch.__version__)'), thread counts $THREADS"
    echo "loadavg_start: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/machine.txt"

for b in $BACKENDS; do
    steps="$STEPS"; [[ "$b" == opencl ]] && steps="$OPENCL_STEPS"
    echo "running xylem-$b ($steps steps) ..." >&2
    "$XYLEM" train --config "$CONFIG" --backend "$b" --max-steps "$steps" --out "$OUT/xylem-$b" \
        > "$OUT/xylem-$b.log" 2>&1 || echo "  xylem-$b failed: see $OUT/xylem-$b.log" >&2
done
echo "profiling 3 steps on native ..." >&2
"$XYLEM" train --config "$CONFIG" --backend native --max-steps 3 --profile --out "$OUT/profile" \
    > "$OUT/profile.log" 2>&1 || echo "  profile failed: see $OUT/profile.log" >&2
for t in $THREADS; do
    echo "running torch ($STEPS steps, $t threads) ..." >&2
    OMP_WAIT_POLICY=PASSIVE "$PY" "$ROOT/bench/torch_gpt.py" --iters "$STEPS" --threads "$t" \
        --sample-tokens "$SAMPLE_TOKENS" > "$OUT/torch-t$t.jsonl" 2> "$OUT/torch-t$t.log" ||
        echo "  torch failed: see $OUT/torch-t$t.log" >&2
done
if [[ -f "$OUT/xylem-native/model.safetensors" ]]; then
    start=$(date +%s.%N)
    "$XYLEM" sample --config "$CONFIG" --checkpoint "$OUT/xylem-native/model.safetensors" --backend native \
        --prime $'\n' --length "$SAMPLE_TOKENS" --top-k 10 --seed 1 > "$OUT/sample.txt" 2> "$OUT/sample.log" || true
    end=$(date +%s.%N)
    echo "{\"tokens\": $SAMPLE_TOKENS, \"seconds\": $("$PY" -c "print($end - $start)")}" > "$OUT/sample.json"
fi
for ctx in 256 1024; do
    sed -e "s/^block_size = 64/block_size = $ctx/" -e "s/max_len = 64/max_len = $ctx/" \
        -e "s/^batch_size = 12/batch_size = 1/" "$CONFIG" > "$OUT/gpt-ctx$ctx.toml"
    /usr/bin/time -f "%M" -o "$OUT/rss-ctx$ctx.txt" "$XYLEM" train --config "$OUT/gpt-ctx$ctx.toml" --backend native \
        --max-steps 3 --out "$OUT/ctx$ctx" > "$OUT/ctx$ctx.log" 2>&1 || echo "  ctx $ctx failed: see $OUT/ctx$ctx.log" >&2
done
echo "loadavg_end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
fi

"$PY" - "$OUT" "$BACKENDS" "$THREADS" <<'PYEOF' | tee "$OUT/summary.md"
import json, math, os, re, sys
out, backends, threads = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def xylem_ms(name):
    try:
        rows = json.load(open(os.path.join(out, name, "metrics.json")))["epochs"]
    except Exception:
        return None, None
    seconds, steps = sum(r["seconds"] for r in rows), sum(r["steps"] for r in rows)
    return 1000 * seconds / steps, rows[-1].get("val_loss")
def torch_rows(t):
    try:
        return [json.loads(l) for l in open(os.path.join(out, f"torch-t{t}.jsonl"))]
    except Exception:
        return []
torch = {}
for t in threads:
    rows = torch_rows(t)
    final = next((r for r in rows if r.get("kind") == "final"), None)
    sample = next((r for r in rows if r.get("kind") == "sample"), None)
    if final:
        torch[t] = (1000 * final["step_seconds"], final.get("val_loss"), sample)
ref_t = min(torch, key=lambda t: torch[t][0]) if torch else None
ref_ms = torch[ref_t][0] if ref_t else None
print(f"reference for the ratios: {'pytorch cpu, ' + ref_t + ' thread(s)' if ref_t else 'none'} (the fastest PyTorch run)\n")
print("| variant | ms/iteration | vs PyTorch | val loss at the last step (nats/char) |")
print("|---|---:|---:|---:|")
native_ms = None
for b in backends:
    ms, vl = xylem_ms(f"xylem-{b}")
    if b == "native":
        native_ms, native_val = ms, vl
    if ms is None:
        print(f"| xylem {b} | failed | | |")
        continue
    ratio = f"{ms / ref_ms:.2f}x" if ref_ms else "n/a"
    print(f"| xylem {b} | {ms:.1f} | {ratio} | {vl:.4f} |" if vl is not None else f"| xylem {b} | {ms:.1f} | {ratio} | |")
for t, (ms, vl, _) in sorted(torch.items()):
    print(f"| pytorch cpu, {t} thread(s) | {ms:.1f} | {ms / ref_ms:.2f}x | {vl:.4f} |")
if native_ms and ref_ms:
    r = native_ms / ref_ms
    print(f"\nspeed goal (native <= 0.5x PyTorch's fastest): {r:.2f}x {'PASS' if r <= 0.5 else 'FAIL'}")
    ocl, _ = xylem_ms("xylem-opencl")
    if ocl:
        print(f"OpenCL (PoCL) vs native: {ocl / native_ms:.2f}x (goal <= 3x: {'PASS' if ocl <= 3 * native_ms else 'FAIL'})")
    if native_val is not None and torch[ref_t][1] is not None:
        first_t = threads[0]
        d = native_val - torch[first_t][1]
        print(f"loss goal (within 0.05 nats/char of PyTorch's {first_t}-thread run): {native_val:.4f} vs "
              f"{torch[first_t][1]:.4f}, {d:+.4f} {'PASS' if abs(d) <= 0.05 else 'FAIL'}")
try:
    log = open(os.path.join(out, "profile.log")).read()
    calls = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(attention_fwd|attention_bwd)\s+(\d+)", log, re.M)}
    launches = re.findall(r"launches per training step: (\d+)", log)
    print(f"\n--profile, 3 steps on native: attention_fwd {calls.get('attention_fwd', '?')} and attention_bwd "
          f"{calls.get('attention_bwd', '?')} launches (4 layers x 3 steps = 12 each: one per layer and pass)"
          + (f"; {launches[-1]} launches per training step" if launches else ""))
    notes = re.findall(r"^note: .*$", log, re.M)
    for n in notes:
        print(f"profile {n}")
except Exception:
    pass
try:
    s = json.load(open(os.path.join(out, "sample.json")))
    x_tps = s["tokens"] / s["seconds"]
    line = f"\nsampling at batch 1, top-k 10: xylem (cache) {x_tps:.0f} tokens/s (process wall time, load included)"
    smp = torch[ref_t][2] if ref_t else None
    if smp:
        nc, kv = smp["no_cache"]["tokens_per_second"], smp["kv_cache"]["tokens_per_second"]
        line += (f"; PyTorch without a cache {nc:.0f}, with one {kv:.0f}: {x_tps / nc:.1f}x (goal >= 2x: "
                 f"{'PASS' if x_tps >= 2 * nc else 'FAIL'}) and {x_tps / kv:.1f}x (goal >= 1x: {'PASS' if x_tps >= kv else 'FAIL'})")
    print(line)
except Exception:
    pass
try:
    r256 = int(open(os.path.join(out, "rss-ctx256.txt")).read().split()[-1])
    r1024 = int(open(os.path.join(out, "rss-ctx1024.txt")).read().split()[-1])
    print(f"\npeak RSS of 3 training steps at batch 1: context 256 {r256 / 1024:.1f} MiB, context 1,024 "
          f"{r1024 / 1024:.1f} MiB ({r1024 / r256:.2f}x for 4x the sequence)")
except Exception:
    pass
sample = os.path.join(out, "sample.txt")
if os.path.exists(sample):
    print("\nsample (xylem native, --length %s --top-k 10 --seed 1):\n\n```\n" % "N"
          + open(sample, errors="replace").read().rstrip()[:600] + "\n```")
PYEOF
echo "raw results: $OUT"

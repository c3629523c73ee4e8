#!/usr/bin/env bash
# Fashion-MNIST MLP benchmark: xylem (native backend) against PyTorch CPU.
#
#   bench/run_mlp_bench.sh [--reps N] [--no-accuracy] [--out DIR] [--xylem PATH] [--quiet-wait S]
#
# Runs interleaved repetitions (1 epoch each) of
#   xylem           build/bin/xylem train --backend native, no tuning environment
#                   (batch 64: examples/fashion_mlp.toml, batch 20: examples/leaf_mlp.toml)
#   xylem-1t        the same with XYLEM_NUM_THREADS=1 (context only)
#   torch-tuned     OPENBLAS_NUM_THREADS=1 GLIBC_TUNABLES=... torch_mlp.py --threads 2
#                   (the reference the bars are defined against)
#   torch-tuned-1t  the same environment with --threads 1 (context only)
#   torch-default   torch_mlp.py with PyTorch's defaults (context only)
# then the accuracy check (5 epochs at batch 64, seed 1) for xylem and PyTorch.
# Prints the machine facts and a table of medians; raw results go to --out
# (default build/bench/mlp-<date>; never into the tracked tree).
# --xylem picks the xylem binary (default build/bin/xylem, built if missing); use a
# private build when others may be rebuilding build/ while this runs.
# Before each run the script waits up to --quiet-wait seconds (default 180) for the
# machine to be quiet (other processes using < 15% of the CPUs over 1 s) and records
# the busy share it saw; 0 disables the wait.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPS=3
ACCURACY=1
OUT=""
XYLEM="$ROOT/build/bin/xylem"
QUIET_WAIT=180
while [[ $# -gt 0 ]]; do
    case "$1" in
        --reps) REPS="$2"; shift 2 ;;
        --no-accuracy) ACCURACY=0; shift ;;
        --out) OUT="$2"; shift 2 ;;
        --xylem) XYLEM="$(realpath "$2")"; shift 2 ;;
        --quiet-wait) QUIET_WAIT="$2"; shift 2 ;;
        -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
OUT="${OUT:-$ROOT/build/bench/mlp-$STAMP}"
mkdir -p "$OUT"

PY=/usr/bin/python3                       # Debian's interpreter, with python3-torch
TORCH_SCRIPT="$ROOT/bench/torch_mlp.py"
RUN_TIMEOUT=600                           # seconds; a run past this is recorded as failed
TUNED_ENV=(OPENBLAS_NUM_THREADS=1
           GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184)
# Variables a user would not normally set; stripped from the untuned runs.
UNSET_ENV=(-u XYLEM_NUM_THREADS -u OPENBLAS_NUM_THREADS -u OPENBLAS_CORETYPE -u OMP_NUM_THREADS
           -u MKL_NUM_THREADS -u GLIBC_TUNABLES -u XYLEM_BACKEND)

if [[ ! -x "$XYLEM" && "$XYLEM" == "$ROOT/build/bin/xylem" ]]; then
    echo "building xylem ..." >&2
    cmake -S "$ROOT" -B "$ROOT/build" >/dev/null && cmake --build "$ROOT/build" -j2 >/dev/null
fi
cd "$ROOT"

# ---- machine facts ---------------------------------------------------------------------------
FACTS="$OUT/machine.txt"
{
    echo "date_utc: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "repo_rev (of this checkout, not necessarily of --xylem): $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty tree)')"
    echo "cpu: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)"
    echo "nproc: $(nproc)"
    echo "kernel: $(uname -r)"
    echo "xylem_binary: $XYLEM built $(date -u -r "$XYLEM" +%Y-%m-%dT%H:%M:%SZ)"
    echo "OPENBLAS_CORETYPE: ${OPENBLAS_CORETYPE:-unset}"
    echo "xylem_backends: $(env "${UNSET_ENV[@]}" "$XYLEM" backends 2>&1 | grep -m1 OpenBLAS | sed 's/^[[:space:]]*//')"
    echo "torch: $("$PY" -c 'import torch; print(torch.__version__, "default_threads", torch.get_num_threads())')"
    echo "numpy: $("$PY" -c 'import numpy; print(numpy.__version__)')"
    echo "python: $("$PY" -V 2>&1)"
    echo "loadavg_start: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$FACTS"
cat "$FACTS"
echo

# ---- one run ---------------------------------------------------------------------------------
RAW="$OUT/raw.csv"
echo "variant,batch,rep,seconds,images_per_second,test_accuracy,train_loss,load1,busy_pct_before,others_pct_during" > "$RAW"
HZ="$(getconf CLK_TCK)"
# GNU time gives each run's own CPU time, to tell how much of the machine others used meanwhile.
if [[ -x /usr/bin/time ]]; then TIMEIT=(/usr/bin/time -f '%U %S'); else TIMEIT=(env); fi
# cpu_jiffies: non-idle and total jiffies of all CPUs so far.
cpu_jiffies() {
    local a; a=($(head -1 /proc/stat))
    local tot=0 i
    for i in 1 2 3 4 5 6 7 8; do tot=$((tot + a[i])); done
    echo "$((tot - a[4] - a[5])) $tot"
}

# busy_pct: share (%) of all CPUs that was not idle over the next second.
busy_pct() {
    local a b
    a=($(head -1 /proc/stat)); sleep 1; b=($(head -1 /proc/stat))
    local tot=0 i
    for i in 1 2 3 4 5 6 7 8; do tot=$((tot + b[i] - a[i])); done
    local idle=$(( (b[4] - a[4]) + (b[5] - a[5]) ))
    echo $(( tot > 0 ? 100 * (tot - idle) / tot : 0 ))
}
# wait_quiet: waits (up to QUIET_WAIT s) until busy_pct < 15; prints the last busy_pct.
wait_quiet() {
    local t0=$SECONDS b
    b=$(busy_pct)
    while (( b >= 15 && SECONDS - t0 < QUIET_WAIT )); do sleep 4; b=$(busy_pct); done
    echo "$b"
}

config_for() { [[ "$1" == 64 ]] && echo examples/fashion_mlp.toml || echo examples/leaf_mlp.toml; }
torch_args_for() { [[ "$1" == 64 ]] && echo "--lr 0.01 --momentum 0.9" || echo "--lr 0.03 --momentum 0.03"; }

# run_one VARIANT BATCH REP: runs one 1-epoch training, appends a row to $RAW.
run_one() {
    local variant="$1" bs="$2" rep="$3" dir="$OUT/runs/$1-b$2-r$3" load1 busy rc=0
    mkdir -p "$dir"
    busy="$(wait_quiet)"
    load1="$(cut -d' ' -f1 /proc/loadavg)"
    local j0 j1; j0=($(cpu_jiffies))
    case "$variant" in
        xylem|xylem-1t)
            local extra=()
            [[ "$variant" == xylem-1t ]] && extra=(XYLEM_NUM_THREADS=1)
            "${TIMEIT[@]}" -o "$dir/cputime" \
            env "${UNSET_ENV[@]}" "${extra[@]}" timeout "$RUN_TIMEOUT" "$XYLEM" train \
                --config "$(config_for "$bs")" --backend native --epochs 1 --batch-size "$bs" \
                --out "$dir" > "$dir/log.txt" 2>&1 || rc=$?
            ;;
        torch-tuned|torch-tuned-1t|torch-default)
            local envs=() targs=()
            case "$variant" in
                torch-tuned) envs=("${TUNED_ENV[@]}"); targs=(--threads 2) ;;
                torch-tuned-1t) envs=("${TUNED_ENV[@]}"); targs=(--threads 1) ;;
            esac
            # shellcheck disable=SC2046
            "${TIMEIT[@]}" -o "$dir/cputime" \
            env "${UNSET_ENV[@]}" "${envs[@]}" timeout "$RUN_TIMEOUT" "$PY" "$TORCH_SCRIPT" \
                --batch-size "$bs" $(torch_args_for "$bs") --epochs 1 --seed 1 "${targs[@]}" \
                > "$dir/log.txt" 2>&1 || rc=$?
            ;;
    esac
    j1=($(cpu_jiffies))
    # CPU share (%) used by everything but this run while it ran (whole process, load included).
    local others
    others="$(awk -v b="$((j1[0] - j0[0]))" -v t="$((j1[1] - j0[1]))" -v hz="$HZ" \
        '{o = b - ($1 + $2) * hz; if (o < 0) o = 0; printf "%d", (t > 0 ? 100 * o / t : 0)}' \
        <(tail -n 1 "$dir/cputime" 2>/dev/null) || true)"
    if [[ $rc -ne 0 ]]; then
        echo "$variant,$bs,$rep,,,,,$load1,$busy,$others" >> "$RAW"
        printf '  %-15s b%-3s rep %s  FAILED (rc %s, see %s)\n' "$variant" "$bs" "$rep" "$rc" "$dir/log.txt"
        return 0
    fi
    "$PY" - "$variant" "$bs" "$rep" "$dir" "$load1" "$busy" "$others" >> "$RAW" <<'EOF'
import json, sys
variant, bs, rep, d, load1, busy, others = sys.argv[1:]
if variant.startswith("xylem"):
    e = json.load(open(d + "/metrics.json"))["epochs"][0]
else:
    e = [json.loads(l) for l in open(d + "/log.txt") if l.startswith('{"epoch"')][0]
print(f'{variant},{bs},{rep},{e["seconds"]:.4f},{e["images_per_second"]:.0f},'
      f'{e["test_accuracy"]:.4f},{e["train_loss"]:.4f},{load1},{busy},{others}')
EOF
    printf '  %-15s b%-3s rep %s  %7s s  (load %s; other processes: %s%% before, %s%% during)\n' \
        "$variant" "$bs" "$rep" "$(tail -1 "$RAW" | cut -d, -f4)" "$load1" "$busy" "$others"
}

VARIANTS=(xylem torch-tuned torch-default xylem-1t torch-tuned-1t)
echo "timing: $REPS interleaved repetitions, 1 epoch each"
for rep in $(seq 1 "$REPS"); do
    for bs in 64 20; do
        for v in "${VARIANTS[@]}"; do run_one "$v" "$bs" "$rep"; done
    done
done
echo "loadavg_end_timing: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$FACTS"

# ---- accuracy check --------------------------------------------------------------------------
ACC="$OUT/accuracy.txt"
: > "$ACC"
if [[ $ACCURACY -eq 1 ]]; then
    echo
    echo "accuracy: 5 epochs at batch 64, seed 1"
    wait_quiet > /dev/null
    # The test set is scored every epoch here (the bars are at epochs 1 and 5): [train] is the
    # example's last table, so an appended key lands in it.
    { cat examples/fashion_mlp.toml; echo "test_every_epoch = true"; } > "$OUT/acc-fashion_mlp.toml"
    env "${UNSET_ENV[@]}" timeout 1200 "$XYLEM" train --config "$OUT/acc-fashion_mlp.toml" \
        --backend native --epochs 5 --out "$OUT/acc-xylem" > "$OUT/acc-xylem.log" 2>&1 || true
    env "${UNSET_ENV[@]}" "${TUNED_ENV[@]}" timeout 1200 "$PY" "$TORCH_SCRIPT" --batch-size 64 \
        --lr 0.01 --momentum 0.9 --epochs 5 --seed 1 --threads 2 > "$OUT/acc-torch.log" 2>&1 || true
    "$PY" - "$OUT" > "$ACC" <<'EOF'
import json, sys
out = sys.argv[1]
def show(name, epochs):
    acc = {e["epoch"]: e["test_accuracy"] for e in epochs}
    a1, a5 = acc.get(1), acc.get(5)
    f = lambda a: "n/a" if a is None else f"{100 * a:.2f}%"
    print(f"{name}: epoch 1 {f(a1)}, epoch 5 {f(a5)}", end="")
    if name == "xylem":
        ok1 = a1 is not None and a1 >= 0.80
        ok5 = a5 is not None and a5 >= 0.855
        print(f"  [bars: epoch 1 >= 80% {'PASS' if ok1 else 'FAIL'}, "
              f"epoch 5 >= 85.5% {'PASS' if ok5 else 'FAIL'}]")
    else:
        print("  (context)")
try:
    show("xylem", json.load(open(out + "/acc-xylem/metrics.json"))["epochs"])
except Exception as ex:
    print(f"xylem: accuracy run failed ({ex}); see {out}/acc-xylem.log")
try:
    show("torch-tuned", [json.loads(l) for l in open(out + "/acc-torch.log") if l.startswith('{"epoch"')])
except Exception as ex:
    print(f"torch-tuned: accuracy run failed ({ex}); see {out}/acc-torch.log")
EOF
    cat "$ACC"
fi
echo "loadavg_end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$FACTS"

# ---- summary ---------------------------------------------------------------------------------
echo
"$PY" - "$RAW" <<'EOF' | tee "$OUT/summary.md"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
order = ["xylem", "torch-tuned", "torch-default", "xylem-1t", "torch-tuned-1t"]
QUIET = 15  # a run is "quiet" when other processes used < 15% of the CPUs while it ran
def pct(r):
    try: return int(r["others_pct_during"])
    except ValueError: return None
runs, quiet, others = {}, {}, {}
for r in rows:
    if not r["seconds"]:
        continue
    k = (r["variant"], r["batch"])
    runs.setdefault(k, []).append(float(r["seconds"]))
    others.setdefault(k, []).append(pct(r))
    if pct(r) is not None and pct(r) < QUIET:
        quiet.setdefault(k, []).append(float(r["seconds"]))
med = {k: statistics.median(v) for k, v in runs.items()}
qmed = {k: statistics.median(v) for k, v in quiet.items()}
print("| variant | batch | runs | median s/epoch | min | max | median images/s | ratio to torch-tuned "
      f"| others' CPU % during runs | quiet runs (<{QUIET}%) | quiet median s |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
for bs in ("64", "20"):
    for v in order:
        k = (v, bs)
        if k not in runs:
            print(f"| {v} | {bs} | 0 | failed | | | | | | | |")
            continue
        s = runs[k]
        ref = med.get(("torch-tuned", bs))
        ratio = f"{med[k] / ref:.2f}x" if ref else "n/a"
        o = " ".join("?" if x is None else str(x) for x in others[k])
        q = f"{qmed[k]:.3f}" if k in qmed else "-"
        print(f"| {v} | {bs} | {len(s)} | {med[k]:.3f} | {min(s):.3f} | {max(s):.3f} "
              f"| {60000 / med[k]:,.0f} | {ratio} | {o} | {len(quiet.get(k, []))} | {q} |")
print()
bars = {"64": 1.0, "20": 0.7}
for bs, bar in bars.items():
    x, t = med.get(("xylem", bs)), med.get(("torch-tuned", bs))
    if x is None or t is None:
        print(f"batch {bs}: bar xylem/torch-tuned <= {bar:.1f}x: NO DATA")
        continue
    r = x / t
    best = min((med[v, bs], v) for v in ("torch-tuned", "torch-tuned-1t", "torch-default") if (v, bs) in med)
    line = (f"batch {bs}: xylem/torch-tuned = {r:.2f}x (bar <= {bar:.1f}x): {'PASS' if r <= bar else 'FAIL'}; "
            f"xylem/fastest torch variant ({best[1]}) = {x / best[0]:.2f}x")
    qx, qt = qmed.get(("xylem", bs)), qmed.get(("torch-tuned", bs))
    if qx and qt:
        line += f"; quiet runs only: xylem/torch-tuned = {qx / qt:.2f}x"
    print(line)
EOF
echo
echo "raw results: $OUT"

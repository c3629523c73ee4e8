#!/usr/bin/env bash
# GPU benchmarks for issue 5's speed bars: xylem (cuda) against PyTorch CUDA in the same run.
#
#   bench/run_gpu_bench.sh [--reps N] [--build DIR] [--backend NAME] [--torch-device DEV]
#                          [--python PATH] [--quick] [--budget S] [--out DIR] [--only GROUPS]
#
# --only GROUPS: comma-separated, of mlp, lenet, theano, resnet, char-rnn, gpt, attention (default all).
#
# Per repetition (interleaved, in this order):
#   mlp-eager          xylem train examples/fashion_mlp.toml, 1 epoch, batch 64
#   mlp-captured       the same config with `capture = true` under [train] (a temp copy)
#   mlp-resident       the same config with `resident = true` under [data]
#   mlp-captured-res   both keys
#   torch-mlp          bench/torch_mlp.py --device DEV, 1 epoch (data on the device)
#   lenet              xylem train examples/fashion_lenet.toml, 1 epoch, batch 64
#   torch-lenet        bench/torch_lenet.py --device DEV, 1 epoch
#   theano             BUILD/bin/xylem-bench-theano BACKEND 500 (y = m @ x + b vs bare GEMM)
#   resnet             xylem train examples/fashion_resnet.toml, --max-steps 400 (batch 128)
#   torch-resnet       bench/torch_resnet.py --device DEV --max-steps 400
#   char-rnn           xylem train examples/char_rnn.toml, --max-steps 400 (of a 979-step epoch)
#   torch-char-rnn     bench/torch_char_rnn.py --device DEV --max-steps 400 (nn.LSTM: cuDNN on cuda)
#   gpt                xylem train examples/gpt_char.toml, --max-steps 500 --epochs 2 (2 x 250)
#   torch-gpt          bench/torch_gpt.py --device DEV --iters 500 --sample-tokens 0
# and in the first repetition only:
#   attention          BUILD/bin/xylem-bench-attention BACKEND 50 (fused and composed attention_fwd/bwd)
#   torch-attention    bench/torch_attention.py --device DEV --reps 50 (scaled_dot_product_attention,
#                      each SDPA backend torch has; the fastest for fp32 is the reference)
# then prints a markdown block for docs/gpu-results.md: device, driver, CUDA (nvidia-smi, nvcc),
# torch, date, a table of medians with ratios and bars, transfers per step, and every raw run.
# Raw results go to BUILD/bench/gpu-<date>/, or --out DIR (summary.md there is the printed block).
#
# Step time, xylem: from each run's log.csv, whose rows are written every print_every (100)
# steps right after the loss is read back (a host sync): the mean step time of each 100-step
# window, median over the full windows after the first (the first holds the first step's
# algorithm choice and, captured, the graph capture). Also shown: metrics.json seconds/steps of
# the whole epoch (train/fit.cpp: the clock starts after the dataset upload and the epoch's order
# upload and stops after the last step's loss read, before evaluation; it includes the first
# steps, the capture and the last partial batch). PyTorch: torch_mlp.py's step_seconds, the same
# windows (synchronised clock reads every 100 steps), and its seconds/steps. ResNet, char-rnn and
# GPT the same way (their configs' print_every is 100; GPT's windows are taken within each of its
# two 250-step epochs, the validation between them untimed; torch_gpt.py reads its clock every 10
# iterations); "run avg" is the timed run's seconds / steps (PyTorch: the first steps included,
# no untimed warm-up for char-rnn and GPT; xylem: its first steps included, validation excluded).
#
# Defaults: --reps 3, --build build-gpu (else build), --backend cuda, --torch-device cuda,
# --python: $PYTHON, else the first of python3, /usr/bin/python3 whose torch sees CUDA
# (/usr/bin/python3 for --torch-device cpu). --quick: short runs (--max-steps 300 for the MLP,
# 100 for LeNet, 20 Theano iterations, 30 steps of ResNet, char-rnn and GPT from copies of their
# configs with print_every = 10 and PyTorch's clock read every 10 steps, attention at 3 calls per
# median) to test the plumbing, e.g. on a machine without a GPU:
#   bench/run_gpu_bench.sh --backend native --torch-device cpu --reps 1 --quick
# --budget S (default 480): no new repetition starts unless it would end within S seconds of the
# first's start, judged by the longest repetition so far (the summary uses the repetitions done);
# each run is killed after 150 s.
#
# Time on an H100 with the defaults (estimate, not yet measured): per repetition four xylem MLP
# runs of ~3 s (process start, data load, CUDA init, a <1 s epoch, evaluation), two PyTorch runs
# of ~8-12 s (import and CUDA init dominate), a xylem LeNet epoch of ~5 s, the Theano loop ~3 s:
# ~40-50 s; then ResNet (400 steps, ~5-10 s each side), char-rnn and GPT (~5 s of xylem, ~10 s of
# PyTorch each, mostly start-up): ~90-100 s per repetition, and the attention pair once (~20 s):
# 3 repetitions ~5 min, under the 10-minute limit of one call (--budget guards it).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ORIG_ARGS=("$@")
REPS=3
BUILD=""
BACKEND=cuda
TORCH_DEVICE=cuda
PY="${PYTHON:-}"
QUICK=0
BUDGET=480
OUT_ARG=""
ONLY=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --reps) REPS="$2"; shift 2 ;;
        --build) BUILD="$(realpath "$2")"; shift 2 ;;
        --backend) BACKEND="$2"; shift 2 ;;
        --torch-device) TORCH_DEVICE="$2"; shift 2 ;;
        --python) PY="$2"; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --budget) BUDGET="$2"; shift 2 ;;
        --only) ONLY="$2"; shift 2 ;;
        --out) OUT_ARG="$2"; shift 2 ;;
        -h|--help) sed -n '2,40p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
if [[ -z "$BUILD" ]]; then
    if [[ -x "$ROOT/build-gpu/bin/xylem" ]]; then BUILD="$ROOT/build-gpu"; else BUILD="$ROOT/build"; fi
fi
XYLEM="$BUILD/bin/xylem"
THEANO="$BUILD/bin/xylem-bench-theano"
ATTENTION="$BUILD/bin/xylem-bench-attention"
[[ -x "$XYLEM" ]] || { echo "no $XYLEM: build first (scripts/gpu-check.sh builds build-gpu)" >&2; exit 1; }
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
OUT="${OUT_ARG:-$BUILD/bench/gpu-$STAMP}"
mkdir -p "$OUT/runs"
OUT="$(realpath "$OUT")"
cd "$ROOT"
RUN_TIMEOUT=150
PLAIN=(env -u XYLEM_NUM_THREADS -u OPENBLAS_NUM_THREADS -u GLIBC_TUNABLES -u XYLEM_BACKEND)
XARGS=(--backend "$BACKEND" --plugin-path "$BUILD/plugins" --epochs 1)
# PyTorch reads the data the xylem configs read (scripts/gpu-run.sh may point them elsewhere).
DATA_DIR="$(sed -n 's/^dir *= *"\(.*\)"/\1/p' examples/fashion_mlp.toml | head -1)"
TARGS=(--device "$TORCH_DEVICE" --epochs 1 --seed 1 --data-dir "${DATA_DIR:-/usr/share/datasets/fashion-mnist}")
TEXT_DIR="$(sed -n 's/^text *= *\[ *"\([^"]*\)".*/\1/p' examples/char_rnn.toml | head -1)"
TEXT_DIR="${TEXT_DIR:-/usr/share/games/fortunes}"
MLP_STEPS=0; LENET_STEPS=0; THEANO_ITERS=500
RESNET_STEPS=400; RNN_STEPS=400; GPT_STEPS=500; WINDOW=100; ATT_REPS=50
if [[ $QUICK -eq 1 ]]; then
    MLP_STEPS=300; LENET_STEPS=100; THEANO_ITERS=20
    RESNET_STEPS=30; RNN_STEPS=30; GPT_STEPS=30; WINDOW=10; ATT_REPS=3
fi
if ((MLP_STEPS)); then MLP_X=(--max-steps $MLP_STEPS); else MLP_X=(); fi
if ((LENET_STEPS)); then LENET_X=(--max-steps $LENET_STEPS); else LENET_X=(); fi

# ---- the Python that runs PyTorch --------------------------------------------------------------
if [[ -z "$PY" ]]; then
    if [[ "$TORCH_DEVICE" == cuda ]]; then
        for c in python3 /usr/bin/python3; do
            if command -v "$c" >/dev/null && "$c" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
                PY="$(command -v "$c")"; break
            fi
        done
        [[ -n "$PY" ]] || { echo "warning: no python3 with CUDA torch found; PyTorch runs will fail (set PYTHON=...)" >&2; PY=/usr/bin/python3; }
    else
        PY=/usr/bin/python3
    fi
fi
SPY=/usr/bin/python3   # for the summary (needs only the standard library)
command -v "$SPY" >/dev/null || SPY="$PY"

# ---- configs -------------------------------------------------------------------------------------
# with_keys SRC DST SECTION=KEY...: copies SRC, inserting each key line right under its [SECTION].
with_keys() {
    local src="$1" dst="$2"; shift 2
    cp "$src" "$dst"
    local kv sec key
    for kv in "$@"; do
        sec="${kv%%=*}"; key="${kv#*=}"
        sed -i "s/^\[$sec\]\$/[$sec]\n$key/" "$dst"
        grep -qx "$key" "$dst" || { echo "could not insert '$key' under [$sec] in $dst" >&2; exit 1; }
    done
}
MLP=examples/fashion_mlp.toml
with_keys "$MLP" "$OUT/mlp-captured.toml" "train=capture = true"
with_keys "$MLP" "$OUT/mlp-resident.toml" "data=resident = true"
with_keys "$MLP" "$OUT/mlp-captured-res.toml" "train=capture = true" "data=resident = true"
# ResNet, char-rnn and GPT: the examples as they are (print_every = 100 = WINDOW); --quick: copies
# with print_every = WINDOW, so that a short run still has several full windows.
RESNET_CFG=examples/fashion_resnet.toml; RNN_CFG=examples/char_rnn.toml; GPT_CFG=examples/gpt_char.toml
if [[ $QUICK -eq 1 ]]; then
    for c in RESNET_CFG RNN_CFG GPT_CFG; do
        dst="$OUT/quick-$(basename "${!c}")"
        sed "s/^print_every *= *[0-9]*/print_every = $WINDOW/" "${!c}" > "$dst"
        grep -qx "print_every = $WINDOW" "$dst" || { echo "could not set print_every in $dst" >&2; exit 1; }
        printf -v "$c" '%s' "$dst"
    done
fi
for c in "$RESNET_CFG" "$RNN_CFG" "$GPT_CFG"; do
    grep -qx "print_every = $WINDOW" "$c" || { echo "$c: print_every is not $WINDOW (the summary's window)" >&2; exit 1; }
done
printf 'resnet\t%s\nchar-rnn\t%s\ngpt\t%s\n' "$WINDOW" "$WINDOW" "$WINDOW" > "$OUT/windows.tsv"

# ---- machine facts -------------------------------------------------------------------------------
FACTS="$OUT/machine.txt"
{
    echo "date_utc: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    # A bundle's revision (scripts/gpu-run.sh sets it): the checkout there is a copy whose git
    # metadata need not match the build that runs.
    if [[ -n "${XYLEM_BUNDLE_REV:-}" ]]; then echo "repo_rev: $XYLEM_BUNDLE_REV (the bundle's)"
    else echo "repo_rev: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (dirty tree)')"; fi
    echo "xylem: $XYLEM, backend $BACKEND"
    echo "xylem_device: $("${PLAIN[@]}" "$XYLEM" backends --plugin-path "$BUILD/plugins" 2>&1 |
        awk -v b="$BACKEND" '$1 == b {on = 1; print $1, $3, $4; next} /^[^ ]/ {on = 0} on && /device/' |
        sed 's/^[[:space:]]*//' | paste -sd ';' | sed 's/;/; /g' || true)"
    if command -v nvidia-smi >/dev/null; then
        echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader 2>&1 | head -1)"
        echo "nvidia_smi_cuda: $(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1)"
    else
        echo "gpu: none (no nvidia-smi)"
    fi
    NVCC="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
    echo "nvcc: $([[ -x "$NVCC" ]] && "$NVCC" --version | sed -n 's/.*release \([^,]*\),.*/\1/p' || echo none)"
    echo "cpu: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1), nproc $(nproc)"
    echo "python: $PY ($("$PY" -V 2>&1))"
    echo "torch: $("$PY" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 | tail -1)"
    echo "torch_device: $TORCH_DEVICE"
    echo "mode: $([[ $QUICK -eq 1 ]] && echo "QUICK (MLP $MLP_STEPS steps, LeNet $LENET_STEPS steps, Theano $THEANO_ITERS iterations, ResNet/char-rnn/GPT $RESNET_STEPS/$RNN_STEPS/$GPT_STEPS steps, attention $ATT_REPS calls): plumbing test, not results" || echo "full epochs (MLP, LeNet); ResNet $RESNET_STEPS, char-rnn $RNN_STEPS, GPT $GPT_STEPS steps; attention medians of $ATT_REPS calls")"
    echo "text: $TEXT_DIR ($(ls "$TEXT_DIR" 2>/dev/null | wc -l) files)"
    echo "loadavg_start: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$FACTS"
cat "$FACTS"
echo

# ---- runs ------------------------------------------------------------------------------------------
RUNS="$OUT/runs.tsv"   # variant rep rc dir
: > "$RUNS"
run() {  # run VARIANT REP COMMAND...: runs it with a timeout, output to runs/VARIANT-rREP/log.txt
    local v="$1" r="$2" d="$OUT/runs/$1-r$2" rc=0 t0=$SECONDS
    shift 2
    mkdir -p "$d"
    "${PLAIN[@]}" timeout "$RUN_TIMEOUT" "$@" > "$d/log.txt" 2>&1 || rc=$?
    printf '%s\t%s\t%s\t%s\n' "$v" "$r" "$rc" "$d" >> "$RUNS"
    if [[ $rc -eq 0 ]]; then printf '  %-17s rep %s  ok (%ss)\n' "$v" "$r" "$((SECONDS - t0))"
    else printf '  %-17s rep %s  FAILED rc %s: %s\n' "$v" "$r" "$rc" "$(grep -m1 -i 'error' "$d/log.txt" | cut -c1-160 || tail -1 "$d/log.txt")"; fi
}
xrun() {  # xrun VARIANT REP CONFIG EXTRA...
    local v="$1" r="$2" cfg="$3"; shift 3
    run "$v" "$r" "$XYLEM" train --config "$cfg" "${XARGS[@]}" "$@" --out "$OUT/runs/$v-r$r"
}
want() { [[ -z "$ONLY" || ",$ONLY," == *",$1,"* ]]; }  # --only's groups
START=$SECONDS
echo "timing: up to $REPS interleaved repetitions (budget ${BUDGET}s)"
LONGEST=0   # the longest repetition so far: the estimate of the next one
for r in $(seq 1 "$REPS"); do
    if ((r > 1 && SECONDS - START + LONGEST > BUDGET)); then
        echo "  budget of ${BUDGET}s: another repetition (~${LONGEST}s) would not end in it after $((r - 1)); stopping"; break
    fi
    REP_START=$SECONDS
    if want mlp; then
        xrun mlp-eager "$r" "$MLP" "${MLP_X[@]}"
        xrun mlp-captured "$r" "$OUT/mlp-captured.toml" "${MLP_X[@]}"
        xrun mlp-resident "$r" "$OUT/mlp-resident.toml" "${MLP_X[@]}"
        xrun mlp-captured-res "$r" "$OUT/mlp-captured-res.toml" "${MLP_X[@]}"
        run torch-mlp "$r" "$PY" bench/torch_mlp.py "${TARGS[@]}" --batch-size 64 --lr 0.01 --momentum 0.9 "${MLP_X[@]}"
    fi
    if want lenet; then
        xrun lenet "$r" examples/fashion_lenet.toml "${LENET_X[@]}"
        run torch-lenet "$r" "$PY" bench/torch_lenet.py "${TARGS[@]}" --batch-size 64 "${LENET_X[@]}"
    fi
    if want theano && [[ -x "$THEANO" ]]; then run theano "$r" "$THEANO" "$BACKEND" "$THEANO_ITERS"; fi
    if want resnet; then
        xrun resnet "$r" "$RESNET_CFG" --max-steps "$RESNET_STEPS"
        run torch-resnet "$r" "$PY" bench/torch_resnet.py "${TARGS[@]}" --max-steps "$RESNET_STEPS" --step-window "$WINDOW"
    fi
    if want char-rnn; then
        xrun char-rnn "$r" "$RNN_CFG" --max-steps "$RNN_STEPS"
        run torch-char-rnn "$r" "$PY" bench/torch_char_rnn.py --device "$TORCH_DEVICE" --text "$TEXT_DIR" --epochs 1 \
            --max-steps "$RNN_STEPS" --step-window "$WINDOW"
    fi
    if want gpt; then
        xrun gpt "$r" "$GPT_CFG" --max-steps "$GPT_STEPS" --epochs 2   # the last --epochs wins: 2 epochs of 250 steps
        run torch-gpt "$r" "$PY" bench/torch_gpt.py --device "$TORCH_DEVICE" --text "$TEXT_DIR" --iters "$GPT_STEPS" \
            --sample-tokens 0
    fi
    if ((r == 1)) && want attention; then
        if [[ -x "$ATTENTION" ]]; then run attention "$r" "$ATTENTION" "$BACKEND" "$ATT_REPS"; fi
        run torch-attention "$r" "$PY" bench/torch_attention.py --device "$TORCH_DEVICE" --reps "$ATT_REPS"
    fi
    if ((SECONDS - REP_START > LONGEST)); then LONGEST=$((SECONDS - REP_START)); fi
done
echo "loadavg_end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$FACTS"
echo "timing took $((SECONDS - START)) s" | tee -a "$FACTS"
echo

# ---- summary ---------------------------------------------------------------------------------------
"$SPY" - "$OUT" "$QUICK" "${ORIG_ARGS[@]}" <<'PYEOF' | tee "$OUT/summary.md"
import csv, json, os, re, statistics, sys
out, quick = sys.argv[1], sys.argv[2] == "1"
facts = dict(l.rstrip("\n").split(": ", 1) for l in open(f"{out}/machine.txt") if ": " in l)
runs = [r for r in csv.reader(open(f"{out}/runs.tsv"), delimiter="\t")]

windows = {}  # variant -> print_every of its config (default 100)
if os.path.exists(f"{out}/windows.tsv"):
    windows = {v: int(w) for v, w in (l.split() for l in open(f"{out}/windows.tsv") if l.strip())}

def xylem_run(d, window=100):
    es = json.load(open(f"{d}/metrics.json"))["epochs"]
    e = es[-1]  # accuracy and losses: the last epoch's; time: every epoch's
    seconds, steps = sum(x["seconds"] for x in es), sum(x["steps"] for x in es)
    rows = list(csv.DictReader(open(f"{d}/log.csv")))
    per = []
    for ep in sorted({r["epoch"] for r in rows}, key=int):  # elapsed_seconds and step restart each epoch
        marks = [(int(r["step"]), float(r["elapsed_seconds"])) for r in rows
                 if r["epoch"] == ep and r.get("kind", "interval") == "interval"]
        prev = (0, 0.0)
        for s, t in marks:
            if s % window == 0:  # full windows only (the last row may close a partial window)
                if s - prev[0] == window: per.append((t - prev[1]) / window)
            prev = (s, t)
    steady = per[1:] if len(per) > 1 else per  # the run's first window holds the first steps
    return {"seconds": seconds, "steps": steps, "avg": seconds / steps,
            "step": statistics.median(steady) if steady else None, "windows": len(steady),
            "acc": e.get("test_accuracy"), "loss": e.get("train_loss"), "val_loss": e.get("val_loss"),
            "tps": e.get("transfers_per_step"), "h2d": e.get("h2d_bytes_per_step")}

def torch_run(d):
    e = [json.loads(l) for l in open(f"{d}/log.txt") if l.startswith('{"epoch"')][-1]
    return {"seconds": e["seconds"], "steps": e["steps"], "avg": e["seconds"] / e["steps"],
            "step": e.get("step_seconds"), "windows": e.get("step_windows"),
            "acc": e["test_accuracy"], "loss": e.get("train_loss")}

def jsonl(d, kind):
    return [r for r in (json.loads(l) for l in open(f"{d}/log.txt") if l.startswith('{"kind"')) if r.get("kind") == kind]

def torch_char_rnn_run(d):
    es = jsonl(d, "epoch")
    e = es[-1]
    seconds, steps = sum(x["seconds"] for x in es), sum(x["steps"] for x in es)
    return {"seconds": seconds, "steps": steps, "avg": seconds / steps, "step": e.get("step_seconds"),
            "windows": e.get("step_windows"), "acc": None, "loss": e.get("train_loss"), "val_loss": e.get("val_loss")}

def torch_gpt_run(d):
    e = jsonl(d, "final")[-1]
    return {"seconds": e["seconds"], "steps": e["iters"], "avg": e["seconds"] / e["iters"],
            "step": e.get("step_seconds"), "windows": e.get("step_windows"), "acc": None,
            "loss": e.get("train_loss"), "val_loss": e.get("val_loss")}

SHAPE = re.compile(r"(B\d+ H\d+ T\d+ D\d+ (?:causal|full))")

def attention_run(d):  # xylem-bench-attention: "NAME  fwd  bwd  fwd-composed  bwd-composed" (ms)
    shapes = {}
    for l in open(f"{d}/log.txt"):
        m = re.match(r"(.+?)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", l)
        if not m or "dropout" in m.group(1) or not SHAPE.search(m.group(1)):
            continue
        f, b, cf, cb = (float(m.group(i)) for i in range(2, 6))
        shapes[SHAPE.search(m.group(1)).group(1)] = {"fwd": f, "bwd": b, "cfwd": cf or None, "cbwd": cb or None}
    if not shapes:
        raise ValueError("no attention rows")
    return {"shapes": shapes}

def torch_attention_run(d):
    shapes = {}
    for r in jsonl(d, "shape"):
        if "fwd_ms" in r:
            shapes[SHAPE.search(r["name"]).group(1)] = {"fwd": r["fwd_ms"], "bwd": r["bwd_ms"], "best": r["best"],
                                                     "default": r.get("default_choice"), "backends": r["backends"]}
    if not shapes:
        raise ValueError("no scaled_dot_product_attention rows")
    env = (jsonl(d, "env") or [{}])[0]
    return {"shapes": shapes, "torch": env.get("torch"), "sdpa": env.get("sdpa")}


def theano_run(d):
    t = open(f"{d}/log.txt").read()
    ratio = re.search(r"loop / GEMM alone:\s*([\d.]+)", t)
    times = re.findall(r":\s+([\d.]+) s \(([\d.]+) GFLOP/s\), transfers in the loop: (\d+)", t)
    return {"ratio": float(ratio.group(1)), "loop_s": float(times[0][0]), "gemm_s": float(times[1][0]),
            "loop_gflops": float(times[0][1]), "gemm_gflops": float(times[1][1]),
            "transfers": sum(int(x[2]) for x in times)}

PARSERS = {"theano": theano_run, "torch-char-rnn": torch_char_rnn_run, "torch-gpt": torch_gpt_run,
           "attention": attention_run, "torch-attention": torch_attention_run}

res, failed = {}, {}
for v, rep, rc, d in runs:
    if rc != "0":
        err = [l.strip() for l in open(f"{d}/log.txt", errors="replace") if "error" in l.lower()]
        failed.setdefault(v, []).append(f"rep {rep}: rc {rc}: {(err or ['see ' + d + '/log.txt'])[0][:200]}")
        continue
    try:
        if v in PARSERS:
            parsed = PARSERS[v](d)
        elif v.startswith("torch"):
            parsed = torch_run(d)
        else:
            parsed = xylem_run(d, windows.get(v, 100))
        res.setdefault(v, []).append(dict(parsed, rep=rep))
    except Exception as ex:
        failed.setdefault(v, []).append(f"rep {rep}: could not parse {d}: {ex}")

def med(v, k):
    xs = [r[k] for r in res.get(v, []) if r.get(k) is not None]
    return statistics.median(xs) if xs else None
ms = lambda s: "n/a" if s is None else f"{1000 * s:.3f} ms"
def ratio(a, b): return None if a is None or b is None else a / b
rx = lambda r: "n/a" if r is None else f"{r:.2f}x"
def verdict(r, bar):
    return "NO DATA" if r is None else ("met" if r <= bar else "NOT met")
nreps = max((len(x) for x in res.values()), default=0)

print("<!-- generated by bench/run_gpu_bench.sh; raw runs in " + out + " -->")
print(f"### GPU benchmarks, {facts.get('date_utc', '?')}")
if quick:
    print("\n**QUICK MODE: short runs to test the plumbing; these are not results.**")
print()
print(f"- GPU: {facts.get('gpu')}; CUDA (driver, nvidia-smi) {facts.get('nvidia_smi_cuda') or 'n/a'}; nvcc {facts.get('nvcc')}")
print(f"- xylem {facts.get('repo_rev')}, backend `{facts.get('xylem', '').split('backend ')[-1]}`: {facts.get('xylem_device')}")
print(f"- PyTorch: {facts.get('torch')} on `{facts.get('torch_device')}` ({facts.get('python')})")
print(f"- CPU: {facts.get('cpu')}; load {facts.get('loadavg_start')} -> {facts.get('loadavg_end')}")
print(f"- Command: `bench/run_gpu_bench.sh " + " ".join(sys.argv[3:]) + "`; medians of " + str(nreps) +
      " interleaved repetitions; " + facts.get("mode", ""))
print()
print("**fashion_mlp training step, batch 64** (steady-state: median over 100-step windows after the first, "
      "clock read after a host sync at each window's end, xylem from log.csv, PyTorch from torch_mlp.py; "
      "epoch average: seconds / steps of the whole timed epoch, first steps, capture and last partial batch included)")
print()
print("| variant | steady-state step | ratio to PyTorch | epoch avg step | ratio | bar | test acc | train loss |")
print("|---|---:|---:|---:|---:|---|---:|---:|")
tstep, tavg = med("torch-mlp", "step"), med("torch-mlp", "avg")
bars = {"mlp-eager": 1.0, "mlp-captured": 0.5}
for v, label in [("mlp-eager", "xylem eager"), ("mlp-captured", "xylem captured"),
                 ("mlp-resident", "xylem eager, resident data"), ("mlp-captured-res", "xylem captured, resident data"),
                 ("torch-mlp", "PyTorch eager")]:
    if v not in res:
        print(f"| {label} | failed | | | | {'<= %.1fx' % bars[v] if v in bars else ''} | | |"); continue
    r1, r2 = ratio(med(v, "step"), tstep), ratio(med(v, "avg"), tavg)
    bar = ""
    if v in bars:
        bar = f"<= {bars[v]:.1f}x: steady {verdict(r1, bars[v])}, epoch avg {verdict(r2, bars[v])}"
    loss = med(v, "loss")
    print(f"| {label} | {ms(med(v, 'step'))} | {rx(r1)} | {ms(med(v, 'avg'))} | {rx(r2)} | {bar} "
          f"| {100 * med(v, 'acc'):.2f}%{' (quick)' if quick else ''} | {'' if loss is None else f'{loss:.4f}'} |")
print()
print("**Transfers per step** (metrics.json, whole epoch; the resident runs' only upload is the epoch's order)")
print()
print("| variant | transfers_per_step | h2d_bytes_per_step |")
print("|---|---:|---:|")
for v, label in [("mlp-eager", "eager"), ("mlp-captured", "captured"), ("mlp-resident", "eager, `[data] resident = true`"),
                 ("mlp-captured-res", "captured, resident")]:
    rs = res.get(v)
    if not rs:
        print(f"| {label} | failed | |"); continue
    t = sorted({round(r['tps'], 4) for r in rs}); h = sorted({round(r['h2d'], 1) for r in rs})
    print(f"| {label} | {' / '.join(map(str, t))} | {' / '.join(f'{x:,.1f}' for x in h)} |")
print()
print("**Theano loop** (`xylem-bench-theano`: y = m @ x + b, 1000x1000 float32, operands resident)")
print()
if "theano" in res:
    r = med("theano", "ratio"); tr = max(x["transfers"] for x in res["theano"])
    print(f"loop / GEMM alone = {r:.3f} (median; bar <= 1.10: {verdict(r, 1.10)}), "
          f"loop {med('theano', 'loop_s'):.3f} s ({med('theano', 'loop_gflops'):.0f} GFLOP/s), "
          f"GEMM alone {med('theano', 'gemm_s'):.3f} s ({med('theano', 'gemm_gflops'):.0f} GFLOP/s), "
          f"transfers in the loops (max over runs) {tr} (bar 0: {'met' if tr == 0 else 'NOT met'})")
else:
    print("failed or not run")
print()
x, t = res.get("lenet"), res.get("torch-lenet")
what = "epoch" if not quick else "run (QUICK: not a full epoch)"
print(f"**fashion_lenet, batch 64, 1 {what}**")
print()
print("| | xylem | PyTorch | ratio | bar |")
print("|---|---:|---:|---:|---|")
xs, ts = med("lenet", "seconds"), med("torch-lenet", "seconds")
r = ratio(xs, ts)
f = lambda s: "failed" if s is None else f"{s:.3f} s"
lsteps = med('lenet', 'steps')
print(f"| time ({'?' if lsteps is None else int(lsteps)} steps) | {f(xs)} | {f(ts)} | {rx(r)} | <= 1.0x: {verdict(r, 1.0)} |")
print(f"| steady-state step | {ms(med('lenet', 'step'))} | {ms(med('torch-lenet', 'step'))} | "
      f"{rx(ratio(med('lenet', 'step'), med('torch-lenet', 'step')))} | |")
xa, ta = med("lenet", "acc"), med("torch-lenet", "acc")
fa = lambda a: "failed" if a is None else f"{100 * a:.2f}%"
print(f"| test accuracy | {fa(xa)} | {fa(ta)} | | >= 83.5% (xylem): "
      f"{'n/a in quick mode' if quick else 'NO DATA' if xa is None else ('met' if xa >= 0.835 else 'NOT met')} |")
print()
print(f"**ResNet-20, char-rnn, GPT: training step, xylem vs PyTorch** (steady-state: median over "
      f"{windows.get('resnet', 100)}-step windows after the run's first, xylem from log.csv, PyTorch from its "
      f"synchronised clock reads (torch_gpt.py: every 10 iterations); run avg: the timed run's seconds / steps, "
      f"first steps included, evaluation excluded)")
print()
print("| model | steps | xylem steady step | PyTorch steady step | ratio | xylem run avg | PyTorch run avg | ratio | bar | loss xylem / PyTorch |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
for v, tv, label, bar, lk in [("resnet", "torch-resnet", "ResNet-20 (fashion_resnet, batch 128)", 1.0, "loss"),
                              ("char-rnn", "torch-char-rnn", "char-rnn (2x LSTM 128, batch 50 x 50)", 0.5, "loss"),
                              ("gpt", "torch-gpt", "GPT (gpt_char, batch 12 x 64)", 1.0, "loss")]:
    xs, ts = med(v, "step"), med(tv, "step")
    xa, ta = med(v, "avg"), med(tv, "avg")
    r1, r2 = ratio(xs, ts), ratio(xa, ta)
    st = med(v, "steps") or med(tv, "steps")
    xl, tl = med(v, lk), med(tv, lk)
    fl = lambda x: "failed" if x is None else f"{x:.4f}"
    if v not in res and tv not in res:
        print(f"| {label} | | failed | failed | | | | | <= {bar:.1f}x: NO DATA | |"); continue
    print(f"| {label} | {'?' if st is None else int(st)} | {ms(xs) if v in res else 'failed'} | "
          f"{ms(ts) if tv in res else 'failed'} | {rx(r1)} | {ms(xa) if v in res else 'failed'} | "
          f"{ms(ta) if tv in res else 'failed'} | {rx(r2)} | <= {bar:.1f}x: steady {verdict(r1, bar)}, run avg "
          f"{verdict(r2, bar)} | train {fl(xl)} / {fl(tl)} |")
print()
print("**Attention, per call** (xylem-bench-attention: fused attention_fwd / attention_bwd, and the composed path; "
      "PyTorch: scaled_dot_product_attention forward with autograd on, and its backward, on the fastest SDPA "
      "backend available for fp32; float32, medians of synced calls, run once)")
print()
xa_, ta_ = res.get("attention", [None])[0], res.get("torch-attention", [None])[0]
if xa_ is None and ta_ is None:
    print("failed or not run")
else:
    print("| shape | xylem fwd | xylem bwd | xylem composed fwd / bwd | PyTorch fwd | PyTorch bwd | PyTorch backend (default pick) | ratio fwd+bwd |")
    print("|---|---:|---:|---:|---:|---:|---|---:|")
    names = list((xa_ or {}).get("shapes", {})) + [n for n in (ta_ or {}).get("shapes", {}) if n not in (xa_ or {}).get("shapes", {})]
    for n in names:
        x = (xa_ or {}).get("shapes", {}).get(n); t = (ta_ or {}).get("shapes", {}).get(n)
        f3 = lambda v: "n/a" if v is None else f"{v:.3f} ms"
        comp = "n/a" if x is None or x["cfwd"] is None else f"{x['cfwd']:.3f} / {x['cbwd']:.3f} ms"
        r = None if x is None or t is None else (x["fwd"] + x["bwd"]) / (t["fwd"] + t["bwd"])
        be = "failed" if t is None else f"{t['best']} ({t['default'] or '?'})"
        print(f"| {n} | {f3(x and x['fwd'])} | {f3(x and x['bwd'])} | {comp} | {f3(t and t['fwd'])} | "
              f"{f3(t and t['bwd'])} | {be} | {rx(r)} |")
    if ta_:
        errs = sorted({f"{b}: {r['error']}" for s_ in ta_["shapes"].values() for b, r in s_["backends"].items() if "error" in r})
        avail = sorted({b for s_ in ta_["shapes"].values() for b, r in s_["backends"].items() if "fwd_ms" in r})
        print()
        print(f"PyTorch {ta_.get('torch')}: SDPA backends that ran: {', '.join(avail) or 'none'}"
              + ("" if ta_.get("sdpa") else " (no scaled_dot_product_attention in this torch: the composed path)")
              + ("; unavailable: " + "; ".join(e[:120] for e in errs) if errs else ""))
print()
print("Notes: xylem's timed epoch starts after its cuBLAS/cuDNN handles exist (created with the device); "
      "PyTorch runs 3 untimed warm-up steps on a copy of the model (cuBLAS/cuDNN initialisation) on cuda "
      "(MLP, LeNet, ResNet; char-rnn and GPT have none: their first window is left out of the steady step only). "
      "PyTorch runs with its default math (cuDNN may use TF32 for convolutions); xylem uses FP32 FMA (no TF32).")
for v in ("torch-mlp", "torch-lenet", "torch-resnet", "torch-char-rnn", "torch-gpt"):
    for _, rep, rc, d in (r for r in runs if r[0] == v and r[2] == "0"):
        head = next((l.strip() for l in open(f"{d}/log.txt") if l.startswith('{"torch"') or l.startswith('{"kind": "data"')), None)
        if head:
            print(f"{v} settings: `{head}`")
        break
print()
print("<details><summary>Raw runs</summary>")
print()
print("| variant | rep | seconds | steps | steady step | epoch avg step | test acc | transfers/step | h2d B/step |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for v in res:
    for r in res[v]:
        if v == "theano":
            print(f"| theano | {r['rep']} | loop {r['loop_s']:.3f} / GEMM {r['gemm_s']:.3f} | | ratio {r['ratio']:.3f} | | | {r['transfers']} | |")
            continue
        if "shapes" in r:
            print(f"| {v} | {r['rep']} | " + "; ".join(f"{n}: {x['fwd']:.3f} + {x['bwd']:.3f} ms" for n, x in r["shapes"].items())
                  + " | | | | | | |")
            continue
        acc = f"{100 * r['acc']:.2f}%" if r.get("acc") is not None else (
            f"val loss {r['val_loss']:.4f}" if r.get("val_loss") is not None else "")
        print(f"| {v} | {r['rep']} | {r['seconds']:.3f} | {r['steps']} | {ms(r['step'])} | {ms(r['avg'])} "
              f"| {acc} | {'' if r.get('tps') is None else r['tps']} | {'' if r.get('h2d') is None else r['h2d']} |")
print()
print("</details>")
if failed:
    print()
    print("**Failed runs**")
    print()
    for v, msgs in failed.items():
        for m in msgs:
            print(f"- {v} {m}")
PYEOF
echo
echo "raw results: $OUT"

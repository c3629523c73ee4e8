#!/usr/bin/env bash
# Runs the CUDA verification on a GPU machine from the bundle scripts/gpu-bundle.sh made (carried
# in .gpu/), without building anything there. Run from the checkout's root on that machine:
#
#   scripts/gpu-run.sh [--check | --bench | --all | --dry-run] [--budget S] [--reps N] [--keep]
#
#   --check    scripts/gpu-check.sh (GPU_CHECK_BUILD=0, GPU_BENCH=0): backends, the whole ctest
#              suite, the CUDA tests verbose, both examples on cuda and native, the Theano loop,
#              the captured MLP (default)
#   --bench    bench/run_gpu_bench.sh alone (the speed bars; summary.md is docs/gpu-results.md's block)
#   --all      gpu-check.sh with the benchmarks in its remaining budget
#   --dry-run  no GPU needed: set up, `xylem backends`, then ctest (cuda tests skip without a device)
#   --budget S seconds this script may take in all (default 560: one device call of 600 s)
#
# Set-up: unpacks .gpu/xylem-gpu-build.tar.xz into a temp dir; makes the absolute path the build
# was configured under (/tmp/xylem-gpu-src, see gpu-bundle.sh) a symlink to a view of this checkout
# whose build-gpu/ is the unpacked build (an existing symlink there is restored on exit); puts
# Fashion-MNIST where the configs and tests read it (/usr/share/datasets/fashion-mnist: kept if
# there, else copied from .gpu/fashion-mnist; if that folder cannot be written, the view gets a
# copy of examples/ whose `dir` is .gpu/fashion-mnist, and the tests that read the fixed path skip);
# LD_LIBRARY_PATH = the bundled libraries + the cuBLAS/cuDNN/NVRTC pip wheels' folders of python3;
# XDG_CACHE_HOME = a fresh temp folder (fused_elementwise's disk cache of NVRTC kernels).
# OpenCL: the bundle has the ICD loader and CLBlast but no driver. NVIDIA's OpenCL driver
# (libnvidia-opencl.so.1: named by /etc/OpenCL/vendors/nvidia.icd if there, else looked for under
# /usr/local/nvidia/lib64, /usr/local/nvidia/lib, /usr/lib/x86_64-linux-gnu, /usr/lib64 and
# ldconfig's cache) is named in a .icd file in a temp folder and OCL_ICD_VENDORS points there; if
# none is found, OCL_ICD_VENDORS is an empty folder and opencl is "unavailable: no OpenCL platform"
# (gpu-check.sh then skips its opencl steps). XYLEM_GPU_OPENCL=system leaves OCL_ICD_VENDORS as it
# is (the machine's own vendor files: a check here with PoCL), =off forces the empty folder.
# Results go to $OUT (the device tool brings back at most 8 files, 2 folders deep), flat:
# summary.md, gpu-run.log, gpu-check.log, gpu-bench-summary.md, bundle-info.txt, results.tar.xz
# (everything: every run's metrics.json/log.csv, the benchmark's raw runs).
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
MODE=check
BUDGET=560
REPS=3
KEEP=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --check) MODE=check; shift ;;
        --bench) MODE=bench; shift ;;
        --all) MODE=all; shift ;;
        --dry-run) MODE=dry-run; shift ;;
        --budget) BUDGET="$2"; shift 2 ;;
        --reps) REPS="$2"; shift 2 ;;
        --keep) KEEP=1; shift ;;
        -h|--help) sed -n '2,34p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
BUNDLE="$REPO/.gpu/xylem-gpu-build.tar.xz"
DATA_BUNDLE="$REPO/.gpu/fashion-mnist"
STD_DATA=/usr/share/datasets/fashion-mnist
DATA_FILES=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz)
RESULTS="${OUT:-$REPO/gpu-out}"
mkdir -p "$RESULTS"
RESULTS="$(cd "$RESULTS" && pwd -P)"
[[ -f "$BUNDLE" ]] || { echo "no $BUNDLE: run scripts/gpu-bundle.sh where it was built and carry .gpu" >&2; exit 1; }

T="$(mktemp -d /tmp/xylem-gpu-run.XXXXXX)"
WORK="$T/work"
mkdir -p "$WORK"
exec > >(tee "$WORK/gpu-run.log") 2>&1
LINK=""; PREV=""
finish() {
    local rc=$?
    if [[ -n "$LINK" ]]; then
        if [[ -n "$PREV" ]]; then ln -sfn "$PREV" "$LINK"; else rm -f "$LINK"; fi
    fi
    if [[ $KEEP -eq 0 ]]; then rm -rf "$T"; else echo "kept $T"; fi
    exit $rc
}
trap finish EXIT
summary() { echo "$*" >> "$WORK/summary.md"; }
echo "# gpu-run.sh --$MODE ($(date -u +%Y-%m-%dT%H:%M:%SZ))" > "$WORK/summary.md"

# ---- unpack, and the build's absolute paths ------------------------------------------------------
t0=$SECONDS
tar -C "$T" -xJf "$BUNDLE" || { echo "could not unpack $BUNDLE" >&2; exit 1; }
echo "unpacked in $((SECONDS - t0)) s into $T"
cat "$T/bundle-info.txt"
cp "$T/bundle-info.txt" "$RESULTS/"
LINK_WANTED="$(sed -n 's/^link: //p' "$T/bundle-info.txt")"
XYLEM_BUNDLE_REV="$(sed -n 's/^repo_rev: //p' "$T/bundle-info.txt")"  # what run_gpu_bench.sh reports
export XYLEM_BUNDLE_REV
VIEW="$T/src"
mkdir -p "$VIEW"
shopt -s dotglob nullglob
for e in "$REPO"/*; do
    case "$(basename "$e")" in build-gpu|.gpu|gpu-out) continue ;; esac
    ln -s "$e" "$VIEW/$(basename "$e")"
done
shopt -u dotglob nullglob
ln -s "$T/build-gpu" "$VIEW/build-gpu"
if [[ -L "$LINK_WANTED" ]]; then PREV="$(readlink "$LINK_WANTED")"
elif [[ -e "$LINK_WANTED" ]]; then echo "$LINK_WANTED exists and is not a symlink: cannot recreate the build's paths" >&2; exit 1; fi
LINK="$LINK_WANTED"
mkdir -p "$(dirname "$LINK")"
ln -sfn "$VIEW" "$LINK"
B="$LINK/build-gpu"
echo "build path: $B -> $T/build-gpu (source $LINK -> view of $REPO)"

# ---- data ------------------------------------------------------------------------------------------
have_all() { local f; for f in "${DATA_FILES[@]}"; do [[ -f "$1/$f" ]] || return 1; done; }
if have_all "$STD_DATA"; then
    DATA_MODE="found at $STD_DATA"
elif mkdir -p "$STD_DATA" 2>/dev/null && cp "$DATA_BUNDLE"/*.gz "$STD_DATA/" 2>/dev/null && have_all "$STD_DATA"; then
    DATA_MODE="copied from .gpu/fashion-mnist to $STD_DATA"
else
    rm "$VIEW/examples"
    cp -r "$REPO/examples" "$VIEW/examples"
    sed -i "s|\"$STD_DATA\"|\"$DATA_BUNDLE\"|" "$VIEW"/examples/*.toml
    DATA_MODE="$STD_DATA not writable: examples/*.toml point at $DATA_BUNDLE (tests with the fixed path skip)"
fi
echo "data: $DATA_MODE"
# The text corpus of char_rnn.toml and gpt_char.toml (the configs read the fixed path).
FORTUNES=/usr/share/games/fortunes
if [[ -d "$FORTUNES" ]] && ls "$FORTUNES" | grep -q .; then
    TEXT_MODE="found at $FORTUNES"
elif [[ -d "$REPO/.gpu/fortunes" ]] && mkdir -p "$FORTUNES" 2>/dev/null && cp "$REPO"/.gpu/fortunes/* "$FORTUNES/"; then
    TEXT_MODE="copied from .gpu/fortunes to $FORTUNES"
else
    TEXT_MODE="no $FORTUNES and none copied: char_rnn and gpt_char fail"
fi
echo "text: $TEXT_MODE"
# Saved ONNX models (check_models.py --save) and the Python package, when the bundle has them.
[[ -d "$REPO/.gpu/onnx" ]] && export GPU_ONNX_DIR="$REPO/.gpu/onnx"
[[ -d "$REPO/.gpu/python/xylem" ]] && export GPU_PYTHONPATH="$REPO/.gpu/python"

# ---- libraries -------------------------------------------------------------------------------------
CUDA_DIRS="$(python3 - <<'PY' 2>/dev/null
import glob, os, site, sys
roots = []
for r in site.getsitepackages() + [site.getusersitepackages()] + sys.path:
    if r and os.path.isdir(os.path.join(r, "nvidia")) and r not in roots:
        roots.append(r)
dirs = []
for r in roots:
    for pat in ("libcublas.so.13", "libcublasLt.so.13", "libcudnn.so.9", "libnvrtc.so.13"):
        for f in sorted(glob.glob(os.path.join(r, "nvidia", "**", pat), recursive=True)):
            d = os.path.dirname(f)
            if d not in dirs:
                dirs.append(d)
print(":".join(dirs))
PY
)"
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do [[ -d "$d" ]] && CUDA_DIRS="${CUDA_DIRS:+$CUDA_DIRS:}$d"; done
export LD_LIBRARY_PATH="$T/sys-lib${CUDA_DIRS:+:$CUDA_DIRS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
missing="$(for f in "$B"/bin/* "$B"/lib/*.so* "$B"/plugins/*.so; do ldd "$f" 2>/dev/null | grep 'not found' | sed "s|^|$(basename "$f"): |"; done | sort -u)"
if [[ -n "$missing" ]]; then echo "missing libraries:"; echo "$missing"; else echo "libraries: all found"; fi
for l in libcublas.so.13 libcudnn.so.9 libnvrtc.so.13; do
    echo "  $l -> $(ldd "$B/plugins/libxylem_cuda.so" 2>/dev/null | awk -v l="$l" '$1 == l {print $3}')"
done

# fused_elementwise's kernels are compiled by NVRTC at run time and cached on disk under
# $XDG_CACHE_HOME/xylem/cuda-fused: a fresh folder, so this run compiles them and gpu-check.sh can
# list what the suite left there.
export XDG_CACHE_HOME="$T/xdg-cache"
mkdir -p "$XDG_CACHE_HOME"

# OpenCL: a vendor folder with NVIDIA's driver, or an empty one (see the top).
OCL_VENDORS="$T/ocl-vendors"
mkdir -p "$OCL_VENDORS"
OCL_LIB=""
OCL_MODE="${XYLEM_GPU_OPENCL:-nvidia}"
if [[ "$OCL_MODE" == system ]]; then
    OCL_DRIVER="system vendor files (XYLEM_GPU_OPENCL=system): OCL_ICD_VENDORS=${OCL_ICD_VENDORS:-unset}, $(ls /etc/OpenCL/vendors 2>/dev/null | paste -sd' ' || true)"
elif [[ "$OCL_MODE" == off ]]; then
    OCL_DRIVER="none used (XYLEM_GPU_OPENCL=off): OCL_ICD_VENDORS is an empty folder"
    export OCL_ICD_VENDORS="$OCL_VENDORS"
else
    ocl_names=(libnvidia-opencl.so.1)
    ocl_icd_note="no /etc/OpenCL/vendors/nvidia.icd"
    if [[ -f /etc/OpenCL/vendors/nvidia.icd ]]; then
        n="$(head -1 /etc/OpenCL/vendors/nvidia.icd | tr -d '[:space:]')"
        ocl_icd_note="/etc/OpenCL/vendors/nvidia.icd names ${n:-nothing}"
        if [[ "$n" == /* && -f "$n" ]]; then OCL_LIB="$n"; elif [[ -n "$n" ]]; then ocl_names=("$n" "${ocl_names[@]}"); fi
    fi
    if [[ -z "$OCL_LIB" ]]; then
        for n in "${ocl_names[@]}"; do
            for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib /lib/x86_64-linux-gnu; do
                [[ -f "$d/$n" ]] && { OCL_LIB="$d/$n"; break 2; }
            done
            OCL_LIB="$(ldconfig -p 2>/dev/null | awk -v n="$n" '$1 == n && $NF ~ /^\// {print $NF; exit}')"
            [[ -n "$OCL_LIB" ]] && break
        done
    fi
    if [[ -n "$OCL_LIB" ]]; then
        echo "$OCL_LIB" > "$OCL_VENDORS/nvidia.icd"
        ocl_missing="$(ldd "$OCL_LIB" 2>/dev/null | grep 'not found' | awk '{print $1}' | paste -sd' ')"
        OCL_DRIVER="$OCL_LIB ($ocl_icd_note; ${ocl_missing:+its missing libraries: $ocl_missing; }named in $OCL_VENDORS/nvidia.icd)"
    else
        OCL_DRIVER="NVIDIA's OpenCL driver not found (libnvidia-opencl.so.1 not in /usr/local/nvidia/lib{64,}, /usr/lib/x86_64-linux-gnu, /usr/lib64, /usr/lib or ldconfig -p; $ocl_icd_note): OCL_ICD_VENDORS is an empty folder, so opencl is unavailable"
    fi
    export OCL_ICD_VENDORS="$OCL_VENDORS"
fi
echo "opencl driver: $OCL_DRIVER"
echo "  libOpenCL.so.1 -> $(ldd "$B/plugins/libxylem_opencl.so" 2>/dev/null | awk '$1 == "libOpenCL.so.1" {print $3}'), libclblast.so.1 -> $(ldd "$B/plugins/libxylem_opencl.so" 2>/dev/null | awk '$1 == "libclblast.so.1" {print $3}')"

{
    summary ""
    summary "- device: $(nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader 2>/dev/null | head -1 || true)"
    summary "- bundle: $(sed -n 's/^repo_rev: //p' "$T/bundle-info.txt"), made $(sed -n 's/^made_utc: //p' "$T/bundle-info.txt"); checkout here: $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo 'no git')"
    summary "- data: $DATA_MODE; text: $TEXT_MODE"
    summary "- onnx models: ${GPU_ONNX_DIR:-none in the bundle}; python package: ${GPU_PYTHONPATH:-none in the bundle}"
    summary "- libraries: ${missing:-all found} (cuBLAS/cuDNN/NVRTC from ${CUDA_DIRS:-nowhere}; NVRTC: $(ldd "$B/plugins/libxylem_cuda.so" 2>/dev/null | awk '$1 == "libnvrtc.so.13" {print $3}'))"
    summary "- opencl driver: $OCL_DRIVER"
}

# ---- the steps -------------------------------------------------------------------------------------
left() { local l=$(( BUDGET - SECONDS )); echo $(( l > 10 ? l : 10 )); }
rc=0
cd "$LINK"
summary "- backends:"
"$B/bin/xylem" backends --plugin-path "$B/plugins" 2>&1 | tee "$WORK/backends.txt" | sed 's/^/    /' >> "$WORK/summary.md"
cat "$WORK/backends.txt"
ocl_block="$(awk '/^[a-z]/ {p = ($1 == "opencl")} p' "$WORK/backends.txt")"
summary "- opencl: $(awk '$1 == "opencl" {print $4}' <<<"$ocl_block" | head -1)${ocl_block:+: }$(sed 1d <<<"$ocl_block" | sed 's/^ *//' | paste -sd'|' | sed 's/|/; /g')"
[[ -n "$ocl_block" ]] || summary "- opencl: not listed by xylem backends"
case "$MODE" in
    dry-run)
        echo "=== ctest (dry run, ${BUDGET}s budget)"
        timeout "$(left)" ctest --test-dir "$B" --output-on-failure -j"$(nproc)" > "$WORK/ctest.log" 2>&1 || rc=$?
        tail -40 "$WORK/ctest.log"
        summary "- ctest: rc $rc: $(grep -E '% tests passed' "$WORK/ctest.log" | tail -1)"
        summary "- skipped: $(grep -c '\*\*\*Skipped' "$WORK/ctest.log") tests ($(grep -E '\*\*\*Skipped' "$WORK/ctest.log" | grep -c -i cuda) of them CUDA)"
        ;;
    check|all)
        bench=0; [[ "$MODE" == all ]] && bench=1
        GPU_CHECK_BUILD=0 GPU_BENCH=$bench GPU_BENCH_REPS="$REPS" GPU_CHECK_LIMIT="$(left)" OUT="$WORK/check" BUILD=build-gpu \
            timeout "$(left)" bash "$LINK/scripts/gpu-check.sh" || rc=$?
        cp "$WORK/check/gpu-check.log" "$RESULTS/" 2>/dev/null
        summary "- gpu-check.sh: rc $rc: $(grep -E '^=== gpu-check:' "$WORK/check/gpu-check.log" | tail -1)"
        grep -E '^=== FAILED' "$WORK/check/gpu-check.log" | sed 's/^/    /' >> "$WORK/summary.md"
        grep -E '% tests passed' "$WORK/check/gpu-check.log" | sed 's/^/    ctest: /' >> "$WORK/summary.md"
        grep -E '^=== (fused kernels|cuda tests in ctest)' "$WORK/check/gpu-check.log" | sed 's/^=== /    /' >> "$WORK/summary.md"
        grep -E '^(ok  |FAIL) .* vs (native|eager)|^per epoch: transfers|^(ok|FAIL): last loss|^(cuda|native) *: fit|^(ok  |FAIL) .* opset 17 ' \
            "$WORK/check/gpu-check.log" | sed 's/^/    /' >> "$WORK/summary.md"
        grep -E '^=== opencl' "$WORK/check/gpu-check.log" | sed 's/^=== /    /' >> "$WORK/summary.md"
        [[ -f "$WORK/check/opencl-conformance.txt" ]] && { summary "    opencl conformance (xylem-conformance, per-op table):"; sed 's/^/        /' "$WORK/check/opencl-conformance.txt" >> "$WORK/summary.md"; }
        for m in "$WORK"/check/*/metrics.json; do
            [[ -f "$m" ]] && summary "    $(basename "$(dirname "$m")"): $(python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))["epochs"]; l=e[-1]; print("%d epochs, test acc %s, train loss %s, %.2f s" % (len(e), l.get("test_accuracy"), l.get("train_loss"), sum(x.get("seconds", 0) for x in e)))' "$m" 2>/dev/null)"
        done
        [[ -f "$WORK/check/gpu-bench/summary.md" ]] && cp "$WORK/check/gpu-bench/summary.md" "$RESULTS/gpu-bench-summary.md"
        ;;
    bench)
        timeout "$(left)" bash "$LINK/bench/run_gpu_bench.sh" --build "$B" --reps "$REPS" \
            --budget "$(( $(left) - 120 ))" --out "$WORK/bench" || rc=$?
        summary "- run_gpu_bench.sh: rc $rc"
        [[ -f "$WORK/bench/summary.md" ]] && cp "$WORK/bench/summary.md" "$RESULTS/gpu-bench-summary.md"
        ;;
esac
summary "- took $SECONDS s of ${BUDGET}s"
[[ -f "$RESULTS/gpu-bench-summary.md" ]] && { summary ""; cat "$RESULTS/gpu-bench-summary.md" >> "$WORK/summary.md"; }
cp "$WORK/summary.md" "$RESULTS/summary.md"
echo; cat "$WORK/summary.md"
# Everything else in one file (checkpoints left out).
tar -C "$WORK" --exclude='*.safetensors' -cJf "$RESULTS/results.tar.xz" . 2>/dev/null
cp "$WORK/gpu-run.log" "$RESULTS/" 2>/dev/null
exit $rc

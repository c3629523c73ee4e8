#!/usr/bin/env bash
# What a machine with an NVIDIA GPU runs to verify the CUDA plugin in one go: the device and
# toolchain versions, a CUDA build, the whole ctest suite (conformance and gradient checks then
# include cuda), both Fashion-MNIST examples trained on cuda, then bench/run_gpu_bench.sh (the
# speed bars; see below). Everything goes to stdout and to ${OUT:-build-gpu}/gpu-check.log; the
# exit status is non-zero if any step failed. To run it on a GPU machine without building there:
# scripts/gpu-bundle.sh here, scripts/gpu-run.sh there (docs/gpu-runbook.md).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build-gpu}"
LOGDIR="${OUT:-$BUILD}"
mkdir -p "$LOGDIR"
exec > >(tee "$LOGDIR/gpu-check.log") 2>&1
failed=()
step() {  # step NAME COMMAND...: runs it, records a failure, goes on
    local name="$1"
    shift
    echo "=== $name"
    if ! "$@"; then failed+=("$name"); echo "=== FAILED: $name"; fi
}

echo "=== device and toolchain"
nvidia-smi || failed+=("nvidia-smi")
nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv || true
/usr/local/cuda/bin/nvcc --version | tail -2
ls /usr/local/cuda/lib*/libcudnn.so.* 2>/dev/null | head -1

# GPU_CHECK_BUILD=0 uses a finished build as it is (scripts/gpu-run.sh: one made elsewhere by
# scripts/gpu-bundle.sh, whose absolute paths it recreates).
if [[ "${GPU_CHECK_BUILD:-1}" != 0 ]]; then
    step "configure" cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DXYLEM_BUILD_CUDA=ON
    step "build" cmake --build "$BUILD" -j"$(nproc)"
fi
step "backends" "$BUILD/bin/xylem" backends --plugin-path "$BUILD/plugins"
# The OpenCL tests are left out here and run in the optional opencl steps at the end, so that the
# machine's OpenCL (NVIDIA's, if gpu-run.sh found its driver) cannot fail this CUDA step.
step "ctest" ctest --test-dir "$BUILD" --output-on-failure --timeout 300 -j4 -E 'Opencl|opencl'
# The CUDA-specific tests alone, verbose: their device listing is the record of what ran where.
# CudaFused: fused_elementwise's generated kernels run on the device (every opcode and input mode
# against float64, captured replay, the disk cache reused by a second process and a damaged file
# rebuilt); FusedConformance (tests/ops) runs it over every backend, cuda included.
step "cuda tests" ctest --test-dir "$BUILD" -R "CudaPlugin|CudaFused|conformance.cuda|/cuda" --output-on-failure \
    --timeout 300 -V
# What NVRTC compiled for fused_elementwise during the suite (one file per program, arch and NVRTC).
fused_cache="${XDG_CACHE_HOME:-$HOME/.cache}/xylem/cuda-fused"
echo "=== fused kernels in the disk cache ($fused_cache): $(ls "$fused_cache" 2>/dev/null | grep -c '\.bin$') files," \
     "$(ls "$fused_cache" 2>/dev/null | sed -n 's/.*-\(sm_[0-9]*\|compute_[0-9]*\)-\(nvrtc[0-9.]*\)\.bin$/\1 \2/p' | sort -u | paste -sd' ')"

for model in fashion_mlp fashion_lenet; do
    step "train $model on cuda" "$BUILD/bin/xylem" train --config "examples/$model.toml" --backend cuda \
        --plugin-path "$BUILD/plugins" --out "$LOGDIR/$model-cuda" --profile
    step "train $model on native (same run, for comparison)" "$BUILD/bin/xylem" train \
        --config "examples/$model.toml" --backend native --plugin-path "$BUILD/plugins" --out "$LOGDIR/$model-native"
done

# The Theano scenario (issue 5 bar: within 10% of the bare GEMM, zero transfers in the loop).
step "theano loop on cuda" "$BUILD/bin/xylem-bench-theano" cuda 500
# Whole-step capture against eager, same config and seed (the MLP step-latency bars).
capture_cfg="$LOGDIR/fashion_mlp_capture.toml"
sed 's/^\[train\]$/[train]\ncapture = true/' examples/fashion_mlp.toml > "$capture_cfg"
step "train fashion_mlp on cuda, captured" "$BUILD/bin/xylem" train --config "$capture_cfg" --backend cuda \
    --plugin-path "$BUILD/plugins" --out "$LOGDIR/fashion_mlp-cuda-capture"

# The speed-bar benchmarks (bench/run_gpu_bench.sh: xylem cuda vs PyTorch CUDA, interleaved, a
# markdown block for docs/gpu-results.md; ~4 minutes with 5 repetitions, estimated). Its budget is
# what is left of GPU_CHECK_LIMIT (default 600 s, one device call) less 90 s for the last
# repetition and the summary; with less than 60 s left it is skipped with the command to run it
# in a call of its own. GPU_BENCH=0 skips it; GPU_BENCH_REPS sets the repetitions (default 5).
if [[ "${GPU_BENCH:-1}" != 0 ]]; then
    budget=$(( ${GPU_CHECK_LIMIT:-600} - SECONDS - 90 ))
    if (( budget >= 60 )); then
        step "gpu benchmarks" bench/run_gpu_bench.sh --build "$BUILD" --reps "${GPU_BENCH_REPS:-5}" \
            --budget "$budget" --out "$LOGDIR/gpu-bench"
    else
        echo "=== gpu benchmarks skipped: ${SECONDS}s used of ${GPU_CHECK_LIMIT:-600}s; run them in a call of" \
             "their own: bench/run_gpu_bench.sh --build $BUILD"
    fi
fi

# Optional, after every CUDA step: the opencl plugin on this machine's OpenCL (on the GPU machine,
# NVIDIA's driver, which scripts/gpu-run.sh names in OCL_ICD_VENDORS). Skipped, with no failure,
# when `xylem backends` says opencl is unavailable (no driver: "no OpenCL platform") or when less
# than 60 s of GPU_CHECK_LIMIT is left; when opencl is available a failed step counts as a failure.
# Lines starting "=== opencl" are what gpu-run.sh copies into summary.md. GPU_OPENCL=0 skips it.
ocl_left() { echo $(( ${GPU_CHECK_LIMIT:-600} - SECONDS - 20 )); }
ocl_step() {  # ocl_step NAME COMMAND...: step with a timeout of what is left; skipped under 60 s
    local name="$1" l
    shift
    l=$(ocl_left)
    if (( l < 60 )); then echo "=== opencl: $name skipped: ${SECONDS}s used of ${GPU_CHECK_LIMIT:-600}s"; return 0; fi
    local t0=$SECONDS r=0
    step "opencl: $name" timeout "$l" "$@" || true
    [[ "${failed[*]:-}" == *"opencl: $name"* ]] && r=1
    echo "=== opencl: $name: $([[ $r == 0 ]] && echo passed || echo FAILED) in $((SECONDS - t0)) s"
}
if [[ "${GPU_OPENCL:-1}" == 0 ]]; then
    echo "=== opencl: skipped (GPU_OPENCL=0)"
else
    ocl_status="$("$BUILD/bin/xylem" backends --plugin-path "$BUILD/plugins" 2>&1 | awk '/^[a-z]/ {p = ($1 == "opencl")} p')"
    echo "$ocl_status"
    if [[ "$(awk '$1 == "opencl" {print $4; exit}' <<<"$ocl_status")" != available ]]; then
        ocl_why="$(grep -m1 'reason:' <<<"$ocl_status" | sed 's/^ *reason: //')"
        echo "=== opencl: unavailable, steps skipped (not a failure): ${ocl_why:-not listed by xylem backends}"
    else
        echo "=== opencl: available: $(grep -m1 'device 0:' <<<"$ocl_status" | sed 's/^ *//' | cut -c1-200)"
        ocl_step "conformance" bash -c '"$1" --plugin "$2" > "$3"; rc=$?; cat "$3"; exit $rc' _ \
            "$BUILD/bin/xylem-conformance" "$BUILD/plugins/libxylem_opencl.so" "$LOGDIR/opencl-conformance.txt"
        ocl_step "agreement tests (test_opencl)" "$BUILD/bin/test_opencl"
        ocl_step "train fashion_mlp 1 epoch" "$BUILD/bin/xylem" train --config examples/fashion_mlp.toml \
            --backend opencl --epochs 1 --plugin-path "$BUILD/plugins" --out "$LOGDIR/fashion_mlp-opencl"
        if [[ -f "$LOGDIR/fashion_mlp-opencl/metrics.json" ]]; then
            echo "=== opencl: fashion_mlp epoch: $(python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))["epochs"][-1]; print("%.2f s, test acc %s, train loss %s" % (e.get("seconds", 0), e.get("test_accuracy"), e.get("train_loss")))' "$LOGDIR/fashion_mlp-opencl/metrics.json" 2>&1)"
        fi
    fi
fi

if ((${#failed[@]})); then
    echo "=== gpu-check: ${#failed[@]} step(s) failed: ${failed[*]}"
    exit 1
fi
echo "=== gpu-check: all steps passed"

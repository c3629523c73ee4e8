#!/usr/bin/env bash
# What a machine with an NVIDIA GPU runs to verify the CUDA plugin in one go: the device and
# toolchain versions, a CUDA build, the whole ctest suite (conformance and gradient checks then
# include cuda), every example trained on cuda and on native and compared, the MLP captured and
# with resident data against eager, the Theano loop, ONNX models on cuda against ONNX Runtime's
# outputs and the Python package on cuda (when scripts/gpu-run.sh provides them: GPU_ONNX_DIR,
# GPU_PYTHONPATH), then bench/run_gpu_bench.sh (the speed bars; see below). Everything goes to stdout and to ${OUT:-build-gpu}/gpu-check.log; the
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
step "ctest" ctest --test-dir "$BUILD" --output-on-failure --timeout 300 -O "$LOGDIR/ctest.log" -j"$(( $(nproc) > 8 ? 8 : $(nproc) ))" \
    -E 'Opencl|opencl' ${GPU_CTEST_ARGS:-}
# (GPU_CTEST_ARGS: more ctest arguments, e.g. "-R CudaPlugin" for a quick test of this script.)
# The record of what ran where: the CUDA tests among those ctest passed (CudaPlugin, CudaFused:
# fused_elementwise's NVRTC kernels against float64, captured replay, the disk cache; the /cuda
# instances of the conformance, gradient and fusion suites; conformance.cuda).
echo "=== cuda tests in ctest: $(grep -E 'Test +#[0-9]+: .*(Cuda|cuda)' "$LOGDIR/gpu-check.log" | grep -c ' Passed') passed," \
     "$(grep -E 'Test +#[0-9]+: .*(Cuda|cuda)' "$LOGDIR/gpu-check.log" | grep -vc ' Passed') not passed"
grep -E 'Test +#[0-9]+: .*(Cuda|cuda)' "$LOGDIR/gpu-check.log" | grep -v ' Passed' | sed 's/^/    /' || true
# gtest's value-parameterised suites (conformance, gradient checks, training agreement) make one
# instance per backend available when the binary starts, but ctest runs the names discovered where
# the build was made: with no GPU there, no /cuda instance is on ctest's list (the first H100 run,
# issue 30, ran only the kit's conformance.cuda and the Cuda* tests). So each test binary runs its
# cuda instances here, by name.
for t in "$BUILD"/bin/test_*; do
    [[ -x "$t" && "$(basename "$t")" != test_opencl ]] || continue
    step "cuda instances of $(basename "$t")" "$t" --gtest_filter='*/cuda:*/cuda/*:*/cuda_*' --gtest_brief=1
done
# What NVRTC compiled for fused_elementwise during the suite (one file per program, arch and NVRTC).
fused_cache="${XDG_CACHE_HOME:-$HOME/.cache}/xylem/cuda-fused"
echo "=== fused kernels in the disk cache ($fused_cache): $(ls "$fused_cache" 2>/dev/null | grep -c '\.bin$') files," \
     "$(ls "$fused_cache" 2>/dev/null | sed -n 's/.*-\(sm_[0-9]*\|compute_[0-9]*\)-\(nvrtc[0-9.]*\)\.bin$/\1 \2/p' | sort -u | paste -sd' ')"

# Every example on cuda against native, same config and seed (scripts/gpu-compare-runs.py: the last
# logged loss within 2% and the test accuracy within a point: two backends' float noise grows over
# training). The longer ones are cut to a few hundred steps; the MLP and LeNet run their configs.
# GPU_PAIRS: which of them (default all five; the MLP's cuda run is the captured runs' reference).
XY=("$BUILD/bin/xylem")
PP=(--plugin-path "$BUILD/plugins")
pair() {  # pair NAME CONFIG FLAGS...: trains on cuda (with --profile) and, meanwhile, on native; compares
    local name="$1" cfg="$2" native_pid
    shift 2
    [[ " ${GPU_PAIRS:-fashion_mlp fashion_lenet fashion_resnet char_rnn gpt_char} " == *" $name "* ]] || return 0
    # The native run uses the CPU while the cuda one uses the GPU: side by side, it costs no time.
    ( failed=()
      step "train $name on native" "${XY[@]}" train --config "$cfg" --backend native "${PP[@]}" \
          --out "$LOGDIR/$name-native" "$@" > "$LOGDIR/$name-native.log" 2>&1
      [[ ${#failed[@]} == 0 ]] ) &
    native_pid=$!
    step "train $name on cuda" "${XY[@]}" train --config "$cfg" --backend cuda "${PP[@]}" --out "$LOGDIR/$name-cuda" --profile "$@"
    wait "$native_pid" || failed+=("train $name on native")
    cat "$LOGDIR/$name-native.log"
    step "compare $name cuda vs native" python3 scripts/gpu-compare-runs.py "$name cuda vs native" \
        "$LOGDIR/$name-cuda" "$LOGDIR/$name-native"
}
pair fashion_mlp examples/fashion_mlp.toml
pair fashion_lenet examples/fashion_lenet.toml
pair fashion_resnet examples/fashion_resnet.toml --epochs 1 --max-steps 150
pair char_rnn examples/char_rnn.toml --epochs 1 --max-steps 300
pair gpt_char examples/gpt_char.toml --epochs 1 --max-steps 250

# Whole-step capture and device-resident data against the eager cuda run, same config and seed:
# the same losses bit for bit, and (resident) no host<->device transfer per step.
for variant in "capture:train=capture = true" "resident:data=resident = true" \
               "capture-resident:train=capture = true:data=resident = true"; do
    vname="${variant%%:*}"
    vcfg="$LOGDIR/fashion_mlp_$vname.toml"
    cp examples/fashion_mlp.toml "$vcfg"
    IFS=: read -r -a kvs <<<"${variant#*:}"
    for kv in "${kvs[@]}"; do sed -i "s/^\[${kv%%=*}\]\$/[${kv%%=*}]\n${kv#*=}/" "$vcfg"; done
    prof=(--profile)
    [[ "$vname" == *capture* ]] && prof=()  # --profile syncs after every op: a captured step refuses it
    step "train fashion_mlp on cuda, $vname" "${XY[@]}" train --config "$vcfg" --backend cuda "${PP[@]}" \
        --out "$LOGDIR/fashion_mlp-cuda-$vname" "${prof[@]}"
    step "compare fashion_mlp $vname vs eager" python3 scripts/gpu-compare-runs.py --same \
        "fashion_mlp $vname vs eager (cuda)" "$LOGDIR/fashion_mlp-cuda-$vname" "$LOGDIR/fashion_mlp-cuda"
done
# Resident data: nothing goes up per step; what transfers remain are the loss read back at each
# log row (print_every) and the epoch's order, at most steps / print_every + 2 per epoch.
step "resident data: no transfer but the log rows' loss reads" python3 -c 'import json, math, sys
e = json.load(open(sys.argv[1]))["epochs"]
every = int(sys.argv[2])
ok = all(x.get("h2d_bytes_per_step", 1) == 0 and
         x["transfers_per_step"] * x["steps"] <= math.ceil(x["steps"] / every) + 2 for x in e)
print("per epoch: transfers", [round(x["transfers_per_step"] * x["steps"]) for x in e], "in", [x["steps"] for x in e],
      "steps; host-to-device bytes per step", [x.get("h2d_bytes_per_step") for x in e])
sys.exit(0 if ok else 1)' "$LOGDIR/fashion_mlp-cuda-resident/metrics.json" \
    "$(sed -n 's/^print_every *= *\([0-9]*\).*/\1/p' examples/fashion_mlp.toml | head -1 | grep . || echo 100)"

# The Theano scenario (issue 5 bar: within 10% of the bare GEMM, zero transfers in the loop).
step "theano loop on cuda" "$BUILD/bin/xylem-bench-theano" cuda 500

# ONNX models through `xylem run --backend cuda` (and native) against ONNX Runtime's outputs, saved
# where the models were exported (scripts/gpu-bundle.sh: tests/onnx/check_models.py --save).
if [[ -n "${GPU_ONNX_DIR:-}" && -d "$GPU_ONNX_DIR" ]]; then
    step "onnx models on cuda and native vs onnxruntime" python3 tests/onnx/check_models.py --xylem "$BUILD/bin/xylem" \
        --work "$LOGDIR/onnx" --saved "$GPU_ONNX_DIR" --opsets 17 --backends cuda,native
else
    echo "=== onnx: skipped (no GPU_ONNX_DIR with saved models)"
fi

# The Python package on cuda (scripts/gpu-bundle.sh builds its extension for the GPU image's python3).
if [[ -n "${GPU_PYTHONPATH:-}" ]]; then
    # The module comes from the build tree, not an installed package: its plugins are named here.
    step "python package on cuda" env PYTHONPATH="$GPU_PYTHONPATH" XYLEM_PLUGIN_PATH="$BUILD/plugins" \
        python3 scripts/gpu-python-check.py \
        --out "$LOGDIR/python"
else
    echo "=== python: skipped (no GPU_PYTHONPATH with the package)"
fi

# The speed-bar benchmarks (bench/run_gpu_bench.sh: xylem cuda vs PyTorch CUDA, interleaved, a
# markdown block for docs/gpu-results.md; ~100 s a repetition, estimated). Its budget is
# what is left of GPU_CHECK_LIMIT (default 600 s, one device call) less 40 s for the
# summary (a repetition starts only if it would end within it); with less than 60 s left it is skipped with the command to run it
# in a call of its own. GPU_BENCH=0 skips it; GPU_BENCH_REPS sets the repetitions (default 3),
# GPU_BENCH_ONLY its groups (run_gpu_bench.sh --only).
if [[ "${GPU_BENCH:-1}" != 0 ]]; then
    budget=$(( ${GPU_CHECK_LIMIT:-600} - SECONDS - 40 ))
    if (( budget >= 60 )); then
        step "gpu benchmarks" bench/run_gpu_bench.sh --build "$BUILD" --reps "${GPU_BENCH_REPS:-3}" \
            --budget "$budget" --out "$LOGDIR/gpu-bench" ${GPU_BENCH_ONLY:+--only "$GPU_BENCH_ONLY"}
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

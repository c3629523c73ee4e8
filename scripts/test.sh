#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# PoCL compiles each OpenCL program on first use (minutes for CLBlast's GEMM on 2 cores) and
# caches the binaries: keep that cache in one stable place so later runs start warm.
export POCL_CACHE_DIR="${POCL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/xylem/pocl}"
mkdir -p "$POCL_CACHE_DIR"
scripts/build.sh
# The ONNX import test (ctest onnx.parity_with_onnxruntime, tests/onnx/check_models.py) compares with
# ONNX Runtime, from PyPI into a venv of its own over Debian's torch; pinned. Made once; where PyPI
# cannot be reached the test is skipped, the rest runs.
if ! build/onnx-venv/bin/python -c 'import onnxruntime' 2>/dev/null; then
  { /usr/bin/python3 -m venv --system-site-packages build/onnx-venv &&
    build/onnx-venv/bin/pip install -q onnxruntime==1.16.3; } ||
    echo "warning: no venv with onnxruntime (build/onnx-venv): the ONNX parity test is skipped" >&2
fi
# The native backend's tests and conformance kit run three times: at the machine's own instruction
# set and capped at AVX2 and at baseline x86-64 (ctest names ending @isa=avx2 / @isa=baseline,
# XYLEM_NATIVE_ISA: tests/CMakeLists.txt), so an AVX-512 machine also tests what AVX2-only and
# older CPUs run, and the reverse as far as the CPU allows (docs/testing.md).
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
# The Python package (python/, docs/python.md): built into venvs by scikit-build-core, its pytest
# suite with Debian's NumPy and with NumPy 2 (scripts/test-python.sh; skipped with a warning where
# PyPI cannot be reached).
scripts/test-python.sh
# The SDK as an outsider uses it: install, build examples/third_party_plugin against it, train.
scripts/test-sdk.sh build

# The same suite again under AddressSanitizer + UndefinedBehaviorSanitizer (LeakSanitizer comes
# with ASan), in its own build folder: Debug (assertions on) at -O1, which keeps the instrumented
# code reasonably fast; CUDA off (nothing here can run it). A UBSan report fails its test
# (-fno-sanitize-recover, CMakeLists.txt; halt_on_error says the same at run time). The OpenCL
# tests run here too: PoCL and LLVM under ASan are slower but report nothing, so there are no
# suppressions; a report in xylem's own code is a bug to fix, never to suppress.
# XYLEM_SANITIZER_TESTS=0 skips this part for a quick local run; CI runs it.
if [ "${XYLEM_SANITIZER_TESTS:-1}" != 0 ]; then
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-O1 -g" -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
    -DXYLEM_SANITIZE="address;undefined" -DXYLEM_BUILD_CUDA=OFF >/dev/null
  cmake --build build-asan -j"$(nproc)"
  # handle_segv/sigbus/abort=0: the loader tests make fixture plugins crash on purpose (in child
  # processes) and check that xylem reports the signal; ASan's own deadly-signal handler would turn
  # that signal into a report and exit status 1. Memory errors are still caught as before, and a
  # crash in xylem's own code still fails its test (by the signal).
  # intercept_tls_get_addr=0: LeakSanitizer's exit-time walk of the dynamic TLS it tracks through
  # __tls_get_addr crashed ("Tracer caught signal 11") on a bogus entry of the OpenCL stack loaded
  # in-process (PoCL), depending on load order (DeviceChoiceCli and two OpenCL training tests, in
  # turn, as this session changed what loads when). Static TLS, stacks and globals are still roots.
  ASAN_OPTIONS="detect_leaks=1:detect_stack_use_after_return=1:strict_string_checks=1:handle_segv=0:handle_sigbus=0:handle_abort=0:intercept_tls_get_addr=0" \
  UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
    ctest --test-dir build-asan --output-on-failure -j"$(nproc)" "$@"
fi

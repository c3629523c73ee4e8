#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/: the IDX reader, the safetensors reader, the TOML config
# loader, and the ONNX importer where libonnx-dev is installed) with clang, ASan and UBSan into build-fuzz/, then runs each for SECONDS (default 60)
# from its checked-in seeds and reports executions, exec/s, corpus size and findings per target.
#   scripts/fuzz.sh [SECONDS] [TARGET...]      TARGET: idx, safetensors, config, onnx (default: all)
# The corpus each run grows is kept in build-fuzz/corpus/<target> (outside git; later runs start
# from it); a crash, leak, hang or sanitizer report is written to build-fuzz/findings/<target>/.
# Reproduce one with: build-fuzz/bin/xylem_fuzz_<target> FILE. Exit status 1 if any run found one.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
[ $# -gt 0 ] && shift
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(idx safetensors config)
  # The importer is built only where ONNX's schema is (onnx/CMakeLists.txt).
  [ -f /usr/include/onnx/onnx-ml.pb.h ] && targets+=(onnx)
fi

scripts/install-deps.sh fuzz  # clang and its libFuzzer runtime (optional in CI, so only here)
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DXYLEM_FUZZ=ON -DXYLEM_BUILD_TESTS=OFF -DXYLEM_BUILD_CONFORMANCE=OFF -DXYLEM_BUILD_CUDA=OFF \
  -DXYLEM_BUILD_OPENCL=OFF >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]/#/xylem_fuzz_}"

# The config seeds are the real example configs plus fuzz/seeds/config (every key set).
mkdir -p build-fuzz/seeds/config
cp examples/*.toml fuzz/seeds/config/*.toml build-fuzz/seeds/config/

found=0
summary=()
for t in "${targets[@]}"; do
  corpus="build-fuzz/corpus/$t" findings="build-fuzz/findings/$t" log="build-fuzz/fuzz-$t.log"
  seeds="fuzz/seeds/$t"
  [ "$t" = config ] && seeds="build-fuzz/seeds/config"
  mkdir -p "$corpus" "$findings"
  echo "fuzzing $t for ${seconds}s (log: $log)"
  # -timeout: an input taking over 10 s is reported as a hang; the first directory is the one
  # libFuzzer adds new inputs to, the seeds are only read.
  set +e
  "build-fuzz/bin/xylem_fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -dict="fuzz/$t.dict" -artifact_prefix="$findings/" -print_final_stats=1 "$corpus" "$seeds" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  # libFuzzer's own count at the end (the folder also keeps inputs it has since reduced).
  size=$(sed -n 's/.*DONE .* corp: \([0-9]*\)\/.*/\1/p' "$log" | tail -1)
  crashes=$(find "$findings" -type f | wc -l)
  [ "$rc" -ne 0 ] && found=1
  status="ok"
  [ -z "$size" ] && size=$(find "$corpus" -type f | wc -l)
  [ "$rc" -ne 0 ] && status="FINDING (exit $rc; see $log and $findings/)"
  summary+=("$(printf '%-12s %12s execs %8s exec/s  corpus %6s  findings %3s  %s' \
    "$t" "${execs:-?}" "${rate:-?}" "$size" "$crashes" "$status")")
done
printf '%s\n' "${summary[@]}"
exit "$found"

#!/usr/bin/env bash
# The third-party plugin path end to end, as an outsider would take it: install the build into a
# temporary prefix, build examples/third_party_plugin against the installed CMake package, check
# that the installed `xylem` lists it, trains fashion_mlp on it, names the missing op for LeNet,
# and that the installed conformance kit passes it.  Usage: scripts/test-sdk.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
work=$(mktemp -d "${TMPDIR:-/tmp}/xylem-sdk.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
fail() { echo "test-sdk: FAIL: $*" >&2; exit 1; }

echo "test-sdk: installing $build into $prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
[[ -x $prefix/bin/xylem ]] || fail "the install has no bin/xylem"
# No environment variable: the installed program must find the installed plugins by itself.
env -u XYLEM_PLUGIN_PATH "$prefix/bin/xylem" backends | grep -Eq '^native +[^ ]+ +[^ ]+ +available' ||
  fail "the installed xylem does not find the installed native plugin"

echo "test-sdk: building examples/third_party_plugin against the installed package"
cmake -S examples/third_party_plugin -B "$work/tiny" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/tiny" -j2 >/dev/null
plugin=$work/tiny/libxylem_tiny.so
exported=$(nm -D --defined-only "$plugin" | awk '$2 == "T" {print $3}')
[[ $exported == xylem_plugin_entry ]] || fail "the plugin exports more than its entry point: $exported"

export XYLEM_PLUGIN_PATH=$work/tiny
"$prefix/bin/xylem" backends >"$work/backends.log"
grep -Eq '^tiny +[^ ]+ +[^ ]+ +available' "$work/backends.log" || fail "xylem backends does not list tiny"
# tiny says its device is a CPU (ABI 1.3 device_kinds): backend = "auto" keeps native over it.
grep -q 'device 0: host CPU (CPU)' "$work/backends.log" || { cat "$work/backends.log"; fail "tiny's device kind is not shown"; }
grep -q '^  passed over tiny: device 0 (host CPU, CPU) ' "$work/backends.log" ||
  { cat "$work/backends.log"; fail "auto does not pass over tiny's CPU"; }

echo "test-sdk: training fashion_mlp on tiny (200 steps)"
"$prefix/bin/xylem" train --config examples/fashion_mlp.toml --backend tiny --epochs 1 --max-steps 200 \
  --out "$work/run" >"$work/train.log" 2>&1 || { cat "$work/train.log"; fail "training on tiny failed"; }
# log.csv: epoch,step,loss,... every print_every (100) steps (kind "interval", the last column) and
# one "epoch" row per epoch; the interval loss must fall, the model must learn.
awk -F, '$NF == "interval" && !n++ {first = $3} $NF == "interval" {last = $3}
         END {printf "test-sdk: loss %.4f -> %.4f\n", first, last; exit !(n >= 2 && last < 0.8 * first)}' \
  "$work/run/log.csv" || fail "the loss did not go down"
grep -E '^test accuracy' "$work/train.log"
awk '/^test accuracy/ {exit !($3 + 0 >= 60)}' "$work/train.log" || fail "test accuracy below 60% after 200 steps"

echo "test-sdk: LeNet on tiny must fail naming the missing op"
if "$prefix/bin/xylem" train --config examples/fashion_lenet.toml --backend tiny --max-steps 1 \
  --out "$work/lenet" >"$work/lenet.log" 2>&1; then
  fail "LeNet trained on tiny, which has no convolution"
fi
grep -q "op conv2d_fwd is not supported by backend 'tiny'" "$work/lenet.log" ||
  { cat "$work/lenet.log"; fail "the error does not name the op and the backend"; }
grep "xylem: error" "$work/lenet.log"

if [[ -x $prefix/bin/xylem-conformance ]]; then
  echo "test-sdk: the installed conformance kit over tiny"
  "$prefix/bin/xylem-conformance" --plugin "$plugin" >"$work/kit.log" 2>&1 || { cat "$work/kit.log"; fail "tiny fails the conformance kit"; }
  grep -E '^(result|summary)' "$work/kit.log" || true
fi
echo "test-sdk: OK"

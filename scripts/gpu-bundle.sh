#!/usr/bin/env bash
# Builds (or reuses) a Release build with CUDA here and packs what a GPU machine needs to run the
# whole verification without building anything (scripts/gpu-run.sh unpacks and runs it there):
#
#   scripts/gpu-bundle.sh [--no-build] [--jobs N]
#
# The build is configured through a fixed path, /tmp/xylem-gpu-src (a symlink to this checkout),
# with its build folder /tmp/xylem-gpu-src/build-gpu (= ./build-gpu), because the test binaries,
# the core library and ctest's files embed absolute paths (XYLEM_SOURCE_DIR, XYLEM_BINARY_DIR, the
# plugin folders, RUNPATH): gpu-run.sh recreates that path on the GPU machine, pointing it at the
# unpacked build beside the checkout there. OpenCL is on: the opencl plugin and tests/opencl's
# test_opencl are bundled with the ICD loader (ocl-icd's libOpenCL.so.1) and libclblast.so.1 from
# this system, which the GPU image lacks; no OpenCL driver (PoCL stays here: gpu-run.sh points the
# loader at NVIDIA's libnvidia-opencl.so.1 there, or at nothing, which makes opencl "unavailable").
#
# Writes into .gpu/ (ignored; carry it with the device tool's `carry: [".gpu"]`):
#   xylem-gpu-build.tar.xz  build-gpu/{bin,lib,plugins,test_plugins*,test_plugin_deps}, ctest's
#                           CTestTestfile.cmake and gtest-discovered test lists, sys-lib/ (the
#                           non-system shared libraries they need: OpenBLAS, gfortran, gtest...,
#                           libOpenCL.so.1 and libclblast.so.1;
#                           not glibc, libstdc++, libgcc_s, nor cuBLAS/cuDNN/NVRTC, which the GPU
#                           image has as pip wheels or in its CUDA toolkit), bundle-info.txt
#   fashion-mnist/          the four .gz files (already compressed; kept out of the xz)
#   fortunes/               the text corpus of examples/char_rnn.toml and gpt_char.toml (Debian's
#                           /usr/share/games/fortunes, 2.8 MiB; gpu-run.sh puts it back there)
#   onnx/                   tests/onnx/check_models.py --save at opset 17 (models exported by this
#                           torch, inputs and ONNX Runtime's outputs; ShuffleNetV2 x0.5 (1.4 MB, the transpose
#                           layer on cuda) in, ResNet-18 and MobileNetV2 left out: the
#                           64 MiB a device call carries):
#                           gpu-check.sh runs them through `xylem run --backend cuda`
#   python/xylem/           the Python package (python/xylem/*.py and its _xylem module) built for
#                           the GPU image's Python (3.12) when XYLEM_GPU_PYTHON names a Python 3.12
#                           with nanobind 2.9.2 (default ~/.cache/xylem/py312/bin/python; skipped,
#                           with a warning, when absent); its RUNPATH is build-gpu/lib
# Environment: XYLEM_GPU_ONNX_PYTHON, a Python with Debian's torch and onnxruntime (default
# build-onnx/onnx-venv/bin/python; the onnx/ folder is skipped, with a warning, when absent).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
LINK=/tmp/xylem-gpu-src
DATA="${XYLEM_GPU_DATA_SRC:-/usr/share/datasets/fashion-mnist}"
JOBS=2
BUILD_IT=1
while [[ $# -gt 0 ]]; do
    case "$1" in
        --no-build) BUILD_IT=0; shift ;;
        --jobs) JOBS="$2"; shift 2 ;;
        -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done

if [[ -L "$LINK" ]]; then ln -sfn "$ROOT" "$LINK"
elif [[ -e "$LINK" ]]; then echo "$LINK exists and is not a symlink: move it away" >&2; exit 1
else ln -s "$ROOT" "$LINK"; fi
B="$LINK/build-gpu"

if [[ $BUILD_IT -eq 1 ]]; then
    if ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$LINK" "$B/CMakeCache.txt" 2>/dev/null ||
       ! grep -qx "XYLEM_BUILD_OPENCL:BOOL=ON" "$B/CMakeCache.txt" 2>/dev/null; then
        gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
        cmake -S "$LINK" -B "$B" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DXYLEM_BUILD_CUDA=ON \
            -DXYLEM_BUILD_OPENCL=ON -DXYLEM_BUILD_TESTS=ON
    fi
    cmake --build "$B" -j"$JOBS"
fi
PY312="${XYLEM_GPU_PYTHON:-$HOME/.cache/xylem/py312/bin/python}"
HAVE_PY=0
if [[ $BUILD_IT -eq 1 && -x "$PY312" ]] && "$PY312" -c 'import sys, nanobind; sys.exit(sys.version_info[:2] != (3, 12))'; then
    # The same build tree with the Python module on (it links the plugins and core already built).
    cmake "$B" -DXYLEM_BUILD_PYTHON=ON -DPython_EXECUTABLE="$PY312" > /dev/null
    cmake --build "$B" -j"$JOBS" --target _xylem && HAVE_PY=1
elif [[ $BUILD_IT -eq 0 ]] && ls "$B"/lib/_xylem.cpython-312-*.so > /dev/null 2>&1; then
    HAVE_PY=1
else
    echo "warning: no Python 3.12 with nanobind at $PY312 (XYLEM_GPU_PYTHON): the bundle has no Python package" >&2
fi
[[ -x "$B/bin/xylem" && -f "$B/plugins/libxylem_cuda.so" ]] || { echo "no CUDA build in $B" >&2; exit 1; }
[[ -f "$B/plugins/libxylem_opencl.so" && -x "$B/bin/test_opencl" ]] || { echo "no OpenCL plugin in $B (XYLEM_BUILD_OPENCL=ON?)" >&2; exit 1; }
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    [[ -f "$DATA/$f.gz" ]] || { echo "missing $DATA/$f.gz (set XYLEM_GPU_DATA_SRC)" >&2; exit 1; }
done

STAGE="$(mktemp -d /tmp/xylem-gpu-stage.XXXXXX)"
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/build-gpu" "$STAGE/sys-lib"
# The build's products and what ctest reads (the gtest lists are written after each link).
(cd "$B" && find share -type f -print
    find bin lib plugins test_plugins* test_plugin_deps -maxdepth 1 \( -type f -o -type l \) \
        \( -perm -u+x -o -name '*.so*' \) -print
    find . \( -name CTestTestfile.cmake -o -name '*_tests.cmake' -o -name '*_include.cmake' \) -print) |
    sed 's|^\./||' | sort > "$STAGE/files.txt"
tar -C "$B" -cf - -T "$STAGE/files.txt" | tar -C "$STAGE/build-gpu" -xf -

# The ldd closure, less the C/C++ runtime (the GPU image has newer ones) and CUDA's own libraries
# (NVRTC too: 105 MiB, and it dlopens its libnvrtc-builtins beside it; the GPU image has both).
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libpthread|libdl\.|librt\.|libresolv|libutil|libstdc\+\+|libgcc_s|libcublas|libcublasLt|libcudnn|libcuda\.|libcudart|libnvrtc)'
while IFS= read -r -d '' f; do ldd "$f" 2>/dev/null || true; done \
        < <(find "$STAGE/build-gpu" -type f \( -name '*.so*' -o -perm -u+x \) -print0) |
    awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
    while read -r name path; do
        [[ "$name" =~ $skip ]] && continue
        [[ "$name" == libxylem* || "$path" == "$STAGE"/* || "$path" == "$B"/* ]] && continue
        [[ -f "$STAGE/sys-lib/$name" ]] || cp -L "$path" "$STAGE/sys-lib/$name"
    done
# The native plugin dlopens OpenBLAS by its SONAME (plugins/native/blas.cpp), so ldd does not list
# it: that library and its own closure (gfortran, quadmath) are added by name.
blas_so="$( (grep -h -o 'XYLEM_OPENBLAS_SONAME=[^ ]*' "$B/build.ninja" "$B"/plugins/native/CMakeFiles/*/flags.make 2>/dev/null || true) |
    sed -n '1{s/.*=//; s/[\\"]//g; p}')"
blas_path="$(ldconfig -p | awk -v n="$blas_so" '$1 == n && $NF ~ /^\// && !p {p = $NF} END {print p}')"
[[ -n "$blas_so" && -n "$blas_path" ]] || { echo "cannot find the OpenBLAS the native plugin loads (${blas_so:-no SONAME})" >&2; exit 1; }
cp -L "$blas_path" "$STAGE/sys-lib/$blas_so"
ldd "$blas_path" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r name path; do
    [[ "$name" =~ $skip ]] || [[ -f "$STAGE/sys-lib/$name" ]] || cp -L "$path" "$STAGE/sys-lib/$name"
done
# The opencl plugin's run-time needs came with the ldd closure; an OpenCL driver must not (the ICD
# loader dlopens one named by a vendor file, so none should be a link-time dependency).
for l in libOpenCL.so.1 libclblast.so.1; do
    [[ -f "$STAGE/sys-lib/$l" ]] || { echo "$l missing from the bundle's sys-lib" >&2; exit 1; }
done
if ls "$STAGE/sys-lib" | grep -q -i pocl; then echo "PoCL got into sys-lib: remove it" >&2; exit 1; fi
{
    echo "link: $LINK"
    echo "build: $B"
    echo "made_utc: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
    echo "repo_rev: $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD -- . ':!build-gpu' || echo ' (dirty tree)')"
    git -C "$ROOT" diff --stat HEAD | sed 's/^/  diff: /'
    echo "build_type: $(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$B/CMakeCache.txt")"
    echo "cuda_codes: $(grep -o -- '--generate-code=[^ ]*' "$B/build.ninja" "$B"/plugins/cuda/CMakeFiles/*/flags.make 2>/dev/null | sed 's/.*code=//' | sort -u | paste -sd' ')"
    echo "nvcc: $(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$B/CMakeCache.txt") ($(sed -n 's/^CMAKE_CUDA_COMPILER_VERSION:[A-Z]*=//p' "$B/CMakeCache.txt"; grep -h -o 'CMAKE_CUDA_COMPILER_VERSION "[^"]*"' "$B"/CMakeFiles/*/CMakeCUDACompiler.cmake 2>/dev/null | head -1))"
    echo "glibc_here: $(ldd --version | head -1)"
    echo "opencl: libOpenCL.so.1 from $(dpkg -S "$(readlink -f /lib/x86_64-linux-gnu/libOpenCL.so.1)" 2>/dev/null | cut -d: -f1 | head -1) $(dpkg-query -W -f='${Version}' ocl-icd-libopencl1 2>/dev/null); libclblast.so.1 -> $(readlink /lib/x86_64-linux-gnu/libclblast.so.1 2>/dev/null); no driver bundled"
    echo "sys_libs: $(cd "$STAGE/sys-lib" && ls | paste -sd' ')"
} > "$STAGE/bundle-info.txt"
cat "$STAGE/bundle-info.txt"

mkdir -p "$ROOT/.gpu/fashion-mnist"
cp "$DATA"/*-ubyte.gz "$ROOT/.gpu/fashion-mnist/"
rm -rf "$ROOT/.gpu/fortunes" "$ROOT/.gpu/onnx" "$ROOT/.gpu/python"
if [[ -d /usr/share/games/fortunes ]]; then
    mkdir -p "$ROOT/.gpu/fortunes"
    find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' -exec cp {} "$ROOT/.gpu/fortunes/" \;
else
    echo "warning: no /usr/share/games/fortunes (apt-get install fortunes): char_rnn and gpt_char cannot run there" >&2
fi
ONNX_PY="${XYLEM_GPU_ONNX_PYTHON:-$ROOT/build-onnx/onnx-venv/bin/python}"
if [[ -x "$ONNX_PY" ]] && "$ONNX_PY" -c 'import onnxruntime, torch' 2>/dev/null; then
    "$ONNX_PY" "$ROOT/tests/onnx/check_models.py" --xylem "$B/bin/xylem" --work "$STAGE/onnx-work" \
        --save "$ROOT/.gpu/onnx" --opsets 17 --models mlp,lenet,mix,lstm,gru,gpt,affine,gelu_tanh,shufflenet \
        2>/dev/null | grep '^saved' || { echo "check_models.py --save failed" >&2; exit 1; }
else
    echo "warning: no Python with torch and onnxruntime at $ONNX_PY (XYLEM_GPU_ONNX_PYTHON): no onnx/ models" >&2
fi
if [[ $HAVE_PY -eq 1 ]]; then
    mkdir -p "$ROOT/.gpu/python/xylem"
    cp "$ROOT"/python/xylem/*.py "$ROOT/python/xylem/py.typed" "$ROOT/.gpu/python/xylem/"
    cp "$B"/lib/_xylem.cpython-312-*.so "$ROOT/.gpu/python/xylem/"
fi
tar -C "$STAGE" -cf - build-gpu sys-lib bundle-info.txt | xz -T"$JOBS" -6 > "$ROOT/.gpu/xylem-gpu-build.tar.xz.tmp"
mv "$ROOT/.gpu/xylem-gpu-build.tar.xz.tmp" "$ROOT/.gpu/xylem-gpu-build.tar.xz"
echo
echo "unpacked: $(du -sh "$STAGE" | cut -f1) ($(wc -l < "$STAGE/files.txt") build files, $(ls "$STAGE/sys-lib" | wc -l) libraries)"
du -sb "$ROOT/.gpu/xylem-gpu-build.tar.xz" "$ROOT/.gpu"/{fashion-mnist,fortunes,onnx,python} 2>/dev/null | awk '{printf "%8.1f MiB  %s\n", $1 / 1048576, $2}'
total=$(du -sb "$ROOT/.gpu" | cut -f1)
tree=$(cd "$ROOT" && git ls-files -co --exclude-standard -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
awk -v a="$total" -v b="$tree" 'BEGIN {printf ".gpu total: %.1f MiB; with the working tree (%.1f MiB) a device call carries %.1f MiB of its 64 MiB\n", a / 1048576, b / 1048576, (a + b) / 1048576}'

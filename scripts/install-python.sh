#!/usr/bin/env bash
# Installs the xylem Python package (python/, docs/python.md) into a venv over Debian's python3,
# which sees Debian's NumPy (and scikit-learn, torch) through --system-site-packages; Debian
# refuses pip into the system Python itself.
#   scripts/install-python.sh [VENV]        default VENV: .venv
# Environment:
#   XYLEM_PY_BUILD_DIR   the CMake build folder (a {wheel_tag} folder in it), kept between runs so a reinstall rebuilds only
#                        what changed (default build/python)
#   XYLEM_PY_DEFINES     extra CMake definitions, e.g. "XYLEM_BUILD_CUDA=OFF XYLEM_BUILD_OPENCL=OFF"
#   XYLEM_PY_EXTRA       extra PyPI packages for the venv, pinned (scripts/test-python.sh adds pytest)
#   XYLEM_PY_SYSTEM_SITE 0: a new venv without Debian's packages (the NumPy 2 test venv: Debian's
#                        scipy and torch are built against NumPy 1)
# Exit status 3: PyPI could not be reached (the caller may skip); any other failure is an error.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv}"
build_dir="${XYLEM_PY_BUILD_DIR:-build/python}/{wheel_tag}"
system_site=--system-site-packages
[ "${XYLEM_PY_SYSTEM_SITE:-1}" = 0 ] && system_site=
# shellcheck disable=SC2086
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv $system_site "$venv"
# The build tools, pinned, in the venv itself: the package then builds without an isolated build
# environment, so the build folder's paths stay the same from one install to the next.
# shellcheck disable=SC2086
if ! "$venv/bin/pip" install -q --disable-pip-version-check scikit-build-core==0.11.6 nanobind==2.9.2 ${XYLEM_PY_EXTRA:-}; then
  echo "install-python.sh: could not install scikit-build-core and nanobind from PyPI into $venv" >&2
  exit 3
fi
settings=(--config-settings=build-dir="$PWD/$build_dir")
for d in ${XYLEM_PY_DEFINES:-}; do settings+=(--config-settings=cmake.define."${d%%=*}"="${d#*=}"); done
"$venv/bin/pip" install -q --disable-pip-version-check --no-build-isolation --no-deps "${settings[@]}" ./python
echo "installed: $("$venv/bin/python" -c 'import xylem; print(xylem.__file__)')"

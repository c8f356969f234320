#!/usr/bin/env bash
# Creates the project's Python venvs with pinned packages, if missing or out of date.
#   install-python.sh          .venv: jax (CPU jaxlib) + numpy, for the pallas backend's tests, and
#                              torch + triton, for the triton backend's (its interpreter runs on
#                              torch CPU tensors; the wheel's ptxas compiles for GPUs ahead of time)
#   install-python.sh --bench  .venv-bench: torch + numpy, for the benchmark baselines
# Debian's python3-venv is installed when `python3 -m venv` is not available.
set -euo pipefail
cd "$(dirname "$0")/.."

JAX_PIN="jax==0.10.2"
TORCH_PIN="torch==2.15.0"
NANOBIND_PIN="nanobind==3.1.0"
SKBUILD_PIN="scikit-build-core==1.1.2"

venv_for() {  # dir, pins...
  local dir=$1; shift
  local stamp="$dir/.parhelion-pins"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$*" ]; then return 0; fi
  if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c "import ensurepip" >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv >/dev/null
  fi
  echo "install-python: $dir <- $*"
  python3 -m venv "$dir"
  "$dir/bin/pip" install -q --upgrade pip
  "$dir/bin/pip" install -q "$@"
  echo "$*" > "$stamp"
}

if [ "${1:-}" = "--bench" ]; then
  venv_for .venv-bench "$TORCH_PIN" numpy matplotlib
else
  # (PyPI's Linux torch is its CUDA build: its CUDA libraries come along, unused here.)
  # scikit-build-core, nanobind and pytest: the Python package's build and tests (python/).
  venv_for .venv "$JAX_PIN" numpy "$TORCH_PIN" "$NANOBIND_PIN" "$SKBUILD_PIN" "pytest==9.2.0"
fi

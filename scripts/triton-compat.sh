#!/usr/bin/env bash
# Compiles every library kernel's Triton modules (tests/test_triton.cpp's cases) for sm_90 and
# sm_100 with another triton release than the project venv's: the GPU machine this backend is
# meant for has triton 3.6, the venv 3.9 (docs/triton.md). Compile mode needs no torch tensors,
# so a stand-in module with torch's dtype names takes torch's place (no CUDA wheel to download).
#   scripts/triton-compat.sh [VERSION] [BUILD]     VERSION defaults to 3.6.0, BUILD to build
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-3.6.0}
build=${2:-build}
[ -x "$build/tests/test_triton" ] || { echo "triton-compat: build $build/tests/test_triton first" >&2; exit 2; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 -m venv "$dir/venv"
"$dir/venv/bin/pip" install -q "triton==$version" numpy
mkdir -p "$dir/stub/torch"
cat > "$dir/stub/torch/__init__.py" <<'PY'
# A stand-in for torch in compile mode: the dtype names the modules and the runner refer to.
float32 = bfloat16 = float16 = float8_e4m3fn = float8_e5m2 = int64 = int32 = int8 = uint8 = bool = object()
PY
echo "triton-compat: triton $("$dir/venv/bin/python" -c 'import triton; print(triton.__version__)')"
PARHELION_PYTHON="$dir/venv/bin/python" PYTHONPATH="$dir/stub" TRITON_CACHE_DIR="$dir/cache" \
  "$build/tests/test_triton" --gtest_filter='Triton.LibraryKernelsCompileForHopperAndBlackwell'

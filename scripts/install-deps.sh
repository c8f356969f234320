#!/usr/bin/env bash
# Installs what building and testing Parhelion needs, from Debian's packages, if missing.
# Idempotent and quiet when everything is there.
#   --bench  also the benchmarks' baselines
#   --lint   also clang-format 14 and clang-tidy 16 (scripts/check-format.sh, check-tidy.sh)
set -euo pipefail
bench=0 lint=0
for arg in "$@"; do
  case "$arg" in
    --bench) bench=1 ;;
    --lint) lint=1 ;;
    *) echo "usage: install-deps.sh [--bench] [--lint]" >&2; exit 2 ;;
  esac
done

need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v make >/dev/null 2>&1 || need+=(make)
[ -f /usr/include/nlohmann/json.hpp ] || need+=(nlohmann-json3-dev)
[ -f /usr/include/gtest/gtest.h ] || need+=(libgtest-dev)
# The benchmarks' baselines (`install-deps.sh --bench`): OpenBLAS and oneDNN.
if [ "$bench" = 1 ]; then
  # OpenBLAS itself, not any cblas.h: the reference BLAS (libblas-dev) installs one too, and then
  # the matmul baselines would silently disappear.
  dpkg -s libopenblas-dev >/dev/null 2>&1 || ls /usr/lib/*/libopenblas.so /usr/lib/*/openblas-*/libopenblas.so \
    >/dev/null 2>&1 || need+=(libopenblas-dev)
  [ -f /usr/include/dnnl.hpp ] || need+=(libdnnl-dev)
  # jemalloc for the torch baselines (eager torch on glibc malloc pays page faults per tensor).
  ls /usr/lib/*/libjemalloc.so.2 >/dev/null 2>&1 || need+=(libjemalloc2)
fi
# clang-tidy 16, not Debian's default 14: clang 14 cannot parse C++23's x[a, b], clang 15 a lambda
# that captures a structured binding.
if [ "$lint" = 1 ]; then
  command -v clang-format-14 >/dev/null 2>&1 || need+=(clang-format-14)
  command -v clang-tidy-16 >/dev/null 2>&1 || need+=(clang-tidy-16)
  # clang's omp.h (g++'s does not parse with clang): the oneDNN baseline includes it.
  dpkg -s libomp-16-dev >/dev/null 2>&1 || need+=(libomp-16-dev)
fi
if [ "${#need[@]}" -gt 0 ]; then
  echo "install-deps: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

#!/usr/bin/env bash
# Installs what building and testing Parhelion needs, from Debian's packages, if missing.
# Idempotent and quiet when everything is there.
set -euo pipefail

need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v make >/dev/null 2>&1 || need+=(make)
[ -f /usr/include/nlohmann/json.hpp ] || need+=(nlohmann-json3-dev)
[ -f /usr/include/gtest/gtest.h ] || need+=(libgtest-dev)
# The benchmarks' baselines (`install-deps.sh --bench`): OpenBLAS and oneDNN.
if [ "${1:-}" = "--bench" ]; then
  # OpenBLAS itself, not any cblas.h: the reference BLAS (libblas-dev) installs one too, and then
  # the matmul baselines would silently disappear.
  dpkg -s libopenblas-dev >/dev/null 2>&1 || ls /usr/lib/*/libopenblas.so /usr/lib/*/openblas-*/libopenblas.so \
    >/dev/null 2>&1 || need+=(libopenblas-dev)
  [ -f /usr/include/dnnl.hpp ] || need+=(libdnnl-dev)
  # jemalloc for the torch baselines (eager torch on glibc malloc pays page faults per tensor).
  ls /usr/lib/*/libjemalloc.so.2 >/dev/null 2>&1 || need+=(libjemalloc2)
fi
if [ "${#need[@]}" -gt 0 ]; then
  echo "install-deps: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

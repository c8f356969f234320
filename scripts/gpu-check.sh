#!/usr/bin/env bash
# The triton backend's GPU check (docs/triton.md): every suite kernel it supports, on an NVIDIA
# GPU, checked against torch eager and timed beside torch eager, torch.compile and the vendor
# library, plus a short autotuning of attention and matmul; a Markdown table in DIR/gpu-check.md.
#   scripts/gpu-check.sh [DIR]                 both steps (build/parhelion and a GPU on one machine)
#   scripts/gpu-check.sh --emit-only DIR       the modules only (no GPU needed; copy DIR over)
#   scripts/gpu-check.sh --run DIR             the run only (a GPU with torch and triton; no Parhelion)
# GPU=h100|h200|b200 picks the modules' target (default h200). The run keeps to about 7 minutes:
# past --budget (420 s) it skips the remaining torch.compile baselines and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=both
case "${1:-}" in
  --emit-only) mode=emit; shift ;;
  --run) mode=run; shift ;;
esac
dir=${1:-gpu-check}
python=${PYTHON:-python3}
[ -x .venv/bin/python ] && [ "$mode" != run ] && python=.venv/bin/python
if [ "$mode" != run ]; then
  [ -x build/parhelion ] || { echo "gpu-check: build Parhelion first (make build, or cmake)"; exit 2; }
  "$python" scripts/gpu_check.py emit "$dir" --gpu "${GPU:-h200}"
fi
if [ "$mode" != emit ]; then
  timeout 480 "$python" scripts/gpu_check.py run "$dir" --budget 420
fi

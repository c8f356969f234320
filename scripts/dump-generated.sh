#!/usr/bin/env bash
# Dumps what the compiler generates for every library kernel (Tile IR, config space, Block IR,
# cpu C++ and the pallas module) into OUTDIR, one file per kernel, shape and stage, so that a
# refactoring can show its generated code unchanged: run it before and after, then `diff -r`.
#   scripts/dump-generated.sh BUILD OUTDIR
# The host's threads and fast memory are pinned so that defaults do not depend on the machine.
set -euo pipefail
build=${1:?usage: dump-generated.sh BUILD OUTDIR}
out=${2:?usage: dump-generated.sh BUILD OUTDIR}
mkdir -p "$out"
export PARHELION_NUM_THREADS=2 PARHELION_FAST_MEMORY=2M
ph="$build/parhelion"
# kernel and shapes: one ragged and one even shape per kernel
shapes() {
  case "$1" in
    add|exp|swiglu|geglu) echo "1000,300 64,4096" ;;
    batch_softmax) echo "3,100,300 4,64,1024" ;;
    attention|causal_attention) echo "2,2,200,64 1,4,512,64" ;;
    matmul|epilogue_subtiling|matmul_layernorm) echo "200,300,100 512,512,256" ;;
    bmm|broadcast_matmul) echo "3,100,70,90 2,128,128,256" ;;
    *) echo "1000,300 256,4096" ;;
  esac
}
for k in $("$ph" list | awk '{print $1}'); do
  for s in $(shapes "$k"); do
    for stage in ir spec block code; do
      "$ph" emit "$k" --shape "$s" --stage "$stage" > "$out/$k.$s.cpu.$stage" 2>&1 || true
    done
    for stage in spec block code; do
      "$ph" emit "$k" --target pallas --tpu v7x --shape "$s" --stage "$stage" > "$out/$k.$s.pallas.$stage" 2>&1 || true
    done
  done
done
echo "wrote $(ls "$out" | wc -l) files to $out"

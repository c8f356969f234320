#!/usr/bin/env bash
# The main job: flash attention written once in C++ (kernels/attention.cpp), tuned and run on
# this CPU against its reference, then emitted for a TPU as a Pallas module that runs here in
# JAX's TPU interpret mode, with both inner-loop strategies; the TPU timing model choosing the
# strategy for the seed's shapes. Then the compiler's stages on a smaller kernel (softmax).
set -euo pipefail
B=${1:-build}
P=$B/parhelion
OUT=$B/demo
mkdir -p "$OUT"
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "attention, written once (kernels/attention.cpp)"
sed -n '/^template <class At, class Stat, class Block>/,/^}/p' kernels/attention.cpp
say "Its config space on this CPU: block sizes, the inner loop's strategy, micro-kernels"
$P emit attention --shape 1,8,2048,64 --stage spec
say "Tuned on this CPU (quick, 20 s budget), checked against the reference, timed"
$P run attention --shape 1,8,2048,64 --tune quick --budget 20
say "The same kernel for a TPU v7x: the pallas config space (only TPU-legal blocks)"
$P emit attention --target pallas --tpu v7x --shape 1,2,512,128 --dtype bf16 --stage spec
say "Emitted as Pallas modules, K/V pipelined (emit_pipeline) and resident"
cfg() { echo "{\"block_sizes\":[128,128],\"inner_loops\":[{\"strategy\":\"$1\",\"buffers\":2}],\"loop_orders\":[[0,1,2]],\"micro_kernels\":[0,0],\"num_threads\":1}"; }
$P emit attention --target pallas --tpu v7x --shape 1,2,512,128 --dtype bf16 --config "$(cfg pipeline)" -o "$OUT/attention_pipeline.py"
$P emit attention --target pallas --tpu v7x --shape 1,2,512,128 --dtype bf16 --config "$(cfg resident)" -o "$OUT/attention_resident.py"
sed -n '/^def _kernel_0/,/^def attention/p' "$OUT/attention_pipeline.py" | head -60
say "Both modules run in JAX's TPU interpret mode (simulated VMEM and DMAs, race detection on)"
.venv/bin/python scripts/pallas_attention_demo.py "$OUT/attention_pipeline.py" "$OUT/attention_resident.py"
say "No TPU needed to choose: the TPU timing model tunes the seed's attention on v7x"
$P tune attention --target pallas --tpu v7x --shape 8,32,8192,256 --dtype bf16 --model
$P tune attention --target pallas --tpu v7x --shape 8,32,32768,256 --dtype bf16 --model
say "The seed's shape on v7x, [8,32,32768,256] bf16: resident K and V keep one buffer each (their block changes per head only) and fit VMEM; at 65536 keys they do not"
res='{"block_sizes":[512,512],"inner_loops":[{"strategy":"resident"}],"loop_orders":[[0,1,2]],"micro_kernels":[0,0],"num_threads":1}'
$P emit attention --target pallas --tpu v7x --shape 1,1,32768,256 --dtype bf16 --config "$res" -o "$OUT/attention_32k_resident.py"
$P emit attention --target pallas --tpu v7x --shape 1,1,65536,256 --dtype bf16 --config "$res" -o "$OUT/attention_64k_resident.py" || true

say "The compiler's stages on softmax (kernels/softmax.cpp), x: f32[8192,2048]"
sed -n '/^ph::Tensor softmax_body/,/^}/p' kernels/softmax.cpp
say "Stage 1: Tile IR"
$P emit softmax --shape 8192,2048 --stage ir
say "Stage 2: Block IR (grid, block specs, scratch, footprint)"
$P emit softmax --shape 8192,2048 --stage block
say "Stage 3: generated C++ (the launch function; the runtime header above it is elided)"
$P emit softmax --shape 8192,2048 --stage code | sed -n '/^\/\/ launch/,$p'
say "Run: checked against the reference, timed (f32, then bf16)"
$P run softmax --shape 8192,2048
$P run softmax --shape 8192,2048 --dtype bf16
say "Generated files"
ls -1 "$OUT"/*.py

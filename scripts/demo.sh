#!/usr/bin/env bash
# The main job: a kernel written in C++ (kernels/softmax.cpp), traced, lowered, compiled just
# in time, checked against its reference and timed; every stage of its code path shown.
set -euo pipefail
B=${1:-build}
P=$B/parhelion
shape=8192,2048
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "The library's kernels"
$P list
say "softmax: the kernel's source (kernels/softmax.cpp)"
sed -n '/^ph::Tensor softmax_body/,/^}/p' kernels/softmax.cpp
say "Stage 1: Tile IR, traced from that C++ for x: f32[$shape]"
$P emit softmax --shape $shape --stage ir
say "Stage 2: the config space and the heuristic default"
$P emit softmax --shape $shape --stage spec
say "Stage 3: Block IR (grid, block specs, scratch, footprint)"
$P emit softmax --shape $shape --stage block
say "Stage 4: generated C++ (the launch function; the runtime header above it is elided)"
$P emit softmax --shape $shape --stage code | sed -n '/^\/\/ launch/,$p'
say "Run: checked against the reference, timed (f32, then bf16)"
$P run softmax --shape $shape
$P run softmax --shape $shape --dtype bf16
say "Another config, pinned from JSON"
$P run softmax --shape $shape --config '{"block_sizes":[2],"loop_orders":[],"num_threads":2}'
say "The same kernel streaming long rows (softmax_two_pass), and layer_norm"
$P run softmax_two_pass --shape 1024,65536
$P run layer_norm --shape $shape
say "A dot kernel (kernels/matmul.cpp): bf16 inputs, f32 accumulation"
$P run matmul --shape 1024,1024,1024 --dtype bf16

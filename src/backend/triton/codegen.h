// The triton backend: Block IR -> one self-contained Python module with a @triton.jit kernel
// per launch and a host function that launches them on torch tensors.
//
// The module defines `KERNEL`, `CONFIG` (the config it was generated for), `GPU` and `ARCH`
// (the target), `SIGNATURE` (the shapes and dtypes it is specialized on), `KERNELS` (per
// launch: the jit function, its argument types for ahead-of-time compiles, its grid and
// num_warps), and a function named after the kernel that takes torch tensors (on a GPU, or on
// the CPU under TRITON_INTERPRET=1) and scalars in the kernel's argument order and returns its
// outputs.
//
// Mapping (see docs/triton.md): a launch's grid -> a 1-D grid of programs, decoded into the
// grid dims in the config's loop order; a tile's block -> `o + tl.arange(0, B)` with a mask
// where its last block is ragged; loads and stores -> pointer arithmetic over each tensor's
// strides (host views address their root tensor); inner loops -> `tl.range` with num_stages;
// dots -> `tl.dot` with f32 accumulation (16-bit operands as stored, f32 ones in IEEE
// precision); Vars -> loop-carried values; padding is replaced by the reduction's identity
// before every reduction and dot contraction over a masked dim.
#pragma once

#include <string>

#include "backend/triton/gpu.h"
#include "lower/block_ir.h"

namespace parhelion::backend::triton {

std::string generate_module(const lower::BlockProgram& program, const GpuModel& gpu);

}  // namespace parhelion::backend::triton

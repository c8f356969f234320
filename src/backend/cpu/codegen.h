// The cpu backend's code generator: Block IR -> one C++ translation unit.
//
// Each launch becomes `extern "C" void ph_launch_N(tensors, scalars, scratch, step_begin,
// step_end)`, which runs grid steps [step_begin, step_end) in the plan's loop order; the
// runtime splits the steps over threads, each calling it once per range of steps it claims.
// Beside it, where the launch has them, `ph_launch_N_partials` (per-thread copies of atomically
// updated tensors) and `ph_launch_N_kept` (clears a thread's kept B panels once per launch call). Block sizes, shapes
// and strides are compile-time constants. Every block value is evaluated by a loop nest over its valid elements only
// (the ragged last block is never read or written past its end); fused pointwise trees are expressions inside their
// consumer's innermost loop, which carries `#pragma omp simd`. The TU is self-contained: the runtime's math header is
// pasted in, so a cached object depends on nothing but its source, compiler and flags.
#pragma once

#include <string>

#include "lower/block_ir.h"

namespace parhelion::backend::cpu {

std::string generate_source(const lower::BlockProgram& program);

// The name of launch `index`'s entry point in the generated object.
std::string launch_symbol(int index);

}  // namespace parhelion::backend::cpu

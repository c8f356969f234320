// The pallas backend: Block IR -> one self-contained Python module that runs the kernel as JAX
// Pallas TPU kernels (one `pl.pallas_call` per launch).
//
// The module defines `CONFIG` (the config it was generated for), `KERNEL`, `SIGNATURE` (the
// shapes and dtypes it is specialized on) and a function named after the kernel that takes
// JAX arrays and scalars in the kernel's argument order, returns its outputs, and passes
// `interpret=` through to Pallas (e.g. `pltpu.InterpretParams()` to run on a CPU).
//
// Mapping (see docs/pallas.md): grid -> the pallas_call grid in the config's loop order (all
// dimensions "parallel": grid steps never share outputs); grid-level blocks -> BlockSpecs with
// index maps; Vars -> VMEM scratch; inner loops -> `pltpu.emit_pipeline` over HBM refs
// (pipeline, `pl.Buffered(buffers)`) or a trace-time loop over a block spanning the whole
// extent (resident); ragged blocks are masked before reductions and dot contractions.
#pragma once

#include <string>

#include "backend/pallas/tpu.h"
#include "lower/block_ir.h"

namespace parhelion::backend::pallas {

std::string generate_module(const lower::BlockProgram& program, const TpuGeneration& tpu);

}  // namespace parhelion::backend::pallas

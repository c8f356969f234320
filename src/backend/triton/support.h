// The constructs the triton backend emits today, and a UserError at the user's line for the
// others (docs/triton.md, "Not supported yet"): never a module that computes something else.
#pragma once

#include "lower/block_ir.h"

namespace parhelion::backend::triton {

// Throws UserError naming the first construct of the program the backend cannot emit.
void check_supported(const lower::BlockProgram& program);

}  // namespace parhelion::backend::triton

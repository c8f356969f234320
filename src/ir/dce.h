// Dead-code elimination on the Tile IR: removes side-effect-free ops whose results are unused.
// Tracing produces some by construction: `out[tile] = v` first evaluates `out[tile]` as a
// load (the subscript does not know it is an assignment target).
#pragma once

#include "ir/ir.h"

namespace parhelion::ir {

void eliminate_dead_code(Function& fn);

}  // namespace parhelion::ir

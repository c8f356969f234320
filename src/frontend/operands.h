// The DSL's operand conversions, shared by the files that trace operations (lang.cpp,
// collectives.cpp): each reports a misuse at the user's line.
#pragma once

#include <vector>

#include "frontend/tracer.h"
#include "ir/ir.h"
#include "parhelion/lang.h"

namespace parhelion::frontend {

// The value of an operand; an integer literal is an i64 constant where `hint` is i64, else f32.
int operand_value(Tracer& T, const Operand& o, DType hint);
// The Tile IR items of a subscript x[idx...] of a host tensor, checked where they can be while tracing.
std::vector<ir::IndexItem> subscript_items(Tracer& T, const Tensor& x, const std::vector<Index>& idx, const Loc& loc);

}  // namespace parhelion::frontend

// The reference interpreter's block views (src/ir/views.h): each result element is read from
// one operand element, computed from the concrete shapes with plain index arithmetic (no shared
// code with the backends' index remaps).
#pragma once

#include <vector>

#include "interp/value.h"
#include "ir/ir.h"

namespace parhelion::interp {

// The value of block-view op `op` of concrete result shape `shape` on operand values `in`.
Value block_view(const ir::Op& op, const std::vector<const Value*>& in, const Shape& shape);

}  // namespace parhelion::interp

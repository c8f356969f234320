// Checks a Tile IR Function: SSA scoping, op placement (host vs device), and every typing rule.
// Throws UserError naming the offending op's source line.
#pragma once

#include "ir/ir.h"

namespace parhelion::ir {

void verify(const Function& fn);

}  // namespace parhelion::ir

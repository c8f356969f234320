// The Tile IR's stable text form: one op per line, nested regions indented; used by
// `parhelion emit --stage ir`, golden tests and error messages.
#pragma once

#include <string>

#include "ir/ir.h"

namespace parhelion::ir {

std::string print(const Function& fn);
std::string type_to_string(const Function& fn, const Type& t);
std::string tile_name(const Function& fn, int tile);

}  // namespace parhelion::ir

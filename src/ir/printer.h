// The Tile IR's stable text form: one op per line, nested regions indented; used by
// `parhelion emit --stage ir`, golden tests and error messages. ir::parse (parser.h) reads it
// back: print(parse(print(fn))) == print(fn).
#pragma once

#include <string>

#include "ir/ir.h"

namespace parhelion::ir {

struct PrintOptions {
  // Appends ` loc("file":line)` to every op, loop and block-size line: the user's source lines,
  // which later stages' diagnostics name. Off by default, so that golden text does not depend
  // on where a kernel's source file lives; the parser accepts both forms.
  bool locations = false;
};

std::string print(const Function& fn, const PrintOptions& options = {});
// The ` loc("file":line)` suffix of PrintOptions::locations ("" for an unknown location).
std::string loc_suffix(const SourceLoc& loc);
std::string type_to_string(const Function& fn, const Type& t);
std::string tile_name(const Function& fn, int tile);

}  // namespace parhelion::ir

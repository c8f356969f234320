// The Tile IR parser: reads the text form that ir::print writes (printer.h) back into a
// Function, so that a pass can be run alone on a hand-trimmed kernel (tests/passes/*.tir,
// `parhelion opt`). For every traced kernel, print(parse(print(fn))) == print(fn).
//
// What the text does not spell out is rebuilt the way the tracer builds it: tensor parameters
// get ids in signature order (then allocations in program order), a tile's source line is its
// loop's, a Var's type is its initial value's. Ids ($bN, tN/gN, vN) must be numbered in the
// order they appear, as the tracer numbers them; value ids (%N) may have gaps (dead code).
// An op's source location is its `loc("file":line)` suffix when the text has one (printed with
// PrintOptions::locations), else its own line in the text, so that diagnostics of later
// stages name a line a reader can find.
//
// Every result type written in the text is checked against the op's typing rule, and the
// result is verified (ir::verify). Mistakes are UserErrors naming `file:line:col` and what was
// expected there, e.g. `foo.tir:7:12: expected ']' after the index of arg0, got ','`.
// `//` starts a comment running to the end of the line.
#pragma once

#include <string>

#include "ir/ir.h"

namespace parhelion::ir {

Function parse(const std::string& text, const std::string& file_name);

}  // namespace parhelion::ir

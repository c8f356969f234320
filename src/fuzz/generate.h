// The random program generator of the differential tester: well-formed kernels drawn from
// the language's grammar, in families that mirror how kernels are written:
//   pointwise     a launch over every dim of a rank-1..3 output; broadcast operands (a row,
//                 a column), the scalar argument, tile indices, fixed and ragged blocks
//   row_reduce    whole rows (or columns) per block: a reduction, then an expression of the
//                 rows and the reduction (softmax-like), or the reduction stored
//   loop_reduce   a reduction over an inner tile loop into Vars (one or two passes), so every
//                 inner-loop strategy is drawn by the config
//   matmul        a K loop of dots into a Var (with or without the accumulator argument,
//                 transposed operands, 16-bit operands, a rounded product), batched or
//                 broadcast, with an epilogue
//   gather        rows selected by an index tensor (a grid over indices, a scalar subscript)
//   indexed       index blocks: gathers (repeated indices), scatters (distinct indices),
//                 masked loads with fills (shifted index blocks), masked stores
//   scans         cumsum, cumprod, a running maximum (associative_scan) and a segmented sum
//                 (a pair scan of values and flags) along whole rows or columns, reversed or not
// Expressions mix every pointwise op kept in a well-conditioned domain (so that a double
// interpreter and f32 code agree to a tolerance), comparisons of exactly-representable
// values under where, and casts through bf16, f16, bool and i64. Shapes are often ragged or 1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/program.h"

namespace parhelion::fuzz {

// The families, by name.
const std::vector<std::string>& families();

// A program of `family` (empty: a random family), fully determined by `seed`.
Program generate(uint64_t seed, const std::string& family = "");

}  // namespace parhelion::fuzz

// The fusion pass's decisions as text, for `parhelion opt --stage fusion` and golden tests:
// per launch, every value with its verdict (see fusion.h for the rules).
//
//   fusion softmax
//   launch 0 over t0
//     %0 load f32[t0,128]: fused
//     %1 amax f32[t0,1]: materialized (reduction)
//     %3 exp f32[t0,128]: materialized
//   launch 0 over t0, t1
//     loop t2
//       %3 dot f32[t0,t1]: in place into v0
//
// Verdicts: `fused` (evaluated inside its consumers' loop nests), `materialized` (computed once
// into scratch; `(reduction)` and `(dot)` are always), `in place into vN` (a dot accumulated
// into its Var's buffer), `scalar` (rank 0: a register, never materialized).
#pragma once

#include <string>

#include "ir/ir.h"

namespace parhelion::lower {

std::string print_fusion(const ir::Function& fn);

}  // namespace parhelion::lower

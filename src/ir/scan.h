// The rules of scans (OpKind::Scan), shared by the tracer (which reports a violation at the
// user's line), the verifier and the Tile IR parser. Each returns an error message, or "" when
// the rule holds.
//
// A Scan over operands x_0..x_{N-1} of one shape S along axis a (backwards if `reverse`) is the
// inclusive scan of the N-tuples (x_0[i], ..., x_{N-1}[i]) along a under the combine function
// c (ir.h's ScanCombine): with the elements of a line along a numbered in scan order
// e_0, e_1, ..., its k-th output is r_k = c(r_{k-1}, e_k), r_0 = e_0. The op's result is
// component `fn` of r, of type {dtype of x_fn, S}. Over a tile dim the line is the block's
// valid elements only (a ragged block's missing elements never enter the combine). The combine
// is assumed associative: backends may combine in another order (pallas: a log-step scan).
#pragma once

#include <string>
#include <vector>

#include "ir/ir.h"

namespace parhelion::ir {

// The result type of component `component` of a scan of `inputs` along `axis` (negative counts
// from the end; normalized): the inputs must share one shape of rank >= 1.
std::string scan_type(const Function& fn, const std::vector<Type>& inputs, int* axis, int component, Type* out);

// A combine function's structure for a scan of operands with these compute dtypes: 2N params
// of rank 0 (a's then b's, each its operand's dtype), ops that are combine ops (below) of rank
// 0 reading only the params and earlier ops, and N results of the operands' dtypes. `defined`
// is the value ids the combine defines (params and ops), for the caller's SSA checks.
std::string combine_rule(const Function& fn, const ScanCombine& c, const std::vector<DType>& dtypes,
                         std::vector<int>* defined = nullptr);

// The ops a combine function may hold: numbers, scalar arguments and pointwise arithmetic
// (no loads, tiles, Vars or loops: it is a function of its arguments).
bool is_combine_op(OpKind k);

}  // namespace parhelion::ir

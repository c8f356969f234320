// The Block IR verifier: the invariants every backend relies on, checked after lowering.
//
// A violation is a compiler bug, not a user error (lowering made an inconsistent decision),
// so it throws InternalError naming the launch and what is wrong. Checked:
//   - the grid walks every tile of its launch once, with steps = ceil(extent / block), and
//     total_steps is their product; threads are within 1..total_steps (or 1);
//   - scratch buffers are 64-byte aligned, in order, disjoint, and within scratch_bytes; the
//     footprint is the scratch;
//   - every reference between decisions points at something of the right kind: a value's
//     materialized scratch, a staged load's block and its staging buffer, a dot's workspace
//     and the Var it accumulates into, an inner loop's staged blocks;
//   - every inner loop with a knob has a strategy the backend offers and, unless pipelined,
//     one buffer; a knob-less loop streams.
#pragma once

#include "lower/block_ir.h"

namespace parhelion::lower {

void verify(const BlockProgram& program);

}  // namespace parhelion::lower

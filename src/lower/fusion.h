// Fusion: which device values become arrays in scratch and which are recomputed inside the
// loop nest of their consumer.
//
// A pointwise value (load, arithmetic, cast, ...) is normally fused: its consumer's loop nest
// evaluates it per element, in registers. It is materialized (computed once into scratch)
// when fusing would be wrong or wasteful:
//   - a Var it reads is assigned, or a tensor it loads is stored to, between its definition
//     and a consumer (fusing would read the new contents);
//   - it is not cheap (beyond loads, constants and index arithmetic) and is consumed by two or
//     more loop nests, broadcast into a larger nest, or used inside a device loop that does not
//     define it (recomputed every trip). A join or a stack of a few operands is no broadcast: each
//     element of an operand is one element of the result (rotary's rotated halves, stored as
//     pairs), unless another of its operands computes the same value.
// Reductions are always materialized (each has its own loop nest); rank-0 values are scalars.
#pragma once

#include <map>
#include <set>
#include <vector>

#include "ir/ir.h"

namespace parhelion::lower {

// A dot that adds into a Var in place (the micro-kernels add into the Var's buffer).
struct AccumulatingDot {
  int var = -1;
  // -1: `acc = acc + dot(a, b)`, computed where the dot is. Else the value `acc * s` of
  // `acc = acc * s + dot(a, b)` (a flash-attention rescale): the Var is rescaled in place and the
  // dot then adds into it, both where the assignment is (the dot's operands are read there).
  int rescaled = -1;
  // The loop tile on whose first trip the dot writes the Var instead of adding into it, the
  // Var's zero init then not stored; -1: it always adds. Where the Var starts as zeros (`full 0`),
  // the next statement after its declaration that touches it is a loop over one tile with a
  // first trip (a static range, or an enclosing tile's block; not a jagged range, which may run
  // none), and in that loop the Var is read and assigned only by this `acc = acc + dot`, its dot
  // one statement of the loop's body (run once a trip). Saves storing the zeros and reading them
  // back: a block of C per grid step (broadcast_matmul's [256, 256] f32 over 4 trips of K).
  int first_trip_writes = -1;
  // Where the first trip writes the Var: a read of the Var (its value id) whose only use is the
  // next statement, a plain store of the whole Var into a block of a tensor of its dtype, that
  // the launch references nowhere else, rows contiguous (indexed by tiles and whole dims only);
  // no statement after the store touches the Var. The Var's value then ends up nowhere but
  // in that block: a backend may have the dot write the block directly and leave the store
  // and the Var's buffer out (Capabilities::dots_write_output_blocks; a matmul's C block, no
  // longer copied out of scratch). -1: none.
  int stored_whole = -1;
};

// Returns the ids of the values of `launch` to materialize; `in_place_dots` (from
// accumulating_dots) are computed into their Var and never materialized.
std::set<int> choose_materialized(const ir::Function& fn, const ir::Op& launch,
                                  const std::map<int, AccumulatingDot>& in_place_dots);

// Dots that accumulate into a Var, `acc = acc + dot(a, b)` or `acc = acc * s + dot(a, b)` (the
// Var read just for this, the dot's result used only there, both in the assignment's block), are
// computed in place. A plain one adds into the Var where the dot is: only when nothing from the
// Var's read or the dot to the assignment reads the Var (directly, or through a value read from
// it earlier and fused into its use) or assigns it. A rescaled one is moved to its assignment
// only when nothing between them writes a Var or a tensor that the dot's operands read, nor
// assigns the Var after its read. Returns dot result -> how (with the loop whose first
// trip writes the Var, where there is one: AccumulatingDot::first_trip_writes).
//
// The same walk finds, where `sums` is given, the sums that accumulate into a Var,
// `acc = acc + sum(x, axis)` (a block result of the Var's type, the sum and the Var's read used
// only there, all in the assignment's block), where nothing from the Var's read or the sum to the
// assignment reads the Var (the sum's operand included) or assigns it: a backend may add the sum
// into the Var where it is, leaving the assignment out (ValuePlan::adds_into). `*sums` gets sum
// result -> the Var.
std::map<int, AccumulatingDot> accumulating_dots(const ir::Function& fn, const ir::Op& launch,
                                                 std::map<int, int>* sums = nullptr);

// A materialized value whose first consumer is a reduction along its last axis is computed
// inside that reduction's loop (one pass: store each element and accumulate it) instead of in
// a loop of its own. Only pure, unmaterialized ops that do not read it may lie between.
struct ReductionProducer {
  int reduction = -1;  // the reduction's result
  int producer = -1;   // the value its loop computes per element
  // What its loop stores: the producer, or a cast of it. When the producer's only other consumer
  // is a materialized cast later in the same block (flash attention's p, cast to bf16 for the
  // second dot), the loop stores the cast and the producer gets no buffer (it is dropped from
  // `materialized`): one pass writes the rounded block (16-bit, or f32 where the dot's kernel
  // widens 16-bit operands: lower.cpp), instead of the producer's block and a pass to read it
  // back. The cast reads nothing but the producer, whose value is the one the loop has.
  int stored = -1;
};
std::vector<ReductionProducer> producers_computed_by_reductions(const ir::Function& fn, const ir::Op& launch,
                                                                std::set<int>* materialized);

}  // namespace parhelion::lower

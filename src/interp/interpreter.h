// The Tile IR reference interpreter: the oracle that does not share the compiler's lowering.
//
// It evaluates a traced kernel (ir::Function) op by op on whole tensors, in double precision,
// with no Block IR, no config and no generated code, following the semantics stated in
// src/ir/ir.h:
// - Host body: an Alloc with a fill (zeros/full) is filled with it; an empty one is filled with
//   NaN, so that reads of memory the kernel never wrote show in floating outputs. A Launch or
//   Loop iterates its tiles row-major (the first tile outermost); each tile's range
//   [begin, end) is cut into blocks of its block size. A block size the kernel fixed
//   (tile(n).block(64), grid loops) is honoured; a tunable one is taken as its whole extent
//   (BlockSize::extent), i.e. one block. The last block may be ragged. A valid kernel's result
//   does not depend on its block sizes; one whose does (a non-associative Var recurrence over an
//   inner loop, say acc = acc * 0.5 + dot(...)) gets the answer for one block per tunable tile.
// - Values are dense blocks of doubles with a concrete shape: a Tile dim is the current block's
//   valid length, min(block, end - offset). f32 values are computed in double (more precise than
//   the f32 the language promises, which is what an oracle wants); i64 values are exact
//   integers (a result beyond 2^53 is refused with a UserError rather than rounded); booleans
//   are 0 and 1.
// - Load widens the storage dtype (f32, bf16, f16, f8e4m3, f8e5m2, i32, i64, i8, u8, bool) to
//   the compute dtype (u8 zero-extends); Store rounds to the storage dtype (bf16/f16/fp8: through
//   f32, round to nearest even, fp8 saturating to its max finite as parhelion/dtype.h states;
//   integers from f32: truncation toward zero; i64 into i32/i8/u8: wraps, as the CPU backend's
//   static_cast does). Cast rounds through the same formats; to an integer truncates toward
//   zero; to bool is `!= 0`. Converting NaN or an out-of-range float to an integer is undefined
//   behaviour in the CPU backend: here it is a UserError.
// - Integer ops (lang.h): floordiv rounds toward -inf, % has the divisor's sign, both give 0
//   for a zero divisor; bitwise ops on exact int64s; << and >> give 0 and the sign fill for a
//   count outside [0, 63]. round is half to even (nearbyint), erf and gelu_exact are std::erf
//   and 0.5 x erfc(-x / sqrt 2); on f32, floordiv is floor(a / b) and % is torch.remainder.
// - Pointwise ops follow torch: numpy broadcasting of size-1 dims, true division (i64 / i64 is
//   f32), pow(a, b) = std::pow (negative bases with integer exponents are defined), maximum,
//   minimum, amax and amin propagate NaN, gelu is the tanh approximation. Reductions cover the
//   block's valid elements only; mean divides by their count.
// - Dot: a [..., M, K] . b [..., K, N] (+ acc), batch dims broadcast, accumulated in double.
// - Scan (src/ir/scan.h): each line along the axis, over the block's valid elements, in scan
//   order (reversed: from the last), left to right through the combine function, whose ops are
//   evaluated by these same rules on rank-0 values.
// - A scalar index (an i64 rank-0 value, e.g. loaded from a tensor) is checked against its
//   dimension: out of range (or never written) is a UserError naming the tensor, the dimension,
//   the value, the size and the op's source line.
// - A gather/scatter index block (an i64 rank-1 value) addresses its tensor dim per element:
//   each element's index is checked like a scalar index. A masked load reads only the elements
//   its mask selects (the others take the fill) and checks only their indices; a masked store
//   writes and checks only its mask's elements.
// - A scatter (a store through an index block) that writes one element twice, within one block
//   or from two grid steps of a launch (which run in parallel on a backend), is a race: a
//   UserError at the store's line. Writes from one grid step in program order are not.
// - Host views (Tensor::view ... narrow) alias their root's memory: a Load through a view reads
//   the root's elements at the view's offset and strides, a Store through one writes them, so
//   a store is visible through the base and through every other view of the same root, in
//   later ops and launches (written arguments are copied once, at their root). An expanded
//   view reads one element at many indices. The verifier refuses what would make the result
//   depend on order: a store through a stride-0 (expanded) dim, and, within one launch, a
//   store through a view whose memory overlaps another view of the same root that the launch
//   also loads or stores (identical views count as one tensor; disjoint narrows are fine).
// Integer outputs have no NaN: an element the kernel never wrote comes back as the dtype's
// minimum (bool: true).
#pragma once

#include <vector>

#include "ir/ir.h"
#include "parhelion/array.h"
#include "parhelion/kernel.h"

namespace parhelion::interp {

struct Interpretation {
  std::vector<Array> outputs;  // fn.outputs, in their storage dtypes (contiguous)
  std::vector<Array> params;   // final state of every tensor argument, by parameter index
};

// Evaluates `fn` on `args` (tensors and scalars in the kernel's argument order; their shapes
// and dtypes must be the traced ones). Arguments are never modified: written arguments are
// copied first. Throws UserError (naming the op's source line) for a data-dependent error.
Interpretation interpret(const ir::Function& fn, const std::vector<Arg>& args);

// Evaluates a kernel traced on a mesh (src/ir/collectives.h states the semantics) on every
// device: `args[d]` are device d's arguments; element d of the result is its outputs and final
// arguments. Throws UserError, at the line, for a race on a copy's regions, a deadlock, a copy
// never waited for, a semaphore not at 0 at the end, a peer outside the mesh, and interpret()'s
// errors (src/interp/mesh_world.h says how).
std::vector<Interpretation> interpret_on_mesh(const ir::Function& fn, const std::vector<std::vector<Arg>>& args);

// About how many element operations interpret(fn, ...) performs (a dot counts M*N*K): callers
// with a time budget (the tuner) use it to decide whether interpreting is affordable.
double work_estimate(const ir::Function& fn);
// The work that is cheap enough to interpret as a check: about a second, a few 100 MB.
inline constexpr double kAffordableWork = 3e7;

}  // namespace parhelion::interp

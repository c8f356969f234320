// Tile IR: the traced kernel, before any configuration is chosen.
//
// Semantics.
// - A Function has host tensors (parameters and allocations), scalar parameters, and a host
//   body: allocations and launches, in program order. Host code is fully specialized: every
//   host tensor has a concrete shape, strides and dtype.
// - A Launch is one top-level tile/grid loop: one kernel launch over a grid whose points are
//   the loop's iterations. Its body is device code. A nested Loop is a device loop.
// - Every loop dimension is a Tile: an iteration range [begin, end) cut into blocks of a
//   block size symbol (BlockSize). A grid dimension is a tile whose block size is fixed at 1.
//   The last block of a range may be partial (ragged): only its valid elements exist; loads,
//   stores and reductions never touch the others.
// - Device values are blocks: a compute dtype (f32, i64, bool) and a shape whose dims are
//   either a Tile (extent = that tile's current block) or a constant. Rank 0 is a scalar.
//   Binary ops broadcast with numpy rules (size-1 constant dims stretch).
// - Vars are loop-carried state: mutable blocks declared in device code, read (VarGet) and
//   written (VarSet) in program order. Backends hold them in fast-memory scratch.
// - Values are SSA: defined once, used only inside the region (or nested regions) that
//   defines them. The verifier checks this and every shape rule.
// - Gathers and scatters: a subscript item may be an i64 block of rank 1 (IndexItem::Gather);
//   element j of the block then addresses position index[j] of that tensor dim, and the item
//   contributes the index block's dim (a tile or a constant) to the load's shape in its place.
//   Two items contributing the same tile dim are refused. Every valid (and, with a mask,
//   active) element's index is checked against its dimension at run time.
// - Masked access: a Load may carry operands {mask, other} (a bool block and a fill, both
//   broadcast to the load's shape): elements where mask is false are not read and take
//   `other`. A Store may carry a second operand, a bool mask: only its true elements are
//   written. Masked-off elements' indices are neither checked nor used.
// - Collectives (src/ir/collectives.h states their rules): a Function with a mesh runs once on
//   every device of the mesh (SPMD), each on its own copy of every tensor (same shapes). Device
//   code reads its own coordinates (DeviceIndex), copies blocks into the same tensor of a peer
//   (CopyStart; CopyWait for its send and its receive), synchronizes (Barrier) and counts
//   (Signal, SemWait). A launch with collectives runs its grid steps in order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parhelion/array.h"
#include "parhelion/dtype.h"
#include "parhelion/mesh.h"

namespace parhelion::ir {

// Where in the user's source an op was written.
struct SourceLoc {
  std::string file;
  int line = 0;
  std::string str() const { return file.empty() ? "<unknown>" : file + ":" + std::to_string(line); }
};

struct Dim {
  enum Kind : uint8_t { Const, Tile } kind = Const;
  int64_t size = 1;  // Const: the size
  int tile = -1;     // Tile: tile id
  static Dim constant(int64_t n) { return {Const, n, -1}; }
  static Dim of_tile(int t) { return {Tile, 0, t}; }
  bool operator==(const Dim& o) const { return kind == o.kind && (kind == Const ? size == o.size : tile == o.tile); }
  bool is_one() const { return kind == Const && size == 1; }
};

struct Type {
  DType dtype = DType::f32;  // a compute dtype: f32, i64 or boolean
  std::vector<Dim> shape;
  int rank() const { return static_cast<int>(shape.size()); }
  bool operator==(const Type& o) const = default;
};

struct BlockSize {
  int id = 0;
  int64_t extent = 1;  // the largest range length of the tiles that use it
  int64_t fixed = 0;   // > 0: fixed by the kernel (tile(n, 64), grid loops); not a config knob
  SourceLoc loc;
};

// A jagged tile's range bound before the trace knows the dims it indexes (ir::bound_jagged_tiles),
// and the extent its block-size symbol plans for (its choices span powers of two up to it).
inline constexpr int64_t kUnboundedRange = int64_t{1} << 62;
inline constexpr int64_t kJaggedBlockExtent = 1024;

struct TileInfo {
  int id = 0;
  int block = 0;  // BlockSize id
  int64_t begin = 0, end = 0;
  bool is_grid = false;  // from ph::grid(): block size 1, used as a scalar index
  SourceLoc loc;
  // A tile over the enclosing tile `parent`'s current block (ph::tile(outer)): its range is
  // [parent's offset, parent's offset + parent's valid length), re-entered for every parent
  // block; begin/end above are the parent's (the bounds of every such range). Its block size
  // is its own symbol, taken as min(its value, the parent's block) when the config binds it.
  int parent = -1;
  // A tile over the number of blocks of block-size symbol `count_block` over `count_extent`
  // indices (ph::tile(ph::num_blocks(bs))): begin is 0 and end is ceil(count_extent / block),
  // which ir::resolve_block_counts sets once the config binds the symbol. Until then end holds
  // count_extent (the count at block 1, an upper bound).
  int count_block = -1;
  int64_t count_extent = 0;
  // A jagged tile: a tile over a range computed in the kernel (ph::range(start, end) of i64
  // scalars, e.g. row offsets loaded from a tensor). Each entry of its loop tiles
  // [value begin_value, value end_value); an empty or reversed range runs no trip. The two
  // values are defined before the loop and are its operands (Op::operands of the Loop, in tile
  // order). begin/end above are then 0 and its bound: the smallest size of the tensor dims it
  // indexes (or a bound the kernel gave), within which every range must lie (checked when the
  // loop is entered: 0 <= start and end <= bound, for a non-empty range).
  int begin_value = -1, end_value = -1;
  bool is_jagged() const { return end_value >= 0; }
  int64_t extent() const { return end - begin; }
};

// A tensor dimension whose size is the number of blocks of a block-size symbol
// (ph::num_blocks(bs)): ceil(extent / block), set by ir::resolve_block_counts; until then the
// dimension's size is `extent` (the count at block 1, an upper bound).
struct BlockCount {
  int dim = 0;
  int block = 0;
  int64_t extent = 0;
  bool operator==(const BlockCount&) const = default;
};

struct TensorInfo {
  std::string name;
  Shape shape, strides;
  DType dtype = DType::f32;
  enum Origin : uint8_t { Param, Alloc, View } origin = Param;
  int param_index = -1;  // Param: index among the kernel's tensor arguments
  // View: a host view (no data of its own) of tensor `base`, made by the host op View that
  // defines it (its kind and arguments are there). `root` is the Param or Alloc whose memory it
  // aliases; `offset` (elements) and `strides` address that memory: element i of the view is
  // root_data[offset + sum(i_d * strides[d])]. A stride 0 is a broadcast (expand) dim: such a
  // view cannot be stored to.
  int base = -1, root = -1;
  int64_t offset = 0;
  std::vector<BlockCount> counts;  // Alloc: dims sized by a number of blocks (ph::num_blocks)
};

// The kinds of host views (OpKind::View; src/ir/views.h has their rules).
enum class ViewKind : uint8_t { reshape, permute, expand, narrow };

struct VarInfo {
  int id = 0;
  Type type;
  SourceLoc loc;
};

enum class OpKind : uint8_t {
  // host
  Alloc,   // tensor; fill = none (empty) or number
  Launch,  // loop_tiles; body
  // device control
  Loop,  // loop_tiles; body; operands: the {begin, end} values of its jagged tiles, in tile order
  // device values
  Load,         // tensor[index] -> block; with operands {mask, other}: masked (see above)
  Store,        // tensor[index] = operands[0]; with operands[1]: a mask; fn: AtomicFn (an update)
  Constant,     // number
  ScalarParam,  // scalar argument `param`
  TileBegin,    // tile -> i64 scalar: first index of the current block
  TileEnd,      // tile -> i64 scalar: one past the last valid index of the current block
  TileIndex,    // tile -> i64 [tile]: the indices of the current block
  Arange,       // i64 [n]: 0..n-1 (shape[0] constant)
  Full,         // block of `number` with the result type
  Unary,        // fn
  Binary,       // fn
  Where,        // operands: cond, a, b
  Cast,         // dtype: rounds through bf16/f16/fp8 (saturating), wraps into i32/i8/u8, converts f32/i64/bool
  Reduce,       // fn, axis, keepdim
  Unsqueeze,    // axis: inserts a size-1 dim
  Dot,          // operands: a [..., M, K], b [..., K, N] (, acc [..., M, N]) -> f32 [..., M, N]
  Transpose,    // swaps the last two dims (a view)
  VarDecl,      // var = operands[0]
  VarGet,       // var
  VarSet,       // var = operands[0]
  // Block views (src/ir/views.h states their rules): index remaps, no arithmetic.
  Reshape,  // result type: tile dims keep their positions, only constant dims split or merge
  Permute,  // perm: result dim i is operand dim perm[i]
  Expand,   // result type: size-1 dims of the operand broadcast (right-aligned; new leading dims)
  Squeeze,  // axis: removes a constant size-1 dim
  Split,    // axis = 0 or 1: that half of a last dim of size 2 (the dim is dropped)
  Join,     // operands a, b (broadcast): a new last dim of size 2, [..., 0] = a, [..., 1] = b
  Stack,    // axis: a new constant dim of size operands.size() at `axis`
  Cat,      // axis: concatenation along a constant dim
  TileId,   // tile -> i64 scalar: the current block's number within its loop (0, 1, ...)
  // host
  View,  // tensor: defines a View TensorInfo of its base (view_kind, dims, axis)
  // device control
  If,  // operands: cond (a bool scalar); body: runs where cond is true (values do not escape it)
  // Scans (src/ir/scan.h states their rules): operands x_0..x_{N-1} (one shape), the inclusive
  // scan along `axis` (backwards if `reverse`) of the N-tuples of their elements under the
  // combine function `combine`; the result is component `fn` of the scanned tuples.
  Scan,
  // Collectives (src/ir/collectives.h): `channel` names the copy or semaphore; a peer is one
  // i64 scalar per mesh axis (its coordinates), the trailing operands.
  DeviceIndex,  // axis -> i64 scalar: this device's coordinate along mesh axis `axis`
  CopyStart,    // tensor[index] on the peer = operands[0]; operands[1..]: the peer
  CopyWait,     // fn = CopyEnd: this device's send of copy `channel` done, or a receive landed
  Barrier,      // dims: the mesh axes of the group (the devices that differ only along them)
  Signal,       // operands: count, the peer: adds count to the peer's semaphore `channel`
  SemWait,      // operands: count: waits until this device's semaphore `channel` >= count, takes it
};

// The end of a copy that CopyWait waits for (Op::fn).
enum class CopyEnd : uint8_t { send, recv };

// One axis of a device mesh: a name and the number of devices along it (parhelion/mesh.h).
using parhelion::MeshAxis;

// Appended (keep the order: the text form names them, config-free but stable):
// bit_not (i64), round (half to even), floor, ceil, trunc (f32 or i64: identity on i64),
// erf, gelu_exact (0.5 x (1 + erf(x / sqrt 2))), exp2 (2^x: flash attention's exponent, with
// the softmax scale times log2(e) folded into q).
enum class UnaryFn : uint8_t {
  neg,
  exp,
  log,
  sqrt,
  rsqrt,
  tanh,
  sigmoid,
  silu,
  gelu,
  abs,
  logical_not,
  bit_not,
  round,
  floor,
  ceil,
  trunc,
  erf,
  gelu_exact,
  exp2
};
enum class BinaryFn : uint8_t {
  add,
  sub,
  mul,
  div,
  maximum,
  minimum,
  pow,
  lt,
  le,
  gt,
  ge,
  eq,
  ne,
  logical_and,
  logical_or,
  // Integer ops (src/ir/integer_ops.h states their definitions):
  floordiv,  // a // b, rounds toward -inf (i64 or f32)
  mod,       // torch.remainder: the sign of the divisor (i64 or f32)
  bit_and,   // i64 or bool
  bit_or,
  bit_xor,
  shl,  // i64 << i64
  shr,  // arithmetic
  // Counter-based random numbers (parhelion/lang.h states the definition): seed x offset (i64)
  // -> f32, the same stream on every backend, config and in the interpreter.
  rand,  // uniform in [0, 1)
  randn  // standard normal (Box-Muller)
};
enum class ReduceFn : uint8_t { sum, max, min, mean };
// The update a Store makes (Op::fn): `none` assigns; the others combine the stored value into
// each element, atomically with respect to every other update of the launch (no order between
// grid steps; a repeated index counts each time). Within a launch, a tensor updated atomically
// is only updated, by one AtomicFn (the verifier's rule; docs/language.md).
enum class AtomicFn : uint8_t { none, add, max, min };

// One index of a load or store. Slice: the block dim of constant size `length` starting at the
// i64 scalar `value` (a Constant for ph::slice(a, b), checked when traced; any scalar for a
// dynamic start, checked at run time: 0 <= start and start + length <= the dim's size).
struct IndexItem {
  enum Kind : uint8_t { Tile, All, Scalar, Gather, Slice } kind = All;
  int tile = -1;       // Tile
  int value = -1;      // Scalar: an i64 rank-0 value id; Gather: an i64 rank-1 value id; Slice: its start
  int64_t length = 0;  // Slice
  bool operator==(const IndexItem&) const = default;
  // Whether the item reads a value (a use of `value`): a scalar, an index block, a slice's start.
  bool has_value() const { return kind == Scalar || kind == Gather || kind == Slice; }
};

struct Op;

// The combine function of a Scan over N operands: a pure function of 2N rank-0 values (the
// running tuple a_0..a_{N-1}, then the next element's b_0..b_{N-1}; each of its operand's
// compute dtype) to N rank-0 values of the same dtypes, given as pointwise ops over value ids
// of its own (in Function::values, defined nowhere else). It is apart from Op::body so that
// passes which walk device code never mistake it for statements of the launch.
struct ScanCombine {
  std::vector<int> params;   // 2N value ids
  std::vector<Op> ops;       // pointwise, rank-0, reading only params and each other
  std::vector<int> results;  // N value ids
};

struct Op {
  explicit Op(OpKind k) : kind(k) {}
  OpKind kind;
  int result = -1;            // value id, or -1
  std::vector<int> operands;  // value ids
  int fn = 0;                 // UnaryFn / BinaryFn / ReduceFn
  int axis = 0;
  bool keepdim = false;
  bool has_fill = false;                   // Alloc: zeros/full
  double number = 0;                       // Constant / Full / Alloc fill
  DType dtype = DType::f32;                // Cast target
  int tensor = -1;                         // Alloc / Load / Store
  std::vector<IndexItem> index;            // Load / Store
  int var = -1;                            // VarDecl / VarGet / VarSet
  int param = -1;                          // ScalarParam
  int tile = -1;                           // TileBegin / TileEnd / TileIndex
  std::vector<int> loop_tiles;             // Launch / Loop
  std::vector<int64_t> dims;               // Permute: perm; View: reshape/expand shape, permute dims
  ViewKind view_kind = ViewKind::reshape;  // View (narrow: axis = dim, dims = {start, length})
  std::vector<Op> body;                    // Launch / Loop
  SourceLoc loc;
  bool reverse = false;              // Scan: from the last element to the first
  std::vector<ScanCombine> combine;  // Scan: exactly one
  int channel = -1;                  // CopyStart / CopyWait: the copy; Signal / SemWait: the semaphore
};

struct Function {
  std::string name;
  std::vector<TensorInfo> tensors;
  int num_tensor_params = 0;
  std::vector<std::string> scalar_params;
  std::vector<BlockSize> block_sizes;
  std::vector<TileInfo> tiles;
  std::vector<VarInfo> vars;
  std::vector<Type> values;  // type of every value id
  std::vector<Op> body;      // host ops
  std::vector<int> outputs;  // tensor ids returned to the caller
  // Collectives: the mesh the kernel runs on (empty: one device), and how many copies (ph::remote_copy)
  // and semaphores (ph::semaphore) it declares; ops name them by number (Op::channel).
  std::vector<MeshAxis> mesh;
  int num_copies = 0;
  int num_semaphores = 0;

  const Type& type_of(int value) const { return values.at(value); }
};

// Whether a load or store has a gather/scatter item; whether it is masked (a load with
// {mask, other}, a store with a mask operand).
bool has_gather(const Op& op);
bool is_masked(const Op& op);
// Whether an op is an atomic update (a Store with an AtomicFn), and which.
bool is_atomic(const Op& op);
AtomicFn atomic_fn(const Op& op);
// The jagged tile a tile's range comes from (itself, or the one it is within), or -1; whether a
// load or store indexes a dim with such a tile (its positions depend on the data).
int jagged_root(const Function& fn, int tile);
bool indexes_jagged_tile(const Function& fn, const Op& op);

std::string_view op_name(const Op& op);
// Binds the block counts (TensorInfo::counts, TileInfo::count_block) to `block_size` (by
// block-size id): sizes, contiguous strides of allocations, and tile ends. Idempotent for one
// binding and re-bindable: the counts keep their extents.
void resolve_block_counts(Function& fn, const std::vector<int64_t>& block_size);
bool has_block_counts(const Function& fn);
// Bounds each jagged tile (TileInfo::is_jagged) by the smallest tensor dim it indexes, itself or
// through a tile within it (which takes its range), and its own block-size symbol's extent by
// that bound. The tracer runs it once the trace is complete.
void bound_jagged_tiles(Function& fn);
std::string_view unary_name(UnaryFn f);
std::string_view binary_name(BinaryFn f);
std::string_view reduce_name(ReduceFn f);
std::string_view atomic_name(AtomicFn f);  // "atomic_add", "atomic_max", "atomic_min" ("store")
bool is_comparison(BinaryFn f);
// Whether a function draws random numbers (ph::rand, ph::randn): its module needs the
// backend's Philox helpers.
bool uses_random(const Function& fn);
// Unary functions that cost an op or two (no transcendental): neg, abs, not, bit_not, the
// roundings. Fusion and the TPU model treat the others as expensive.
bool is_cheap_unary(UnaryFn f);
// Elementwise (or index) ops with no side effects: fusable into a consumer's loop nest.
bool is_pointwise(OpKind k);

// Visits every op in pre-order (a loop before its body).
template <class F>
void walk(const std::vector<Op>& ops, F&& f) {
  for (const Op& op : ops) {
    f(op);
    walk(op.body, f);
  }
}

}  // namespace parhelion::ir

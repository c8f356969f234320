// A random kernel for differential testing: a small syntax tree of the kernel language that
// can be traced (played through the DSL, exactly as a user's C++ kernel runs) and printed as
// the C++ kernel a user would write. Both walk the same tree, so a printed failure is the
// program that failed.
//
// A Program has input tensors (random data; index tensors hold valid indices), output
// tensors allocated in host code, host views of either, and a host body of launches. Device code is statements
// (loops, Var declarations and assignments, stores) over expression trees (loads, numbers,
// the scalar argument, tile indices, pointwise ops, where, casts, reductions, unsqueeze,
// transpose, dot). The generator (generate.h) only builds well-typed programs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "parhelion/array.h"
#include "parhelion/dtype.h"
#include "parhelion/kernel.h"
#include "parhelion/mesh.h"

namespace parhelion::fuzz {

// A host view's op (Tensor::view ... narrow in lang.h), applied to the tensor `view_of`.
struct HostViewOp {
  enum Kind { View, Reshape, Permute, Transpose, Expand, Squeeze, Unsqueeze, Narrow } kind = View;
  std::vector<int64_t> dims;  // View/Reshape/Expand: the shape; Permute: the permutation; Narrow: {start, length}
  int axis = 0;               // Transpose: d0; Squeeze/Unsqueeze/Narrow: the dim
  int axis2 = 0;              // Transpose: d1
};

struct TensorDecl {
  Shape shape;
  DType dtype = DType::f32;
  bool is_output = false;
  int64_t index_bound = 0;  // > 0: an integer input whose values are indices in [0, index_bound)
  // >= 0: not a tensor of its own but a host view of tensor `view_of` (an earlier one, possibly a
  // view itself) made in host code; `shape` is the view's, `dtype` its base's.
  int view_of = -1;
  HostViewOp view;
  bool is_view() const { return view_of >= 0; }
  // >= 0: an output whose dim 0 is ph::num_blocks(block_refs[count_ref]) (shape[0] holds that
  // block size's extent; the count is the config's).
  int count_ref = -1;
  // Not empty: an integer input holding exactly these values (the row offsets of a jagged
  // tensor: sorted, empty groups included).
  std::vector<int64_t> values;
  // An output allocated with ph::full(shape, fill) rather than ph::empty (what atomic updates
  // combine into).
  bool filled = false;
  double fill = 0;
};

// One dimension of a tile loop: [0, extent) in blocks that the config chooses, or a fixed
// block (`fixed_block` > 0), or a grid dimension (single indices).
struct LoopDim {
  int64_t extent = 1;
  int64_t fixed_block = 0;
  int64_t begin = 0;   // a sub-range [begin, extent): ph::tile(ph::range(begin, extent))
  int parent = -1;     // >= 0: ph::tile(t<parent>), over that tile's current block
  int block_ref = -1;  // >= 0: blocks of the registered block size block_refs[block_ref]
  int count_ref = -1;  // >= 0: ph::tile(ph::num_blocks(block_refs[count_ref]))
  // >= 0: a jagged tile, ph::tile(ph::jagged(tensor jagged_offsets, t<jagged_group>.begin())): the
  // rows of the group the enclosing tile's block starts at
  int jagged_offsets = -1, jagged_group = -1;
};

// A subscript item: a loop tile (`tile` is the program's tile number), `ph::all`, or an
// integer expression: an i64 scalar, or an i64 block of rank 1 (a gather/scatter index block).
// A slice: ph::slice(begin, begin + length), or with `expr` >= 0 ph::slice(expr, ph::length(length)).
// A Scalar with `expr` < 0 is the integer `begin`.
struct Subscript {
  enum Kind { Tile, All, Scalar, Slice } kind = All;
  int tile = -1;
  int expr = -1;
  int64_t begin = 0, length = 0;  // Slice
  int block_ref = -1;             // Tile, in a Full's shape: written as bs<block_ref> (see Expr::Full)
};

struct Expr {
  enum Kind {
    Load,       // tensor[index]
    Number,     // a float literal
    ScalarArg,  // the kernel's scalar argument
    TileIndex,  // tile.index() (i64), or tile.begin() with `scalar`
    Unary,      // fn (ir::UnaryFn)
    Binary,     // fn (ir::BinaryFn)
    Where,      // args: cond, a, b
    Cast,       // dtype
    Reduce,     // fn (ir::ReduceFn), axis, keepdim
    Unsqueeze,  // axis
    Transpose,
    Dot,      // args: a, b [, acc]; with `dtype` != f32: the product rounded to it
    VarRead,  // var
    Full,     // ph::full({tiles of `index`}, number): a block of one value; a tile subscript with
              // `block_ref` >= 0 is written as that registered block size (ph::full({bs0, t1}, ..)),
              // the generator making sure its tile is the innermost open one of that block size
    // Block views (src/ir/views.h):
    Expand,      // ph::expand(arg, {tiles of `index`})
    Stack,       // ph::stack({args}, axis)
    Cat,         // ph::cat({args}, axis)
    Reshape,     // ph::reshape(arg, {tiles of `index`, then the constants `dims`})
    Permute,     // ph::permute(arg, dims)
    Split,       // ph::split(arg), half `axis` (0: .first, 1: .second)
    Squeeze,     // ph::squeeze(arg, axis)
    MaskedLoad,  // ph::load(tensor, {index}, args[0] (mask), args[1] (fill))
    TileId,      // tile.id(): the block's number (i64), as an index of per-block partials
    // A scan along `axis` (reversed if `reverse`), by `fn`: 0 ph::cumsum, 1 ph::cumprod,
    // 2 ph::associative_scan with maximum, 3 a segmented sum of args[0] that restarts where the
    // bool block args[1] is true (a pair scan of values and flags).
    Scan,
    DeviceIndex,  // ph::device_index(the mesh's axis `axis`) (i64 scalar; a Program on a mesh)
  } kind = Number;
  std::vector<int64_t> dims;  // Reshape: trailing constant dims; Permute: the permutation
  std::vector<int> args;      // child expressions
  int fn = 0;
  int axis = 0;
  bool keepdim = false;
  bool scalar = false;
  double number = 0;
  DType dtype = DType::f32;
  int tensor = -1;
  std::vector<Subscript> index;
  int tile = -1;
  int var = -1;
  bool reverse = false;  // Scan
};

struct Stmt {
  // When: ph::when(expr, [&] { body }) under the bool scalar `expr` (an else branch is a second
  // When under its negation).
  // On a mesh (Program::mesh): Copy makes copy handle `copy` (ph::remote_copy of `expr` into
  // tensor[index] of the peer `shift` devices ahead along mesh axis `axis`, modulo its size) and
  // starts it; CopyWait waits for copy `copy` (wait(): its send and a receive); Barrier is
  // ph::barrier over the mesh axes `axes`.
  // Let: `auto e<expr> = <expr>;`, the value traced once, there; later references to expression
  // `expr` (in this body, and in bodies nested in it) read that value instead of tracing the tree
  // again: a value with several consumers, as users write them (one traced value, which fusion
  // may compute once into scratch), where a tree referenced twice traces two.
  enum Kind { Loop, VarDecl, VarSet, Store, When, Copy, CopyWait, Barrier, Let } kind = Store;
  // Loop: its dims (tile numbers `tiles`, one per dim); at the top level a launch.
  std::vector<LoopDim> dims;
  std::vector<int> tiles;
  bool grid = false;
  std::vector<Stmt> body;
  int var = -1;     // VarDecl / VarSet
  int expr = -1;    // VarDecl / VarSet / Store / Let: the value
  int tensor = -1;  // Store
  std::vector<Subscript> index;
  int mask = -1;          // Store: >= 0, a masked store (ph::store) of the elements where it is true
  int atomic = 0;         // Store: an ir::AtomicFn: ph::atomic_add / atomic_max / atomic_min (masked or not)
  int copy = -1;          // Copy / CopyWait
  int axis = 0;           // Copy: the mesh axis of the peer
  int64_t shift = 0;      // Copy
  std::vector<int> axes;  // Barrier
};

struct Program {
  std::string name = "fuzz_kernel";
  std::vector<TensorDecl> tensors;  // inputs first, then outputs
  bool has_scalar = false;          // one scalar argument (after the tensors)
  double scalar_value = 0.5;
  std::vector<Expr> exprs;
  std::vector<Stmt> body;  // launches
  int num_tiles = 0, num_vars = 0;
  std::vector<int64_t> block_refs;  // ph::register_block_size(extent), in host code first
  std::string family;               // which generator made it (for reports)
  // The tensors the kernel returns (empty: every output). An input here is updated in place;
  // an output not here is an intermediate between launches.
  std::vector<int> returns;
  // Not empty: the kernel runs on this mesh (KernelBase::interpret_on, run_on), device d with
  // inputs of its own (make_inputs(p, device_seed(seed, d))); it makes `num_copies` copies.
  std::vector<MeshAxis> mesh;
  int num_copies = 0;

  int num_inputs() const;
  std::vector<int> outputs() const;   // the tensors allocated in host code
  std::vector<int> returned() const;  // what the kernel returns
};

// The kernel's inputs: seeded random data in [-1, 1] (index tensors: valid indices).
std::vector<Array> make_inputs(const Program& p, uint64_t seed);
// The seed of device `device`'s inputs, for a program on a mesh.
uint64_t device_seed(uint64_t seed, int64_t device);
// The arguments for a call: the inputs, then the scalar.
std::vector<Arg> make_args(const Program& p, const std::vector<Array>& inputs);

// A Kernel that traces `p` through the DSL (the program is copied into it).
std::unique_ptr<KernelBase> make_kernel(const Program& p);

// The program as a self-contained C++ kernel, with a main() that makes the inputs of `seed`
// (as make_inputs does) and runs it with `config_json` (empty: the default config).
std::string to_cpp(const Program& p, const std::string& config_json = "", uint64_t seed = 1);

}  // namespace parhelion::fuzz

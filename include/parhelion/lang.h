// The Parhelion kernel language: C++ in the tile style of PyTorch's Helion.
//
// A kernel is a plain C++ function over `Tensor`s (and `Scalar`s). Parhelion runs it once per
// input signature (shapes, strides, dtypes) to trace it:
//   - code outside tile loops is host code: shape arithmetic, allocation, argument checks;
//   - each top-level `tile(...)`/`grid(...)` loop becomes one kernel launch over a grid;
//   - nested loops are device loops; indexing a tensor with tiles loads or stores a block;
//   - `Var` is state carried across device-loop iterations.
// Every operation records the caller's source line, so mistakes are reported there.
//
//   ph::Tensor add(ph::Tensor x, ph::Tensor y) {
//     auto out = ph::empty_like(x);
//     for (auto tile : ph::tile(out.sizes())) out[tile] = x[tile] + y[tile];
//     return out;
//   }
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <source_location>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "parhelion/array.h"
#include "parhelion/dtype.h"

namespace parhelion {

using Loc = std::source_location;

class Tensor;
class Var;
class Scalar;
class Int;
class Tile;

// A block-size symbol: `register_block_size(n)` makes one that several tile loops can share.
struct BlockSizeRef {
  int id = -1;
};
BlockSizeRef register_block_size(int64_t extent, Loc loc = Loc::current());

// The number of blocks of a block-size symbol over its registered extent, ceil(extent / block):
// a size that the config decides. It sizes host allocations (`ph::empty({ph::num_blocks(bm), n})`:
// one row per block, for per-block partial results written at `t.id()`) and tile loops
// (`ph::tile(ph::num_blocks(bm))`, e.g. to reduce those partials in a second launch). The size is
// bound when the kernel is specialized for a config (the interpreter binds it with its own block
// choice: one block per tunable tile, so a count of 1). A dimension sized by it is indexed only by
// a tile over the same count or by a scalar (t.id()): `ph::all` or a slice of it is a UserError.
struct NumBlocks {
  int block = -1;
  int64_t extent = 0;
};
NumBlocks num_blocks(BlockSizeRef b, Loc loc = Loc::current());

// One dimension of a tile loop: a range [begin, end) and how its block size is chosen.
struct Extent {
  int64_t begin = 0, end = 0;
  int block_id = -1;        // a registered block size, shared with other loops
  int64_t fixed_block = 0;  // a block size fixed by the kernel (not tuned)
  int parent = -1;          // a tile over this tile's current block (see Extent(const Tile&))
  int count_block = -1;     // a range 0..num_blocks (see NumBlocks)
  int begin_value = -1;     // a jagged range: the i64 scalars of range(start, end) (see there)
  int end_value = -1;
  Extent(int64_t n) : end(n) {}  // NOLINT: `tile(n)` reads best
  Extent(int n) : end(n) {}      // NOLINT
  Extent(int64_t b, int64_t e) : begin(b), end(e) {}
  // The current block of an enclosing tile: `for (auto inner : ph::tile(outer))` loops over
  // [outer.begin(), outer.end()) in blocks of its own tunable block size, taken as
  // min(its config value, outer's block); `.block(n)` fixes it instead. The outer tile must be
  // open and not a grid index.
  Extent(const Tile& outer);                                    // NOLINT: `tile(outer)` reads best
  Extent(NumBlocks n) : end(n.extent), count_block(n.block) {}  // NOLINT: 0..num_blocks(bs)
  Extent block(BlockSizeRef b) const {
    Extent x = *this;
    x.block_id = b.id;
    return x;
  }
  Extent block(int64_t n) const {
    Extent x = *this;
    x.fixed_block = n;
    return x;
  }
};
// A sub-range: `ph::tile(ph::range(begin, end))` tiles [begin, end) (host ints, 0 <= begin <= end),
// its blocks starting at begin. (`ph::tile(a, b)` with two extents is a two-dimensional loop.)
inline Extent range(int64_t end) { return Extent(int64_t{0}, end); }
inline Extent range(int64_t begin, int64_t end) { return Extent(begin, end); }

// One dimension of a tile loop, inside the loop's body.
class Tile {
 public:
  Tile() = default;
  explicit Tile(int id) : id_(id) {}
  int ir_id() const { return id_; }              // internal: the tile's id in the trace
  Tensor begin(Loc loc = Loc::current()) const;  // i64 scalar: first index of this block
  Tensor end(Loc loc = Loc::current()) const;    // i64 scalar: one past its last valid index
  Tensor index(Loc loc = Loc::current()) const;  // i64 [tile]: the indices of this block
  // i64 scalar: this block's number within its loop, (begin() - range begin) / block: 0, 1, ...
  // (for a tile over an enclosing tile's block, counted from that block's start). With a tile
  // over a registered block size `bs`, it indexes a `ph::num_blocks(bs)` dimension:
  // `partial[t.id(), tn] = sum(x[t, tn], 0)`.
  Tensor id(Loc loc = Loc::current()) const;

 private:
  int id_ = -1;
};

// The tiles of a multi-dimensional loop over a runtime-sized shape (`tile(x.sizes())`).
class Tiles {
 public:
  explicit Tiles(std::vector<Tile> t) : tiles_(std::move(t)) {}
  const Tile& operator[](size_t i) const { return tiles_.at(i); }
  size_t size() const { return tiles_.size(); }
  const std::vector<Tile>& tiles() const { return tiles_; }

 private:
  std::vector<Tile> tiles_;
};

// The most indices a subscript takes (one per dim of the tensor it indexes: a tensor of higher
// rank can be indexed through a view that merges dims, x.view(...)).
inline constexpr size_t kMaxSubscript = 8;

struct AllTag {};
inline constexpr AllTag all{};  // index with the whole dimension

// A slice index: `x[ph::slice(a, b), t]` is the block dim of constant size b - a starting at a
// (host ints, 0 <= a < b <= the dim's size, checked when traced); `x[ph::slice(start,
// ph::length(n)), t]` starts at an i64 scalar block `start` (t.begin(), a loaded value, ...) with
// the constant length n, checked at run time (0 <= start, start + n <= size: otherwise the call
// fails naming the tensor, the dimension, the value and the subscript's line). Loads and stores.
struct Length {
  int64_t n = 0;
};
inline Length length(int64_t n) { return Length{n}; }
struct SliceSpec {
  int64_t begin = 0, end = 0;  // static
  int start = -1;              // dynamic: the value id of the i64 scalar start
  int64_t length = 0;
};
inline SliceSpec slice(int64_t begin, int64_t end) { return SliceSpec{begin, end, -1, end - begin}; }
SliceSpec slice(const Tensor& start, Length n, Loc loc = Loc::current());

// One index of a tensor subscript: a tile (or several), `all`, an integer, an i64 scalar, a
// slice (above), or an i64 block of rank 1: a gather (scatter, when stored to) index block.
//
// Gather/scatter: `weight[idx, te]` with `idx = ids[tt]` (i64 [tt]) is the block [tt, te] whose
// element (i, j) is weight[idx[i], off_te + j] (an embedding); `out[idx, tn] = v` writes
// out[idx[i], off_tn + j] (a scatter). Any computed i64 block of rank 1 is an index block
// (`t.index() + offset`, `ids[tt].to(ph::i64)`). Each index block contributes its dim (a tile
// or a constant) to the result in its own place; two indices giving the same tile dim are
// refused (`x[t.index(), t]`: no pairing rule is guessed). Every valid element's index is
// checked against its dimension at run time: out of range is a UserError naming the tensor,
// the dimension, the value, its size and the line (the cpu backend checks unless the config
// says "index_checks":false). Ragged (invalid) lanes are never read nor checked. A scatter
// whose index block repeats a position (in one block, or across parallel grid steps) is a race:
// the interpreter refuses it with a UserError; backends leave the winner unspecified.
struct Index {
  enum Kind { TileK, AllK, IntK, ScalarK, GatherK, SliceK } kind;
  std::vector<Tile> tiles;
  int64_t integer = 0;
  int value = -1;
  SliceSpec slice;
  Loc loc;
  Index(const SliceSpec& s, Loc l = Loc::current()) : kind(SliceK), slice(s), loc(l) {}
  Index(const Tile& t, Loc l = Loc::current()) : kind(TileK), tiles{t}, loc(l) {}
  Index(const Tiles& t, Loc l = Loc::current()) : kind(TileK), tiles(t.tiles()), loc(l) {}
  Index(AllTag, Loc l = Loc::current()) : kind(AllK), loc(l) {}
  Index(int64_t i, Loc l = Loc::current()) : kind(IntK), integer(i), loc(l) {}
  Index(int i, Loc l = Loc::current()) : kind(IntK), integer(i), loc(l) {}
  Index(const Tensor& block, Loc l = Loc::current());  // an i64 scalar, or an i64 rank-1 index block
  Index(const Var& scalar, Loc l = Loc::current());    // a ph::Var holding an i64 scalar
};

namespace detail {
template <class... A>
inline constexpr bool dependent_false = false;
// Whether a subscript's arguments are all indices (see Index).
template <class... A>
inline constexpr bool all_indices = std::conjunction_v<std::is_convertible<const A&, Index>...>;
}  // namespace detail

#if !(defined(__cpp_multidimensional_subscript) && __cpp_multidimensional_subscript >= 202110L)
// Before C++23 (P2128), `x[a, b]` compiles as `x[(a, b)]`: the comma operator drops `a` and the
// kernel silently indexes with `b` alone. Make that comma a compile error that says why.
template <class T>
concept SubscriptPart = std::is_same_v<std::remove_cvref_t<T>, Tile> || std::is_same_v<std::remove_cvref_t<T>, Tiles> ||
    std::is_same_v<std::remove_cvref_t<T>, AllTag> || std::is_same_v<std::remove_cvref_t<T>, Index> ||
    std::is_same_v<std::remove_cvref_t<T>, SliceSpec>;
template <class A, class B>
requires(SubscriptPart<A> || SubscriptPart<B>) void operator,(A&&, B&&) {
  static_assert(sizeof(A) == 0,
                "parhelion: x[a, b] needs C++23's multidimensional subscript (compile with -std=c++23: g++ 12 or "
                "clang++ 15 or newer); with an older standard write x(a, b)");
}
#endif

// An operand of a DSL operation: a tensor block, a Var, a Scalar argument or a number.
// Converting to it records the user's source line.
struct Operand {
  enum Kind { TensorK, NumberK } kind;
  int value = -1;  // TensorK: a device value id (materialized on conversion)
  double number = 0;
  bool is_int = false;  // NumberK: an integer literal (i64) rather than a float
  Loc loc;
  Operand(const Tensor& t, Loc l = Loc::current());
  Operand(const Var& v, Loc l = Loc::current());
  Operand(const Scalar& s, Loc l = Loc::current());
  Operand(const Int& s, Loc l = Loc::current());
  Operand(double x, Loc l = Loc::current()) : kind(NumberK), number(x), loc(l) {}
  Operand(float x, Loc l = Loc::current()) : kind(NumberK), number(x), loc(l) {}
  Operand(int x, Loc l = Loc::current()) : kind(NumberK), number(x), is_int(true), loc(l) {}
  Operand(int64_t x, Loc l = Loc::current()) : kind(NumberK), number(static_cast<double>(x)), is_int(true), loc(l) {}
};

// A range computed in the kernel: `ph::tile(ph::range(start, end))` with i64 scalars (offsets
// loaded from a tensor, t.begin(), integer arguments, arithmetic on them) tiles [start, end) in
// blocks of a tunable (or `.block(n)` fixed) size: a jagged loop, whose every entry has its own
// range. It is a nested loop (a launch's grid is fixed when the kernel is specialized). An empty
// or reversed range runs no trip; a non-empty one must lie within every tensor dimension its
// tile indexes: 0 <= start and end <= the dimension's size, checked at run time (a UserError
// naming this line on cpu and in the interpreter; a TPU kernel cannot raise, and clamps the
// range to the dimensions instead).
Extent range(const Operand& begin, const Operand& end, Loc loc = Loc::current());
// The rows of group `group` of a jagged tensor with row offsets `offsets` (rank 1, integer,
// offsets[g] <= offsets[g + 1]): range(offsets[group], offsets[group + 1]). `group` is a grid
// index or an i64 scalar. `for (auto g : ph::grid(n)) for (auto r : ph::tile(ph::jagged(off, g)))`
// visits the rows of every group, as Helion's jagged tiles do.
Extent jagged(const Tensor& offsets, const Tile& group, Loc loc = Loc::current());
Extent jagged(const Tensor& offsets, const Tensor& group, Loc loc = Loc::current());

// One dimension of a block shape for zeros/full/empty inside device code: a tile or a size.
// A registered block size as a block dim (`ph::zeros({tile, bs})`) is the dim of the innermost
// open tile of that block size: the same extent, ragged last block included, so it combines
// with that tile's blocks elementwise (a dim that is only the symbol's full block would not
// match a ragged block). No open tile of that block size is a UserError.
// In host code, `ph::num_blocks(bs)` sizes an allocation's dim (see NumBlocks).
struct DimSpec {
  int tile = -1;
  int64_t size = 1;
  int block = -1;                                                 // a BlockSizeRef: resolved to a tile when traced
  int count_block = -1;                                           // a NumBlocks: host allocations only
  DimSpec(const Tile& t) : tile(t.ir_id()) {}                     // NOLINT
  DimSpec(int64_t n) : size(n) {}                                 // NOLINT
  DimSpec(int n) : size(n) {}                                     // NOLINT
  DimSpec(BlockSizeRef b) : block(b.id) {}                        // NOLINT
  DimSpec(NumBlocks n) : size(n.extent), count_block(n.block) {}  // NOLINT
};

// A tensor inside a kernel being traced: a host tensor (argument or allocation) or a device
// block value. Indexing a host tensor inside a tile loop loads a block; assigning to the
// indexed expression stores one.
class Tensor {
 public:
  Tensor() = default;

  int rank() const;
  Shape sizes() const;  // host tensors only: concrete sizes
  int64_t size(int dim) const;
  template <size_t N>
  std::array<int64_t, N> sizes(Loc loc = Loc::current()) const {
    check_rank(static_cast<int>(N), loc);
    std::array<int64_t, N> a{};
    for (size_t i = 0; i < N; ++i) a[i] = size(static_cast<int>(i));
    return a;
  }
  DType dtype() const;
  bool is_block() const { return kind_ == BlockK; }

  // Subscript: x[t0, t1], x[tile, ph::all], x[i, tile] (C++23 multi-argument operator[]);
  // x(t0, t1) is the same for older compilers.
  // (Fixed arities rather than a template, so that each Index records the caller's line.)
  Tensor operator[](const Index& a) const { return subscript({a}); }
#if defined(__cpp_multidimensional_subscript) && __cpp_multidimensional_subscript >= 202110L
  Tensor operator[](const Index& a, const Index& b) const { return subscript({a, b}); }
  Tensor operator[](const Index& a, const Index& b, const Index& c) const { return subscript({a, b, c}); }
  Tensor operator[](const Index& a, const Index& b, const Index& c, const Index& d) const {
    return subscript({a, b, c, d});
  }
  Tensor operator[](const Index& a, const Index& b, const Index& c, const Index& d, const Index& e) const {
    return subscript({a, b, c, d, e});
  }
  Tensor operator[](const Index& a, const Index& b, const Index& c, const Index& d, const Index& e,
                    const Index& f) const {
    return subscript({a, b, c, d, e, f});
  }
  Tensor operator[](const Index& a, const Index& b, const Index& c, const Index& d, const Index& e, const Index& f,
                    const Index& g) const {
    return subscript({a, b, c, d, e, f, g});
  }
  Tensor operator[](const Index& a, const Index& b, const Index& c, const Index& d, const Index& e, const Index& f,
                    const Index& g, const Index& h) const {
    return subscript({a, b, c, d, e, f, g, h});
  }
#endif
  Tensor operator()(const Index& a) const { return subscript({a}); }
  Tensor operator()(const Index& a, const Index& b) const { return subscript({a, b}); }
  Tensor operator()(const Index& a, const Index& b, const Index& c) const { return subscript({a, b, c}); }
  Tensor operator()(const Index& a, const Index& b, const Index& c, const Index& d) const {
    return subscript({a, b, c, d});
  }
  Tensor operator()(const Index& a, const Index& b, const Index& c, const Index& d, const Index& e) const {
    return subscript({a, b, c, d, e});
  }
  Tensor operator()(const Index& a, const Index& b, const Index& c, const Index& d, const Index& e,
                    const Index& f) const {
    return subscript({a, b, c, d, e, f});
  }
  Tensor operator()(const Index& a, const Index& b, const Index& c, const Index& d, const Index& e, const Index& f,
                    const Index& g) const {
    return subscript({a, b, c, d, e, f, g});
  }
  Tensor operator()(const Index& a, const Index& b, const Index& c, const Index& d, const Index& e, const Index& f,
                    const Index& g, const Index& h) const {
    return subscript({a, b, c, d, e, f, g, h});
  }
  // A subscript built at run time (a frontend in another language: the Python one).
  Tensor at(const std::vector<Index>& idx) const { return subscript(idx); }
  // Any other subscript is a compile error here. Without these, a subscript with an argument
  // that is not an index (or with more than eight) would fall back to the built-in comma
  // operator, and `W[ex, tk, tn]` would silently mean `W[tn]`.
#if defined(__cpp_multidimensional_subscript) && __cpp_multidimensional_subscript >= 202110L
  template <class... A>
  requires(sizeof...(A) > kMaxSubscript || !detail::all_indices<A...>) Tensor operator[](const A&...) const {
    static_assert(detail::dependent_false<A...>,
                  "a Parhelion subscript takes one to eight indices, each a ph::Tile, ph::all, an integer, an "
                  "i64 scalar (a block or a ph::Var) or an i64 index block of rank 1");
    return {};
  }
#endif
  template <class... A>
  requires(sizeof...(A) > kMaxSubscript || !detail::all_indices<A...>) Tensor operator()(const A&...) const {
    static_assert(detail::dependent_false<A...>,
                  "a Parhelion subscript takes one to eight indices, each a ph::Tile, ph::all, an integer, an "
                  "i64 scalar (a block or a ph::Var) or an i64 index block of rank 1");
    return {};
  }

  // A block: ph::unsqueeze. A host tensor (in host code): a view with a new size-1 dim.
  Tensor unsqueeze(int axis, Loc loc = Loc::current()) const;
  Tensor to(DType dtype, Loc loc = Loc::current()) const;

  // Host views, in host code: a new tensor that aliases this one's memory (no data moves).
  // Loads through a view read the base's elements, stores through it write them (visible
  // through the base and any other view of it). Views of views compose.
  // view/reshape: the same elements in row-major order under a new shape (one -1 is inferred);
  //   refused when this tensor's strides cannot describe it without a copy (as torch.view).
  Tensor view(const Shape& shape, Loc loc = Loc::current()) const;
  Tensor reshape(const Shape& shape, Loc loc = Loc::current()) const;
  // permute: dim i of the view is dim dims[i] of this tensor; transpose swaps two dims.
  Tensor permute(const Shape& dims, Loc loc = Loc::current()) const;
  Tensor transpose(int d0, int d1, Loc loc = Loc::current()) const;
  // expand: size-1 dims (and new leading dims) broadcast to `shape` with stride 0; -1 keeps a
  //   dim. Read-only: a store through an expanded view is an error at its line.
  Tensor expand(const Shape& shape, Loc loc = Loc::current()) const;
  // squeeze: removes a dim of size 1 (a block: ph::squeeze).
  Tensor squeeze(int dim, Loc loc = Loc::current()) const;
  // narrow: `length` indices of `dim` from `start` (static), as torch.narrow.
  Tensor narrow(int dim, int64_t start, int64_t length, Loc loc = Loc::current()) const;

  // `x[tile] = value` stores (assignment to an indexed expression); `t = u` rebinds a handle.
  void operator=(const Operand& value) &&;
  Tensor& operator=(const Tensor&) & = default;
  Tensor(const Tensor&) = default;  // declared: the assignment above deprecates the implicit one

  // Internal: used by the tracer.
  enum Kind { NoneK, HostK, BlockK };
  static Tensor host(int tensor_id) {
    Tensor t;
    t.kind_ = HostK;
    t.id_ = tensor_id;
    return t;
  }
  static Tensor block(int value_id) {
    Tensor t;
    t.kind_ = BlockK;
    t.id_ = value_id;
    return t;
  }
  Kind kind() const { return kind_; }
  int id() const { return id_; }

 private:
  Tensor subscript(const std::vector<Index>& idx) const;
  void check_rank(int n, Loc loc) const;
  Kind kind_ = NoneK;
  int id_ = -1;
  // Set on the result of a subscript of a host tensor: where an assignment stores.
  int store_tensor_ = -1;
  std::vector<int64_t> store_index_;  // (kind, tile, value, length) of each item of the subscript
  int store_line_ = 0;
  const char* store_file_ = nullptr;
};

// A scalar kernel argument (a runtime value, not specialized on): eps, scale, ...
class Scalar {
 public:
  Scalar() = default;
  explicit Scalar(int param) : param_(param) {}
  int param() const { return param_; }

 private:
  int param_ = -1;
};

// An integer kernel argument, a runtime value (not specialized on): in device code an i64 scalar
// (a loop bound in ph::range, a row count, an index). The call passes an integer (exact up to
// 2^53; on a TPU, up to 2^24 in magnitude, checked by the generated module). A plain `int64_t`
// (or `int`) parameter is instead a compile-time constant: the kernel is traced and compiled
// once per value, which host code may use for shapes and loop ranges.
class Int : public Scalar {
 public:
  Int() = default;
  explicit Int(int param) : Scalar(param) {}
};

// Loop-carried state. Declare it in a tile loop, assign it in a nested loop.
class Var {
 public:
  Var(const Tensor& init, Loc loc = Loc::current());  // NOLINT: `Var m = ph::full(...)`
  Var(const Var&) = delete;
  Var& operator=(const Operand& value);
  // (operator= cannot take a source location: these blame the line that computed `value`.)
  Var& operator=(const Tensor& value);
  Var& operator=(const Var& other);
  int slot() const { return slot_; }
  Tensor unsqueeze(int axis, Loc loc = Loc::current()) const;

 private:
  int slot_ = -1;
};

// --- host code: allocation and checks ---------------------------------------------------------
Tensor empty(const Shape& shape, DType dtype = DType::f32, Loc loc = Loc::current());
// empty({ph::num_blocks(bm), n}): a host allocation with dims sized by block counts.
Tensor empty(std::initializer_list<DimSpec> shape, DType dtype = DType::f32, Loc loc = Loc::current());
Tensor empty_like(const Tensor& t, Loc loc = Loc::current());
Tensor empty_like(const Tensor& t, DType dtype, Loc loc = Loc::current());
// zeros/full: host allocations in host code, blocks inside tile loops.
Tensor zeros(std::initializer_list<DimSpec> shape, DType dtype = DType::f32, Loc loc = Loc::current());
Tensor zeros(const Shape& shape, DType dtype = DType::f32, Loc loc = Loc::current());
Tensor full(std::initializer_list<DimSpec> shape, double value, DType dtype = DType::f32, Loc loc = Loc::current());
Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Loc loc = Loc::current());
Tensor zeros_like(const Tensor& t, Loc loc = Loc::current());
// The same with a shape built at run time (the Python frontend's).
Tensor full(const std::vector<DimSpec>& shape, double value, DType dtype = DType::f32, Loc loc = Loc::current());
Tensor empty(const std::vector<DimSpec>& shape, DType dtype = DType::f32, Loc loc = Loc::current());
// Host-side argument checks: throw a UserError at the caller's line when `ok` is false.
void expect(bool ok, const std::string& what, Loc loc = Loc::current());
void expect_dtype(const Tensor& t, std::initializer_list<DType> allowed, Loc loc = Loc::current());

// --- loops ------------------------------------------------------------------------------------
namespace detail {
// Opens a tile/grid loop in the trace; the range-for body runs once, symbolically.
std::vector<Tile> open_loop(const std::vector<Extent>& dims, bool grid, Loc loc);
void close_loop();

template <class Deref>
class LoopRange {
 public:
  LoopRange(std::vector<Extent> dims, bool grid, Loc loc) : dims_(std::move(dims)), grid_(grid), loc_(loc) {}
  struct Sentinel {};
  class Iterator {
   public:
    explicit Iterator(std::vector<Tile> t) : tiles_(std::move(t)) {}
    Deref operator*() const {
      if constexpr (std::is_same_v<Deref, Tile>)
        return tiles_[0];
      else if constexpr (std::is_same_v<Deref, Tiles>)
        return Tiles(tiles_);
      else {
        Deref a{};
        for (size_t i = 0; i < a.size(); ++i) a[i] = tiles_[i];
        return a;
      }
    }
    Iterator& operator++() {
      done_ = true;
      close_loop();
      return *this;
    }
    bool operator!=(Sentinel) const { return !done_; }

   private:
    std::vector<Tile> tiles_;
    bool done_ = false;
  };
  Iterator begin() { return Iterator(open_loop(dims_, grid_, loc_)); }
  Sentinel end() { return {}; }

 private:
  std::vector<Extent> dims_;
  bool grid_;
  Loc loc_;
};
}  // namespace detail

// tile(n), tile(m, n), tile(b, m, n): block loops; tile(x.sizes()): any rank.
// tile(range(b, e)): a sub-range; tile(outer): over an enclosing tile's current block;
// tile(num_blocks(bs)): over the number of blocks of a block size.
// At the top level a tile loop is one launch over a grid; nested, a device loop.
detail::LoopRange<Tile> tile(const Extent& a, Loc loc = Loc::current());
detail::LoopRange<std::array<Tile, 2>> tile(const Extent& a, const Extent& b, Loc loc = Loc::current());
detail::LoopRange<std::array<Tile, 3>> tile(const Extent& a, const Extent& b, const Extent& c,
                                            Loc loc = Loc::current());
detail::LoopRange<Tiles> tile(const Shape& sizes, Loc loc = Loc::current());
// grid(n): a loop over single indices (each iteration's tile is one element; use it as an
// integer index or `.begin()`).
detail::LoopRange<Tile> grid(const Extent& a, Loc loc = Loc::current());
detail::LoopRange<std::array<Tile, 2>> grid(const Extent& a, const Extent& b, Loc loc = Loc::current());

// --- device control ------------------------------------------------------------------------
// Runs `then` only where the bool scalar `cond` is true (C++ cannot trace an `if` on a device
// value): `ph::when(t.begin() + 8 <= n, [&] { out[t] = x[t]; })`. The function is traced once,
// as a region of the kernel; values it computes do not escape it (assign a ph::Var, or store),
// and loops, Vars and stores inside it are as anywhere in device code. With `otherwise`, that
// runs where cond is false. A condition on a block is reduced to a scalar first
// (ph::amax(mask.to(DType::i64), 0) > 0: any). Skipping the rest of an iteration is a `when`
// around it.
void when(const Operand& cond, const std::function<void()>& then, Loc loc = Loc::current());
void when(const Operand& cond, const std::function<void()>& then, const std::function<void()>& otherwise,
          Loc loc = Loc::current());

// --- device code: pointwise, reductions, shapes -----------------------------------------------
Tensor operator+(const Operand& a, const Operand& b);
Tensor operator-(const Operand& a, const Operand& b);
Tensor operator*(const Operand& a, const Operand& b);
Tensor operator/(const Operand& a, const Operand& b);
Tensor operator-(const Operand& a);
Tensor operator<(const Operand& a, const Operand& b);
Tensor operator<=(const Operand& a, const Operand& b);
Tensor operator>(const Operand& a, const Operand& b);
Tensor operator>=(const Operand& a, const Operand& b);
Tensor operator==(const Operand& a, const Operand& b);
Tensor operator!=(const Operand& a, const Operand& b);
Tensor operator&&(const Operand& a, const Operand& b);
Tensor operator||(const Operand& a, const Operand& b);
Tensor operator!(const Operand& a);

// Integer arithmetic (the definitions hold on every backend and in the interpreter; docs/language.md
// section 8). An integer literal beside an i64 block is an i64.
// floordiv(a, b): torch's `a // b`, rounding toward -inf (i64 x i64 -> i64; with an f32 operand,
//   floor(a / b) in f32). Integer division by zero gives 0 (as numpy); INT64_MIN // -1 wraps.
// a % b (= remainder(a, b)): torch.remainder, a - floordiv(a, b) * b, with the sign of the
//   divisor (0 or of b's sign). i64 % 0 gives 0; an f32 % 0 is NaN. INT64_MIN % -1 is 0.
// a & b, a | b, a ^ b: bitwise on two i64 blocks, logical on two bool blocks (mixing them is an
//   error: cast first). ~a: bitwise not of an i64 block (-a - 1), logical not of a bool block.
// a << b, a >> b: shifts of i64 blocks; >> is arithmetic (sign-filling). A count outside
//   [0, 63] gives 0 for << and the sign fill (0 or -1, i.e. a >> 63) for >>, as torch does.
//   On pallas the compute integer is 32-bit (JAX without x64): counts outside [0, 31] give
//   those results there, and values must fit in 32 bits.
Tensor operator%(const Operand& a, const Operand& b);
Tensor operator&(const Operand& a, const Operand& b);
Tensor operator|(const Operand& a, const Operand& b);
Tensor operator^(const Operand& a, const Operand& b);
Tensor operator~(const Operand& a);
Tensor operator<<(const Operand& a, const Operand& b);
Tensor operator>>(const Operand& a, const Operand& b);
Tensor floordiv(const Operand& a, const Operand& b);
Tensor remainder(const Operand& a, const Operand& b);

// Counter-based random numbers: rand(seed, offsets) is a block of offsets' shape whose element
// at offset o is a function of (seed, o) alone: Philox-4x32-10 with key (seed's low, high 32
// bits) and counter (o's low, high 32 bits, 0, 0), its first word w mapped to [0, 1) as
// (w as int32, negatives folded to -w - 1) * 4.6566127342e-10 in f32. randn(seed, offsets) is
// sqrt(-2 ln u1) cos(2 pi u2) of the first two words (u1 clamped to at least 1e-7). Both are
// the same on every backend and config (rand bit for bit, randn to a few ulps), so a backward
// kernel recomputes a dropout mask from the seed instead of storing it:
//   auto keep = ph::rand(seed, row * n + tn.index()) >= p;   // row: tm.index() unsqueezed
// The offsets are i64 blocks (tile indices and integer arithmetic), the seed an i64 scalar or
// block; both must fit in 32 bits on pallas (its integers are 32-bit). The stream equals
// Triton's tl.rand / tl.randn for the same seed and offsets below 2^31.
Tensor rand(const Operand& seed, const Operand& offsets);
Tensor randn(const Operand& seed, const Operand& offsets);

Tensor exp(const Operand& x);
// 2^x. Flash attention's exponent: with the softmax scale times log2(e) folded into q once,
// exp2(s - m) = exp(scale * (q.k - max)) costs no multiply per score (docs/attention.md).
Tensor exp2(const Operand& x);
Tensor log(const Operand& x);
Tensor sqrt(const Operand& x);
Tensor rsqrt(const Operand& x);
Tensor tanh(const Operand& x);
Tensor sigmoid(const Operand& x);
Tensor silu(const Operand& x);
Tensor gelu(const Operand& x);  // tanh approximation
// gelu(x, Gelu::exact) = 0.5 x (1 + erf(x / sqrt(2))) (torch's default gelu); Gelu::tanh is
// gelu(x).
enum class Gelu { tanh, exact };
Tensor gelu(const Operand& x, Gelu approximate);
Tensor erf(const Operand& x);  // the error function (f32; an i64 block is cast to f32)
// Rounding to an integral value, in f32 (an i64 block is returned unchanged, as in torch):
// round: to nearest, ties to even (torch.round); floor: toward -inf; ceil: toward +inf;
// trunc: toward zero. NaN and infinities pass through.
Tensor round(const Operand& x);
Tensor floor(const Operand& x);
Tensor ceil(const Operand& x);
Tensor trunc(const Operand& x);
// clamp(x, lo, hi) = minimum(maximum(x, lo), hi), as torch.clamp: NaN in x (or a bound)
// propagates; lo > hi gives hi. i64 operands stay i64.
Tensor clamp(const Operand& x, const Operand& lo, const Operand& hi);
Tensor abs(const Operand& x);
Tensor maximum(const Operand& a, const Operand& b);
Tensor minimum(const Operand& a, const Operand& b);
Tensor pow(const Operand& a, const Operand& b);
Tensor where(const Operand& cond, const Operand& a, const Operand& b);
// cast(x, d): the value as dtype d holds it, computed in compute_dtype(d) (dtype.h states the
// conversions): to bf16/f16/f8e4m3/f8e5m2 rounds to nearest even in place (fp8 saturates to
// its max finite); to an integer truncates a float toward zero and wraps a wider integer; to
// bool is `!= 0`.
Tensor cast(const Operand& x, DType dtype);

// Reductions over `axis` (negative counts from the end); over a tile dimension they cover
// the block's valid elements only.
Tensor sum(const Operand& x, int axis, bool keepdim = false);
Tensor amax(const Operand& x, int axis, bool keepdim = false);
Tensor amin(const Operand& x, int axis, bool keepdim = false);
Tensor mean(const Operand& x, int axis, bool keepdim = false);

// Scans along `axis` (negative counts from the end), inclusive: element i of the result
// combines elements 0..i of its line (with `reverse`, elements i..n-1). The result has x's
// shape. Over a tile dimension a line is the block's valid elements only: the missing
// elements of a ragged last block never enter a scan. A scan runs within one block: to carry
// it across the blocks of a loop, add the previous block's last element (a ph::Var).
//   auto c = ph::cumsum(x[tm, tn], 1);                 // torch.cumsum(x, 1) on each block
//   auto s = ph::cumsum(x[tm, tn], 1, /*reverse=*/true);  // suffix sums
// cumsum: an i64 block sums exactly in i64, a bool block as i64 (as torch); floats in f32.
Tensor cumsum(const Operand& x, int axis, bool reverse = false);
Tensor cumprod(const Operand& x, int axis, bool reverse = false);
// associative_scan: the scan under a user combine function of two elements, `combine(a, b)`
// with a the running result and b the next element (rank-0 blocks of x's compute dtype); it
// must return one element of that dtype, computed from a, b and numbers only (no loads, Vars
// or blocks from outside). It must be associative: backends may combine in another order than
// left to right (pallas: a log-step scan).
//   auto m = ph::associative_scan(x[t], 0, [](const ph::Tensor& a, const ph::Tensor& b) {
//     return ph::maximum(a, b);                        // a running maximum (torch.cummax values)
//   });
using ScanCombine1 = std::function<Tensor(const Tensor& a, const Tensor& b)>;
Tensor associative_scan(const Operand& x, int axis, const ScanCombine1& combine, bool reverse = false);
// Several blocks scanned together, as tuples: xs broadcast to one shape; combine(a, b) takes
// and returns one element per block (a[k], b[k] of xs[k]'s compute dtype); component k of the
// result is returned as element k. The pair form below reads better for two blocks.
using ScanCombineN = std::function<std::vector<Tensor>(const std::vector<Tensor>& a, const std::vector<Tensor>& b)>;
std::vector<Tensor> associative_scan(const std::vector<Tensor>& xs, int axis, const ScanCombineN& combine,
                                     bool reverse = false, Loc loc = Loc::current());
// Two blocks scanned together, with the combine over pairs written as Triton's and Helion's
// tuple scans are: combine(a0, a1, b0, b1) -> {r0, r1}. A segmented sum by segment ids (sorted,
// so that each segment is contiguous):
//   auto [sums, ids] = ph::associative_scan(
//       std::pair{v /*f32 [tn, td]*/, id.unsqueeze(1) /*i64 [tn, 1]*/}, 0,
//       [](const ph::Tensor& av, const ph::Tensor& ai, const ph::Tensor& bv, const ph::Tensor& bi) {
//         return std::pair{ph::where(ai == bi, av + bv, bv), bi};
//       });
using ScanCombine2 =
    std::function<std::pair<Tensor, Tensor>(const Tensor& a0, const Tensor& a1, const Tensor& b0, const Tensor& b1)>;
std::pair<Tensor, Tensor> associative_scan(const std::pair<Tensor, Tensor>& xs, int axis, const ScanCombine2& combine,
                                           bool reverse = false, Loc loc = Loc::current());

// Masked access. load(x, {indices...}, mask, other): the block x[indices...], except that
// elements where the boolean `mask` (broadcast to the block's shape) is false are not read and
// take `other` (a number or a block broadcast to it, converted to the block's dtype). Indices
// are anything a subscript takes (tiles, all, integers, scalars, index blocks); a masked-off
// element's indices need not be in bounds and are not checked. Concatenation:
//   auto j = tn.index();  // the output's column
//   auto a = ph::load(x, {tm, j}, j < n1, 0.0f), b = ph::load(y, {tm, j - n1}, j >= n1, 0.0f);
//   out[tm, tn] = ph::where(j < n1, a, b);
// store(x, {indices...}, value, mask): writes value (broadcast) only where mask is true; the
// others are not written and their indices not checked.
Tensor load(const Tensor& x, std::initializer_list<Index> index, const Operand& mask, const Operand& other,
            Loc loc = Loc::current());
void store(const Tensor& x, std::initializer_list<Index> index, const Operand& value, const Operand& mask,
           Loc loc = Loc::current());
// The same with indices built at run time (the Python frontend's).
Tensor load(const Tensor& x, const std::vector<Index>& index, const Operand& mask, const Operand& other,
            Loc loc = Loc::current());
void store(const Tensor& x, const std::vector<Index>& index, const Operand& value, const Operand& mask,
           Loc loc = Loc::current());

// Atomic updates. atomic_add(x, {indices...}, value[, mask]): x[indices...] += value (broadcast
// to the block), element by element, atomically with respect to every other update of the
// launch; atomic_max and atomic_min keep the larger (smaller) value, NaN propagating as in
// ph::maximum. Grid steps may update the same elements (a split-K matmul adds its partial
// products into one output block); a repeated index of a gather block counts once per time it
// appears (a histogram, a scatter-add). Indices are anything a subscript takes; with a mask,
// only its true elements are updated and checked. Floats are added in no defined order, so a
// sum may differ from the sequential one by rounding; integers are exact (wrapping as stores
// do). Nothing is returned. Rules, checked when traced: within one launch a tensor updated
// atomically is neither loaded nor stored, and is updated by one of the three only; bool
// tensors take no atomics. Backends: cpu updates in place with atomic instructions, or keeps
// per-thread partial results combined when the launch ends (config knob "atomics");
// pallas runs the steps that meet in order ("arbitrary" grid dims) and updates the block in VMEM.
//   auto out = ph::zeros({m, n});
//   for (auto [tm, tn, ts] : ph::tile(m, n, k)) {  // ts: one split of the reduction
//     ph::Var acc = ph::zeros({tm, tn});
//     for (auto tk : ph::tile(ts)) acc = acc + ph::dot(a[tm, tk], b[tk, tn]);
//     ph::atomic_add(out, {tm, tn}, acc);
//   }
void atomic_add(const Tensor& x, std::initializer_list<Index> index, const Operand& value, Loc loc = Loc::current());
void atomic_add(const Tensor& x, std::initializer_list<Index> index, const Operand& value, const Operand& mask,
                Loc loc = Loc::current());
void atomic_max(const Tensor& x, std::initializer_list<Index> index, const Operand& value, Loc loc = Loc::current());
void atomic_max(const Tensor& x, std::initializer_list<Index> index, const Operand& value, const Operand& mask,
                Loc loc = Loc::current());
void atomic_min(const Tensor& x, std::initializer_list<Index> index, const Operand& value, Loc loc = Loc::current());
void atomic_min(const Tensor& x, std::initializer_list<Index> index, const Operand& value, const Operand& mask,
                Loc loc = Loc::current());
// Any of the three with indices built at run time (the Python frontend's); mask may be null.
enum class Atomic { add, max, min };
void atomic_update(Atomic fn, const Tensor& x, const std::vector<Index>& index, const Operand& value,
                   const Operand* mask, Loc loc = Loc::current());

Tensor unsqueeze(const Operand& x, int axis);
Tensor transpose(const Operand& x);  // swaps the last two dimensions

// Block views: index remaps of a block (no arithmetic, nothing moves in memory).
// reshape: tile dims keep their positions and order; only the constant dims between them split
//   or merge, keeping their product: reshape(x /*[t, 8]*/, {t, 4, 2}). Anything else is an error.
Tensor reshape(const Operand& x, std::initializer_list<DimSpec> shape);
Tensor reshape(const Operand& x, const std::vector<DimSpec>& shape);
// permute: result dim i is dim perm[i] of x (transpose is permute of the last two).
Tensor permute(const Operand& x, std::initializer_list<int> perm);
Tensor permute(const Operand& x, const std::vector<int>& perm);
// expand: size-1 constant dims broadcast to a tile or a size (right-aligned; new leading dims
//   are added; -1 keeps a dim): expand(row /*[1, tn]*/, {tm, tn}).
Tensor expand(const Operand& x, std::initializer_list<DimSpec> shape);
Tensor expand(const Operand& x, const std::vector<DimSpec>& shape);
// squeeze: removes a constant size-1 dim (negative counts from the end).
Tensor squeeze(const Operand& x, int axis);
// split: the two halves x[..., 0] and x[..., 1] of a last dim of constant size 2
//   (`auto [re, im] = ph::split(x)`: interleaved pairs, rotary embeddings, int4 unpacking).
std::pair<Tensor, Tensor> split(const Operand& x);
// join: a new last dim of size 2 holding a and b (broadcast to one shape; one dtype): the
//   inverse of split.
Tensor join(const Operand& a, const Operand& b);
// stack: a new constant dim of size n at `axis` (0..rank; negative counts from the end).
Tensor stack(std::initializer_list<Operand> xs, int axis);
Tensor stack(const std::vector<Operand>& xs, int axis);
// cat: concatenation along `axis`, which must be a constant dim of every operand; the others
//   must be equal.
Tensor cat(std::initializer_list<Operand> xs, int axis);
Tensor cat(const std::vector<Operand>& xs, int axis);

// Matrix products on blocks, accumulated in f32: a [..., M, K] . b [..., K, N] -> [..., M, N]
// (leading batch dims broadcast). f32, bf16, f16 or fp8 data (fp8 blocks run as bf16: exact);
// integer blocks are cast to a float dtype first. bf16 x bf16 uses the CPU's bf16 dot
// instructions where present. dot(a, b, acc) returns acc + a . b (addmm).
Tensor dot(const Operand& a, const Operand& b);
Tensor dot(const Operand& a, const Operand& b, const Operand& acc);
// dot with its f32 result rounded to `out_dtype` (e.g. bf16), as a bf16 matmul's output would be.
Tensor dot(const Operand& a, const Operand& b, DType out_dtype);
inline Tensor bmm(const Operand& a, const Operand& b) { return dot(a, b); }
inline Tensor matmul(const Operand& a, const Operand& b) { return dot(a, b); }
Tensor arange(int64_t n, Loc loc = Loc::current());  // i64 [n]: 0..n-1

}  // namespace parhelion

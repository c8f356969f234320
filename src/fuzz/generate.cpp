#include "fuzz/generate.h"

#include <algorithm>
#include <functional>
#include <random>

#include "ir/ir.h"
#include "parhelion/error.h"

namespace parhelion::fuzz {

using ir::AtomicFn;
using ir::BinaryFn;
using ir::ReduceFn;
using ir::UnaryFn;

const std::vector<std::string>& families() {
  static const std::vector<std::string> f = {"pointwise", "row_reduce", "loop_reduce", "matmul",
                                             "gather",    "indexed",    "views",       "slices",
                                             "jagged",    "scans",      "atomics",     "collectives"};
  return f;
}

namespace {

class Generator {
 public:
  explicit Generator(uint64_t seed) : rng_(seed) {}

  Program run(std::string family) {
    if (family.empty()) family = families()[pick(families().size())];
    p_.family = family;
    p_.has_scalar = chance(0.3);
    p_.scalar_value = choose<double>({0.5, -1.5, 2.0, 0.125});
    if (family == "pointwise")
      pointwise();
    else if (family == "row_reduce")
      row_reduce();
    else if (family == "loop_reduce")
      loop_reduce();
    else if (family == "matmul")
      matmul();
    else if (family == "gather")
      gather();
    else if (family == "indexed")
      indexed();
    else if (family == "views")
      views();
    else if (family == "slices")
      slices();
    else if (family == "jagged")
      jagged();
    else if (family == "scans")
      scans();
    else if (family == "atomics")
      atomics();
    else if (family == "collectives")
      collectives();
    else
      throw UserError("unknown fuzz family '" + family + "'");
    return std::move(p_);
  }

 private:
  // --- randomness ---
  size_t pick(size_t n) { return static_cast<size_t>(rng_() % n); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  template <class T>
  T choose(std::initializer_list<T> v) {
    return *(v.begin() + pick(v.size()));
  }
  int64_t extent() { return choose<int64_t>({1, 2, 3, 5, 8, 16, 17, 31, 33, 64, 100, 130}); }
  DType data_dtype() { return choose({DType::f32, DType::f32, DType::bf16, DType::f16}); }
  // An input's dtype: also fp8 (its values are exact in f32, so loads agree exactly).
  DType in_dtype() { return chance(0.12) ? choose({DType::f8e4m3, DType::f8e5m2}) : data_dtype(); }

  // --- building ---
  int add(Expr e) {
    p_.exprs.push_back(std::move(e));
    return static_cast<int>(p_.exprs.size()) - 1;
  }
  int tensor(Shape shape, DType dtype, bool output = false, int64_t index_bound = 0) {
    TensorDecl t;
    t.shape = std::move(shape);
    t.dtype = dtype;
    t.is_output = output;
    t.index_bound = index_bound;
    p_.tensors.push_back(std::move(t));
    return static_cast<int>(p_.tensors.size()) - 1;
  }
  int new_tile() { return p_.num_tiles++; }
  int new_var() { return p_.num_vars++; }
  static Subscript tile_ix(int t) { return {Subscript::Tile, t, -1}; }
  static Subscript all_ix() { return {Subscript::All, -1, -1}; }
  int load(int t, std::vector<Subscript> ix) {
    Expr e;
    e.kind = Expr::Load;
    e.tensor = t;
    e.index = std::move(ix);
    return add(e);
  }
  int num(double v) {
    Expr e;
    e.kind = Expr::Number;
    e.number = v;
    return add(e);
  }
  int inum(int64_t v) {  // an integer literal (i64 beside an i64 block)
    Expr e;
    e.kind = Expr::Number;
    e.number = static_cast<double>(v);
    e.dtype = DType::i64;
    return add(e);
  }
  int un(UnaryFn f, int a) {
    Expr e;
    e.kind = Expr::Unary;
    e.fn = static_cast<int>(f);
    e.args = {a};
    return add(e);
  }
  int bin(BinaryFn f, int a, int b) {
    Expr e;
    e.kind = Expr::Binary;
    e.fn = static_cast<int>(f);
    e.args = {a, b};
    return add(e);
  }
  int where(int cond, int a, int b) {  // (operands drawn by the caller, in order)
    Expr e;
    e.kind = Expr::Where;
    e.args = {cond, a, b};
    return add(e);
  }
  int cast(int a, DType d) {
    Expr e;
    e.kind = Expr::Cast;
    e.dtype = d;
    e.args = {a};
    return add(e);
  }
  int unsqueeze(int a, int axis) {
    Expr e;
    e.kind = Expr::Unsqueeze;
    e.axis = axis;
    e.args = {a};
    return add(e);
  }
  int transpose(int a) {
    Expr e;
    e.kind = Expr::Transpose;
    e.args = {a};
    return add(e);
  }
  // A chain of block views that gives back `v` (broadcast to the tiles): stack with -v, cat,
  // reshape to pairs, permute them, split twice, unsqueeze/squeeze. Every view's index remap
  // is exercised on the way, and a wrong remap picks -v or a neighbour instead.
  int view_chain(int v, const std::vector<int>& tiles) {
    const int r = static_cast<int>(tiles.size());
    std::vector<Subscript> full;
    for (int t : tiles) full.push_back(tile_ix(t));
    Expr e;
    e.kind = Expr::Expand;
    e.args = {v};
    e.index = full;
    int w = add(e);
    Expr neg;
    neg.kind = Expr::Unary;
    neg.fn = static_cast<int>(ir::UnaryFn::neg);
    neg.args = {w};
    Expr st;
    st.kind = Expr::Stack;
    st.args = {add(neg), w};
    st.axis = r;  // [tiles, 2]: (-w, w)
    int s2 = add(st);
    Expr ct;
    ct.kind = Expr::Cat;
    ct.args = {s2, s2};
    ct.axis = r;  // [tiles, 4]: (-w, w, -w, w)
    Expr rs;
    rs.kind = Expr::Reshape;
    rs.args = {add(ct)};
    rs.index = full;
    rs.dims = {2, 2};  // q[.., i, j] = c[.., 2i + j]
    Expr pm;
    pm.kind = Expr::Permute;
    pm.args = {add(rs)};
    for (int k = 0; k < r; ++k) pm.dims.push_back(k);
    pm.dims.push_back(r + 1);
    pm.dims.push_back(r);  // p[.., j, i] = q[.., i, j]
    Expr s0;
    s0.kind = Expr::Split;
    s0.args = {add(pm)};
    s0.axis = 0;  // p[.., j, 0] = c[.., j]: (-w, w)
    Expr us;
    us.kind = Expr::Unsqueeze;
    us.args = {add(s0)};
    us.axis = 0;
    Expr sq;
    sq.kind = Expr::Squeeze;
    sq.args = {add(us)};
    sq.axis = 0;
    Expr s1;
    s1.kind = Expr::Split;
    s1.args = {add(sq)};
    s1.axis = 1;  // w
    return add(s1);
  }
  int reduce(ReduceFn f, int a, int axis, bool keepdim) {
    Expr e;
    e.kind = Expr::Reduce;
    e.fn = static_cast<int>(f);
    e.axis = axis;
    e.keepdim = keepdim;
    e.args = {a};
    return add(e);
  }
  int var_read(int v) {
    Expr e;
    e.kind = Expr::VarRead;
    e.var = v;
    return add(e);
  }
  int tile_index(int t, bool scalar) {
    Expr e;
    e.kind = Expr::TileIndex;
    e.tile = t;
    e.scalar = scalar;
    return add(e);
  }
  static Stmt loop(std::vector<LoopDim> dims, std::vector<int> tiles, bool grid = false) {
    Stmt s;
    s.kind = Stmt::Loop;
    s.dims = std::move(dims);
    s.tiles = std::move(tiles);
    s.grid = grid;
    return s;
  }
  static Stmt store(int t, std::vector<Subscript> ix, int value) {
    Stmt s;
    s.kind = Stmt::Store;
    s.tensor = t;
    s.index = std::move(ix);
    s.expr = value;
    return s;
  }
  static Stmt var_decl(int v, int value) {
    Stmt s;
    s.kind = Stmt::VarDecl;
    s.var = v;
    s.expr = value;
    return s;
  }
  static Stmt var_set(int v, int value) {
    Stmt s;
    s.kind = Stmt::VarSet;
    s.var = v;
    s.expr = value;
    return s;
  }
  // A tile loop dim: config-chosen blocks, sometimes a fixed (often ragged) block.
  LoopDim dim(int64_t n) { return {n, chance(0.15) ? choose<int64_t>({1, 4, 16}) : 0}; }

  // --- expressions ---
  // Leaves make f32-compute values whose shapes broadcast to the expression's shape.
  using Leaf = std::function<int()>;

  int leaf(const std::vector<Leaf>& leaves) {
    double r = std::uniform_real_distribution<double>(0, 1)(rng_);
    if (r < 0.12) return num(choose<double>({0.5, -1.25, 2.0, 0.1, 3.0, -0.75}));
    if (r < 0.18 && p_.has_scalar) {
      Expr e;
      e.kind = Expr::ScalarArg;
      return add(e);
    }
    return leaves[pick(leaves.size())]();
  }

  // A boolean condition of exactly representable values (loaded data, numbers): a double
  // interpreter and f32 code take the same branch.
  int condition(const std::vector<Leaf>& exact) {
    static const BinaryFn cmps[] = {BinaryFn::lt, BinaryFn::le, BinaryFn::gt, BinaryFn::ge, BinaryFn::eq, BinaryFn::ne};
    int a = exact[pick(exact.size())]();
    int b = chance(0.5) ? exact[pick(exact.size())]() : num(choose<double>({0.0, 0.25, -0.5}));
    int c = bin(cmps[pick(6)], a, b);
    if (chance(0.2)) c = un(UnaryFn::logical_not, c);
    if (chance(0.2)) {
      int d = bin(cmps[pick(6)], exact[pick(exact.size())](), num(0.0));
      c = bin(chance(0.5) ? BinaryFn::logical_and : BinaryFn::logical_or, c, d);
    }
    return c;
  }

  // A float expression over `leaves` (and `exact`, for conditions); every op is kept in a
  // domain where it is well conditioned.
  int fexpr(const std::vector<Leaf>& leaves, const std::vector<Leaf>& exact, int depth) {
    if (depth <= 0 || chance(0.2)) return leaf(leaves);
    auto sub = [&] { return fexpr(leaves, exact, depth - 1); };
    auto positive = [&](int x, double lo) { return bin(BinaryFn::add, un(UnaryFn::abs, x), num(lo)); };
    auto exact_leaf = [&] { return exact[pick(exact.size())](); };
    size_t kind = pick(23);
    // Rounding, floors and integer truncation are discontinuous: only of values that a double
    // interpreter and f32 code hold identically.
    if (approximate_exact_ && (kind == 16 || kind == 17 || kind == 20 || kind == 21 || kind == 22)) kind = 15;
    switch (kind) {
      case 16: {  // rounding to fp8 of an exact value, scaled into the subnormal or saturating range
        double k = choose<double>({1.0, 64.0, 1024.0, 1.0 / 256});
        int r =
            cast(cast(bin(BinaryFn::mul, exact_leaf(), num(k)), choose({DType::f8e4m3, DType::f8e5m2})), DType::f32);
        return bin(BinaryFn::mul, r, num(1.0 / k));
      }
      case 17: {  // round/floor/ceil/trunc of an exact value (they are discontinuous)
        int x = bin(BinaryFn::mul, exact_leaf(), num(choose<double>({4.0, 2.5, 8.0})));
        return bin(BinaryFn::mul, un(choose({UnaryFn::round, UnaryFn::floor, UnaryFn::ceil, UnaryFn::trunc}), x),
                   num(0.25));
      }
      case 18:
        return un(choose({UnaryFn::erf, UnaryFn::gelu_exact}), sub());
      case 19: {  // clamp
        double lo = choose<double>({-0.5, -1.0, 0.0}), hi = choose<double>({0.25, 1.0, 2.0});
        return bin(BinaryFn::minimum, bin(BinaryFn::maximum, sub(), num(lo)), num(hi));
      }
      case 20:  // an integer expression, back in f32 (exact: small integers)
        return bin(BinaryFn::mul, cast(iexpr(exact, int_leaves_, depth), DType::f32), num(0.0625));
      case 22: {  // random numbers at computed offsets, under a literal or computed seed
        int offsets = iexpr(exact, int_leaves_, depth - 1);
        int seed = chance(0.5) ? inum(choose<int64_t>({0, 1, 12345, -7})) : iexpr(exact, int_leaves_, 0);
        int r = bin(chance(0.6) ? BinaryFn::rand : BinaryFn::randn, seed, offsets);
        return chance(0.5) ? r : bin(BinaryFn::mul, r, sub());
      }
      case 21: {  // float floor division and remainder of exact operands (quotients never near an integer)
        int a = bin(BinaryFn::mul, exact_leaf(), num(8.0)), d = num(choose<double>({2.0, -4.0, 0.5, 3.0, -1.5}));
        return bin(BinaryFn::mul, bin(chance(0.5) ? BinaryFn::floordiv : BinaryFn::mod, a, d), num(0.125));
      }
      case 0:
        return bin(BinaryFn::add, sub(), sub());
      case 1:
        return bin(BinaryFn::sub, sub(), sub());
      case 2:
        return bin(BinaryFn::mul, sub(), un(UnaryFn::tanh, sub()));
      case 3:
        return bin(BinaryFn::div, sub(), positive(sub(), 0.5));
      case 4:
        return bin(chance(0.5) ? BinaryFn::maximum : BinaryFn::minimum, sub(), sub());
      case 5:
        return bin(BinaryFn::pow, positive(sub(), 0.5), un(UnaryFn::tanh, sub()));
      case 6:
        return un(choose({UnaryFn::neg, UnaryFn::abs, UnaryFn::tanh, UnaryFn::sigmoid}), sub());
      case 7:
        return un(choose({UnaryFn::silu, UnaryFn::gelu}), un(UnaryFn::tanh, sub()));
      case 8:
        return un(chance(0.5) ? UnaryFn::exp : UnaryFn::exp2, un(UnaryFn::tanh, sub()));
      case 9:
        return un(UnaryFn::log, positive(sub(), 1.0));
      case 10:
        return un(chance(0.5) ? UnaryFn::sqrt : UnaryFn::rsqrt, positive(sub(), 0.5));
      case 11: {
        const int c = condition(exact), a = sub(), b = sub();  // (drawn in this order)
        return where(c, a, b);
      }
      case 12:  // rounding through a 16-bit format
        return cast(cast(sub(), choose({DType::bf16, DType::f16})), DType::f32);
      case 13:  // a boolean as 0/1
        return cast(condition(exact), DType::f32);
      case 14:  // through an integer type: a comparison's 0/1
        return cast(cast(condition(exact), choose({DType::i64, DType::i32})), DType::f32);
      default:
        return bin(BinaryFn::mul, sub(), num(choose<double>({0.5, 2.0, -1.0})));
    }
  }

  // An i64 expression over exact leaves (truncated to small integers), integer inputs and
  // literals, bounded so that it is exact in the interpreter's doubles and fits the 32-bit
  // integers of the pallas backend: every product and left shift takes operands reduced
  // modulo a small number, and shift counts are in [0, 31] or beyond 63 (or negative), where
  // every backend gives the same defined result.
  int iexpr(const std::vector<Leaf>& exact, const std::vector<Leaf>& ints, int depth) {
    auto leafi = [&]() -> int {
      double r = std::uniform_real_distribution<double>(0, 1)(rng_);
      if (r < 0.2) return inum(choose<int64_t>({0, 1, 3, -2, 7, 255, -100}));
      if (r < 0.55 && !ints.empty()) return ints[pick(ints.size())]();
      return cast(bin(BinaryFn::mul, exact[pick(exact.size())](), num(8.0)), DType::i64);
    };
    if (depth <= 0 || chance(0.25)) return leafi();
    auto sub = [&] { return iexpr(exact, ints, depth - 1); };
    auto small = [&](int x) { return bin(BinaryFn::mod, x, inum(choose<int64_t>({7, 13, -5, 16}))); };
    auto count = [&] {
      return chance(0.4) ? bin(BinaryFn::bit_and, sub(), inum(7)) : inum(choose<int64_t>({0, 1, 2, 5, -1, 64, 100}));
    };
    auto divisor = [&] { return chance(0.3) ? small(sub()) : inum(choose<int64_t>({3, -4, 0, 1, -1, 16})); };
    switch (pick(12)) {
      case 0:
        return bin(chance(0.5) ? BinaryFn::add : BinaryFn::sub, sub(), sub());
      case 1:
        return bin(BinaryFn::mul, small(sub()), small(sub()));
      case 2:
        return bin(BinaryFn::floordiv, sub(), divisor());
      case 3:
        return bin(BinaryFn::mod, sub(), divisor());
      case 4:
        return bin(choose({BinaryFn::bit_and, BinaryFn::bit_or, BinaryFn::bit_xor}), sub(), sub());
      case 5:
        return un(UnaryFn::bit_not, sub());
      case 6:
        return bin(BinaryFn::shl, small(sub()), count());
      case 7:
        return bin(BinaryFn::shr, sub(), count());
      case 8: {  // clamp
        int lo = inum(choose<int64_t>({-3, 0})), hi = inum(choose<int64_t>({5, 100}));
        return bin(BinaryFn::minimum, bin(BinaryFn::maximum, sub(), lo), hi);
      }
      case 9: {
        const int c = condition(exact), a = sub(), b = sub();  // (drawn in this order)
        return where(c, a, b);
      }
      case 10: {  // wraps into 8 bits (an i64 block: a bare literal is an f32 constant, out of i8's range)
        int x = sub();
        if (p_.exprs[static_cast<size_t>(x)].kind == Expr::Number)
          x = bin(BinaryFn::add, x, cast(bin(BinaryFn::mul, exact[pick(exact.size())](), num(8.0)), DType::i64));
        return cast(x, choose({DType::i8, DType::u8}));
      }
      default: {  // bitwise ops on booleans are logical
        int c =
            bin(choose({BinaryFn::bit_and, BinaryFn::bit_or, BinaryFn::bit_xor}), condition(exact), condition(exact));
        return cast(chance(0.3) ? un(UnaryFn::bit_not, c) : c, DType::i64);
      }
    }
  }

  // The i64 index of a tile's last dim as a small f32, shaped to broadcast as [.., t] (rank `r`).
  Leaf index_leaf(int tile) {
    // (scaled by a power of two: exact in f32 and in double, so it may appear in conditions)
    return [this, tile] { return bin(BinaryFn::mul, cast(tile_index(tile, false), DType::f32), num(0.125)); };
  }

  // A [rows, cols] mask from tile indices: a triangle (rows.index() + c >= cols.index(), or
  // another comparison), sometimes a band (two of them and-ed or or-ed), sometimes negated.
  // The cpu backend decides such masks per block (emit/decided_wheres.cpp): blocks wholly
  // inside, wholly outside and across the boundary all occur at the configs the tester draws.
  int index_mask(int rows, int cols) {
    auto one = [&] {
      int r = unsqueeze(tile_index(rows, false), -1), c = tile_index(cols, false);
      if (chance(0.6)) r = bin(BinaryFn::add, r, inum(choose<int64_t>({0, 1, -3, 5, 17})));
      if (chance(0.3)) c = bin(BinaryFn::sub, c, inum(choose<int64_t>({2, -7})));
      const BinaryFn cmp = choose({BinaryFn::ge, BinaryFn::gt, BinaryFn::le, BinaryFn::lt});
      return chance(0.5) ? bin(cmp, r, c) : bin(cmp, c, r);
    };
    int m = one();
    if (chance(0.3)) m = bin(chance(0.5) ? BinaryFn::logical_and : BinaryFn::logical_or, m, one());
    if (chance(0.2)) m = un(UnaryFn::logical_not, m);
    return m;
  }
  int masked(int rows, int cols, int value, double fill) {
    const int mask = index_mask(rows, cols);
    return where(mask, value, num(fill));
  }

  // An expression that has every dim of `anchor`'s shape: combined with it, so that a
  // reduction over the block's dims really reduces over them (an expression of numbers alone
  // would make the result depend on how many blocks a loop has).
  int anchored(int e, const Leaf& anchor) {
    static const BinaryFn ops[] = {BinaryFn::add, BinaryFn::mul, BinaryFn::sub};
    return bin(ops[pick(3)], e, anchor());
  }

  // --- families ---
  void pointwise() {
    int rank = 1 + static_cast<int>(pick(3));
    Shape s;
    for (int i = 0; i < rank; ++i) s.push_back(extent());
    if (rank == 3 && s[0] * s[1] * s[2] > 40000) s[0] = 2;
    std::vector<int> tiles;
    std::vector<LoopDim> dims;
    for (int i = 0; i < rank; ++i) {
      tiles.push_back(new_tile());
      dims.push_back(dim(s[i]));
    }
    std::vector<Subscript> full;
    for (int t : tiles) full.push_back(tile_ix(t));
    int x = tensor(s, data_dtype());  // (not fp8: the in-place variant stores to it)
    std::vector<Leaf> leaves = {[=, this] { return load(x, full); }};
    std::vector<Leaf> exact = leaves;
    if (chance(0.6)) {
      int y = tensor(s, in_dtype());
      leaves.push_back([=, this] { return load(y, full); });
      exact.push_back(leaves.back());
    }
    if (rank >= 2 && chance(0.6)) {  // a row, broadcast over the leading dims
      int b = tensor({s.back()}, in_dtype());
      leaves.push_back([=, this] { return load(b, {tile_ix(tiles.back())}); });
    }
    if (rank >= 2 && chance(0.5)) {  // a column: [t0] unsqueezed to [t0, 1, ...]
      int c = tensor({s[0]}, in_dtype());
      leaves.push_back([=, this] {
        int v = load(c, {tile_ix(tiles[0])});
        for (int i = 1; i < rank; ++i) v = unsqueeze(v, -1);
        return v;
      });
    }
    if (chance(0.3)) leaves.push_back(index_leaf(tiles.back()));
    int_leaves_.clear();
    if (chance(0.35)) {  // an 8-bit integer input (whole-range data) for the integer expressions
      int q = tensor(s, choose({DType::i8, DType::u8}));
      int_leaves_.push_back([=, this] { return load(q, full); });
    }
    if (chance(0.3)) int_leaves_.push_back([=, this] { return tile_index(tiles.back(), false); });
    if (chance(0.15)) {  // an integer output: an integer expression stored (wrapping into 8 bits)
      int out = tensor(s, choose({DType::i8, DType::u8, DType::i32, DType::i64}), true);
      Stmt launch = loop(dims, tiles);
      launch.body.push_back(store(out, full, iexpr(exact, int_leaves_, 4)));
      p_.body.push_back(std::move(launch));
      return;
    }
    const double variant = std::uniform_real_distribution<double>(0, 1)(rng_);
    if (variant < 0.2) {  // in place: x[tiles] = f(x[tiles], ...), x returned
      Stmt launch = loop(dims, tiles);
      launch.body.push_back(store(x, full, fexpr(leaves, exact, 4)));
      p_.body.push_back(std::move(launch));
      p_.returns = {x};
      return;
    }
    if (variant > 0.55 && variant < 0.7) {  // pairs: out[tiles, :] = stack of two expressions
      pairs(s, tiles, dims, leaves, exact);
      return;
    }
    int out = tensor(s, data_dtype(), true);
    Stmt launch = loop(dims, tiles);
    int value = fexpr(leaves, exact, 4);
    if (rank == 2 && chance(0.2)) value = masked(tiles[0], tiles[1], value, -1.5);
    // Block views (views.h) on the way to the store; ph::expand takes a block, not a number.
    const bool number = p_.exprs[value].kind == Expr::Number || p_.exprs[value].kind == Expr::ScalarArg;
    if (variant > 0.7 && !number) value = view_chain(value, tiles);
    launch.body.push_back(store(out, full, value));
    p_.body.push_back(std::move(launch));
    if (variant < 0.4) {  // a second launch reads the first one's result (at other blocks)
      std::vector<int> tiles2;
      std::vector<LoopDim> dims2;
      for (int i = 0; i < rank; ++i) {
        tiles2.push_back(new_tile());
        dims2.push_back(dim(s[i]));
      }
      std::vector<Subscript> full2;
      for (int t : tiles2) full2.push_back(tile_ix(t));
      std::vector<Leaf> second = {[=, this] { return load(out, full2); }, [=, this] { return load(x, full2); }};
      int out2 = tensor(s, data_dtype(), true);
      int_leaves_.clear();  // the first launch's
      Stmt launch2 = loop(dims2, tiles2);
      launch2.body.push_back(store(out2, full2, fexpr(second, {second[1]}, 3)));
      p_.body.push_back(std::move(launch2));
      p_.returns = chance(0.5) ? std::vector<int>{out2} : std::vector<int>{out, out2};
    }
  }

  // A store of two expressions as the pairs of a trailing dim of 2, as rotary stores its rotated
  // halves: out [s, 2], out[tiles, :] = stack({a, b}, -1). Each half is evaluated once per pair
  // (the emitter unrolls the pair dim), so lowering may fuse an expensive half into the store
  // (lower/fusion.h); sometimes both halves share a subexpression, which it must not.
  void pairs(const Shape& s, const std::vector<int>& tiles, const std::vector<LoopDim>& dims,
             const std::vector<Leaf>& leaves, const std::vector<Leaf>& exact) {
    const int rank = static_cast<int>(s.size());
    std::vector<Subscript> full;
    for (int t : tiles) full.push_back(tile_ix(t));
    auto block = [&](int v) {  // broadcast to the tiles (a row is not a whole block)
      if (p_.exprs[v].kind == Expr::Number || p_.exprs[v].kind == Expr::ScalarArg)
        v = bin(BinaryFn::add, v, leaves[0]());  // (ph::expand takes a block, not a number)
      Expr e;
      e.kind = Expr::Expand;
      e.args = {v};
      e.index = full;
      return add(e);
    };
    int a = fexpr(leaves, exact, 4);
    int b = fexpr(leaves, exact, 4);
    if (chance(0.3)) b = chance(0.5) ? un(UnaryFn::exp, a) : bin(BinaryFn::mul, a, b);
    Shape os = s;
    os.push_back(2);
    int out = tensor(os, data_dtype(), true);
    Expr st;
    st.kind = Expr::Stack;
    st.args = {block(a), block(b)};
    st.axis = rank;
    std::vector<Subscript> pair = full;
    pair.push_back(all_ix());
    Stmt launch = loop(dims, tiles);
    launch.body.push_back(store(out, pair, add(st)));
    p_.body.push_back(std::move(launch));
  }

  // Blocks of whole rows (or, with `columns`, whole columns) of an input x [m, n]: the tile over
  // the other dim, the block's subscript, and leaves reading it (and sometimes a vector along
  // the whole dim, broadcast over the blocked one). `exact` holds x's block alone.
  struct WholeLines {
    int64_t m = 0, n = 0;
    bool columns = false;
    int t = -1;
    Subscript ix_t;
    std::vector<Subscript> block;
    std::vector<Leaf> leaves, exact;
  };
  WholeLines whole_lines() {
    WholeLines w;
    w.m = extent();
    w.n = extent();
    w.columns = chance(0.3);
    const int64_t m = w.m, n = w.n;
    const bool columns = w.columns;
    int x = tensor({m, n}, in_dtype());
    w.t = new_tile();
    w.ix_t = tile_ix(w.t);
    w.block = columns ? std::vector<Subscript>{all_ix(), w.ix_t} : std::vector<Subscript>{w.ix_t, all_ix()};
    std::vector<Subscript> block = w.block;
    w.leaves = {[=, this] { return load(x, block); }};
    w.exact = w.leaves;
    if (chance(0.5)) {
      int b = tensor({columns ? m : n}, in_dtype());
      w.leaves.push_back([=, this] {
        int v = load(b, {all_ix()});
        return columns ? unsqueeze(v, -1) : v;
      });
    }
    return w;
  }

  static ReduceFn reduce_fn(size_t i) { return static_cast<ReduceFn>(i % 4); }

  void row_reduce() {
    WholeLines w = whole_lines();
    const int64_t m = w.m, n = w.n;
    const bool columns = w.columns;  // reduce along axis 0 of [M, tn] blocks
    const int t = w.t;
    const Subscript ix_t = w.ix_t;
    const std::vector<Subscript> block = w.block;
    std::vector<Leaf> leaves = w.leaves, exact = w.exact;
    const int axis = columns ? 0 : 1;
    ReduceFn f = reduce_fn(pick(4));
    int e = anchored(fexpr(leaves, exact, 3), leaves[0]);
    Stmt launch = loop({dim(columns ? n : m)}, {t});
    if (chance(0.4)) {  // the reduction itself
      int out = tensor({columns ? n : m}, data_dtype(), true);
      launch.body.push_back(store(out, {ix_t}, reduce(f, e, axis, false)));
    } else {  // an expression of the rows and their reduction (softmax-like)
      int r = reduce(f, e, axis, true);
      std::vector<Leaf> with_r = leaves;
      with_r.push_back([=] { return r; });
      // Sometimes the rows and their reduction are values of their own (Lets), each traced once:
      // a costly e is then materialized and computed inside the reduction's loop; and sometimes
      // the rows are read after it only through a 16-bit cast, itself read by two stores: the
      // reduction's loop then stores the cast (lower/fusion.h).
      const bool lets = chance(0.5);
      const int rows = chance(0.25) ? cast(e, choose({DType::bf16, DType::f16})) : e;
      for (int v : {e, r, rows}) {
        if (!lets || (v == rows && rows == e)) continue;
        Stmt let;
        let.kind = Stmt::Let;
        let.expr = v;
        launch.body.push_back(let);
      }
      int final = bin(BinaryFn::sub, rows, r);
      if (chance(0.7)) final = fexpr(std::vector<Leaf>{[=] { return final; }, [=] { return r; }}, exact, 2);
      // Sometimes a second reduction of the same rows, of another expression of them or of one
      // that reads r: the cpu backend computes the first kind in r's loop, the second after it.
      if (chance(0.5)) {
        const int e2 = anchored(fexpr(chance(0.5) ? with_r : leaves, exact, 2), leaves[0]);
        final = bin(BinaryFn::add, final, reduce(reduce_fn(pick(4)), e2, axis, true));
      }
      int out = tensor({m, n}, data_dtype(), true);
      launch.body.push_back(store(out, block, final));
      if (rows != e) {
        int out2 = tensor({m, n}, data_dtype(), true);
        launch.body.push_back(store(out2, block, bin(BinaryFn::mul, rows, num(2.0))));
      }
    }
    p_.body.push_back(std::move(launch));
  }

  // Scans along whole rows (or columns) of a block: cumsum, cumprod, a running maximum by an
  // associative_scan, or a segmented sum restarting at flags (a pair scan), forward or
  // reversed; then the scan stored, or an expression of it and the rows. (A scan along a tiled
  // dim would cut its lines at the config's blocks, a result that depends on the config.)
  void scans() {
    WholeLines w = whole_lines();
    const int64_t m = w.m, n = w.n;
    const bool columns = w.columns;  // scan along axis 0 of [M, tn] blocks
    const int t = w.t;
    const std::vector<Subscript> block = w.block;
    std::vector<Leaf> leaves = w.leaves, exact = w.exact;
    int e = anchored(fexpr(leaves, exact, 2), leaves[0]);
    Expr sc;
    sc.kind = Expr::Scan;
    sc.fn = static_cast<int>(pick(4));
    sc.axis = columns ? 0 : (chance(0.5) ? 1 : -1);
    sc.reverse = chance(0.4);
    if (sc.fn == 1) e = un(UnaryFn::tanh, e);  // |factors| < 1: the products never overflow
    sc.args = {e};
    if (sc.fn == 3) {  // flags from an index tensor along the scanned dim: a segment starts at 0
      int ids = tensor({columns ? m : n}, DType::i32, false, 3);
      int f = bin(BinaryFn::eq, load(ids, {all_ix()}), inum(0));
      sc.args.push_back(columns ? unsqueeze(f, -1) : f);
    }
    int r = add(sc);
    int final = r;
    if (chance(0.5)) final = fexpr(std::vector<Leaf>{[=] { return r; }, leaves[0]}, exact, 2);
    int out = tensor({m, n}, data_dtype(), true);
    Stmt launch = loop({dim(columns ? n : m)}, {t});
    launch.body.push_back(store(out, block, final));
    p_.body.push_back(std::move(launch));
  }

  void loop_reduce() {
    int64_t m = extent(), n = extent();
    int x = tensor({m, n}, in_dtype());
    int b = chance(0.5) ? tensor({n}, in_dtype()) : -1;
    int tm = new_tile();
    int out = tensor({m}, data_dtype(), true);
    // Sometimes a causal loop: each trip's work under ph::when(tn.begin() < tm.begin() + c),
    // which the backends turn into a bound on the trips (ir/trip_guard.h). Fixed blocks keep
    // the result the same at every config.
    const bool causal = chance(0.2);
    LoopDim dm = dim(m);
    if (causal) dm.fixed_block = choose<int64_t>({8, 16});
    const int64_t reach = dm.fixed_block + choose<int64_t>({0, 3, -5, 40});
    Stmt launch = loop({dm}, {tm});
    auto pass = [&](ReduceFn f, std::function<int(int)> transform) {
      int tn = new_tile();
      std::vector<Leaf> leaves = {[=, this] { return load(x, {tile_ix(tm), tile_ix(tn)}); }};
      std::vector<Leaf> exact = leaves;
      if (b >= 0) leaves.push_back([=, this] { return load(b, {tile_ix(tn)}); });
      if (chance(0.2)) leaves.push_back(index_leaf(tn));
      int v = new_var();
      double init = f == ReduceFn::max ? -INFINITY : f == ReduceFn::min ? INFINITY : 0.0;
      launch.body.push_back(var_decl(v, add_full({tm}, init)));
      LoopDim dn = dim(n);
      if (causal) dn.fixed_block = choose<int64_t>({8, 16, 128});
      Stmt inner = loop({dn}, {tn});
      int blk = transform(anchored(fexpr(leaves, exact, 3), leaves[0]));
      if (chance(0.25)) blk = masked(tm, tn, blk, f == ReduceFn::min ? 2.5 : f == ReduceFn::max ? -2.5 : 0.0);
      if (f == ReduceFn::sum && chance(0.25)) {
        // A one-hot pick (cross_entropy's target logit): sum(where(tn's index == j, x, 0)), j a
        // row's label (some past the row's end, some negative: they pick nothing) or the row's
        // own index (the diagonal), the cpu's single read of the picked element (or of none).
        int j;
        if (chance(0.3)) {
          j = tile_index(tm, false);
        } else {
          j = load(tensor({m}, chance(0.5) ? DType::i32 : DType::i64, false, n + 3), {tile_ix(tm)});
          if (chance(0.3)) j = bin(BinaryFn::sub, j, inum(2));
        }
        const int index = tile_index(tn, false), row_j = unsqueeze(j, -1);
        blk = where(chance(0.7) ? bin(BinaryFn::eq, index, row_j) : bin(BinaryFn::eq, row_j, index), blk, num(0.0));
      }
      int r = reduce(f == ReduceFn::mean ? ReduceFn::sum : f, blk, -1, false);
      int acc = var_read(v);
      int next = f == ReduceFn::max   ? bin(BinaryFn::maximum, acc, r)
                 : f == ReduceFn::min ? bin(BinaryFn::minimum, acc, r)
                                      : bin(BinaryFn::add, acc, r);
      Stmt set = var_set(v, next);
      if (causal) {
        Stmt w;
        w.kind = Stmt::When;
        w.expr = bin(BinaryFn::lt, tile_index(tn, true), bin(BinaryFn::add, tile_index(tm, true), inum(reach)));
        w.body.push_back(std::move(set));
        set = std::move(w);
      }
      inner.body.push_back(std::move(set));
      launch.body.push_back(std::move(inner));
      return v;
    };
    int result;
    if (chance(0.35)) {  // two passes: the row max, then sum(exp(x - max)) (a log-sum-exp)
      // (Each pass draws its own expression, so x - max is not bounded by 0: it is kept under 60,
      // whose exp and a row's sum of them stay finite in f32 as in the interpreter's double.
      // Unbounded, an exp(96) was inf on the cpu and 4.9e41 in the interpreter: loop_reduce seed
      // 4285, when one-hot picks were first drawn.)
      int vmax = pass(ReduceFn::max, [](int e) { return e; });
      int vsum = pass(ReduceFn::sum, [&, vmax](int e) {
        return un(UnaryFn::exp,
                  bin(BinaryFn::minimum, bin(BinaryFn::sub, e, unsqueeze(var_read(vmax), -1)), num(60.0)));
      });
      result = bin(BinaryFn::add, un(UnaryFn::log, var_read(vsum)), var_read(vmax));
    } else {
      ReduceFn f = reduce_fn(pick(4));
      int v = pass(f, [](int e) { return e; });
      result = var_read(v);
      if (f == ReduceFn::mean) result = bin(BinaryFn::div, result, num(static_cast<double>(n)));
      if (chance(0.5)) {
        approximate_exact_ = true;  // a Var's sum is not exact: no discontinuous op of it
        result = fexpr(std::vector<Leaf>{[=, this] { return var_read(v); }}, {[=, this] { return var_read(v); }}, 2);
        approximate_exact_ = false;
      }
    }
    launch.body.push_back(store(out, {tile_ix(tm)}, result));
    p_.body.push_back(std::move(launch));
  }

  int add_full(std::vector<int> tiles, double value) {
    Expr e;
    e.kind = Expr::Full;
    e.number = value;
    for (int t : tiles) e.index.push_back(tile_ix(t));
    return add(e);
  }

  // A product of two blocks, accumulated in f32.
  int dot(int a, int b) {
    Expr d;
    d.kind = Expr::Dot;
    d.args = {a, b};
    return add(d);
  }

  void matmul() {
    const bool batched = chance(0.35);
    const bool shared_b = batched && chance(0.4);  // y [K, N] for every batch
    int64_t bs = batched ? choose<int64_t>({1, 2, 3}) : 1, m = extent(), k = extent(), n = extent();
    DType dt = in_dtype();
    const bool at = !batched && chance(0.3), bt = !batched && chance(0.3);
    int tb = batched ? new_tile() : -1, tm = new_tile(), tn = new_tile(), tk = new_tile();
    auto lead = [&](std::vector<Subscript> ix) {
      if (batched) ix.insert(ix.begin(), tile_ix(tb));
      return ix;
    };
    auto lead_shape = [&](Shape s) {
      if (batched) s.insert(s.begin(), bs);
      return s;
    };
    int a = tensor(lead_shape(at ? Shape{k, m} : Shape{m, k}), dt);
    int b = tensor(shared_b ? Shape{k, n} : lead_shape(bt ? Shape{n, k} : Shape{k, n}), chance(0.8) ? dt : in_dtype());
    int bias = chance(0.5) ? tensor({n}, in_dtype()) : -1;
    int out = tensor(lead_shape({m, n}), data_dtype(), true);
    std::vector<int> grid_tiles = batched ? std::vector<int>{tb, tm, tn} : std::vector<int>{tm, tn};
    std::vector<LoopDim> grid_dims;
    if (batched) grid_dims.push_back(dim(bs));
    grid_dims.push_back(dim(m));
    grid_dims.push_back(dim(n));
    Stmt launch = loop(grid_dims, grid_tiles);
    int v = new_var();
    std::vector<int> acc_tiles = batched ? std::vector<int>{tb, tm, tn} : std::vector<int>{tm, tn};
    // (mostly zeros, which a loop's first trip may write instead: AccumulatingDot::first_trip_writes)
    launch.body.push_back(var_decl(v, add_full(acc_tiles, chance(0.8) ? 0.0 : 0.5)));
    Stmt inner = loop({dim(k)}, {tk});
    int A = at ? transpose(load(a, {tile_ix(tk), tile_ix(tm)})) : load(a, lead({tile_ix(tm), tile_ix(tk)}));
    if (!at && chance(0.2)) {  // a masked A (a dot reads it from scratch), its fill a number
      Expr masked;
      masked.kind = Expr::MaskedLoad;
      masked.tensor = a;
      masked.index = lead({tile_ix(tm), tile_ix(tk)});
      masked.args = {bin(BinaryFn::lt, tile_index(tk, false), num(static_cast<double>(k - 1))),
                     num(choose<double>({0.0, 0.1, -2.0}))};
      A = add(masked);
    }
    int B = shared_b ? load(b, {tile_ix(tk), tile_ix(tn)})
            : bt     ? transpose(load(b, {tile_ix(tn), tile_ix(tk)}))
                     : load(b, lead({tile_ix(tk), tile_ix(tn)}));
    if (chance(0.2)) A = bin(BinaryFn::mul, A, num(0.5));  // a computed operand
    if (chance(0.25)) {                                    // 16-bit operands for the MXU / bf16 micro-kernels
      A = cast(A, DType::bf16);
      B = cast(B, DType::bf16);
    }
    Expr d;
    d.kind = Expr::Dot;
    d.args = {A, B};
    int next, product = -1;  // product: the dot of `acc + dot`, where the assignment is one
    switch (pick(4)) {
      case 0:
        d.args.push_back(var_read(v));
        next = add(d);
        break;
      case 1:
        product = add(d);
        next = bin(BinaryFn::add, var_read(v), product);
        break;
      case 2: {
        // acc = acc * s + dot, the flash-attention rescale (computed in place after the Var is
        // rescaled). Any s but 1 would make the result depend on the number of K blocks, which
        // the interpreter does not share with the config under test: s is 1, as a number or as a
        // row factor computed from a load (x * 0 + 1, inputs being finite) and broadcast.
        const int row = load(tensor(lead_shape({m}), DType::f32), lead({tile_ix(tm)}));
        const int scale =
            chance(0.5) ? unsqueeze(bin(BinaryFn::add, bin(BinaryFn::mul, row, num(0.0)), num(1.0)), batched ? 2 : 1)
                        : num(1.0);
        next = chance(0.5) ? bin(BinaryFn::add, bin(BinaryFn::mul, var_read(v), scale), add(d))
                           : bin(BinaryFn::add, add(d), bin(BinaryFn::mul, scale, var_read(v)));
        break;
      }
      default:
        d.dtype = DType::bf16;  // the product rounded, as a bf16 matmul's output
        product = add(d);
        next = bin(BinaryFn::add, var_read(v), product);
    }
    // Where `acc + dot` meets its dot (lower/fusion.h: the dot adds into the Var in place only
    // where the assignment runs whenever the dot does and nothing between them reads or assigns
    // the Var): sometimes the dot is a value of its own (a Let) and then
    // - the assignment runs under a condition on the scalar argument, or
    // - a second Var adds what each assignment added to the first (the product again, whatever
    //   the blocks), from the first read after the dot, or read before it (a value the
    //   subtraction between the dot and the assignment uses: fused, it would read the Var there).
    const int shape = product >= 0 ? pick(6) : 2;
    int result = v;  // the Var the epilogue reads
    auto let = [&](int value) {
      Stmt s;
      s.kind = Stmt::Let;
      s.expr = value;
      inner.body.push_back(s);
    };
    const bool read_early = shape == 1 && chance(0.5);
    const int before = shape == 1 ? var_read(v) : -1;
    if (read_early) let(before);
    if (shape < 2) let(product);
    if (shape == 0) {
      p_.has_scalar = true;
      Expr arg;
      arg.kind = Expr::ScalarArg;
      Stmt w;
      w.kind = Stmt::When;
      w.expr = bin(BinaryFn::gt, add(arg), num(0.0));
      w.body.push_back(var_set(v, next));
      inner.body.push_back(std::move(w));
    } else if (shape == 1) {
      result = new_var();
      launch.body.push_back(var_decl(result, add_full(acc_tiles, 0.0)));
      if (read_early) {
        inner.body.push_back(var_set(result, bin(BinaryFn::sub, var_read(result), before)));
        inner.body.push_back(var_set(v, next));
        inner.body.push_back(var_set(result, bin(BinaryFn::add, var_read(result), var_read(v))));
      } else {
        let(before);
        inner.body.push_back(var_set(v, next));
        inner.body.push_back(
            var_set(result, bin(BinaryFn::add, var_read(result), bin(BinaryFn::sub, var_read(v), before))));
      }
    } else {
      inner.body.push_back(var_set(v, next));
    }
    launch.body.push_back(std::move(inner));
    std::vector<Leaf> leaves = {[=, this] { return var_read(result); }};
    if (bias >= 0) leaves.push_back([=, this] { return load(bias, {tile_ix(tn)}); });
    // Conditions compare exact values only (the bias, the column index): the accumulator is
    // rounded differently at different K blocks (a rounded product per block), and a
    // threshold on it would turn a rounding difference into a different branch.
    std::vector<Leaf> exact;
    if (bias >= 0) exact.push_back(leaves.back());
    exact.push_back(index_leaf(tn));
    int epilogue = chance(0.4) ? var_read(result) : fexpr(leaves, exact, 2);
    launch.body.push_back(store(out, lead({tile_ix(tm), tile_ix(tn)}), epilogue));
    p_.body.push_back(std::move(launch));
  }

  void gather() {
    int64_t v = extent() + 1, d = extent(), g = extent();
    int table = tensor({v, d}, in_dtype());
    int idx = tensor({g}, chance(0.5) ? DType::i32 : DType::i64, false, v);
    int out = tensor({g, d}, data_dtype(), true);
    int tg = new_tile(), td = new_tile();
    const bool grid = chance(0.6);
    // The row number: idx[g] on a grid, or idx[t.begin()] on a tile of fixed block 1.
    auto row = [=, this] {
      Expr e;
      e.kind = Expr::Load;
      e.tensor = idx;
      if (grid)
        e.index = {tile_ix(tg)};
      else
        e.index = {Subscript{Subscript::Scalar, -1, tile_index(tg, true)}};
      return add(e);
    };
    std::vector<Leaf> leaves = {[=, this] {
      return load(table, {Subscript{Subscript::Scalar, -1, row()}, tile_ix(td)});
    }};
    std::vector<Leaf> exact = leaves;
    if (chance(0.5)) {
      int b = tensor({d}, in_dtype());
      leaves.push_back([=, this] { return load(b, {tile_ix(td)}); });
    }
    Stmt launch = grid ? loop({{g, 0}}, {tg}, true) : loop({{g, 1}}, {tg});
    Stmt inner = loop({dim(d)}, {td});
    inner.body.push_back(store(out, {tile_ix(tg), tile_ix(td)}, fexpr(leaves, exact, 3)));
    launch.body.push_back(std::move(inner));
    p_.body.push_back(std::move(launch));
  }

  // Index blocks, masked loads and masked stores: a launch over (tg, td) that gathers rows of a
  // table through idx[tg] (indices drawn in range, often repeated), or scatters rows to
  // out[idx[tg], td] (idx a permutation: distinct indices that cover every row, so every
  // output element is written); loads shifted by a constant through td.index() + c under the
  // mask `< d` with a fill (a number or another block); and a masked store over the plain one.
  void indexed() {
    const bool scatter = chance(0.35);
    int64_t d = extent(), g = extent();
    if (scatter && g % 7 == 0) ++g;  // the index formula (7i + c) % g is then a permutation
    const int64_t v = scatter ? g : extent() + 1;
    const DType dt = data_dtype();
    int table = tensor({v, d}, dt);
    int idx = tensor({g}, chance(0.5) ? DType::i32 : DType::i64, false, v);
    int src = tensor({g, d}, dt);
    int out = tensor({scatter ? v : g, d}, data_dtype(), true);
    int tg = new_tile(), td = new_tile();
    auto rows = [=, this] { return load(idx, {tile_ix(tg)}); };  // i64 [tg]
    auto computed = [](int e) { return Subscript{Subscript::Scalar, -1, e}; };
    // td.index() + c, as an i64 index block (a float literal makes the sum f32: cast back).
    auto shifted = [=, this](int64_t c) {
      int j = tile_index(td, false);
      return c == 0 ? j : cast(bin(BinaryFn::add, j, num(static_cast<double>(c))), DType::i64);
    };
    auto row_leaf = [=, this](Leaf l) { return [=, this] { return unsqueeze(l(), 1); }; };
    std::vector<Leaf> leaves = {[=, this] { return load(src, {tile_ix(tg), tile_ix(td)}); }};
    if (!scatter || chance(0.5))  // a gathered table row (in the scatter mode, through the permutation)
      leaves.push_back([=, this] { return load(table, {computed(rows()), tile_ix(td)}); });
    std::vector<Leaf> exact = leaves;
    exact.push_back(index_leaf(td));
    exact.push_back(row_leaf([=, this] { return cast(rows(), DType::f32); }));
    if (chance(0.7)) {
      const int64_t c = choose<int64_t>({0, 1, 2, 5});
      const bool from_table = chance(0.5);
      leaves.push_back([=, this] {
        int j = shifted(c);
        Expr m;
        m.kind = Expr::MaskedLoad;
        m.tensor = from_table ? table : src;
        m.index = {from_table ? computed(rows()) : tile_ix(tg), computed(j)};
        int fill = chance(0.5) ? num(choose<double>({0.0, -2.0, 0.75})) : load(src, {tile_ix(tg), tile_ix(td)});
        m.args = {bin(BinaryFn::lt, j, num(static_cast<double>(d))), fill};
        return add(m);
      });
    }
    // One launch over (tg, td), or a launch over tg with an inner loop over td (whose
    // strategies must leave gathered and masked blocks in place).
    const bool inner = chance(0.35);
    Stmt launch = inner ? loop({dim(g)}, {tg}) : loop({dim(g), dim(d)}, {tg, td});
    Stmt body = inner ? loop({dim(d)}, {td}) : Stmt{};
    std::vector<Stmt>& stmts = inner ? body.body : launch.body;
    std::vector<Subscript> target = {scatter ? computed(rows()) : tile_ix(tg), tile_ix(td)};
    int value = fexpr(leaves, exact, 3);
    if (leaves.size() > 1 && chance(0.6))
      value = bin(BinaryFn::add, value, leaves[1 + pick(leaves.size() - 1)]());  // an indexed leaf
    stmts.push_back(store(out, target, value));
    if (chance(0.4)) {  // a masked store over it: a condition of exact values
      Stmt m = store(out, {scatter ? computed(rows()) : tile_ix(tg), tile_ix(td)}, fexpr(leaves, exact, 2));
      m.mask = condition(exact);
      stmts.push_back(std::move(m));
    }
    if (inner) launch.body.push_back(std::move(body));
    p_.body.push_back(std::move(launch));
  }

  // A kernel on a mesh (a ring, or a 2-D mesh with the ring along one axis): rows of x [m, k]
  // per block, an expression of them (and of the device's coordinates) copied to the device
  // `shift` ahead along the ring, into the same rows of a landing tensor there; after the wait,
  // the landed rows combined with the local ones. The copies run in a launch over row blocks
  // (its steps in order) or in a loop over them inside a one-step launch, sometimes with a
  // second, independent store between the start and the wait (the overlap a fused kernel has)
  // and a barrier per block (one copy in flight towards a device at a time). Every block lands in
  // rows of its own, once, so the program is race-free.
  void collectives() {
    if (chance(0.7))
      p_.mesh = {{"x", static_cast<int64_t>(1 + pick(5))}};
    else
      p_.mesh = {{"x", 2}, {"y", choose<int64_t>({2, 3})}};
    const int axis = static_cast<int>(pick(p_.mesh.size()));
    const int64_t size = p_.mesh[static_cast<size_t>(axis)].size;
    const int64_t shift = size > 1 ? static_cast<int64_t>(1 + pick(static_cast<size_t>(size - 1))) : 0;
    const int64_t m = extent(), k = choose<int64_t>({1, 3, 8, 17, 32});
    const int x = tensor({m, k}, in_dtype());
    const int landing = tensor({m, k}, choose({DType::f32, DType::f32, DType::bf16}), true);
    const int out = tensor({m, k}, data_dtype(), true);
    const int rows_tile = new_tile();
    const std::vector<Subscript> rows = {tile_ix(rows_tile), all_ix()};
    std::vector<Leaf> leaves = {[=, this] { return load(x, rows); }};
    for (size_t a = 0; a < p_.mesh.size(); ++a)
      if (chance(0.5))
        leaves.push_back([=, this] {
          Expr e;
          e.kind = Expr::DeviceIndex;
          e.axis = static_cast<int>(a);
          return cast(add(e), DType::f32);
        });
    std::vector<Stmt> body;
    Stmt copy;
    copy.kind = Stmt::Copy;
    copy.copy = p_.num_copies++;
    copy.tensor = landing;
    copy.index = rows;
    copy.expr = anchored(fexpr(leaves, {leaves[0]}, 3), leaves[0]);  // (a copy does not broadcast)
    copy.axis = axis;
    copy.shift = shift;
    std::vector<int> all_axes;
    for (size_t a = 0; a < p_.mesh.size(); ++a) all_axes.push_back(static_cast<int>(a));
    Stmt barrier;
    barrier.kind = Stmt::Barrier;
    barrier.axes = chance(0.5) ? all_axes : std::vector<int>{axis};
    if (chance(0.2)) body.push_back(barrier);
    body.push_back(copy);
    if (chance(0.4)) {  // work that overlaps the copy
      const int other = tensor({m, k}, data_dtype(), true);
      body.push_back(store(other, rows, fexpr({leaves[0]}, {leaves[0]}, 3)));
    }
    Stmt wait;
    wait.kind = Stmt::CopyWait;
    wait.copy = copy.copy;
    body.push_back(wait);
    // Waits pair with copies by count only: the next block's copy starts once every device of the
    // ring has received this one (a barrier; otherwise two could be in flight towards a device).
    body.push_back(barrier);
    const std::vector<Leaf> after = {[=, this] { return load(landing, rows); }, leaves[0]};
    body.push_back(store(out, rows, fexpr(after, after, 3)));
    if (chance(0.5)) {  // a launch over row blocks
      Stmt launch = loop({dim(m)}, {rows_tile});
      launch.body = std::move(body);
      p_.body.push_back(std::move(launch));
    } else {  // a loop over them in a one-step launch
      Stmt inner = loop({dim(m)}, {rows_tile});
      inner.body = std::move(body);
      Stmt launch = loop({LoopDim{1}}, {new_tile()}, true);
      launch.body.push_back(std::move(inner));
      p_.body.push_back(std::move(launch));
    }
    if (chance(0.5)) p_.returns = {out};
  }

  // --- host views ---
  // A host view's layout as the generator tracks it (strides in its root's elements), so that
  // it only draws view/reshape where the strides can describe the new shape without a copy.
  struct Layout {
    Shape shape, strides;
  };
  static Layout contiguous(const Shape& s) {
    Layout l{s, Shape(s.size(), 1)};
    for (int d = static_cast<int>(s.size()) - 2; d >= 0; --d) l.strides[d] = l.strides[d + 1] * s[d + 1];
    return l;
  }
  static int64_t numel(const Shape& s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
  }

  // A chain of 1..3 host view ops of a tensor of layout `l` (applied to `l`). `write`: ops that
  // a store may go through (no expand); `narrow`: narrow may be drawn.
  std::vector<HostViewOp> view_chain_ops(Layout& l, bool write, bool narrow) {
    std::vector<HostViewOp> ops;
    const int n = 1 + static_cast<int>(pick(3));
    for (int step = 0; step < n; ++step) {
      const int r = static_cast<int>(l.shape.size());
      HostViewOp op;
      Layout next = l;
      bool ok = false;
      for (int attempt = 0; attempt < 8 && !ok; ++attempt) {
        next = l;
        switch (pick(7)) {
          case 0:  // permute
            if (r < 2) break;
            op.kind = HostViewOp::Permute;
            op.dims.clear();
            for (int i = 0; i < r; ++i) op.dims.push_back(i);
            std::shuffle(op.dims.begin(), op.dims.end(), rng_);
            for (int i = 0; i < r; ++i) {
              next.shape[i] = l.shape[op.dims[i]];
              next.strides[i] = l.strides[op.dims[i]];
            }
            ok = true;
            break;
          case 1:  // transpose
            if (r < 2) break;
            op.kind = HostViewOp::Transpose;
            op.axis = static_cast<int>(pick(r));
            op.axis2 = (op.axis + 1 + static_cast<int>(pick(r - 1))) % r;
            std::swap(next.shape[op.axis], next.shape[op.axis2]);
            std::swap(next.strides[op.axis], next.strides[op.axis2]);
            ok = true;
            break;
          case 2: {  // narrow
            if (!narrow) break;
            int d = static_cast<int>(pick(r));
            if (l.shape[d] < 2) break;
            int64_t start = static_cast<int64_t>(pick(l.shape[d]));
            int64_t len = 1 + static_cast<int64_t>(pick(l.shape[d] - start));
            op.kind = HostViewOp::Narrow;
            op.axis = d;
            op.dims = {start, len};
            next.shape[d] = len;
            ok = true;
            break;
          }
          case 3: {  // unsqueeze
            if (r >= 4) break;
            op.kind = HostViewOp::Unsqueeze;
            op.axis = static_cast<int>(pick(r + 1));
            next.shape.insert(next.shape.begin() + op.axis, 1);
            next.strides.insert(next.strides.begin() + op.axis, 0);  // (never merged by a reshape below)
            ok = true;
            break;
          }
          case 4: {  // squeeze a size-1 dim
            if (r < 2) break;
            int d = static_cast<int>(pick(r));
            if (l.shape[d] != 1) break;
            op.kind = HostViewOp::Squeeze;
            op.axis = d;
            next.shape.erase(next.shape.begin() + d);
            next.strides.erase(next.strides.begin() + d);
            ok = true;
            break;
          }
          default: {  // view/reshape: split a dim by a factor, or merge two that are adjacent in memory
            op.kind = chance(0.5) ? HostViewOp::View : HostViewOp::Reshape;
            int d = static_cast<int>(pick(r));
            if (chance(0.5) && r < 4) {
              int64_t f = 0;
              for (int64_t k = 2; k < l.shape[d]; ++k)
                if (l.shape[d] % k == 0) {
                  f = k;
                  if (chance(0.5)) break;
                }
              if (f == 0) break;
              next.shape[d] = l.shape[d] / f;
              next.shape.insert(next.shape.begin() + d + 1, f);
              next.strides[d] = l.strides[d] * f;
              next.strides.insert(next.strides.begin() + d + 1, l.strides[d]);
            } else {
              if (d + 1 >= r || l.shape[d] < 2 || l.shape[d + 1] < 2 ||
                  l.strides[d] != l.strides[d + 1] * l.shape[d + 1])
                break;
              next.shape[d] = l.shape[d] * l.shape[d + 1];
              next.shape.erase(next.shape.begin() + d + 1);
              next.strides[d] = l.strides[d + 1];
              next.strides.erase(next.strides.begin() + d + 1);
            }
            op.dims = next.shape;
            if (chance(0.3)) op.dims[pick(op.dims.size())] = -1;  // inferred
            ok = true;
          }
        }
      }
      if (!ok) continue;
      ops.push_back(op);
      l = next;
    }
    if (!write && chance(0.4) && l.shape.size() < 4) {  // broadcast a new leading dim (read only)
      HostViewOp op;
      op.kind = HostViewOp::Expand;
      int64_t lead = choose<int64_t>({2, 3});
      if (numel(l.shape) * lead <= 60000) {
        op.dims = l.shape;
        for (int64_t& d : op.dims)
          if (chance(0.3)) d = -1;  // kept
        op.dims.insert(op.dims.begin(), lead);
        l.shape.insert(l.shape.begin(), lead);
        l.strides.insert(l.strides.begin(), 0);
        ops.push_back(op);
      }
    }
    return ops;
  }

  // Views of `base` by `ops`, one tensor per op; the last one.
  int apply_views(int base, const std::vector<HostViewOp>& ops) {
    for (const HostViewOp& op : ops) {
      TensorDecl t;
      t.dtype = p_.tensors[base].dtype;
      t.view_of = base;
      t.view = op;
      t.shape = shape_after(p_.tensors[base].shape, op);
      p_.tensors.push_back(t);
      base = static_cast<int>(p_.tensors.size()) - 1;
    }
    return base;
  }
  static Shape shape_after(const Shape& s, const HostViewOp& op) {
    Shape r = s;
    switch (op.kind) {
      case HostViewOp::View:
      case HostViewOp::Reshape: {
        r = op.dims;
        int64_t known = 1;
        for (int64_t d : r) known *= d < 0 ? 1 : d;
        for (int64_t& d : r)
          if (d < 0) d = numel(s) / known;
        return r;
      }
      case HostViewOp::Permute:
        for (size_t i = 0; i < r.size(); ++i) r[i] = s[op.dims[i]];
        return r;
      case HostViewOp::Transpose:
        std::swap(r[op.axis], r[op.axis2]);
        return r;
      case HostViewOp::Expand: {
        r = op.dims;
        const size_t lead = r.size() - s.size();
        for (size_t i = lead; i < r.size(); ++i)
          if (r[i] < 0) r[i] = s[i - lead];
        return r;
      }
      case HostViewOp::Squeeze:
        r.erase(r.begin() + op.axis);
        return r;
      case HostViewOp::Unsqueeze:
        r.insert(r.begin() + op.axis, 1);
        return r;
      case HostViewOp::Narrow:
        r[op.axis] = op.dims[1];
        return r;
    }
    return r;
  }

  Shape root_shape() {
    int rank = 1 + static_cast<int>(pick(3));
    Shape s;
    for (int i = 0; i < rank; ++i) s.push_back(extent());
    while (numel(s) > 20000) s[pick(s.size())] = choose<int64_t>({2, 3, 5});
    return s;
  }

  // Kernels that take host views of their arguments and load through them (permute,
  // transpose, narrow, view/reshape, unsqueeze/squeeze, expand, views of views), or store
  // through a view of an output (then read back through the base by a second launch), or
  // update an argument in place through a view (narrow included), or through one narrow from
  // another, disjoint one. Never a store through one view while an overlapping other view of
  // the same tensor is accessed in the launch (the verifier refuses that).
  void views() {
    Shape s = root_shape();
    const double variant = std::uniform_real_distribution<double>(0, 1)(rng_);
    const bool write_out = variant < 0.35, in_place = variant >= 0.35 && variant < 0.55;
    Layout l = contiguous(s);
    std::vector<HostViewOp> ops;
    int x, half = -1;
    if (in_place && s[0] >= 2 && chance(0.4)) {  // x.narrow(0, h, len) = f(x.narrow(0, 0, len))
      x = tensor(s, data_dtype());
      half = static_cast<int>(s[0] / 2);
      const int64_t len = std::min<int64_t>(half, s[0] - half);
      HostViewOp lo{HostViewOp::Narrow, {0, len}, 0, 0}, hi{HostViewOp::Narrow, {half, len}, 0, 0};
      l.shape[0] = len;
      ops = view_chain_ops(l, true, false);
      ops.insert(ops.begin(), lo);
      std::vector<HostViewOp> ops_hi = ops;
      ops_hi[0] = hi;
      half = apply_views(x, ops_hi);  // the view written
    } else {
      x = tensor(s, in_place ? data_dtype() : in_dtype());
      ops = view_chain_ops(l, write_out || in_place, !write_out);
    }
    const int vx = apply_views(x, ops);
    const Shape t = p_.tensors[vx].shape;
    const int rank = static_cast<int>(t.size());
    std::vector<int> tiles;
    std::vector<LoopDim> dims;
    for (int i = 0; i < rank; ++i) {
      tiles.push_back(new_tile());
      dims.push_back(dim(t[i]));
    }
    std::vector<Subscript> full;
    for (int tt : tiles) full.push_back(tile_ix(tt));
    std::vector<Leaf> leaves = {[=, this] { return load(vx, full); }};
    std::vector<Leaf> exact = leaves;
    if (!in_place && chance(0.4)) {  // a second argument through the same views
      int y = apply_views(tensor(s, in_dtype()), ops);
      leaves.push_back([=, this] { return load(y, full); });
      exact.push_back(leaves.back());
    }
    if (chance(0.4)) {  // a plain argument of the view's shape
      int z = tensor(t, in_dtype());
      leaves.push_back([=, this] { return load(z, full); });
    }
    if (rank >= 2 && chance(0.4)) {  // a row expanded over the leading dims: b.expand(t)
      int b = tensor({t.back()}, in_dtype());
      HostViewOp e{HostViewOp::Expand, t, 0, 0};
      if (chance(0.5)) e.dims.back() = -1;  // kept
      if (chance(0.5)) {                    // through a size-1 dim: b.unsqueeze(0).expand(...)
        int u = apply_views(b, {HostViewOp{HostViewOp::Unsqueeze, {}, 0, 0}});
        int be = apply_views(u, {e});
        leaves.push_back([=, this] { return load(be, full); });
      } else {
        int be = apply_views(b, {e});
        leaves.push_back([=, this] { return load(be, full); });
      }
    }
    if (chance(0.2)) leaves.push_back(index_leaf(tiles.back()));
    int_leaves_.clear();
    Stmt launch = loop(dims, tiles);
    int value = fexpr(leaves, exact, 3);
    if (in_place) {  // the argument updated through its view, returned whole
      launch.body.push_back(store(half >= 0 ? half : vx, full, value));
      p_.body.push_back(std::move(launch));
      p_.returns = {x};
      return;
    }
    if (!write_out) {
      int out = tensor(t, data_dtype(), true);
      launch.body.push_back(store(out, full, value));
      p_.body.push_back(std::move(launch));
      return;
    }
    // Stored through the views `ops` of an output of the root's shape: every element written
    // once (write chains have no narrow), so out == f(x) in the root's coordinates.
    int out = tensor(s, data_dtype(), true);
    int vout = apply_views(out, ops);
    launch.body.push_back(store(vout, full, value));
    p_.body.push_back(std::move(launch));
    if (chance(0.5)) {  // a second launch reads the stores back through the base
      std::vector<int> tiles2;
      std::vector<LoopDim> dims2;
      for (size_t i = 0; i < s.size(); ++i) {
        tiles2.push_back(new_tile());
        dims2.push_back(dim(s[i]));
      }
      std::vector<Subscript> full2;
      for (int tt : tiles2) full2.push_back(tile_ix(tt));
      std::vector<Leaf> second = {[=, this] { return load(out, full2); }, [=, this] { return load(x, full2); }};
      int out2 = tensor(s, data_dtype(), true);
      Stmt launch2 = loop(dims2, tiles2);
      launch2.body.push_back(store(out2, full2, fexpr(second, {second[1]}, 2)));
      p_.body.push_back(std::move(launch2));
      p_.returns = chance(0.5) ? std::vector<int>{out2} : std::vector<int>{out, out2};
    }
  }

  // --- slices, sub-range and nested tiles, per-block partials ---
  static Subscript slice_ix(int64_t begin, int64_t length) { return {Subscript::Slice, -1, -1, begin, length}; }
  int tile_id(int t) {
    Expr e;
    e.kind = Expr::TileId;
    e.tile = t;
    return add(e);
  }

  void slices() {
    switch (pick(4)) {
      case 0:
        return static_slices();
      case 1:
        return dynamic_slices();
      case 2:
        return computed_slices();
      default:
        return nested_partials();
    }
  }

  // Windows of `len` rows at a start computed in the kernel from the grid step,
  // (g.begin() * a + k) % (n - len + 1): in range at every step (the remainder of a positive
  // divisor), cut along the second-to-last dim (pallas: pl.ds, checked at every step when it
  // compiles); sometimes also a window at g.id() + k (in range: n - len + 1 > m - 1 + k).
  void computed_slices() {
    int64_t m = extent(), n = extent() + 1, c = extent();
    int64_t len = 1 + static_cast<int64_t>(pick(static_cast<size_t>(n)));
    int x = tensor({n, c}, data_dtype());
    int out = tensor({m, len, c}, data_dtype(), true);
    int g = new_tile();
    const int64_t a = 1 + static_cast<int64_t>(pick(5)), k = static_cast<int64_t>(pick(7));
    auto start = [=, this] {
      return bin(BinaryFn::mod, bin(BinaryFn::add, bin(BinaryFn::mul, tile_index(g, true), inum(a)), inum(k)),
                 inum(n - len + 1));
    };
    std::vector<Leaf> leaves = {[=, this] {
      return load(x, {Subscript{Subscript::Slice, -1, start(), 0, len}, all_ix()});
    }};
    std::vector<Leaf> exact = leaves;
    const int64_t k2 = n - len + 1 - m;  // g.id() + k2 + len <= n for every g < m
    if (k2 >= 0 && chance(0.5))
      leaves.push_back([=, this] {
        return load(x, {Subscript{Subscript::Slice, -1, bin(BinaryFn::add, tile_id(g), inum(k2)), 0, len}, all_ix()});
      });
    Stmt launch = loop({{m, 0}}, {g}, true);
    launch.body.push_back(store(out, {tile_ix(g), all_ix(), all_ix()}, fexpr(leaves, exact, 3)));
    p_.body.push_back(std::move(launch));
  }

  // Rows [0, b) and [b, m) in two launches over sub-ranges, each reading a static slice of the
  // columns (and of a row vector), stored whole or into a slice of a padded output.
  void static_slices() {
    int64_t m = extent(), n = extent() + 1;
    int64_t len = 1 + static_cast<int64_t>(pick(static_cast<size_t>(n)));
    int x = tensor({m, n}, data_dtype());
    int row = chance(0.5) ? tensor({n}, data_dtype()) : -1;
    const bool padded = chance(0.4);
    int out = tensor({m, padded ? len + 2 : len}, data_dtype(), true);
    std::vector<int64_t> cuts = {0};
    if (m >= 2 && chance(0.7)) cuts.push_back(1 + static_cast<int64_t>(pick(static_cast<size_t>(m - 1))));
    cuts.push_back(m);
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      int t = new_tile();
      LoopDim d = dim(cuts[k + 1]);
      d.begin = cuts[k];
      const int64_t a = static_cast<int64_t>(pick(static_cast<size_t>(n - len + 1)));
      std::vector<Leaf> leaves = {[=, this] { return load(x, {tile_ix(t), slice_ix(a, len)}); }};
      std::vector<Leaf> exact = leaves;
      if (row >= 0) {
        const int64_t r = static_cast<int64_t>(pick(static_cast<size_t>(n - len + 1)));
        leaves.push_back([=, this] { return load(row, {slice_ix(r, len)}); });
      }
      Stmt launch = loop({d}, {t});
      if (padded) {
        launch.body.push_back(store(out, {tile_ix(t), slice_ix(1, len)}, fexpr(leaves, exact, 3)));
        Leaf column = [=, this] { return load(x, {tile_ix(t), slice_ix(0, 1)}); };
        launch.body.push_back(store(out, {tile_ix(t), slice_ix(0, 1)}, anchored(num(0.5), column)));
        launch.body.push_back(
            store(out, {tile_ix(t), slice_ix(len + 1, 1)}, load(x, {tile_ix(t), slice_ix(n - 1, 1)})));
      } else {
        launch.body.push_back(store(out, {tile_ix(t), all_ix()}, fexpr(leaves, exact, 3)));
      }
      p_.body.push_back(std::move(launch));
    }
  }

  // A window of `len` columns per row, starting at an index read from a tensor (on a grid) or at
  // a tile's first row (a block of one row: the row's own start in a row-major table).
  void dynamic_slices() {
    int64_t m = extent(), n = extent() + 1;
    int64_t len = 1 + static_cast<int64_t>(pick(static_cast<size_t>(n)));
    int x = tensor({m, n}, data_dtype());
    int start = tensor({m}, chance(0.5) ? DType::i32 : DType::i64, false, n - len + 1);
    int out = tensor({m, len}, data_dtype(), true);
    int g = new_tile();
    auto at = [=, this] {
      Expr e;
      e.kind = Expr::Load;
      e.tensor = start;
      e.index = {tile_ix(g)};
      int v = add(e);
      return chance(0.3) ? cast(v, DType::i64) : v;
    };
    std::vector<Leaf> leaves = {[=, this] {
      return load(x, {tile_ix(g), Subscript{Subscript::Slice, -1, at(), 0, len}});
    }};
    std::vector<Leaf> exact = leaves;
    if (chance(0.5)) leaves.push_back([=, this] { return load(x, {tile_ix(g), slice_ix(n - len, len)}); });
    Stmt launch = loop({{m, 0}}, {g}, true);
    launch.body.push_back(store(out, {tile_ix(g), all_ix()}, fexpr(leaves, exact, 3)));
    p_.body.push_back(std::move(launch));
  }

  // A launch over row blocks of a registered block size: an inner tile over each block's rows
  // writes an elementwise result and accumulates column sums in a Var, stored per block at
  // t.id() into partials sized by ph::num_blocks; a second launch reduces the partials with a
  // tile loop over ph::num_blocks. (The partials are an intermediate: their row count is the
  // config's.) Sometimes laid out with the block number leading a unit dim (TPU layouts).
  void nested_partials() {
    int64_t m = extent(), n = extent();
    const bool unit = chance(0.5);
    p_.block_refs.push_back(m);
    int x = tensor({m, n}, data_dtype());
    int out = tensor({m, n}, data_dtype(), true);
    int part = tensor(unit ? Shape{m, 1, n} : Shape{m, n}, DType::f32, true);
    p_.tensors[part].count_ref = 0;
    int sums = tensor(unit ? Shape{1, n} : Shape{n}, DType::f32, true);
    p_.returns = {out, sums};
    int to = new_tile(), tn = new_tile(), ti = new_tile();
    LoopDim dm = dim(m);
    dm.fixed_block = 0;
    dm.block_ref = 0;
    Stmt launch = loop({dm, dim(n)}, {to, tn});
    int acc = new_var();
    Expr z;
    z.kind = Expr::Full;
    z.index = {tile_ix(tn)};
    z.number = 0;
    launch.body.push_back(var_decl(acc, add(z)));
    LoopDim di;
    di.parent = to;
    if (chance(0.3)) di.fixed_block = choose<int64_t>({1, 2, 8});
    Stmt inner = loop({di}, {ti});
    std::vector<Leaf> leaves = {[=, this] { return load(x, {tile_ix(ti), tile_ix(tn)}); }};
    inner.body.push_back(store(out, {tile_ix(ti), tile_ix(tn)}, fexpr(leaves, leaves, 3)));
    int summand = anchored(fexpr(leaves, leaves, 2), leaves[0]);
    inner.body.push_back(var_set(acc, bin(BinaryFn::add, var_read(acc), reduce(ReduceFn::sum, summand, 0, false))));
    launch.body.push_back(std::move(inner));
    if (chance(0.5)) {  // a block sized by the registered block size: ph::full({bs0, tn}, c)
      int wide = tensor({m, n}, data_dtype(), true);
      p_.returns.push_back(wide);
      int f = add_full({to, tn}, choose<double>({0.5, -1.0, 2.0}));
      p_.exprs[f].index[0].block_ref = 0;
      std::vector<Leaf> rows = {[=, this] { return load(x, {tile_ix(to), tile_ix(tn)}); }};
      launch.body.push_back(store(wide, {tile_ix(to), tile_ix(tn)},
                                  bin(chance(0.5) ? BinaryFn::add : BinaryFn::mul, fexpr(rows, rows, 2), f)));
    }
    std::vector<Subscript> at = {Subscript{Subscript::Scalar, -1, tile_id(to)}};
    if (unit) at.push_back(Subscript{Subscript::Scalar, -1, -1, 0, 0});  // the integer 0
    at.push_back(tile_ix(tn));
    launch.body.push_back(store(part, at, var_read(acc)));
    p_.body.push_back(std::move(launch));

    int tn2 = new_tile(), tb = new_tile();
    Stmt reduce_launch = loop({dim(n)}, {tn2});
    int acc2 = new_var();
    Expr z2;
    z2.kind = Expr::Full;
    z2.index = {tile_ix(tn2)};
    z2.number = 0;
    int init = add(z2);
    if (unit) init = unsqueeze(init, 0);
    reduce_launch.body.push_back(var_decl(acc2, init));
    LoopDim db;
    db.count_ref = 0;
    Stmt over_blocks = loop({db}, {tb});
    std::vector<Subscript> rows = {tile_ix(tb)};
    if (unit) rows.push_back(all_ix());
    rows.push_back(tile_ix(tn2));
    over_blocks.body.push_back(
        var_set(acc2, bin(BinaryFn::add, var_read(acc2), reduce(ReduceFn::sum, load(part, rows), 0, false))));
    reduce_launch.body.push_back(std::move(over_blocks));
    std::vector<Subscript> dst;
    if (unit) dst.push_back(all_ix());
    dst.push_back(tile_ix(tn2));
    reduce_launch.body.push_back(store(sums, dst, var_read(acc2)));
    p_.body.push_back(std::move(reduce_launch));
  }

  // --- jagged loops ---
  // A jagged tensor x [rows, n] with row offsets drawn with empty groups, one-row groups and long
  // ones (and, for a reduction, rows no group covers). A launch over (group, column block) runs
  // a jagged loop over each group's rows, its block fixed or the config's: a segment
  // reduction into a Var (sum, or max) stored per group, or an elementwise result per row that
  // mixes the row's position in its group and its block number, and sometimes a sum over a
  // loop nested in the trip.
  void jagged() {
    const int64_t groups = choose<int64_t>({1, 2, 3, 5, 8}), n = choose<int64_t>({1, 2, 3, 5, 16, 17});
    const bool reduce_rows = chance(0.5);
    std::vector<int64_t> offsets = {0};
    for (int64_t g = 0; g < groups; ++g)
      offsets.push_back(offsets.back() + choose<int64_t>({0, 0, 1, 2, 3, 5, 8, 17, 33}));
    if (offsets.back() == 0) offsets.back() = 1;  // at least one row
    const int64_t rows = offsets.back() + (reduce_rows ? static_cast<int64_t>(pick(3)) : 0);
    int x = tensor({rows, n}, in_dtype());
    int off = tensor({groups + 1}, chance(0.5) ? DType::i32 : DType::i64);
    p_.tensors[off].values = offsets;
    // (Whole rows sometimes: the columns `all`, as a TPU store through a jagged tile needs.)
    const bool whole_rows = !reduce_rows && chance(0.5);
    int g = new_tile(), tn = whole_rows ? -1 : new_tile(), tr = new_tile();
    LoopDim dg{groups, 1};
    Stmt launch = whole_rows ? loop({dg}, {g}) : loop({dg, dim(n)}, {g, tn});
    LoopDim dr;
    dr.jagged_offsets = off;
    dr.jagged_group = g;
    if (chance(0.4)) dr.fixed_block = choose<int64_t>({1, 2, 8, 16});
    Stmt inner = loop({dr}, {tr});
    const Subscript cols = whole_rows ? all_ix() : tile_ix(tn);
    std::vector<Leaf> leaves = {[=, this] { return load(x, {tile_ix(tr), cols}); }};
    std::vector<Leaf> exact = leaves;
    // Sometimes the trip's work runs under a condition (ph::when) on the group's length (its
    // offsets: scalars, the same at every config), with an else branch for a per-row result.
    int cond = -1;
    if (chance(0.4)) {
      int start = load(off, {Subscript{Subscript::Scalar, -1, tile_index(g, true)}});
      int next = load(off, {Subscript{Subscript::Scalar, -1, bin(BinaryFn::add, tile_index(g, true), inum(1))}});
      cond =
          bin(choose({BinaryFn::gt, BinaryFn::le}), bin(BinaryFn::sub, next, start), inum(choose<int64_t>({0, 1, 3})));
    }
    auto guarded = [&](Stmt s) {
      if (cond < 0) return s;
      Stmt w;
      w.kind = Stmt::When;
      w.expr = cond;
      w.body.push_back(std::move(s));
      return w;
    };
    if (reduce_rows) {
      // One row per group at a leading index ([groups, 1, n]: the TPU layout of per-group rows).
      int out = tensor({groups, 1, n}, data_dtype(), true);
      const bool max = chance(0.3);
      int v = new_var();
      launch.body.push_back(var_decl(v, add_full({tn}, max ? -2.0 : 0.0)));
      int r = reduce(max ? ReduceFn::max : ReduceFn::sum, anchored(fexpr(leaves, exact, 3), leaves[0]), 0, false);
      inner.body.push_back(guarded(var_set(v, bin(max ? BinaryFn::maximum : BinaryFn::add, var_read(v), r))));
      launch.body.push_back(std::move(inner));
      launch.body.push_back(
          store(out, {tile_ix(g), Subscript{Subscript::Scalar, -1, -1, 0, 0}, tile_ix(tn)}, var_read(v)));
    } else {
      int out = tensor({rows, n}, data_dtype(), true);
      // the row's position in its group, and the block's number (exact: small integers)
      leaves.push_back([=, this] {
        int start = load(off, {Subscript{Subscript::Scalar, -1, tile_index(g, true)}});
        int pos = bin(BinaryFn::sub, tile_index(tr, false), start);
        return unsqueeze(bin(BinaryFn::mul, cast(pos, DType::f32), num(0.125)), 1);
      });
      // (a block number depends on the block size: only a fixed one gives every config's result)
      if (dr.fixed_block > 0) leaves.push_back([=, this] { return cast(tile_id(tr), DType::f32); });
      // The group's weights, as a scalar index: its first offset's position (the group's number).
      auto group = [=, this] { return Subscript{Subscript::Scalar, -1, tile_index(g, true)}; };
      // Sometimes a loop nested in the trip, carried in a Var of the trip's block, declared in the
      // trip: the sum of y [rows, k, n] over k's blocks, or grouped GEMM's K loop, the rows' a
      // [rows, k] times the group's weights w [groups, k, n] (a B the same on every trip of the
      // jagged loop, one per K block: its packed panels are kept across the trips).
      if (!whole_rows && chance(0.4)) {
        const int64_t k = choose<int64_t>({1, 2, 3, 5, 9, 33});
        const bool gemm = chance(0.5);
        // (a's dtype mostly y's: a 16-bit operand beside an f32 one rounds the other on the MXU)
        const DType dt = in_dtype();
        int y = tensor({gemm ? groups : rows, k, n}, dt);
        int a = gemm ? tensor({rows, k}, chance(0.8) ? dt : in_dtype()) : -1;
        int tk = new_tile(), v = new_var();
        inner.body.push_back(var_decl(v, add_full({tr, tn}, 0.0)));
        Stmt nested = loop({dim(k)}, {tk});
        nested.body.push_back(
            var_set(v, bin(BinaryFn::add, var_read(v),
                           gemm ? dot(load(a, {tile_ix(tr), tile_ix(tk)}), load(y, {group(), tile_ix(tk), tile_ix(tn)}))
                                : reduce(ReduceFn::sum, load(y, {tile_ix(tr), tile_ix(tk), tile_ix(tn)}), 1, false))));
        inner.body.push_back(std::move(nested));
        leaves.push_back([=, this] { return var_read(v); });
      }
      // Sometimes a dot over a whole K in the trip (moe_matmul's): the rows' a [rows, k] times the
      // group's w [groups, k, n], a B the same on every trip (its panels kept across them).
      if (!whole_rows && chance(0.3)) {
        const int64_t k = choose<int64_t>({1, 4, 19, 64});
        const DType dt = in_dtype();
        int a = tensor({rows, k}, dt), w = tensor({groups, k, n}, chance(0.8) ? dt : in_dtype());
        leaves.push_back([=, this] {
          return dot(load(a, {tile_ix(tr), all_ix()}), load(w, {group(), all_ix(), tile_ix(tn)}));
        });
      }
      inner.body.push_back(guarded(store(out, {tile_ix(tr), cols}, fexpr(leaves, exact, 3))));
      if (cond >= 0) {  // the else branch: every row is written once
        Stmt other;
        other.kind = Stmt::When;
        other.expr = un(UnaryFn::logical_not, cond);
        other.body.push_back(store(out, {tile_ix(tr), cols}, fexpr(leaves, exact, 2)));
        inner.body.push_back(std::move(other));
      }
      launch.body.push_back(std::move(inner));
    }
    p_.body.push_back(std::move(launch));
  }

  // Atomic updates that meet: grid steps over a split reduction (with or without an inner loop
  // over the split's block), a grid loop over rows, or a scatter through an index tensor with
  // repeated indices, masked sometimes. Adds go into f32 (or an exact i32 count): their order is
  // not defined, and one rounding per update of a 16-bit tensor would make it matter; max and
  // min are exact in any dtype.
  void atomics() {
    const auto f = choose({AtomicFn::add, AtomicFn::add, AtomicFn::max, AtomicFn::min});
    const ReduceFn rf = f == AtomicFn::add ? ReduceFn::sum : f == AtomicFn::max ? ReduceFn::max : ReduceFn::min;
    const BinaryFn bf = f == AtomicFn::add ? BinaryFn::add : f == AtomicFn::max ? BinaryFn::maximum : BinaryFn::minimum;
    const int64_t n = extent();
    auto output = [&](Shape shape, bool count) {
      int out = tensor(std::move(shape), count ? DType::i32 : f == AtomicFn::add ? DType::f32 : data_dtype(), true);
      p_.tensors[out].filled = true;
      p_.tensors[out].fill = count ? 3 : choose<double>({0.0, 0.25, -0.5});
      return out;
    };
    auto update = [&](int out, std::vector<Subscript> ix, int value, int mask) {
      Stmt s = store(out, std::move(ix), value);
      s.atomic = static_cast<int>(f);
      s.mask = mask;
      return s;
    };
    const size_t shape = pick(3);
    if (shape == 0) {  // a split reduction: out[0, tn] op= reduce over the split's rows
      const int64_t k = extent();
      int x = tensor({k, n}, in_dtype());
      int out = output({1, n}, false);
      int ts = new_tile(), tn = new_tile();
      Stmt launch = loop({dim(k), dim(n)}, {ts, tn});
      const Subscript zero{Subscript::Scalar, -1, -1, 0, 0};
      auto value_of = [&](int rows) {
        std::vector<Leaf> leaves = {[=, this] { return load(x, {tile_ix(rows), tile_ix(tn)}); }};
        return reduce(rf, anchored(fexpr(leaves, leaves, 2), leaves[0]), 0, false);
      };
      if (chance(0.5)) {  // an inner loop over the split's block, carried in a Var
        int tk = new_tile(), v = new_var();
        launch.body.push_back(var_decl(v, add_full({tn}, f == AtomicFn::add ? 0.0 : f == AtomicFn::max ? -4.0 : 4.0)));
        LoopDim inner;
        inner.extent = k;
        inner.parent = ts;
        Stmt il = loop({inner}, {tk});
        il.body.push_back(var_set(v, bin(bf, var_read(v), value_of(tk))));
        launch.body.push_back(std::move(il));
        launch.body.push_back(update(out, {zero, tile_ix(tn)}, var_read(v), -1));
      } else {
        launch.body.push_back(update(out, {zero, tile_ix(tn)}, value_of(ts), -1));
      }
      p_.body.push_back(std::move(launch));
    } else if (shape == 1) {  // one grid step per row: out[tn] op= x[g, tn], masked sometimes
      const int64_t m = extent();
      // (x [m, 1, n]: the row as a scalar index, g.begin(), at a leading dim, as a TPU block takes it)
      int x = tensor({m, 1, n}, in_dtype());
      int out = output({n}, false);
      int g = new_tile(), tn = new_tile();
      Stmt launch = loop({LoopDim{m, 1}, dim(n)}, {g, tn});
      std::vector<Leaf> leaves = {[=, this] {
        const Subscript row{Subscript::Scalar, -1, tile_index(g, true)}, zero{Subscript::Scalar, -1, -1, 0, 0};
        return load(x, {row, zero, tile_ix(tn)});
      }};
      const int value = fexpr(leaves, leaves, 2);
      const int mask = chance(0.4) ? condition(leaves) : -1;
      launch.body.push_back(update(out, {tile_ix(tn)}, value, mask));
      p_.body.push_back(std::move(launch));
    } else {  // a scatter with repeated indices: out[ids[t], tn] op= x[t, tn] (or a count)
      // Sometimes without tn (a histogram, out[ids[t]] op= x[t]): the update's innermost loop then
      // runs along the index block, where two elements of one vector may meet on a bin (the cpu
      // vectorized that loop with AVX-512 scatters, and kept one of the updates that met).
      const bool histogram = chance(0.35);
      const int64_t rows = extent(), bins = choose<int64_t>({1, 2, 3, 7, 16});
      const bool count = f == AtomicFn::add && chance(0.3);
      int ids = tensor({rows}, chance(0.5) ? DType::i32 : DType::i64, false, bins);
      int x = tensor(histogram ? Shape{rows} : Shape{rows, n}, in_dtype());
      int out = output(histogram ? Shape{bins} : Shape{bins, n}, count);
      int t = new_tile(), tn = histogram ? -1 : new_tile();
      Stmt launch = histogram ? loop({dim(rows)}, {t}) : loop({dim(rows), dim(n)}, {t, tn});
      std::vector<Leaf> leaves = {[=, this] {
        return histogram ? load(x, {tile_ix(t)}) : load(x, {tile_ix(t), tile_ix(tn)});
      }};
      const Subscript row{Subscript::Scalar, -1, load(ids, {tile_ix(t)})};
      const int value =
          count ? add_full(histogram ? std::vector<int>{t} : std::vector<int>{t, tn}, 1.0) : fexpr(leaves, leaves, 2);
      const int mask = chance(0.3) ? condition(leaves) : -1;
      launch.body.push_back(update(out,
                                   histogram ? std::vector<Subscript>{row} : std::vector<Subscript>{row, tile_ix(tn)},
                                   count ? cast(value, DType::i64) : value, mask));
      p_.body.push_back(std::move(launch));
    }
  }

  std::mt19937_64 rng_;
  Program p_;
  bool approximate_exact_ = false;  // the current `exact` leaves are not exact (a Var's sum)
  std::vector<Leaf> int_leaves_;    // i64 leaves of the current launch (integer inputs, tile indices)
};

}  // namespace

Program generate(uint64_t seed, const std::string& family) { return Generator(seed).run(family); }

}  // namespace parhelion::fuzz

#include "fuzz/generate.h"

#include <functional>
#include <random>

#include "ir/ir.h"
#include "parhelion/error.h"

namespace parhelion::fuzz {

using ir::BinaryFn;
using ir::ReduceFn;
using ir::UnaryFn;

const std::vector<std::string>& families() {
  static const std::vector<std::string> f = {"pointwise", "row_reduce", "loop_reduce", "matmul", "gather", "slices"};
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
    else if (family == "slices")
      slices();
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

  // --- building ---
  int add(Expr e) {
    p_.exprs.push_back(std::move(e));
    return static_cast<int>(p_.exprs.size()) - 1;
  }
  int tensor(Shape shape, DType dtype, bool output = false, int64_t index_bound = 0) {
    p_.tensors.push_back({std::move(shape), dtype, output, index_bound});
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
    switch (pick(16)) {
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
        return un(UnaryFn::exp, un(UnaryFn::tanh, sub()));
      case 9:
        return un(UnaryFn::log, positive(sub(), 1.0));
      case 10:
        return un(chance(0.5) ? UnaryFn::sqrt : UnaryFn::rsqrt, positive(sub(), 0.5));
      case 11: {
        Expr w;
        w.kind = Expr::Where;
        w.args = {condition(exact), sub(), sub()};
        return add(w);
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

  // The i64 index of a tile's last dim as a small f32, shaped to broadcast as [.., t] (rank `r`).
  Leaf index_leaf(int tile) {
    // (scaled by a power of two: exact in f32 and in double, so it may appear in conditions)
    return [this, tile] { return bin(BinaryFn::mul, cast(tile_index(tile, false), DType::f32), num(0.125)); };
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
    int x = tensor(s, data_dtype());
    std::vector<Leaf> leaves = {[=, this] { return load(x, full); }};
    std::vector<Leaf> exact = leaves;
    if (chance(0.6)) {
      int y = tensor(s, data_dtype());
      leaves.push_back([=, this] { return load(y, full); });
      exact.push_back(leaves.back());
    }
    if (rank >= 2 && chance(0.6)) {  // a row, broadcast over the leading dims
      int b = tensor({s.back()}, data_dtype());
      leaves.push_back([=, this] { return load(b, {tile_ix(tiles.back())}); });
    }
    if (rank >= 2 && chance(0.5)) {  // a column: [t0] unsqueezed to [t0, 1, ...]
      int c = tensor({s[0]}, data_dtype());
      leaves.push_back([=, this] {
        int v = load(c, {tile_ix(tiles[0])});
        for (int i = 1; i < rank; ++i) v = unsqueeze(v, -1);
        return v;
      });
    }
    if (chance(0.3)) leaves.push_back(index_leaf(tiles.back()));
    const double variant = std::uniform_real_distribution<double>(0, 1)(rng_);
    if (variant < 0.2) {  // in place: x[tiles] = f(x[tiles], ...), x returned
      Stmt launch = loop(dims, tiles);
      launch.body.push_back(store(x, full, fexpr(leaves, exact, 4)));
      p_.body.push_back(std::move(launch));
      p_.returns = {x};
      return;
    }
    int out = tensor(s, data_dtype(), true);
    Stmt launch = loop(dims, tiles);
    launch.body.push_back(store(out, full, fexpr(leaves, exact, 4)));
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
      Stmt launch2 = loop(dims2, tiles2);
      launch2.body.push_back(store(out2, full2, fexpr(second, {second[1]}, 3)));
      p_.body.push_back(std::move(launch2));
      p_.returns = chance(0.5) ? std::vector<int>{out2} : std::vector<int>{out, out2};
    }
  }

  static ReduceFn reduce_fn(size_t i) { return static_cast<ReduceFn>(i % 4); }

  void row_reduce() {
    int64_t m = extent(), n = extent();
    const bool columns = chance(0.3);  // reduce over axis 0 of [M, tn] blocks
    int x = tensor({m, n}, data_dtype());
    int t = new_tile();
    Subscript ix_t = tile_ix(t);
    std::vector<Subscript> block =
        columns ? std::vector<Subscript>{all_ix(), ix_t} : std::vector<Subscript>{ix_t, all_ix()};
    std::vector<Leaf> leaves = {[=, this] { return load(x, block); }};
    std::vector<Leaf> exact = leaves;
    if (chance(0.5)) {  // along the reduced dim, broadcast over the blocked one
      int b = tensor({columns ? m : n}, data_dtype());
      leaves.push_back([=, this] {
        int v = load(b, {all_ix()});
        return columns ? unsqueeze(v, -1) : v;
      });
    }
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
      int final = bin(BinaryFn::sub, e, r);
      if (chance(0.7)) final = fexpr(std::vector<Leaf>{[=] { return final; }, [=] { return r; }}, exact, 2);
      int out = tensor({m, n}, data_dtype(), true);
      launch.body.push_back(store(out, block, final));
    }
    p_.body.push_back(std::move(launch));
  }

  void loop_reduce() {
    int64_t m = extent(), n = extent();
    int x = tensor({m, n}, data_dtype());
    int b = chance(0.5) ? tensor({n}, data_dtype()) : -1;
    int tm = new_tile();
    int out = tensor({m}, data_dtype(), true);
    Stmt launch = loop({dim(m)}, {tm});
    auto pass = [&](ReduceFn f, std::function<int(int)> transform) {
      int tn = new_tile();
      std::vector<Leaf> leaves = {[=, this] { return load(x, {tile_ix(tm), tile_ix(tn)}); }};
      std::vector<Leaf> exact = leaves;
      if (b >= 0) leaves.push_back([=, this] { return load(b, {tile_ix(tn)}); });
      if (chance(0.2)) leaves.push_back(index_leaf(tn));
      int v = new_var();
      double init = f == ReduceFn::max ? -INFINITY : f == ReduceFn::min ? INFINITY : 0.0;
      launch.body.push_back(var_decl(v, add_full({tm}, init)));
      Stmt inner = loop({dim(n)}, {tn});
      int blk = transform(anchored(fexpr(leaves, exact, 3), leaves[0]));
      int r = reduce(f == ReduceFn::mean ? ReduceFn::sum : f, blk, -1, false);
      int acc = var_read(v);
      int next = f == ReduceFn::max   ? bin(BinaryFn::maximum, acc, r)
                 : f == ReduceFn::min ? bin(BinaryFn::minimum, acc, r)
                                      : bin(BinaryFn::add, acc, r);
      inner.body.push_back(var_set(v, next));
      launch.body.push_back(std::move(inner));
      return v;
    };
    int result;
    if (chance(0.35)) {  // two passes: the row max, then sum(exp(x - max)) (a log-sum-exp)
      int vmax = pass(ReduceFn::max, [](int e) { return e; });
      int vsum = pass(ReduceFn::sum, [&, vmax](int e) {
        return un(UnaryFn::exp, bin(BinaryFn::sub, e, unsqueeze(var_read(vmax), -1)));
      });
      result = bin(BinaryFn::add, un(UnaryFn::log, var_read(vsum)), var_read(vmax));
    } else {
      ReduceFn f = reduce_fn(pick(4));
      int v = pass(f, [](int e) { return e; });
      result = var_read(v);
      if (f == ReduceFn::mean) result = bin(BinaryFn::div, result, num(static_cast<double>(n)));
      if (chance(0.5))
        result = fexpr(std::vector<Leaf>{[=, this] { return var_read(v); }}, {[=, this] { return var_read(v); }}, 2);
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

  void matmul() {
    const bool batched = chance(0.35);
    const bool shared_b = batched && chance(0.4);  // y [K, N] for every batch
    int64_t bs = batched ? choose<int64_t>({1, 2, 3}) : 1, m = extent(), k = extent(), n = extent();
    DType dt = data_dtype();
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
    int b =
        tensor(shared_b ? Shape{k, n} : lead_shape(bt ? Shape{n, k} : Shape{k, n}), chance(0.8) ? dt : data_dtype());
    int bias = chance(0.5) ? tensor({n}, data_dtype()) : -1;
    int out = tensor(lead_shape({m, n}), data_dtype(), true);
    std::vector<int> grid_tiles = batched ? std::vector<int>{tb, tm, tn} : std::vector<int>{tm, tn};
    std::vector<LoopDim> grid_dims;
    if (batched) grid_dims.push_back(dim(bs));
    grid_dims.push_back(dim(m));
    grid_dims.push_back(dim(n));
    Stmt launch = loop(grid_dims, grid_tiles);
    int v = new_var();
    std::vector<int> acc_tiles = batched ? std::vector<int>{tb, tm, tn} : std::vector<int>{tm, tn};
    launch.body.push_back(var_decl(v, add_full(acc_tiles, 0.0)));
    Stmt inner = loop({dim(k)}, {tk});
    int A = at ? transpose(load(a, {tile_ix(tk), tile_ix(tm)})) : load(a, lead({tile_ix(tm), tile_ix(tk)}));
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
    int next;
    switch (pick(3)) {
      case 0:
        d.args.push_back(var_read(v));
        next = add(d);
        break;
      case 1:
        next = bin(BinaryFn::add, var_read(v), add(d));
        break;
      default:
        d.dtype = DType::bf16;  // the product rounded, as a bf16 matmul's output
        next = bin(BinaryFn::add, var_read(v), add(d));
    }
    inner.body.push_back(var_set(v, next));
    launch.body.push_back(std::move(inner));
    std::vector<Leaf> leaves = {[=, this] { return var_read(v); }};
    if (bias >= 0) leaves.push_back([=, this] { return load(bias, {tile_ix(tn)}); });
    // Conditions compare exact values only (the bias, the column index): the accumulator is
    // rounded differently at different K blocks (a rounded product per block), and a
    // threshold on it would turn a rounding difference into a different branch.
    std::vector<Leaf> exact;
    if (bias >= 0) exact.push_back(leaves.back());
    exact.push_back(index_leaf(tn));
    int epilogue = chance(0.4) ? var_read(v) : fexpr(leaves, exact, 2);
    launch.body.push_back(store(out, lead({tile_ix(tm), tile_ix(tn)}), epilogue));
    p_.body.push_back(std::move(launch));
  }

  void gather() {
    int64_t v = extent() + 1, d = extent(), g = extent();
    int table = tensor({v, d}, data_dtype());
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
      int b = tensor({d}, data_dtype());
      leaves.push_back([=, this] { return load(b, {tile_ix(td)}); });
    }
    Stmt launch = grid ? loop({{g, 0}}, {tg}, true) : loop({{g, 1}}, {tg});
    Stmt inner = loop({dim(d)}, {td});
    inner.body.push_back(store(out, {tile_ix(tg), tile_ix(td)}, fexpr(leaves, exact, 3)));
    launch.body.push_back(std::move(inner));
    p_.body.push_back(std::move(launch));
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
    switch (pick(3)) {
      case 0:
        return static_slices();
      case 1:
        return dynamic_slices();
      default:
        return nested_partials();
    }
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

  std::mt19937_64 rng_;
  Program p_;
};

}  // namespace

Program generate(uint64_t seed, const std::string& family) { return Generator(seed).run(family); }

}  // namespace parhelion::fuzz

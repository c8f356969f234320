// Gathers, scatters and masked access (docs/language.md, section 4): each construct on the cpu
// backend at several configs against a reference written here and against the interpreter, the
// bounds checks (cpu and interpreter), the race rule of scatters, the Tile IR text round trip,
// and the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/pallas/interpret.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "kernels/kernels.h"
#include "kernels/references.h"
#include "parhelion/parhelion.h"

#include "tests/user_error.h"

namespace ph = parhelion;
namespace pallas = ph::backend::pallas;

namespace {

std::string here(int line) { return std::string("test_gather.cpp:") + std::to_string(line) + ": "; }

// The default config and three that cut every tile into small (ragged) blocks, with reversed
// loop orders, two threads and every inner-loop strategy, all drawn from the kernel's own space.
std::vector<ph::Config> configs(ph::KernelBase& k, const std::vector<ph::Arg>& args) {
  ph::CompiledKernel c = k.compile(args);
  const ph::ConfigSpec& spec = c.config_spec();
  std::vector<ph::Config> out = {c.config()};
  for (int v = 0; v < 3; ++v) {
    ph::Config x = c.config();
    for (size_t i = 0; i < spec.block_sizes.size(); ++i) {
      const auto& ch = spec.block_sizes[i].choices;
      x.block_sizes[i] = ch[std::min<size_t>(static_cast<size_t>(v), ch.size() - 1)];
    }
    for (auto& order : x.loop_orders)
      if (v != 1) std::reverse(order.begin(), order.end());
    x.num_threads = v == 2 ? 1 : 2;
    for (size_t i = 0; i < spec.inner_loops.size(); ++i) {
      const auto& st = spec.inner_loops[i].strategies;
      x.inner_loops[i].strategy = st[static_cast<size_t>(v) % st.size()];
    }
    out.push_back(x);
  }
  return out;
}

// Runs `k` at each config and at the interpreter; each output must equal `want` to `tol`.
void check_all(ph::KernelBase& k, const std::vector<ph::Arg>& args, const std::vector<ph::Array>& want,
               double tol = 1e-6) {
  std::vector<ph::Array> interp = k.interpret(args);
  ASSERT_EQ(interp.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_LE(ph::max_abs_diff(interp[i], want[i]), tol) << "interpreter";
  for (const ph::Config& cfg : configs(k, args)) {
    SCOPED_TRACE(cfg.to_json());
    std::vector<ph::Array> got = k.compile(args, &cfg).run(args);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_LE(ph::max_abs_diff(got[i], want[i]), tol);
  }
}

ph::Array ids_array(const std::vector<int64_t>& v, ph::DType dt) {
  ph::Array a = ph::Array::zeros({static_cast<int64_t>(v.size())}, dt);
  for (size_t i = 0; i < v.size(); ++i) a.set(static_cast<int64_t>(i), static_cast<double>(v[i]));
  return a;
}

// --- gathers -------------------------------------------------------------------------------------

constexpr int kLineGather = __LINE__ + 5;
ph::Tensor embed(ph::Tensor ids, ph::Tensor w) {
  auto n = ids.size(0), e = w.size(1);
  auto out = ph::empty({n, e}, w.dtype());
  for (auto [tt, te] : ph::tile(n, e)) {
    out[tt, te] = w[ids[tt].to(ph::DType::i64), te];
  }
  return out;
}

ph::Array embed_reference(const ph::Array& ids, const ph::Array& w) {
  int64_t n = ids.shape()[0], e = w.shape()[1];
  ph::Array r = ph::Array::zeros({n, e}, w.dtype());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < e; ++j) r.set(i * e + j, w.get(static_cast<int64_t>(ids.get(i)) * e + j));
  return r;
}

TEST(Gather, RowsByAnIndexBlockRaggedAndRepeated) {
  ph::Kernel k("embed", embed);
  for (ph::DType dt : {ph::DType::i32, ph::DType::i64}) {
    ph::Array ids = ids_array({4, 0, 4, 6, 1, 1, 2}, dt);  // repeated rows, 7 tokens: ragged blocks
    ph::Array w = ph::Array::random({7, 13}, ph::DType::f32, 3);
    check_all(k, {ids, w}, {embed_reference(ids, w)});
  }
  ph::Array one = ids_array({5}, ph::DType::i64), w1 = ph::Array::random({6, 1}, ph::DType::f32, 4);
  check_all(k, {one, w1}, {embed_reference(one, w1)});  // size 1 everywhere
  ph::Array wb = ph::Array::random({9, 5}, ph::DType::bf16, 5), ib = ids_array({8, 0, 3}, ph::DType::i64);
  check_all(k, {ib, wb}, {embed_reference(ib, wb)});
}

// A gather copies rows bit for bit, as torch's does: NaN payloads (signalling ones included),
// -0 and subnormals of a bf16 or fp8 table arrive unchanged, at every config.
TEST(Gather, CopiesTheElementsBits) {
  ph::Kernel k("embed", embed);
  const std::vector<uint16_t> bf16_bits = {0x7f81, 0xffc3, 0x8000, 0x0001, 0x7f80, 0x3f80};
  const std::vector<uint8_t> fp8_bits = {0x7f, 0xff, 0x80, 0x01, 0x7e, 0x38};
  ph::Array ids = ids_array({5, 0, 3, 1, 4, 2, 0}, ph::DType::i64);
  for (ph::DType dt : {ph::DType::bf16, ph::DType::f8e4m3}) {
    ph::Array w = ph::Array::zeros({6, 1}, dt);
    for (size_t i = 0; i < 6; ++i) {
      if (dt == ph::DType::bf16)
        w.data_as<uint16_t>()[i] = bf16_bits[i];
      else
        w.data_as<uint8_t>()[i] = fp8_bits[i];
    }
    for (const ph::Config& cfg : configs(k, {ids, w})) {
      SCOPED_TRACE(cfg.to_json());
      ph::Array got = k.compile({ids, w}, &cfg).run({ids, w})[0];
      for (int64_t i = 0; i < 7; ++i) {
        const auto row = static_cast<size_t>(ids.get(i));
        if (dt == ph::DType::bf16)
          EXPECT_EQ(got.data_as<uint16_t>()[i], bf16_bits[row]) << "token " << i;
        else
          EXPECT_EQ(got.data_as<uint8_t>()[i], fp8_bits[row]) << "token " << i;
      }
    }
  }
}

TEST(Gather, OutOfRangeIndexIsAnErrorAtTheLine) {
  ph::Kernel k("embed", embed);
  ph::Array ids = ids_array({1, 7, 0}, ph::DType::i64), w = ph::Array::random({7, 3}, ph::DType::f32, 3);
  for (const ph::Config& c : configs(k, {ids, w})) {
    std::string msg = user_error_of([&] { k.compile({ids, w}, &c).run({ids, w}); });
    EXPECT_HAS(msg, here(kLineGather));
    EXPECT_HAS(msg, "index 7 is out of bounds for dimension 0 of arg1 (size 7)");
  }
  std::string msg = user_error_of([&] { k.interpret({ids, w}); });
  EXPECT_HAS(msg, here(kLineGather));
  EXPECT_HAS(msg, "index 7 is out of bounds for dimension 0 of arg1, which has size 7");
  ph::Array neg = ids_array({-1}, ph::DType::i64);
  EXPECT_HAS(user_error_of([&] { k(neg, w); }), "index -1 is out of bounds for dimension 0 of arg1");
}

// t.index() + offset is an index block too: a shifted copy, the shifted-out columns masked.
ph::Tensor shift_left(ph::Tensor x, int64_t by) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m, n});
  for (auto [tm, tn] : ph::tile(m, n)) {
    auto j = tn.index() + by;
    out[tm, tn] = ph::load(x, {tm, j}, j < n, -1.0f);
  }
  return out;
}

template <int By>
ph::Tensor shift_left_by(ph::Tensor x) {
  return shift_left(x, By);
}

TEST(Gather, ComputedIndexBlockWithMask) {
  ph::Kernel k0("shift0", shift_left_by<0>), k1("shift1", shift_left_by<1>), k3("shift3", shift_left_by<3>);
  ph::KernelBase* ks[] = {&k0, &k1, &k3};
  for (int64_t by : {0, 1, 3}) {
    ph::KernelBase& k = *ks[by == 3 ? 2 : by];
    ph::Array x = ph::Array::random({5, 9}, ph::DType::f32, 7);
    ph::Array want = ph::Array::zeros({5, 9}, ph::DType::f32);
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = 0; j < 9; ++j) want.set(i * 9 + j, j + by < 9 ? x.get(i * 9 + j + by) : -1.0);
    check_all(k, {x}, {want});
  }
}

// A gather along the second dim, and an index block of constant length (ph::arange).
ph::Tensor columns(ph::Tensor x, ph::Tensor cols) {
  auto m = x.size(0);
  auto c = cols.size(0);
  auto out = ph::empty({m, c});
  for (auto tm : ph::tile(m)) out[tm, ph::all] = x[tm, cols[ph::all]];
  return out;
}

TEST(Gather, ColumnsByAConstantLengthIndexBlock) {
  ph::Kernel k("columns", columns);
  ph::Array x = ph::Array::random({6, 10}, ph::DType::f32, 8), cols = ids_array({9, 0, 3, 3}, ph::DType::i64);
  ph::Array want = ph::Array::zeros({6, 4}, ph::DType::f32);
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 4; ++j) want.set(i * 4 + j, x.get(i * 10 + static_cast<int64_t>(cols.get(j))));
  check_all(k, {x, cols}, {want});
}

// Indices that vary along the innermost (simd) loop are checked ahead of it (emit/loop_nest.cpp):
// a gathered column index at each element, and a shifted tile index, linear along the loop, at
// the loop's two ends. Out of range anywhere, in any block of any config, the launch still names
// the line, the dimension and the index; in range, the loop that runs has no check inside.
constexpr int kLineColumns = __LINE__ + 4;
ph::Tensor columns_plus_shifted(ph::Tensor x, ph::Tensor cols, ph::Tensor shift) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m, n});
  for (auto [tm, tn] : ph::tile(m, n)) out[tm, tn] = x[tm, cols[tn]] + x[tm, tn.index() + shift[0]];
  return out;
}

TEST(Gather, IndicesAlongTheLoopAreCheckedAheadAndStillNamed) {
  ph::Kernel k("columns_plus_shifted", columns_plus_shifted);
  const int64_t m = 5, n = 37;
  ph::Array x = ph::Array::random({m, n}, ph::DType::f32, 4);
  std::vector<int64_t> c(n);
  for (int64_t j = 0; j < n; ++j) c[static_cast<size_t>(j)] = (j * 7 + 3) % n;
  ph::Array cols = ids_array(c, ph::DType::i64);
  ph::Array zero = ids_array({0}, ph::DType::i64);
  ph::Array want = ph::Array::zeros({m, n}, ph::DType::f32);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) want.set(i * n + j, x.get(i * n + c[static_cast<size_t>(j)]) + x.get(i * n + j));
  check_all(k, {x, cols, zero}, {want});
  const std::string src = k.compile({x, cols, zero}).source();
  EXPECT_NE(src.find("ph_bad0 |="), std::string::npos) << "a loop that checks the gathered indices";
  EXPECT_NE(src.find("const bool ph_span0 = "), std::string::npos) << "the shifted index checked at the ends";
  EXPECT_NE(src.find("} else {  // the loop with its checks"), std::string::npos);

  // A gathered column out of range at one element: at the first, the middle, the last.
  for (int64_t at : {int64_t{0}, n / 2, n - 1})
    for (int64_t bad : {n, int64_t{-2}}) {
      std::vector<int64_t> cb = c;
      cb[static_cast<size_t>(at)] = bad;
      ph::Array cols_bad = ids_array(cb, ph::DType::i64);
      for (const ph::Config& cfg : configs(k, {x, cols_bad, zero})) {
        SCOPED_TRACE(cfg.to_json() + " at " + std::to_string(at));
        std::string msg = user_error_of([&] { k.compile({x, cols_bad, zero}, &cfg).run({x, cols_bad, zero}); });
        EXPECT_HAS(msg, here(kLineColumns));
        EXPECT_HAS(msg, "index " + std::to_string(bad) + " is out of bounds for dimension 1 of arg0 (size 37)");
      }
    }
  // The shifted index past the end: the last columns of every row (and before the start).
  for (int64_t by : {int64_t{1}, int64_t{-1}}) {
    ph::Array shift = ids_array({by}, ph::DType::i64);
    for (const ph::Config& cfg : configs(k, {x, cols, shift})) {
      SCOPED_TRACE(cfg.to_json() + " shift " + std::to_string(by));
      std::string msg = user_error_of([&] { k.compile({x, cols, shift}, &cfg).run({x, cols, shift}); });
      EXPECT_HAS(msg, here(kLineColumns));
      EXPECT_HAS(msg, "is out of bounds for dimension 1 of arg0 (size 37)");
    }
  }
}

// A row index read through another under a mask (paged attention's block table): ids =
// table[slot[t]] where valid[t], else 0; out[t, :] = emb[ids, :]. In the loop over columns both
// indices are checked ahead (the outer reads through the inner, so it is neither hoisted nor
// checked before it): an out-of-range slot where valid is an error, not a read past the table.
constexpr int kLinePaged = __LINE__ + 5;
ph::Tensor paged_rows(ph::Tensor table, ph::Tensor slot, ph::Tensor valid, ph::Tensor emb) {
  auto n = slot.size(0), e = emb.size(1);
  auto out = ph::empty({n, e});
  for (auto [tt, te] : ph::tile(n, e)) {
    auto ids = ph::load(table, {slot[tt]}, valid[tt] > 0, 0);
    out[tt, te] = emb[ids, te];
  }
  return out;
}

TEST(Gather, AnIndexReadThroughAMaskedIndexIsCheckedInOrder) {
  ph::Kernel k("paged_rows", paged_rows);
  ph::Array table = ids_array({3, 0, 2, 1}, ph::DType::i64), emb = ph::Array::random({4, 40}, ph::DType::f32, 6);
  auto want_of = [&](const std::vector<int64_t>& slot, const std::vector<int64_t>& valid) {
    ph::Array want = ph::Array::zeros({static_cast<int64_t>(slot.size()), 40}, ph::DType::f32);
    for (size_t i = 0; i < slot.size(); ++i) {
      const int64_t row = valid[i] > 0 ? static_cast<int64_t>(table.get(slot[i])) : 0;
      for (int64_t j = 0; j < 40; ++j) want.set(static_cast<int64_t>(i) * 40 + j, emb.get(row * 40 + j));
    }
    return want;
  };
  // Masked off, a slot far out of range is neither checked nor read.
  const std::vector<int64_t> slot = {1, 3, 99, 0, 2, -5}, valid = {1, 1, 0, 1, 1, 0};
  ph::Array s = ids_array(slot, ph::DType::i64), v = ids_array(valid, ph::DType::i64);
  check_all(k, {table, s, v, emb}, {want_of(slot, valid)});
  // Where valid, it is an error naming the table's subscript.
  ph::Array s_bad = ids_array({1, 3, 1 << 30, 0, 2, -5}, ph::DType::i64),
            v_bad = ids_array({1, 1, 1, 1, 1, 0}, ph::DType::i64);
  for (const ph::Config& cfg : configs(k, {table, s_bad, v_bad, emb})) {
    SCOPED_TRACE(cfg.to_json());
    std::string msg = user_error_of([&] {
      k.compile({table, s_bad, v_bad, emb}, &cfg).run({table, s_bad, v_bad, emb});
    });
    EXPECT_HAS(msg, here(kLinePaged));
    EXPECT_HAS(msg, "index 1073741824 is out of bounds for dimension 0 of arg0 (size 4)");
  }
  // A table entry out of range: the error names emb's subscript.
  ph::Array table_bad = ids_array({3, 0, 7, 1}, ph::DType::i64);
  for (const ph::Config& cfg : configs(k, {table_bad, s, v, emb})) {
    SCOPED_TRACE(cfg.to_json());
    std::string msg = user_error_of([&] { k.compile({table_bad, s, v, emb}, &cfg).run({table_bad, s, v, emb}); });
    EXPECT_HAS(msg, here(kLinePaged + 1));
    EXPECT_HAS(msg, "index 7 is out of bounds for dimension 0 of arg3 (size 4)");
  }
}

// A cat of two gathered row blocks: each part is read only where the cat takes it, so the
// second part's row index (the same all along the loop over columns) is neither read nor
// checked, nor hoisted out of that loop, for the first part's rows.
constexpr int kLineCatRows = __LINE__ + 4;
ph::Tensor cat_rows(ph::Tensor x, ph::Tensor ids_a, ph::Tensor ids_b) {
  auto na = ids_a.size(0), nb = ids_b.size(0), n = x.size(1);
  auto out = ph::empty({na + nb, n});
  for (auto tn : ph::tile(n)) out[ph::all, tn] = ph::cat({x[ids_a[ph::all], tn], x[ids_b[ph::all], tn]}, 0);
  return out;
}

TEST(Gather, ACatsPartIsReadAndCheckedOnlyWhereTaken) {
  ph::Kernel k("cat_rows", cat_rows);
  ph::Array x = ph::Array::random({6, 50}, ph::DType::f32, 2);
  const std::vector<int64_t> a = {5, 0, 3}, b = {1, 1, 4, 2};
  ph::Array want = ph::Array::zeros({7, 50}, ph::DType::f32);
  for (int64_t r = 0; r < 7; ++r)
    for (int64_t j = 0; j < 50; ++j)
      want.set(r * 50 + j, x.get((r < 3 ? a[static_cast<size_t>(r)] : b[static_cast<size_t>(r - 3)]) * 50 + j));
  check_all(k, {x, ids_array(a, ph::DType::i64), ids_array(b, ph::DType::i64)}, {want});
  ph::Array b_bad = ids_array({1, 1, 6, 2}, ph::DType::i64);
  for (const ph::Config& cfg : configs(k, {x, ids_array(a, ph::DType::i64), b_bad})) {
    SCOPED_TRACE(cfg.to_json());
    std::string msg = user_error_of([&] {
      k.compile({x, ids_array(a, ph::DType::i64), b_bad}, &cfg).run({x, ids_array(a, ph::DType::i64), b_bad});
    });
    EXPECT_HAS(msg, here(kLineCatRows));
    EXPECT_HAS(msg, "index 6 is out of bounds for dimension 0 of arg0 (size 6)");
  }
}

// A gathered block feeding a dot (it has no strided address: it is read from scratch).
ph::Tensor gathered_matmul(ph::Tensor ids, ph::Tensor x, ph::Tensor w) {
  auto n = ids.size(0), kdim = x.size(1), o = w.size(1);
  auto out = ph::empty({n, o});
  for (auto [tt, to] : ph::tile(n, o)) {
    ph::Var acc = ph::zeros({tt, to});
    auto rows = ids[tt];
    for (auto tk : ph::tile(kdim)) acc = acc + ph::dot(x[rows, tk], w[tk, to]);
    out[tt, to] = acc;
  }
  return out;
}

TEST(Gather, GatheredOperandOfADot) {
  ph::Kernel k("gathered_matmul", gathered_matmul);
  ph::Array ids = ids_array({3, 3, 0, 5, 2}, ph::DType::i64), x = ph::Array::random({6, 7}, ph::DType::f32, 1),
            w = ph::Array::random({7, 3}, ph::DType::f32, 2);
  ph::Array want = ph::Array::zeros({5, 3}, ph::DType::f32);
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      double s = 0;
      for (int64_t p = 0; p < 7; ++p) s += x.get(static_cast<int64_t>(ids.get(i)) * 7 + p) * w.get(p * 3 + j);
      want.set(i * 3 + j, s);
    }
  check_all(k, {ids, x, w}, {want}, 1e-5);
}

// --- scatters ------------------------------------------------------------------------------------

constexpr int kLineScatter = __LINE__ + 6;
ph::Tensor scatter_rows(ph::Tensor dst, ph::Tensor idx, ph::Tensor v) {
  auto n = idx.size(0), e = v.size(1);
  auto out = ph::zeros({dst.size(0), e});
  for (auto [tt, te] : ph::tile(n, e)) {
    auto rows = idx[tt];
    out[rows, te] = v[tt, te] * 2.0f;
  }
  return out;
}

TEST(Scatter, DistinctRowsAreWritten) {
  ph::Kernel k("scatter_rows", scatter_rows);
  ph::Array dst = ph::Array::zeros({8, 1}, ph::DType::f32), idx = ids_array({5, 0, 7, 2, 6}, ph::DType::i64),
            v = ph::Array::random({5, 3}, ph::DType::f32, 4);
  ph::Array want = ph::Array::zeros({8, 3}, ph::DType::f32);
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 3; ++j) want.set(static_cast<int64_t>(idx.get(i)) * 3 + j, 2 * v.get(i * 3 + j));
  check_all(k, {dst, idx, v}, {want});
}

TEST(Scatter, RepeatedIndexIsARaceInTheInterpreter) {
  ph::Kernel k("scatter_rows", scatter_rows);
  ph::Array dst = ph::Array::zeros({8, 1}, ph::DType::f32), idx = ids_array({5, 0, 5}, ph::DType::i64),
            v = ph::Array::random({3, 3}, ph::DType::f32, 4);
  std::string msg = user_error_of([&] { k.interpret({dst, idx, v}); });
  EXPECT_HAS(msg, here(kLineScatter));
  EXPECT_HAS(msg, "is written twice");
  ph::Array bad = ids_array({5, 8}, ph::DType::i64);
  ph::Array v2 = ph::Array::random({2, 3}, ph::DType::f32, 4);
  msg = user_error_of([&] { k(dst, bad, v2); });
  EXPECT_HAS(msg, here(kLineScatter));
  EXPECT_HAS(msg, "index 8 is out of bounds for dimension 0 of buf0 (size 8)");
}

// --- masked access -------------------------------------------------------------------------------

// Concatenation along the last dim in one launch, with masked loads.
ph::Tensor concat(ph::Tensor x, ph::Tensor y) {
  auto m = x.size(0), n1 = x.size(1), n2 = y.size(1);
  auto out = ph::empty({m, n1 + n2});
  for (auto [tm, tn] : ph::tile(m, n1 + n2)) {
    auto j = tn.index();
    auto a = ph::load(x, {tm, j}, j < n1, 0.0f);
    auto b = ph::load(y, {tm, j - n1}, j >= n1, 0.0f);
    out[tm, tn] = ph::where(j < n1, a, b);
  }
  return out;
}

TEST(Masked, ConcatenationReadsOnlyInRangeElements) {
  ph::Kernel k("concat", concat);
  for (auto [n1, n2] : {std::pair<int64_t, int64_t>{5, 3}, {1, 1}, {7, 12}}) {
    ph::Array x = ph::Array::random({3, n1}, ph::DType::f32, 1), y = ph::Array::random({3, n2}, ph::DType::f32, 2);
    ph::Array want = ph::Array::zeros({3, n1 + n2}, ph::DType::f32);
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < n1 + n2; ++j)
        want.set(i * (n1 + n2) + j, j < n1 ? x.get(i * n1 + j) : y.get(i * n2 + j - n1));
    check_all(k, {x, y}, {want});
  }
}

// A masked store with a scalar index that is out of range where the mask is off, and a fill
// that is a block.
ph::Tensor masked_rows(ph::Tensor x, ph::Tensor row) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::full({m, n}, 5.0);
  for (auto tn : ph::tile(n)) {
    auto r = row[0];  // an i64 scalar, possibly out of range
    auto ok = (r >= 0) && (r < m);
    auto v = ph::load(x, {r, tn}, ok, x[0, tn] * 3.0f);
    ph::store(out, {r, tn}, v + 1.0f, ok && (tn.index() != 2));
    out[0, tn] = v;
  }
  return out;
}

TEST(Masked, MaskedOffIndicesAreNeitherCheckedNorUsed) {
  ph::Kernel k("masked_rows", masked_rows);
  ph::Array x = ph::Array::random({4, 6}, ph::DType::f32, 3);
  for (int64_t r : {2, 9, -3}) {
    ph::Array row = ids_array({r}, ph::DType::i64);
    ph::Array want = ph::Array::full({4, 6}, 5.0, ph::DType::f32);
    const bool ok = r >= 0 && r < 4;
    for (int64_t j = 0; j < 6; ++j) {
      double v = ok ? x.get(r * 6 + j) : x.get(j) * 3.0;
      if (ok && j != 2) want.set(r * 6 + j, v + 1.0);
      want.set(j, v);
    }
    SCOPED_TRACE(r);
    check_all(k, {x, row}, {want}, 1e-5);
  }
}

// --- the Tile IR text form ---------------------------------------------------------------------

TEST(GatherIr, PrintParseRoundTrip) {
  ph::Array ids = ids_array({1, 0}, ph::DType::i64), w = ph::Array::random({3, 4}, ph::DType::f32, 1);
  ph::Array x = ph::Array::random({2, 3}, ph::DType::f32, 1), y = ph::Array::random({2, 2}, ph::DType::f32, 1);
  ph::Array dst = ph::Array::zeros({3, 1}, ph::DType::f32), v = ph::Array::random({2, 4}, ph::DType::f32, 4);
  ph::Kernel k1("embed", embed);
  ph::Kernel k2("concat", concat);
  ph::Kernel k3("scatter_rows", scatter_rows);
  ph::Kernel k4("masked_rows", masked_rows);
  for (const std::string& text : {k1.compile({ids, w}).ir(), k2.compile({x, y}).ir(), k3.compile({dst, ids, v}).ir(),
                                  k4.compile({w, ids}).ir()}) {
    ph::ir::Function fn = ph::ir::parse(text, "test.tir");
    EXPECT_EQ(ph::ir::print(fn), text);
  }
  EXPECT_HAS(k2.compile({x, y}).ir(), "mask %");
  EXPECT_HAS(k2.compile({x, y}).ir(), " else %");
}

TEST(GatherIr, ParserChecksTheMask) {
  const std::string text = R"(kernel k(arg0: f32[4]) -> (buf0)
  $b0 = block_size(extent=4)
  buf0 = empty f32[4]
  launch t0 in 0..4 by $b0 {
    %0 = tile_index t0 : i64[t0]
    %1 = load arg0[t0] mask %0 else %0 : f32[t0]
    store buf0[t0], %1
  }
  return buf0
)";
  EXPECT_HAS(user_error_of([&] { ph::ir::parse(text, "test.tir"); }),
             "the mask of a masked access must be a boolean block");
}

// --- refusals ------------------------------------------------------------------------------------

constexpr int kLineSameDim = __LINE__ + 4;
ph::Tensor same_dim_twice(ph::Tensor x) {
  auto out = ph::empty({x.size(0)});
  for (auto t : ph::tile(x.size(0))) {
    out[t] = ph::sum(x[t.index(), t], -1);
  }
  return out;
}

constexpr int kLineRank2 = __LINE__ + 4;
ph::Tensor rank2_index(ph::Tensor x, ph::Tensor ids) {
  auto out = ph::empty({ids.size(0), ids.size(1)});
  for (auto [a, b] : ph::tile(ids.size(0), ids.size(1))) {
    out[a, b] = x[ids[a, b]];
  }
  return out;
}

constexpr int kLineNotBool = __LINE__ + 4;
ph::Tensor float_mask(ph::Tensor x) {
  auto out = ph::empty({x.size(0)});
  for (auto t : ph::tile(x.size(0))) {
    out[t] = ph::load(x, {t}, x[t], 0.0f);
  }
  return out;
}

constexpr int kLineF32Index = __LINE__ + 4;
ph::Tensor float_index(ph::Tensor x) {
  auto out = ph::empty({x.size(0)});
  for (auto t : ph::tile(x.size(0))) {
    out[t] = x[x[t]];
  }
  return out;
}

TEST(GatherErrors, BadIndexBlocksAndMasksNameTheLine) {
  ph::Array x = ph::Array::random({4, 4}, ph::DType::f32, 1), x1 = ph::Array::random({4}, ph::DType::f32, 1);
  ph::Array ids = ph::Array::zeros({2, 2}, ph::DType::i64);
  ph::Kernel a("same_dim_twice", same_dim_twice);
  ph::Kernel b("rank2_index", rank2_index);
  ph::Kernel c("float_mask", float_mask);
  ph::Kernel d("float_index", float_index);
  std::string m = user_error_of([&] { a(x); });
  EXPECT_HAS(m, here(kLineSameDim));
  EXPECT_HAS(m, "which another index of the subscript also gives the block");
  m = user_error_of([&] { b(x1, ids); });
  EXPECT_HAS(m, here(kLineRank2));
  EXPECT_HAS(m, "an i64 block of rank 1");
  m = user_error_of([&] { c(x1); });
  EXPECT_HAS(m, here(kLineNotBool));
  EXPECT_HAS(m, "must be a boolean block");
  m = user_error_of([&] { d(x1); });
  EXPECT_HAS(m, here(kLineF32Index));
  EXPECT_HAS(m, "cast it with .to(ph::i64)");
}

}  // namespace

// --- library kernels beyond the registry's shapes ---------------------------------------------------

namespace {

TEST(GatherKernels, EmbeddingOfRank2And3Ids) {
  ph::Array w = ph::Array::random({11, 6}, ph::DType::f32, 2);
  for (const ph::Shape& s : {ph::Shape{3, 5}, ph::Shape{1, 1}, ph::Shape{2, 3, 4}}) {
    ph::Array ids = ph::Array::random(s, ph::DType::i32, 9, 0, 11);
    std::vector<ph::Array> want = {ph::ref::embedding(ids, w)};
    check_all(ph::kernels::embedding, {ids, w}, want);
  }
  ph::Array bad = ids_array({3, 11}, ph::DType::i64);
  EXPECT_HAS(user_error_of([&] { ph::kernels::embedding(bad, w); }), "index 11 is out of bounds for dimension 0");
}

TEST(GatherKernels, GroupedGemmRunsEachGroupsOwnRows) {
  ph::Array x = ph::Array::random({10, 4}, ph::DType::f32, 1), w = ph::Array::random({3, 4, 3}, ph::DType::f32, 2);
  // An empty group, rows 8 and 9 in none (their output rows stay 0).
  ph::Array off = ids_array({0, 7, 7, 8}, ph::DType::i64);
  std::vector<ph::Array> want = {ph::ref::grouped_gemm(x, w, off)};
  check_all(ph::kernels::grouped_gemm, {x, w, off}, want, 1e-5);
  ph::Array past = ids_array({0, 7, 7, 11}, ph::DType::i64);  // a group past x's rows
  EXPECT_HAS(user_error_of([&] { ph::kernels::grouped_gemm(x, w, past); }), "jagged.cpp:");
}

}  // namespace

namespace {

ph::Tensor masked_copy(ph::Tensor x) {
  auto out = ph::zeros_like(x);
  for (auto [tm, tn] : ph::tile(x.size(0), x.size(1))) {
    ph::store(out, {tm, tn}, x[tm, tn], x[tm, tn] > 0.0f);
  }
  return out;
}

// A scatter through a computed index block: pallas scatters are row DMAs whose row numbers are
// read as scalars from an index tensor's block in SMEM (tests/test_pallas_gather.cpp).
constexpr int kLineScatterComputed = __LINE__ + 5;
ph::Tensor scatter_rows_shifted(ph::Tensor dst, ph::Tensor idx, ph::Tensor v) {
  auto n = idx.size(0), e = v.size(1);
  auto out = ph::zeros({dst.size(0), e});
  for (auto [tt, te] : ph::tile(n, e)) {
    out[idx[tt] + 1, te] = v[tt, te] * 2.0f;
  }
  return out;
}

TEST(GatherPallas, ScatterThroughAComputedIndexIsRefusedNamingTheConstruct) {
  ph::Kernel k("scatter_rows_shifted", scatter_rows_shifted);
  ph::Array dst = ph::Array::zeros({16, 1}, ph::DType::f32), idx = ids_array({5, 0, 7, 2, 6, 1, 3, 4}, ph::DType::i64),
            v = ph::Array::random({8, 128}, ph::DType::f32, 4);
  std::string m = user_error_of([&] { k.emit_pallas({dst, idx, v}, "v7x"); });
  EXPECT_HAS(m, here(kLineScatterComputed));
  EXPECT_HAS(m, "the pallas backend does not support this scatter into buf0");
  EXPECT_HAS(m, "its index block is a computed value");
}

// A masked store is a read-modify-write of its block on pallas (more cases in
// tests/test_pallas_stores.cpp): interpret mode, where unwritten output memory is NaN.
TEST(GatherPallas, MaskedStoreRunsInInterpretMode) {
  ph::Kernel c("masked_copy", masked_copy);
  ph::Array x = ph::Array::random({16, 128}, ph::DType::f32, 1);
  ph::Array want = c.interpret({x})[0];
  EXPECT_LE(ph::max_abs_diff(c(x), want), 0.0);
  ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
  ph::PallasModule m = c.emit_pallas({x}, "v7x");
  auto r = pallas::run_in_interpret_mode({{"masked_copy", m.source, "masked_copy", {x}, {}, true}});
  ASSERT_TRUE(r.at(0).ok) << r[0].error << "\n" << m.source;
  EXPECT_EQ(r[0].export_status, "ok");
  EXPECT_FALSE(r[0].races);
  EXPECT_LE(ph::max_abs_diff(r[0].outputs.at(0), want), 0.0) << m.source;
}

}  // namespace

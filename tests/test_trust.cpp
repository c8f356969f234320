// Regressions for defects that gave wrong results silently, or crashed, on ordinary kernels.
// Each test fails on the code before its fix.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "parhelion/parhelion.h"

#include "tests/user_error.h"

namespace ph = parhelion;

namespace {

std::string here(int line) { return std::string("test_trust.cpp:") + std::to_string(line) + ": "; }

// --- a batched dot that accumulates into its third argument --------------------------------------

ph::Tensor bmm_into_acc(ph::Tensor x, ph::Tensor y) {
  auto [b, m, k] = x.sizes<3>();
  auto n = y.size(2);
  auto out = ph::empty({b, m, n});
  for (auto [tb, tm, tn] : ph::tile(b, m, n)) {
    ph::Var acc = ph::zeros({tb, tm, tn});
    for (auto tk : ph::tile(k)) acc = ph::dot(x[tb, tm, tk], y[tb, tk, tn], acc);
    out[tb, tm, tn] = acc;
  }
  return out;
}

ph::Array bmm_reference(const ph::Array& x, const ph::Array& y) {
  int64_t B = x.shape()[0], M = x.shape()[1], K = x.shape()[2], N = y.shape()[2];
  ph::Array r = ph::Array::zeros({B, M, N}, ph::DType::f32);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t p = 0; p < K; ++p) s += x.get((b * M + i) * K + p) * y.get((b * K + p) * N + j);
        r.set((b * M + i) * N + j, s);
      }
  return r;
}

TEST(Trust, BatchedDotWithAccumulatorArgument) {
  ph::Kernel k("bmm_into_acc", bmm_into_acc);
  ph::Array x = ph::Array::random({3, 37, 29}, ph::DType::f32, 1),
            y = ph::Array::random({3, 29, 21}, ph::DType::f32, 2);
  ph::Array want = bmm_reference(x, y);
  // Batch blocks of 1 and 2 (a ragged last one), and K blocks smaller than K: the accumulator
  // is copied into the dot's output for every batch index and every K trip.
  for (const char* cfg :
       {R"({"block_sizes":[1,16,16,8],"loop_orders":[[0,1,2]],"micro_kernels":[0],"num_threads":1})",
        R"({"block_sizes":[2,8,32,16],"loop_orders":[[2,1,0]],"micro_kernels":[0],"num_threads":2})",
        R"({"block_sizes":[4,64,32,32],"loop_orders":[[0,1,2]],"micro_kernels":[0],"num_threads":1})"}) {
    SCOPED_TRACE(cfg);
    ph::Config c = ph::Config::from_json(cfg);
    ph::Array got = k.compile({x, y}, &c).run({x, y}).at(0);
    EXPECT_LT(ph::max_abs_diff(got, want), 1e-4);
  }
}

// --- a store that leaves out a grid tile races -------------------------------------------------------

constexpr int kLineRacyStore = __LINE__ + 4;
ph::Tensor racy_row_sum(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m});
  for (auto [tm, tn] : ph::tile(m, n)) out[tm] = ph::sum(x[tm, tn], -1);
  return out;
}

TEST(Trust, StoreThatLeavesOutAGridTileIsRejected) {
  ph::Kernel k("racy_row_sum", racy_row_sum);
  ph::Array x = ph::Array::random({64, 300}, ph::DType::f32, 1);
  std::string msg = user_error_of([&] { k(x); });
  EXPECT_HAS(msg, here(kLineRacyStore));
  EXPECT_HAS(msg, "does not index the launch's tile t1");
  // Not emitted for a TPU either (it was, with every grid dim "parallel").
  EXPECT_HAS(user_error_of([&] { k.emit_pallas({x}, "v7x"); }), "does not index the launch's tile t1");
  // The same store is fine when that tile cannot have a second step.
  ph::Array one = ph::Array::random({64, 1}, ph::DType::f32, 1);
  ph::Array got = k(one);
  for (int64_t i = 0; i < 64; ++i) EXPECT_FLOAT_EQ(got.get(i), one.get(i));
}

// --- a dot whose operands disagree on the contracted extent -----------------------------------------

constexpr int kLineShortK = __LINE__ + 7;
ph::Tensor unchecked_matmul(ph::Tensor x, ph::Tensor y) {
  auto [m, k] = x.sizes<2>();
  auto n = y.size(1);
  auto out = ph::empty({m, n});
  for (auto [tm, tn] : ph::tile(m, n)) {
    ph::Var acc = ph::zeros({tm, tn});
    for (auto tk : ph::tile(k)) acc = acc + ph::dot(x[tm, tk], y[tk, tn]);
    out[tm, tn] = acc;
  }
  return out;
}

TEST(Trust, DotContractedExtentsMustBeEqual) {
  ph::Kernel k("unchecked_matmul", unchecked_matmul);
  ph::Array x = ph::Array::random({64, 100}, ph::DType::f32, 1), y = ph::Array::random({110, 32}, ph::DType::f32, 2);
  std::string msg = user_error_of([&] { k(x, y); });
  EXPECT_HAS(msg, here(kLineShortK));
  EXPECT_HAS(msg, "contracted extents differ");
  EXPECT_HAS(msg, "dimension 1 of arg0 (size 100) with dimension 0 of arg1 (size 110)");
  ph::Array y2 = ph::Array::random({100, 32}, ph::DType::f32, 2);
  EXPECT_NO_THROW(k(x, y2));
}

// --- `var = expression` is blamed on the user's line ----------------------------------------------------

constexpr int kLineVarAssign = __LINE__ + 6;
ph::Tensor bad_var_assign(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m});
  for (auto tm : ph::tile(m)) {
    ph::Var acc = ph::zeros({tm});
    for (auto tn : ph::tile(n)) acc = x[tm, tn] * 2.0f;
    out[tm] = acc;
  }
  return out;
}

TEST(Trust, VarAssignmentErrorsNameTheUsersLine) {
  ph::Kernel k("bad_var_assign", bad_var_assign);
  ph::Array x = ph::Array::random({8, 8}, ph::DType::f32, 1);
  std::string msg = user_error_of([&] { k(x); });
  EXPECT_HAS(msg, here(kLineVarAssign));
  EXPECT_HAS(msg, "cannot assign a block of shape [t0, t1] to a ph::Var of shape [t0]");
  EXPECT_EQ(msg.find("lang.h"), std::string::npos) << msg;
}

ph::Tensor row_sums(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m});
  for (auto tm : ph::tile(m)) {
    ph::Var acc = ph::zeros({tm});
    for (auto tn : ph::tile(n)) acc = acc + ph::sum(x[tm, tn], -1);
    out[tm] = acc;
  }
  return out;
}

TEST(Trust, VarAssignmentsCarryTheUsersLineIntoTheIr) {
  ph::Kernel k("row_sums", row_sums);
  ph::Array x = ph::Array::random({8, 40}, ph::DType::f32, 1);
  auto c = k.compile({x});
  EXPECT_EQ(c.ir().find("lang.h"), std::string::npos) << c.ir();
  EXPECT_EQ(c.source().find("lang.h"), std::string::npos) << c.source();
}

// --- a ph::Var as a subscript index ------------------------------------------------------------------

// out[e, n] = sum over k of w[expert[e], k, n]: the expert id is carried in a Var.
ph::Tensor expert_column_sums(ph::Tensor expert, ph::Tensor w) {
  auto num = expert.size(0);
  auto [ne, k, n] = w.sizes<3>();
  (void)ne;
  auto out = ph::empty({num, n});
  for (auto e : ph::grid(num)) {
    ph::Var ex = expert[e];
    for (auto tn : ph::tile(n)) {
      ph::Var acc = ph::zeros({tn});
      for (auto tk : ph::tile(k)) acc = acc + ph::sum(w[ex, tk, tn], 0);
      out[e, tn] = acc;
    }
  }
  return out;
}

TEST(Trust, VarAsSubscriptIndex) {
  ph::Kernel kern("expert_column_sums", expert_column_sums);
  ph::Array expert = ph::Array::empty({3}, ph::DType::i64);
  for (int i = 0; i < 3; ++i) expert.set(i, 2 - i);
  ph::Array w = ph::Array::random({3, 10, 6}, ph::DType::f32, 4);
  ph::Array got = kern(expert, w);
  for (int e = 0; e < 3; ++e)
    for (int j = 0; j < 6; ++j) {
      double s = 0;
      for (int p = 0; p < 10; ++p) s += w.get(((2 - e) * 10 + p) * 6 + j);
      EXPECT_NEAR(got.get(e * 6 + j), s, 1e-5);
    }
}

// --- integer indices loaded from tensors are bounds-checked ------------------------------------------

constexpr int kLineGather = __LINE__ + 5;
ph::Tensor embedding(ph::Tensor idx, ph::Tensor table) {
  auto [v, d] = table.sizes<2>();
  (void)v;
  auto out = ph::empty({idx.size(0), d});
  for (auto [g, td] : ph::tile(ph::range(idx.size(0)).block(1), d)) out[g, td] = table[idx[g.begin()], td];
  return out;
}

ph::Tensor embedding_grid(ph::Tensor idx, ph::Tensor table) {
  auto d = table.size(1);
  auto out = ph::empty({idx.size(0), d});
  for (auto g : ph::grid(idx.size(0)))
    for (auto td : ph::tile(d)) out[g, td] = table[idx[g], td];
  return out;
}

TEST(Trust, LoadedIndicesAreBoundsChecked) {
  ph::Kernel k("embedding_grid", embedding_grid);
  ph::Array table = ph::Array::random({10, 16}, ph::DType::f32, 1);
  ph::Array idx = ph::Array::empty({4}, ph::DType::i32);
  for (int i = 0; i < 4; ++i) idx.set(i, 3 * i);
  ph::Array got = k(idx, table);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 16; ++j) EXPECT_EQ(got.get(i * 16 + j), table.get(3 * i * 16 + j));
  for (int bad : {10, -1, 1 << 30}) {
    idx.set(2, bad);
    std::string msg = user_error_of([&] { k(idx, table); });
    EXPECT_HAS(msg, "test_trust.cpp:");
    EXPECT_HAS(msg, "index " + std::to_string(bad) + " is out of bounds for dimension 0 of arg1 (size 10)");
  }
  // The opt-out: no check in the generated code.
  auto checked = k.compile({idx, table});
  EXPECT_HAS(checked.source(), "ph_index_error(ph_st, ");
  ph::Config c = checked.config();
  c.index_checks = false;
  EXPECT_EQ(k.compile({idx, table}, &c).source().find("ph_index_error(ph_st, "), std::string::npos);
  EXPECT_EQ(ph::Config::from_json(c.to_json()), c);
}

// The row is a reduction of an index tensor (a scalar computed by a reduce, not a plain
// expression): checked too.
ph::Tensor row_of_max(ph::Tensor idx, ph::Tensor table) {
  auto d = table.size(1);
  auto out = ph::empty({d});
  for (auto td : ph::tile(d)) out[td] = table[ph::amax(idx[ph::all], 0), td];
  return out;
}

TEST(Trust, ReducedIndicesAreChecked) {
  ph::Kernel k("row_of_max", row_of_max);
  ph::Array table = ph::Array::random({10, 16}, ph::DType::f32, 1);
  ph::Array idx = ph::Array::empty({3}, ph::DType::i64);
  for (int i = 0; i < 3; ++i) idx.set(i, i + 4);
  ph::Array got = k(idx, table);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(got.get(j), table.get(6 * 16 + j));
  idx.set(1, 11);
  EXPECT_HAS(user_error_of([&] { k(idx, table); }), "index 11 is out of bounds for dimension 0 of arg1 (size 10)");
}

TEST(Trust, IndicesComputedFromTileOffsetsAreChecked) {
  ph::Kernel k("embedding", embedding);
  ph::Array table = ph::Array::random({10, 16}, ph::DType::f32, 1);
  ph::Array idx = ph::Array::empty({3}, ph::DType::i64);
  idx.set(0, 1);
  idx.set(1, 12);
  idx.set(2, 0);
  std::string msg = user_error_of([&] { k(idx, table); });
  EXPECT_HAS(msg, here(kLineGather));
  EXPECT_HAS(msg, "index 12 is out of bounds for dimension 0 of arg1 (size 10)");
}

// --- storing a number: the store's target type outlives the number's new value ----------------------

ph::Tensor many_literal_stores(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m, n});
  for (auto tn : ph::tile(n))
    for (int rep = 0; rep < 40; ++rep) out[ph::all, tn] = 0.25f * rep;  // each store adds a Constant
  return out;
}

TEST(Trust, StoringNumbersKeepsTheTargetShape) {
  ph::Kernel k("many_literal_stores", many_literal_stores);
  ph::Array x = ph::Array::random({3, 5}, ph::DType::f32, 1);
  ph::Array got = k(x);
  for (int64_t i = 0; i < got.numel(); ++i) EXPECT_EQ(got.get(i), 0.25 * 39);
}

// --- a store that reads the tensor it writes, through a transpose --------------------------------------

ph::Tensor transpose_in_place(ph::Tensor x) {
  for (auto g : ph::grid(1)) {
    (void)g;
    x[ph::all, ph::all] = ph::transpose(x[ph::all, ph::all]);
  }
  return x;
}

TEST(Trust, StoreReadsItsTensorBeforeOverwritingIt) {
  ph::Kernel k("transpose_in_place", transpose_in_place);
  ph::Array x = ph::Array::random({5, 5}, ph::DType::f32, 1);
  ph::Array before = x.clone();
  ph::Array got = k(x);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) EXPECT_EQ(got.get(i * 5 + j), before.get(j * 5 + i)) << i << "," << j;
}

// --- pow and NaN as torch defines them --------------------------------------------------------------

ph::Tensor pow_and_nan(ph::Tensor base, ph::Tensor expo, ph::Tensor v) {
  auto n = base.size(0);
  auto out = ph::empty({n + 4});
  for (auto t : ph::tile(n)) out[t] = ph::pow(base[t], expo[t]);
  for (auto g : ph::grid(1)) {
    (void)g;
    auto row = v[ph::all];
    out[n] = ph::amax(row, 0);
    out[n + 1] = ph::amin(row, 0);
    out[n + 2] = ph::sum(ph::maximum(row, 0.0f), 0);
    out[n + 3] = ph::sum(ph::minimum(0.0f, row), 0);
  }
  return out;
}

TEST(Trust, PowAndNanPropagationFollowTorch) {
  ph::Kernel k("pow_and_nan", pow_and_nan);
  const std::vector<std::pair<double, double>> cases = {{-2, 2},        {-2, 3},        {0, 0},    {0, 2},    {0, -1},
                                                        {2, 0.5},       {-2, 0.5},      {3, -2},   {1, NAN},  {NAN, 0},
                                                        {-1, INFINITY}, {-2, INFINITY}, {-0.0, 3}, {-0.0, -1}};
  const int n = static_cast<int>(cases.size());
  ph::Array base = ph::Array::empty({n}, ph::DType::f32), expo = ph::Array::empty({n}, ph::DType::f32);
  for (int i = 0; i < n; ++i) {
    base.set(i, cases[i].first);
    expo.set(i, cases[i].second);
  }
  ph::Array v = ph::Array::empty({4}, ph::DType::f32);
  const double values[] = {1, NAN, 2, 3};
  for (int i = 0; i < 4; ++i) v.set(i, values[i]);
  ph::Array got = k(base, expo, v);
  auto same = [](double a, double b) {
    return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b)) ||
           std::fabs(a - b) <= 1e-5 * std::max(1.0, std::fabs(b));
  };
  for (int i = 0; i < n; ++i)
    EXPECT_TRUE(same(got.get(i), std::pow(cases[i].first, cases[i].second)))
        << "pow(" << cases[i].first << ", " << cases[i].second << ") = " << got.get(i);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(std::isnan(got.get(n + i))) << "NaN reaches output " << i;
  ph::Array want = k.interpret({base, expo, v}).at(0);  // the interpreter agrees
  for (int64_t i = 0; i < want.numel(); ++i) EXPECT_TRUE(same(got.get(i), want.get(i))) << i;
}

// A row's amax and amin keep their lanes with plain compares and flag a NaN apart
// (emit/reductions.cpp): a NaN in any lane of the vector loop, or in the scalar tail, still
// reaches the result, and rows without one (infinities, zeros alone) give the max and min.
ph::Tensor row_max_and_min(ph::Tensor x) {
  auto [rows, cols] = x.sizes<2>();
  (void)cols;
  auto out = ph::empty({rows, 2});
  for (auto t : ph::tile(rows)) {
    auto row = x[t, ph::all];
    out[t, 0] = ph::amax(row, 1);
    out[t, 1] = ph::amin(row, 1);
  }
  return out;
}

TEST(Trust, RowMaxAndMinFlagANanInEveryLane) {
  ph::Kernel k("row_max_and_min", row_max_and_min);
  const int64_t cols = 100;  // 3 vector trips of 32 lanes and a tail of 4
  const std::vector<int64_t> nan_at = {0, 1, 15, 16, 31, 32, 63, 64, 95, 96, 99, -1, -1};
  const int64_t rows = static_cast<int64_t>(nan_at.size());
  ph::Array x = ph::Array::random({rows, cols}, ph::DType::f32, 7, -1, 1);
  x.set(11 * cols + 40, INFINITY);  // row 11: an infinity and no NaN
  x.set(11 * cols + 41, -INFINITY);
  for (int64_t j = 0; j < cols; ++j) x.set(12 * cols + j, j % 2 ? 0.0 : -0.0);  // row 12: zeros alone
  for (int64_t r = 0; r < rows; ++r)
    if (nan_at[r] >= 0) x.set(r * cols + nan_at[r], NAN);
  // Every vector width this host offers (512 only with AVX-512; none where the knob is absent),
  // and the default.
  std::vector<std::string> configs = {"{}"};
  for (int bits : k.compile({x}).config_spec().vector_bits)
    configs.push_back("{\"vector_bits\":" + std::to_string(bits) + "}");
  for (const std::string& config : configs) {
    ph::Config c = ph::Config::from_json(config);
    ph::Array got = k.compile({x}, &c).run({x}).at(0);
    for (int64_t r = 0; r < rows; ++r) {
      if (nan_at[r] >= 0) {
        EXPECT_TRUE(std::isnan(got.get(r * 2)) && std::isnan(got.get(r * 2 + 1))) << config << " NaN at " << nan_at[r];
        continue;
      }
      double mx = -INFINITY, mn = INFINITY;
      for (int64_t j = 0; j < cols; ++j) {
        mx = std::max(mx, x.get(r * cols + j));
        mn = std::min(mn, x.get(r * cols + j));
      }
      EXPECT_EQ(got.get(r * 2), mx) << config << " row " << r;
      EXPECT_EQ(got.get(r * 2 + 1), mn) << config << " row " << r;
    }
  }
}

// A one-hot sum, sum(where(cols.index() == label, x, 0)) over column blocks, reads only the
// picked element on the cpu (emit/reductions.cpp). It must still give what the full sum gives:
// x at the label where the label is in the block, 0 where it is not (negative, past the row,
// another block), whatever the other columns hold (NaN, infinities), and +0 for a picked -0.
ph::Tensor picked_logit(ph::Tensor x, ph::Tensor label) {
  auto [rows, cols] = x.sizes<2>();
  auto out = ph::empty({rows});
  for (auto r : ph::tile(rows)) {
    ph::Var acc = ph::zeros({r});
    for (auto c : ph::tile(cols))
      acc = acc + ph::sum(ph::where(c.index() == label[r].unsqueeze(-1), x[r, c], 0.0f), -1);
    out[r] = acc;
  }
  return out;
}

TEST(Trust, OneHotSumsGiveThePickedElementOnly) {
  ph::Kernel k("picked_logit", picked_logit);
  const int64_t cols = 100;
  const std::vector<int64_t> labels = {5, -1, 100, 99, 7, 40, 64, 0};
  const int64_t rows = static_cast<int64_t>(labels.size());
  ph::Array x = ph::Array::random({rows, cols}, ph::DType::f32, 3, -2, 2);
  ph::Array label = ph::Array::empty({rows}, ph::DType::i64);
  for (int64_t r = 0; r < rows; ++r) {
    label.set(r, static_cast<double>(labels[r]));
    x.set(r * cols + (labels[r] + 1) % cols, NAN);  // a NaN beside the pick
    x.set(r * cols + (labels[r] + 3) % cols, -INFINITY);
  }
  x.set(4 * cols + 7, -0.0);       // row 4 picks -0
  x.set(5 * cols + 40, INFINITY);  // row 5 picks inf
  const ph::Array want = k.interpret({x, label}).at(0);
  for (const char* config : {R"({"block_sizes":[1,32]})", R"({"block_sizes":[8,64]})", R"({"block_sizes":[2,128]})"}) {
    ph::Config c = ph::Config::from_json(config);
    const std::string src = k.compile({x, label}, &c).source();
    EXPECT_NE(src.find("ph_pick"), std::string::npos) << "the cpu reads the picked element alone";
    ph::Array got = k.compile({x, label}, &c).run({x, label}).at(0);
    for (int64_t r = 0; r < rows; ++r) {
      const double in_row = labels[r] >= 0 && labels[r] < cols ? x.get(r * cols + labels[r]) : 0.0;
      const double expect = 0.0 + in_row;  // (+0 for a picked -0: the Var sums from 0)
      EXPECT_TRUE(got.get(r) == expect || (std::isnan(got.get(r)) && std::isnan(expect))) << config << " row " << r;
      EXPECT_EQ(std::signbit(got.get(r)), std::signbit(expect)) << config << " row " << r;
      EXPECT_TRUE(got.get(r) == want.get(r) && std::signbit(got.get(r)) == std::signbit(want.get(r)))
          << config << " row " << r << ": the interpreter has " << want.get(r);
    }
  }
}

}  // namespace

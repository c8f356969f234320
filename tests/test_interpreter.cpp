// The reference interpreter (src/interp): small kernels, one per op family, against results
// computed here by plain loops; data-dependent errors; and every library kernel interpreted
// at two shapes (one ragged) against its independent reference, a second check of each.
#include "interp/interpreter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "driver/compiled_kernel_impl.h"
#include "kernels/kernels.h"
#include "kernels/registry.h"
#include "tune/accuracy.h"

namespace ph = parhelion;

namespace {

double bf16(double v) { return ph::bf16_to_f32(ph::f32_to_bf16(static_cast<float>(v))); }
double f16(double v) { return ph::f16_to_f32(ph::f32_to_f16(static_cast<float>(v))); }

// --- blocks: fixed ragged blocks, tunable blocks as one block, tile begin/end/index ----------

ph::Tensor block_geometry(ph::Tensor x) {
  int64_t n = x.size(0);
  auto out = ph::empty({3, n}, ph::DType::f32);
  for (auto t : ph::tile(ph::range(n).block(64))) {
    out[0, t] = x[t] * 2.0f + ph::cast(t.index(), ph::DType::f32);
    out[1, t] = ph::zeros({t}) + ph::cast(t.end() - t.begin(), ph::DType::f32);  // this block's length
  }
  for (auto t : ph::tile(n)) out[2, t] = ph::zeros({t}) + ph::cast(t.end() - t.begin(), ph::DType::f32);
  return out;
}

TEST(Interpreter, FixedBlocksAreRaggedAndTunableBlocksAreOneBlock) {
  ph::Kernel k("block_geometry", block_geometry);
  const int64_t n = 150;  // 64 + 64 + 22
  ph::Array x = ph::Array::random({n}, ph::DType::f32, 1);
  ph::Array out = k.interpret({x}).at(0);
  ASSERT_EQ(out.shape(), (ph::Shape{3, n}));
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(out.get(i), static_cast<float>(x.get(i) * 2 + static_cast<double>(i))) << i;
    EXPECT_EQ(out.get(n + i), i < 128 ? 64 : 22) << i;
    EXPECT_EQ(out.get(2 * n + i), n) << i;
  }
}

// --- grid loops, reductions, where, arange -------------------------------------------------

std::tuple<ph::Tensor, ph::Tensor> row_stats2(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto arg = ph::empty({m}, ph::DType::i64);
  auto stats = ph::empty({m, 4}, ph::DType::f32);
  for (auto row : ph::grid(m)) {
    auto v = x[row, ph::all];
    auto best = ph::amax(v, 0);
    arg[row] = ph::amin(ph::where(v == best, ph::arange(n), n), 0);
    stats[row, 0] = best;
    stats[row, 1] = ph::amin(v, 0);
    stats[row, 2] = ph::sum(v, 0);
    stats[row, 3] = ph::mean(v, 0);
  }
  return {arg, stats};
}

TEST(Interpreter, GridLoopsAndRowReductions) {
  ph::Kernel k("row_stats2", row_stats2);
  const int64_t m = 5, n = 37;
  ph::Array x = ph::Array::random({m, n}, ph::DType::f32, 2);
  auto out = k.interpret({x});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].dtype(), ph::DType::i64);
  for (int64_t r = 0; r < m; ++r) {
    int64_t best = 0;
    double mn = INFINITY, sum = 0;
    for (int64_t c = 0; c < n; ++c) {
      double v = x.get(r * n + c);
      if (v > x.get(r * n + best)) best = c;
      mn = std::min(mn, v);
      sum += v;
    }
    EXPECT_EQ(out[0].get(r), best) << r;
    EXPECT_EQ(out[1].get(r * 4 + 0), x.get(r * n + best));
    EXPECT_EQ(out[1].get(r * 4 + 1), mn);
    EXPECT_EQ(out[1].get(r * 4 + 2), static_cast<float>(sum));
    EXPECT_EQ(out[1].get(r * 4 + 3), static_cast<float>(sum / n));
  }
}

// Reductions over either axis of a 2-D block, keepdim, and of integers.
std::tuple<ph::Tensor, ph::Tensor, ph::Tensor> axis_reductions(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto cols = ph::empty({n}, ph::DType::f32);
  auto centered = ph::empty({m, n}, ph::DType::f32);
  auto isum = ph::empty({1}, ph::DType::i64);
  for (auto t : ph::tile(1)) {
    auto v = x[ph::all, ph::all];
    cols[ph::all] = ph::amax(v, 0) - ph::amin(v, 0);                     // over rows
    centered[ph::all, ph::all] = v - ph::mean(v, -1, /*keepdim=*/true);  // [m, 1] broadcast
    isum[t] = ph::zeros({t}, ph::DType::i64) + ph::sum(ph::arange(n) * ph::arange(n), 0);
  }
  return {cols, centered, isum};
}

TEST(Interpreter, ReductionsOverEitherAxisKeepdimAndIntegers) {
  ph::Kernel k("axis_reductions", axis_reductions);
  const int64_t m = 4, n = 9;
  ph::Array x = ph::Array::random({m, n}, ph::DType::f32, 3);
  auto out = k.interpret({x});
  for (int64_t c = 0; c < n; ++c) {
    double mx = -INFINITY, mn = INFINITY;
    for (int64_t r = 0; r < m; ++r) mx = std::max(mx, x.get(r * n + c)), mn = std::min(mn, x.get(r * n + c));
    EXPECT_EQ(out[0].get(c), static_cast<float>(mx - mn));
  }
  for (int64_t r = 0; r < m; ++r) {
    double mean = 0;
    for (int64_t c = 0; c < n; ++c) mean += x.get(r * n + c) / n;
    for (int64_t c = 0; c < n; ++c) EXPECT_NEAR(out[1].get(r * n + c), x.get(r * n + c) - mean, 1e-6);
  }
  EXPECT_EQ(out[2].get(0), 0 + 1 + 4 + 9 + 16 + 25 + 36 + 49 + 64);
}

// --- Vars across an inner loop of ragged fixed blocks ----------------------------------------

std::tuple<ph::Tensor, ph::Tensor> running_sums(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto sums = ph::empty({m}, ph::DType::f32);
  auto prefix = ph::empty({m, n}, ph::DType::f32);
  for (auto rows : ph::tile(ph::range(m).block(3))) {
    ph::Var acc = ph::zeros({rows});
    ph::Var trips = ph::zeros({}, ph::DType::i64);
    for (auto cols : ph::tile(ph::range(n).block(16))) {
      // The running sum before this block, then the block's own inclusive sums column by column.
      prefix[rows, cols] = acc.unsqueeze(-1) + ph::zeros({rows, cols});
      acc = acc + ph::sum(x[rows, cols], -1);
      trips = trips + 1;
    }
    sums[rows] = acc + ph::cast(trips, ph::DType::f32) * 10.0f;
  }
  return {sums, prefix};
}

TEST(Interpreter, VarsCarryStateAcrossAnInnerLoop) {
  ph::Kernel k("running_sums", running_sums);
  const int64_t m = 7, n = 40;  // rows 3+3+1, columns 16+16+8: 3 trips
  ph::Array x = ph::Array::random({m, n}, ph::DType::f32, 4);
  auto out = k.interpret({x});
  for (int64_t r = 0; r < m; ++r) {
    double s = 0;
    for (int64_t c = 0; c < n; ++c) {
      if (c % 16 == 0) {
        EXPECT_NEAR(out[1].get(r * n + c), s, 1e-5) << r << "," << c;
      } else {
        EXPECT_EQ(out[1].get(r * n + c), out[1].get(r * n + c - 1));
      }
      s += x.get(r * n + c);
    }
    EXPECT_NEAR(out[0].get(r), s + 30, 1e-5) << r;
  }
}

// --- dot: accumulator, transpose, batch broadcast, bf16 -------------------------------------

// out = c + a . b^T with a [M,K], b [N,K], c [M,N], K streamed in fixed blocks of 8.
ph::Tensor dot_acc_transpose(ph::Tensor a, ph::Tensor b, ph::Tensor c) {
  auto [m, kk] = a.sizes<2>();
  int64_t n = b.size(0);
  auto out = ph::empty({m, n}, a.dtype());
  for (auto [tm, tn] : ph::tile(ph::range(m).block(4), n)) {
    ph::Var acc = c[tm, tn];
    for (auto tk : ph::tile(ph::range(kk).block(8))) acc = ph::dot(a[tm, tk], ph::transpose(b[tn, tk]), acc);
    out[tm, tn] = acc;
  }
  return out;
}

TEST(Interpreter, DotWithAccumulatorAndTranspose) {
  ph::Kernel k("dot_acc_transpose", dot_acc_transpose);
  const int64_t m = 6, kk = 21, n = 5;
  for (ph::DType dt : {ph::DType::f32, ph::DType::bf16}) {
    ph::Array a = ph::Array::random({m, kk}, dt, 5), b = ph::Array::random({n, kk}, dt, 6),
              c = ph::Array::random({m, n}, ph::DType::f32, 7);
    ph::Array out = k.interpret({a, b, c}).at(0);
    ASSERT_EQ(out.dtype(), dt);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = c.get(i * n + j);
        for (int64_t p = 0; p < kk; ++p) s += a.get(i * kk + p) * b.get(j * kk + p);
        double want = dt == ph::DType::bf16 ? bf16(s) : static_cast<float>(s);
        EXPECT_NEAR(out.get(i * n + j), want, 1e-6) << i << "," << j;  // the store rounds once
      }
  }
}

// x [B,M,K] . y [K,N]: y's missing batch dim broadcasts.
ph::Tensor batched_dot(ph::Tensor x, ph::Tensor y) {
  auto [b, m, kk] = x.sizes<3>();
  int64_t n = y.size(1);
  auto out = ph::empty({b, m, n}, ph::DType::f32);
  for (auto tb : ph::tile(b)) out[tb, ph::all, ph::all] = ph::dot(x[tb, ph::all, ph::all], y[ph::all, ph::all]);
  return out;
}

TEST(Interpreter, DotBroadcastsBatchDims) {
  ph::Kernel k("batched_dot", batched_dot);
  const int64_t b = 3, m = 2, kk = 7, n = 4;
  ph::Array x = ph::Array::random({b, m, kk}, ph::DType::f32, 8), y = ph::Array::random({kk, n}, ph::DType::f32, 9);
  ph::Array out = k.interpret({x, y}).at(0);
  for (int64_t q = 0; q < b; ++q)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < kk; ++p) s += x.get((q * m + i) * kk + p) * y.get(p * n + j);
        EXPECT_EQ(out.get((q * m + i) * n + j), static_cast<float>(s));
      }
}

// --- casts and stores to every dtype ---------------------------------------------------------

std::tuple<ph::Tensor, ph::Tensor, ph::Tensor, ph::Tensor, ph::Tensor> casts(ph::Tensor x) {
  int64_t n = x.size(0);
  auto f = ph::empty({4, n}, ph::DType::f32);
  auto to_bf16 = ph::empty({n}, ph::DType::bf16);
  auto to_f16 = ph::empty({n}, ph::DType::f16);
  auto to_i32 = ph::empty({2, n}, ph::DType::i32);
  auto to_bool = ph::empty({n}, ph::DType::boolean);
  for (auto t : ph::tile(n)) {
    auto v = x[t] * 100.0f;
    f[0, t] = ph::cast(v, ph::DType::bf16);  // rounds in place, stays f32
    f[1, t] = ph::cast(v, ph::DType::f16);
    f[2, t] = ph::cast(ph::cast(v, ph::DType::i64), ph::DType::f32);  // truncation toward zero
    f[3, t] = ph::cast(ph::cast(v, ph::DType::boolean), ph::DType::f32);
    to_bf16[t] = v;  // stores round to the tensor's dtype
    to_f16[t] = v;
    to_i32[0, t] = v;                                                              // truncation
    to_i32[1, t] = ph::cast(t.index() + int64_t{4294967296} - 3, ph::DType::i32);  // wraps mod 2^32
    to_bool[t] = v > 0.0f;
  }
  return {f, to_bf16, to_f16, to_i32, to_bool};
}

TEST(Interpreter, CastsAndStoresRoundToTheirDtype) {
  ph::Kernel k("casts", casts);
  const int64_t n = 33;
  ph::Array x = ph::Array::random({n}, ph::DType::f32, 10);
  x.set(0, 0.0);
  x.set(1, -0.015);  // v = -1.5: truncates to -1
  auto out = k.interpret({x});
  EXPECT_EQ(out[1].dtype(), ph::DType::bf16);
  EXPECT_EQ(out[3].dtype(), ph::DType::i32);
  EXPECT_EQ(out[4].dtype(), ph::DType::boolean);
  for (int64_t i = 0; i < n; ++i) {
    double v = x.get(i) * 100.0;
    EXPECT_EQ(out[0].get(i), bf16(v)) << i;
    EXPECT_EQ(out[0].get(n + i), f16(v)) << i;
    EXPECT_EQ(out[0].get(2 * n + i), std::trunc(v)) << i;
    EXPECT_EQ(out[0].get(3 * n + i), v != 0 ? 1 : 0) << i;
    EXPECT_EQ(out[1].get(i), bf16(v)) << i;
    EXPECT_EQ(out[2].get(i), f16(v)) << i;
    EXPECT_EQ(out[3].get(i), std::trunc(v)) << i;
    EXPECT_EQ(out[3].get(n + i), static_cast<double>(i) - 3) << i;
    EXPECT_EQ(out[4].get(i), v > 0 ? 1 : 0) << i;
  }
  EXPECT_EQ(out[0].get(2 * n + 1), -1);
}

// A float that does not fit the integer type is undefined in the CPU backend: an error here.
ph::Tensor bad_cast(ph::Tensor x) {
  auto out = ph::empty({x.size(0)}, ph::DType::i32);
  for (auto t : ph::tile(x.size(0))) out[t] = x[t] * 1e10f;
  return out;
}

TEST(Interpreter, OutOfRangeFloatToIntegerIsAUserError) {
  ph::Kernel k("bad_cast", bad_cast);
  ph::Array x = ph::Array::full({3}, 1.0, ph::DType::f32);
  try {
    k.interpret({x});
    FAIL() << "no error";
  } catch (const ph::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("does not convert to i32"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("test_interpreter.cpp"), std::string::npos) << e.what();
  }
}

// --- pointwise: every unary and binary fn, broadcasting, booleans ----------------------------

ph::Tensor unary_zoo(ph::Tensor x) {
  int64_t n = x.size(0);
  auto out = ph::empty({10, n}, ph::DType::f32);
  for (auto t : ph::tile(n)) {
    auto v = x[t];
    auto pos = ph::abs(v) + 0.5f;
    out[0, t] = -v;
    out[1, t] = ph::exp(v);
    out[2, t] = ph::log(pos);
    out[3, t] = ph::sqrt(pos);
    out[4, t] = ph::rsqrt(pos);
    out[5, t] = ph::tanh(v);
    out[6, t] = ph::sigmoid(v);
    out[7, t] = ph::silu(v);
    out[8, t] = ph::gelu(v);
    out[9, t] = ph::cast(!(v > 0.0f), ph::DType::f32) + ph::cast(ph::abs(-t.index()), ph::DType::f32);
  }
  return out;
}

TEST(Interpreter, EveryUnaryFn) {
  ph::Kernel k("unary_zoo", unary_zoo);
  const int64_t n = 41;
  ph::Array x = ph::Array::random({n}, ph::DType::f32, 11, -4, 4);
  ph::Array out = k.interpret({x}).at(0);
  auto near = [](double got, double want) { EXPECT_NEAR(got, want, 1e-7 * (1 + std::abs(want))); };
  for (int64_t i = 0; i < n; ++i) {
    double v = x.get(i), pos = std::abs(v) + 0.5;
    auto at = [&](int j) { return out.get(j * n + i); };
    near(at(0), -v);
    near(at(1), std::exp(v));
    near(at(2), std::log(pos));
    near(at(3), std::sqrt(pos));
    near(at(4), 1 / std::sqrt(pos));
    near(at(5), std::tanh(v));
    near(at(6), 1 / (1 + std::exp(-v)));
    near(at(7), v / (1 + std::exp(-v)));
    near(at(8), 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
    EXPECT_EQ(at(9), (v > 0 ? 0 : 1) + static_cast<double>(i));
  }
}

// Binary ops on a [m, 1] column against a [1, n] row (numpy broadcasting), i64 arithmetic and
// true division, comparisons and logical ops.
std::tuple<ph::Tensor, ph::Tensor> binary_zoo(ph::Tensor col, ph::Tensor row) {
  int64_t m = col.size(0), n = row.size(0);
  auto f = ph::empty({9, m, n}, ph::DType::f32);
  auto b = ph::empty({8, m, n}, ph::DType::boolean);
  for (auto [tm, tn] : ph::tile(m, n)) {
    auto a = col[tm].unsqueeze(-1);  // [tm, 1]
    auto c = row[tn].unsqueeze(0);   // [1, tn]
    f[0, tm, tn] = a + c;
    f[1, tm, tn] = a - c;
    f[2, tm, tn] = a * c;
    f[3, tm, tn] = a / c;
    f[4, tm, tn] = ph::maximum(a, c);
    f[5, tm, tn] = ph::minimum(a, c);
    f[6, tm, tn] = ph::pow(ph::abs(a) + 0.5f, c);
    auto i = tm.index().unsqueeze(-1), j = tn.index().unsqueeze(0);  // i64 [tm,1], [1,tn]
    f[7, tm, tn] = ph::cast(i * j - i + 3 * j, ph::DType::f32);
    f[8, tm, tn] = i / (j + 1);  // i64 / i64 is true division
    b[0, tm, tn] = a < c;
    b[1, tm, tn] = a <= c;
    b[2, tm, tn] = a > c;
    b[3, tm, tn] = a >= c;
    b[4, tm, tn] = i == j;
    b[5, tm, tn] = i != j;
    b[6, tm, tn] = (a > 0.0f) && (c > 0.0f);
    b[7, tm, tn] = (a > 0.0f) || (c > 0.0f);
  }
  return {f, b};
}

TEST(Interpreter, EveryBinaryFnWithBroadcasting) {
  ph::Kernel k("binary_zoo", binary_zoo);
  const int64_t m = 6, n = 7;
  ph::Array col = ph::Array::random({m}, ph::DType::f32, 12, -2, 2),
            row = ph::Array::random({n}, ph::DType::f32, 13, -2, 2);
  row.set(0, col.get(0));  // one equal pair for <= and >=
  auto out = k.interpret({col, row});
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double a = col.get(i), c = row.get(j);
      auto F = [&](int s) { return out[0].get((s * m + i) * n + j); };
      auto B = [&](int s) { return out[1].get((s * m + i) * n + j); };
      EXPECT_EQ(F(0), static_cast<float>(a + c));
      EXPECT_EQ(F(1), static_cast<float>(a - c));
      EXPECT_EQ(F(2), static_cast<float>(a * c));
      EXPECT_EQ(F(3), static_cast<float>(a / c));
      EXPECT_EQ(F(4), std::max(a, c));
      EXPECT_EQ(F(5), std::min(a, c));
      EXPECT_EQ(F(6), static_cast<float>(std::pow(std::abs(a) + 0.5, c)));
      EXPECT_EQ(F(7), static_cast<double>(i * j - i + 3 * j));
      EXPECT_EQ(F(8), static_cast<float>(static_cast<double>(i) / static_cast<double>(j + 1)));
      EXPECT_EQ(B(0), a < c);
      EXPECT_EQ(B(1), a <= c);
      EXPECT_EQ(B(2), a > c);
      EXPECT_EQ(B(3), a >= c);
      EXPECT_EQ(B(4), i == j);
      EXPECT_EQ(B(5), i != j);
      EXPECT_EQ(B(6), a > 0 && c > 0);
      EXPECT_EQ(B(7), a > 0 || c > 0);
    }
}

// The language follows torch where the CPU backend's fast paths do not: pow of a negative
// base or of 0^0, and NaN through maximum and amax.
ph::Tensor torch_semantics(ph::Tensor x) {
  auto out = ph::empty({4}, ph::DType::f32);
  for ([[maybe_unused]] auto g : ph::grid(1)) {
    auto v = x[ph::all];
    out[0] = ph::pow(-2.0f, 2.0f);
    out[1] = ph::pow(0.0f, 0.0f);
    out[2] = ph::amax(v, 0);
    out[3] = ph::sum(ph::maximum(v, 1.0f), 0);
  }
  return out;
}

TEST(Interpreter, PowAndNaNFollowTorch) {
  ph::Kernel k("torch_semantics", torch_semantics);
  ph::Array x = ph::Array::from_floats({3}, std::vector<float>{1, NAN, 2});
  ph::Array out = k.interpret({x}).at(0);
  EXPECT_EQ(out.get(0), 4);
  EXPECT_EQ(out.get(1), 1);
  EXPECT_TRUE(std::isnan(out.get(2)));
  EXPECT_TRUE(std::isnan(out.get(3)));
}

// i64 values are exact integers in a double: beyond 2^53 the interpreter refuses, not rounds.
ph::Tensor times_four(ph::Tensor x) {
  auto out = ph::empty_like(x);
  for (auto t : ph::tile(x.size(0))) out[t] = x[t] * 4;
  return out;
}

TEST(Interpreter, I64BeyondTwoTo53IsRefusedNotRounded) {
  ph::Kernel k("times_four", times_four);
  ph::Array x = ph::Array::full({2}, 3.0, ph::DType::i64);
  EXPECT_EQ(k.interpret({x}).at(0).get(1), 12);
  x.set(1, 4e15);  // below 2^53, but four times it is not
  EXPECT_THROW(k.interpret({x}), ph::UserError);
  x.set(1, 1e17);  // already beyond 2^53 as an argument
  EXPECT_THROW(k.interpret({x}), ph::UserError);
}

// --- memory: allocation fills, scalar indices, arguments ------------------------------------

// zeros/full fill; empty is NaN where never written.
std::tuple<ph::Tensor, ph::Tensor, ph::Tensor> fills(ph::Tensor x) {
  int64_t n = x.size(0);
  auto e = ph::empty({n}, ph::DType::f32);
  auto z = ph::zeros({n}, ph::DType::f32);
  auto f = ph::full({n}, 2.5, ph::DType::bf16);
  for (auto t : ph::tile(ph::range(n / 2))) {
    e[t] = x[t];
    z[t] = x[t];
  }
  return {e, z, f};
}

TEST(Interpreter, AllocationsAreFilledAndUnwrittenMemoryIsNaN) {
  ph::Kernel k("fills", fills);
  const int64_t n = 9;
  ph::Array x = ph::Array::random({n}, ph::DType::f32, 14);
  auto out = k.interpret({x});
  for (int64_t i = 0; i < n; ++i) {
    if (i < n / 2) {
      EXPECT_EQ(out[0].get(i), x.get(i));
      EXPECT_EQ(out[1].get(i), x.get(i));
    } else {
      EXPECT_TRUE(std::isnan(out[0].get(i))) << i;
      EXPECT_EQ(out[1].get(i), 0);
    }
    EXPECT_EQ(out[2].get(i), 2.5);
  }
}

// A gather: row r of the output is row idx[r] of the table; the index is an i32 tensor.
constexpr int kGatherLine = __LINE__ + 6;  // the line of `table[i, ph::all]` below
ph::Tensor gather_rows(ph::Tensor table, ph::Tensor idx) {
  auto [v, d] = table.sizes<2>();
  auto out = ph::empty({idx.size(0), d}, table.dtype());
  for (auto r : ph::grid(idx.size(0))) {
    auto i = idx[r];  // i64 scalar
    out[r, ph::all] = table[i, ph::all];
  }
  return out;
}

TEST(Interpreter, ScalarIndexFromAnIntegerTensor) {
  ph::Kernel k("gather_rows", gather_rows);
  ph::Array table = ph::Array::random({5, 6}, ph::DType::f32, 15);
  ph::Array idx = ph::Array::empty({4}, ph::DType::i32);
  const int want[] = {3, 0, 4, 3};
  for (int r = 0; r < 4; ++r) idx.set(r, want[r]);
  ph::Array out = k.interpret({table, idx}).at(0);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 6; ++c) EXPECT_EQ(out.get(r * 6 + c), table.get(want[r] * 6 + c));
}

TEST(Interpreter, OutOfBoundsScalarIndexIsAUserErrorNamingTensorDimValueAndLine) {
  ph::Kernel k("gather_rows", gather_rows);
  ph::Array table = ph::Array::random({5, 6}, ph::DType::f32, 15);
  ph::Array idx = ph::Array::full({3}, 1.0, ph::DType::i32);
  idx.set(2, 9);
  try {
    k.interpret({table, idx});
    FAIL() << "no error";
  } catch (const ph::UserError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("arg0"), std::string::npos) << m;  // the table
    EXPECT_NE(m.find("index 9"), std::string::npos) << m;
    EXPECT_NE(m.find("dimension 0"), std::string::npos) << m;
    EXPECT_NE(m.find("size 5"), std::string::npos) << m;
    EXPECT_NE(m.find("test_interpreter.cpp:" + std::to_string(kGatherLine)), std::string::npos) << m;
  }
  idx.set(2, -1);
  EXPECT_THROW(k.interpret({table, idx}), ph::UserError);
}

// An index read from memory the kernel never wrote is reported, not used.
ph::Tensor unwritten_index(ph::Tensor x) {
  auto idx = ph::empty({1}, ph::DType::i64);
  auto out = ph::empty({1}, ph::DType::f32);
  for (auto g : ph::grid(1)) out[g] = x[idx[g]];
  return out;
}

TEST(Interpreter, IndexFromUnwrittenMemoryIsAUserError) {
  ph::Kernel k("unwritten_index", unwritten_index);
  ph::Array x = ph::Array::random({4}, ph::DType::f32, 16);
  try {
    k.interpret({x});
    FAIL() << "no error";
  } catch (const ph::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("never wrote"), std::string::npos) << e.what();
  }
}

// In place: the compiled kernel writes its argument; the interpreter works on a copy.
ph::Tensor scale_in_place(ph::Tensor x, ph::Scalar s) {
  for (auto tile : ph::tile(x.sizes())) x[tile] = x[tile] * s;
  return x;
}

TEST(Interpreter, ArgumentsAreNeverModifiedAndParamsShowTheirFinalState) {
  ph::Kernel k("scale_in_place", scale_in_place);
  ph::Array x = ph::Array::random({3, 5}, ph::DType::f32, 17);
  ph::Array before = x.clone();
  std::vector<ph::Arg> args = {x, 1.5};
  ph::interp::Interpretation r = ph::interp::interpret(k.trace(args)->fn, args);
  ASSERT_EQ(r.params.size(), 1u);
  ASSERT_EQ(r.outputs.size(), 1u);
  for (int64_t i = 0; i < x.numel(); ++i) {
    EXPECT_EQ(x.get(i), before.get(i));
    EXPECT_EQ(r.params[0].get(i), static_cast<float>(before.get(i) * 1.5));
    EXPECT_EQ(r.outputs[0].get(i), r.params[0].get(i));
  }
  ph::Array wrong = ph::Array::random({3, 4}, ph::DType::f32, 1);
  EXPECT_THROW(ph::interp::interpret(k.trace(args)->fn, {wrong, 1.5}), ph::UserError);
}

// Strided arguments are read through their strides.
TEST(Interpreter, StridedArgumentsReadLogicalElements) {
  ph::Kernel k("scale_in_place", scale_in_place);
  ph::Array base = ph::Array::random({4, 6}, ph::DType::f32, 18);
  // Every other column: shape [4, 3], strides [6, 2].
  ph::Array view = ph::Array::wrap(base.data(), {4, 3}, {6, 2}, ph::DType::f32);
  ph::Array out = k.interpret({view, 2.0}).at(0);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(out.get(i * 3 + j), 2 * base.get(i * 6 + 2 * j));
}

// --- the oracle in use: compiled kernels agree with it ------------------------------------

// Runs `k` compiled by the CPU backend at its default config and at the smallest blocks, on
// fresh copies of `tensors` (then `scalars`), and checks every output against the interpreter.
void expect_compiled_agrees(ph::KernelBase& k, const std::vector<ph::Array>& tensors,
                            const std::vector<double>& scalars = {}, ph::DType tol = ph::DType::f32) {
  auto fresh = [&](std::vector<ph::Array>& copies) {
    copies.clear();
    for (const ph::Array& t : tensors) copies.push_back(t.clone());
    std::vector<ph::Arg> args(copies.begin(), copies.end());
    for (double s : scalars) args.emplace_back(s);
    return args;
  };
  std::vector<ph::Array> c0;
  auto want = k.interpret(fresh(c0));
  ph::Config def = k.compile(fresh(c0)).config(), smallest = def;
  for (auto& b : smallest.block_sizes) b = 1;
  for (const ph::Config& c : {def, smallest}) {
    SCOPED_TRACE(k.name() + " config " + c.to_json());
    std::vector<ph::Array> copies;
    auto args = fresh(copies);
    auto got = k.compile(args, &c).run(args);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      auto cmp = ph::tune::compare(got[i], want[i], tol);
      EXPECT_TRUE(cmp.ok) << "output " << i << " max abs error " << cmp.max_abs_err;
    }
  }
}

TEST(Interpreter, CompiledKernelsAgreeWithIt) {
  // (Not block_geometry: it reports its tunable block's length, which is the config's choice.)
  ph::Kernel stats("row_stats2", row_stats2);
  expect_compiled_agrees(stats, {ph::Array::random({5, 37}, ph::DType::f32, 2)});
  ph::Kernel axes("axis_reductions", axis_reductions);
  expect_compiled_agrees(axes, {ph::Array::random({4, 9}, ph::DType::f32, 3)});
  ph::Kernel sums("running_sums", running_sums);
  expect_compiled_agrees(sums, {ph::Array::random({7, 40}, ph::DType::f32, 4)});
  ph::Kernel dots("dot_acc_transpose", dot_acc_transpose);
  for (ph::DType dt : {ph::DType::f32, ph::DType::bf16})
    expect_compiled_agrees(dots,
                           {ph::Array::random({6, 21}, dt, 5), ph::Array::random({5, 21}, dt, 6),
                            ph::Array::random({6, 5}, ph::DType::f32, 7)},
                           {}, dt);
  ph::Kernel batched("batched_dot", batched_dot);
  expect_compiled_agrees(
      batched, {ph::Array::random({3, 2, 7}, ph::DType::f32, 8), ph::Array::random({7, 4}, ph::DType::f32, 9)});
  ph::Kernel cast_kernel("casts", casts);
  expect_compiled_agrees(cast_kernel, {ph::Array::random({33}, ph::DType::f32, 10)});
  ph::Kernel unaries("unary_zoo", unary_zoo);
  expect_compiled_agrees(unaries, {ph::Array::random({41}, ph::DType::f32, 11, -4, 4)});
  ph::Kernel binaries("binary_zoo", binary_zoo);
  expect_compiled_agrees(
      binaries, {ph::Array::random({6}, ph::DType::f32, 12, -2, 2), ph::Array::random({7}, ph::DType::f32, 13, -2, 2)});
  ph::Kernel gather("gather_rows", gather_rows);
  ph::Array idx = ph::Array::empty({4}, ph::DType::i32);
  for (int r = 0; r < 4; ++r) idx.set(r, (r * 3) % 5);
  expect_compiled_agrees(gather, {ph::Array::random({5, 6}, ph::DType::f32, 15), idx});
  ph::Kernel in_place("scale_in_place", scale_in_place);
  expect_compiled_agrees(in_place, {ph::Array::random({3, 5}, ph::DType::f32, 17)}, {1.5});
}

// --- the library: every kernel, two shapes, f32 and bf16, against its reference -------------

std::vector<ph::Shape> library_shapes(const ph::kernels::KernelEntry& e) {
  if (e.name == "int4_matmul") return {{5, 64, 7, 32}, {13, 96, 29, 48}};                       // M,K,N,G
  if (e.name == "bmm" || e.name == "broadcast_matmul") return {{2, 8, 16, 4}, {3, 13, 29, 7}};  // B,M,K,N
  if (e.name == "matmul" || e.name == "epilogue_subtiling" || e.name == "matmul_layernorm" || e.name == "fp8_matmul" ||
      e.name == "split_k_matmul")
    return {{16, 32, 8}, {13, 29, 37}};
  if (e.name == "moe_matmul")
    return {{5, 4, 3, 3, 2},
            {13, 7, 9, 4, 2}};  // T,K,N,E,TOPK                                                    // M,K,N
  if (e.name.find("attention") != std::string::npos) return {{1, 2, 16, 8}, {2, 33, 12}};  // both layouts
  if (e.min_rank == 4) return {{1, 5, 3, 10}, {2, 3, 1, 2}};
  if (e.name == "grouped_gemm") return {{13, 7, 9, 3}, {20, 5, 6, 4}};     // M,K,N,G
  if (e.name.rfind("segment_", 0) == 0) return {{13, 7, 5}, {40, 3, 90}};  // N,D,S
  if (e.min_rank == 3) return {{2, 4, 32}, {3, 5, 17}};
  if (e.min_rank == 2) return {{8, 64}, {7, 129}};
  return {{4, 96}, {3, 5, 13}};
}

class LibraryInterpretation : public ::testing::TestWithParam<std::string> {};

TEST_P(LibraryInterpretation, MatchesTheIndependentReference) {
  const auto& e = ph::kernels::find_kernel(GetParam());
  int cases = 0;
  for (ph::DType dt : {ph::DType::f32, ph::DType::bf16, ph::DType::f8e4m3}) {
    if (std::find(e.dtypes.begin(), e.dtypes.end(), dt) == e.dtypes.end()) continue;
    for (const ph::Shape& shape : library_shapes(e)) {
      SCOPED_TRACE(e.name + " " + ph::shape_to_string(shape) + " " + std::string(ph::dtype_name(dt)));
      auto in = e.make_inputs(shape, dt, 42);
      auto want = e.reference(in);
      auto got = e.kernel->interpret(in.args());
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        auto cmp = ph::kernels::compare(got[i], want[i], dt, e.tolerance(shape));
        EXPECT_TRUE(cmp.ok) << "output " << i << " max abs error " << cmp.max_abs_err;
      }
      ++cases;
    }
  }
  EXPECT_GE(cases, 2);
}

std::vector<std::string> library_names() {
  std::vector<std::string> names;
  for (const auto& e : ph::kernels::registry()) names.push_back(e.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Library, LibraryInterpretation, ::testing::ValuesIn(library_names()),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace

// Hand-computed checks of the naive kernel references (kernels/references.h).
#include "kernels/references.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <vector>

namespace parhelion {
namespace {

Array F(Shape shape, std::vector<float> v, DType dt = DType::f32) {
  return Array::from_floats(std::move(shape), v, dt);
}

Array ints(std::vector<int64_t> v, DType dt) {
  Array a = Array::empty({static_cast<int64_t>(v.size())}, dt);
  for (size_t i = 0; i < v.size(); ++i) a.set(static_cast<int64_t>(i), static_cast<double>(v[i]));
  return a;
}

// Checks shape, dtype f32 and every element against `want` to within `tol`.
void expect_array(const Array& got, const Shape& shape, const std::vector<double>& want, double tol = 1e-6) {
  ASSERT_EQ(got.shape(), shape);
  EXPECT_EQ(got.dtype(), DType::f32);
  EXPECT_TRUE(got.is_contiguous());
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size()));
  for (int64_t i = 0; i < got.numel(); ++i)
    EXPECT_NEAR(got.get(i), want[static_cast<size_t>(i)], tol) << "at flat index " << i;
}

const double kLn2 = std::log(2.0), kLn3 = std::log(3.0), kE = std::exp(1.0);

TEST(RefAdd, Basic) { expect_array(ref::add(F({3}, {1, 2, 3}), F({3}, {0.5f, -2, 10})), {3}, {1.5, 0, 13}); }

TEST(RefAdd, MixedLowPrecisionInputsGiveF32) {
  // 1.5, -0.25, 3, 8 are exact in bf16 and f16.
  expect_array(ref::add(F({2, 2}, {1.5f, -0.25f, 3, 8}, DType::bf16), F({2, 2}, {1, 1, 1, 1}, DType::f16)), {2, 2},
               {2.5, 0.75, 4, 9});
}

TEST(RefAdd, ShapeMismatchThrows) {
  EXPECT_THROW(ref::add(F({3}, {1, 2, 3}), F({1, 3}, {1, 2, 3})), std::invalid_argument);
  EXPECT_THROW(ref::add(F({1}, {1}), ints({1}, DType::i32)), std::invalid_argument);
}

TEST(RefExp, KnownValues) {
  expect_array(ref::exp(F({4}, {0, 1, static_cast<float>(kLn2), -1})), {4}, {1, kE, 2, 1 / kE});
  EXPECT_THROW(ref::exp(ints({1}, DType::i64)), std::invalid_argument);
}

TEST(RefSoftmax, TwoElements) {
  expect_array(ref::softmax(F({2}, {0, static_cast<float>(kLn2)})), {2}, {1.0 / 3, 2.0 / 3});
}

TEST(RefSoftmax, UniformRowAndLargeShift) {
  // Without subtracting the row max, e^1000 would overflow.
  expect_array(ref::softmax(F({2, 4}, {7, 7, 7, 7, 1000, 1001, 1000, 1000})), {2, 4},
               {0.25, 0.25, 0.25, 0.25, 1 / (3 + kE), kE / (3 + kE), 1 / (3 + kE), 1 / (3 + kE)});
}

TEST(RefSoftmax, BatchedRank3IsPerLastDimRow) {
  // [B=2, M=1, N=2]: each row normalized on its own.
  expect_array(ref::softmax(F({2, 1, 2}, {0, static_cast<float>(kLn3), 5, 5})), {2, 1, 2}, {0.25, 0.75, 0.5, 0.5});
}

TEST(RefSoftmax, RankZeroThrows) {
  EXPECT_THROW(ref::softmax(Array::full({}, 1.0, DType::f32)), std::invalid_argument);
}

TEST(RefLayerNorm, TwoElementRow) {
  // Row [1, 3]: mean 2, biased var 1 -> normalized [-1, 1].
  auto x = F({1, 2}, {1, 3});
  expect_array(ref::layer_norm(x, F({2}, {1, 1}), F({2}, {0, 0}), 0.0), {1, 2}, {-1, 1});
  // Scale/shift: [-1*2 + 0.5, 1*3 - 1].
  expect_array(ref::layer_norm(x, F({2}, {2, 3}), F({2}, {0.5f, -1}), 0.0), {1, 2}, {-1.5, 2});
  // eps = 3: rstd = 1/sqrt(1+3) = 1/2.
  expect_array(ref::layer_norm(x, F({2}, {2, 3}), F({2}, {0.5f, -1}), 3.0), {1, 2}, {-0.5, 0.5});
}

TEST(RefLayerNorm, MultipleRowsAndConstantRow) {
  // Row 1: [0, 4, 8] mean 4, var 32/3. Row 2 is constant: var 0, so (with eps > 0) output is b.
  const double eps = 0.25, s = std::sqrt(32.0 / 3 + eps);
  expect_array(ref::layer_norm(F({2, 3}, {0, 4, 8, 5, 5, 5}), F({3}, {1, 1, 1}), F({3}, {0, 1, 2}), eps), {2, 3},
               {-4 / s, 1, 2 + 4 / s, 0, 1, 2}, 1e-5);
}

TEST(RefLayerNorm, BadShapesThrow) {
  auto x = F({1, 2}, {1, 3});
  EXPECT_THROW(ref::layer_norm(x, F({3}, {1, 1, 1}), F({2}, {0, 0}), 0.0), std::invalid_argument);
  EXPECT_THROW(ref::layer_norm(x, F({2}, {1, 1}), F({1, 2}, {0, 0}), 0.0), std::invalid_argument);
  EXPECT_THROW(ref::layer_norm(F({2}, {1, 3}), F({2}, {1, 1}), F({2}, {0, 0}), 0.0), std::invalid_argument);
}

TEST(RefRmsNorm, KnownValues) {
  // Row [1, 7]: mean(x^2) = 25, rstd 1/5. Row [1, 1] with eps 3: rstd 1/2.
  expect_array(ref::rms_norm(F({1, 2}, {1, 7}), F({2}, {1, 2}), 0.0), {1, 2}, {0.2, 2.8});
  expect_array(ref::rms_norm(F({2, 2}, {1, 1, -2, 2}), F({2}, {1, 1}), 3.0), {2, 2},
               {0.5, 0.5, -2 / std::sqrt(7.0), 2 / std::sqrt(7.0)});
  EXPECT_THROW(ref::rms_norm(F({2}, {1, 7}), F({2}, {1, 1}), 0.0), std::invalid_argument);
  EXPECT_THROW(ref::rms_norm(F({1, 2}, {1, 7}), F({3}, {1, 1, 1}), 0.0), std::invalid_argument);
}

TEST(RefRmsNormBackward, SingleColumnIsSignFunction) {
  // N = 1, eps = 0: y = x / |x| * w is flat in x, so dx = 0; dw = g * sign(x) = 3.
  auto [dx, dw] = ref::rms_norm_backward(F({1, 1}, {3}), F({1, 1}, {2}), F({1}, {5}), 0.0);
  expect_array(dx, {1, 1}, {0});
  expect_array(dw, {1}, {3});
}

// Loss L = sum_ij y_ij g_ij of rms_norm, written out independently in double for finite
// differences.
double rms_loss(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& g, int64_t m,
                int64_t n, double eps) {
  double loss = 0;
  for (int64_t i = 0; i < m; ++i) {
    double ms = 0;
    for (int64_t j = 0; j < n; ++j) ms += x[i * n + j] * x[i * n + j] / n;
    for (int64_t j = 0; j < n; ++j) loss += x[i * n + j] / std::sqrt(ms + eps) * w[j] * g[i * n + j];
  }
  return loss;
}

std::vector<double> to_doubles(const Array& a) {
  std::vector<double> v(static_cast<size_t>(a.numel()));
  for (int64_t i = 0; i < a.numel(); ++i) v[static_cast<size_t>(i)] = a.get(i);
  return v;
}

TEST(RefRmsNormBackward, MatchesCentralFiniteDifference) {
  const int64_t m = 3, n = 5;
  const double eps = 1e-2, h = 1e-4;
  Array xa = Array::random({m, n}, DType::f32, 1), wa = Array::random({n}, DType::f32, 2, 0.5, 1.5),
        ga = Array::random({m, n}, DType::f32, 3);
  auto [dx, dw] = ref::rms_norm_backward(ga, xa, wa, eps);
  ASSERT_EQ(dx.shape(), (Shape{m, n}));
  ASSERT_EQ(dw.shape(), (Shape{n}));
  auto x = to_doubles(xa), w = to_doubles(wa), g = to_doubles(ga);
  auto fd = [&](std::vector<double>& v, size_t k) {
    double orig = v[k];
    v[k] = orig + h;
    double lp = rms_loss(x, w, g, m, n, eps);
    v[k] = orig - h;
    double lm = rms_loss(x, w, g, m, n, eps);
    v[k] = orig;
    return (lp - lm) / (2 * h);
  };
  for (size_t k : {0u, 3u, 7u, 11u, 14u}) EXPECT_NEAR(dx.get(static_cast<int64_t>(k)), fd(x, k), 1e-5) << "dx at " << k;
  for (size_t j = 0; j < static_cast<size_t>(n); ++j)
    EXPECT_NEAR(dw.get(static_cast<int64_t>(j)), fd(w, j), 1e-5) << "dw at " << j;
}

TEST(RefRmsNormBackward, BadShapesThrow) {
  EXPECT_THROW(ref::rms_norm_backward(F({1, 3}, {1, 2, 3}), F({1, 2}, {1, 2}), F({2}, {1, 1}), 0),
               std::invalid_argument);
  EXPECT_THROW(ref::rms_norm_backward(F({1, 2}, {1, 2}), F({1, 2}, {1, 2}), F({1}, {1}), 0), std::invalid_argument);
}

TEST(RefSwiglu, KnownValues) {
  // silu(0) = 0; sigmoid(ln 3) = 3/4 so silu(ln 3) = 0.75 ln 3; silu(20) ~ 20, silu(-20) ~ 0.
  expect_array(ref::swiglu(F({4}, {0, static_cast<float>(kLn3), 20, -20}), F({4}, {5, 2, 1, 1})), {4},
               {0, 1.5 * kLn3, 20, 0}, 1e-5);
  EXPECT_THROW(ref::swiglu(F({2}, {0, 1}), F({3}, {0, 1, 2})), std::invalid_argument);
}

TEST(RefGeglu, KnownValues) {
  // Published tanh-GELU values: gelu(1) = 0.8411920, gelu(-1) = -0.1588080; gelu(0) = 0.
  expect_array(ref::geglu(F({3}, {1, -1, 0}), F({3}, {1, 2, 7})), {3}, {0.8411920, -2 * 0.1588080, 0}, 1e-6);
  // Odd/even split: gelu(x) - gelu(-x) = x exactly; large |x| saturates to relu.
  Array a = ref::geglu(F({4}, {2.5f, -2.5f, 10, -10}), F({4}, {1, 1, 3, 3}));
  EXPECT_NEAR(a.get(0) - a.get(1), 2.5, 1e-6);
  EXPECT_NEAR(a.get(2), 30, 1e-5);
  EXPECT_NEAR(a.get(3), 0, 1e-5);
  EXPECT_THROW(ref::geglu(F({2}, {0, 1}), F({1, 2}, {0, 1})), std::invalid_argument);
}

TEST(RefCrossEntropy, UniformLogitsGiveLogV) {
  Array logits = F({2, 4}, {0, 0, 0, 0, 3, 3, 3, 3});
  expect_array(ref::cross_entropy(logits, ints({0, 3}, DType::i64)), {2}, {std::log(4.0), std::log(4.0)});
  expect_array(ref::cross_entropy(logits, ints({2, 1}, DType::i32)), {2}, {std::log(4.0), std::log(4.0)});
}

TEST(RefCrossEntropy, TwoClasses) {
  // logits [0, ln 3]: logsumexp = ln 4. Label 0 -> ln 4; label 1 -> ln 4 - ln 3.
  // Row 2 is shifted by 1000 (needs the max subtraction): same losses.
  Array logits = F({3, 2}, {0, static_cast<float>(kLn3), 0, static_cast<float>(kLn3), 1000, 1001});
  expect_array(ref::cross_entropy(logits, ints({0, 1, 0}, DType::i32)), {3},
               {std::log(4.0), std::log(4.0 / 3), std::log1p(kE)}, 1e-5);
}

TEST(RefCrossEntropy, BadLabelsThrow) {
  Array logits = F({2, 3}, {0, 0, 0, 0, 0, 0});
  EXPECT_THROW(ref::cross_entropy(logits, ints({0, 3}, DType::i64)), std::invalid_argument);
  EXPECT_THROW(ref::cross_entropy(logits, ints({-1, 0}, DType::i32)), std::invalid_argument);
  EXPECT_THROW(ref::cross_entropy(logits, ints({0}, DType::i64)), std::invalid_argument);
  EXPECT_THROW(ref::cross_entropy(logits, F({2}, {0, 1})), std::invalid_argument);
  EXPECT_THROW(ref::cross_entropy(F({6}, {0, 0, 0, 0, 0, 0}), ints({0, 1}, DType::i64)), std::invalid_argument);
}

TEST(RefWelford, MeanAndPopulationVariance) {
  // [1,2,3,4]: mean 2.5, var 1.25. Constant row: var 0. Offset row: mean 10002, var 2/4.
  Array x = F({3, 4}, {1, 2, 3, 4, 5, 5, 5, 5, 10001, 10002, 10003, 10002});
  auto [mean, var] = ref::welford(x);
  expect_array(mean, {3}, {2.5, 5, 10002});
  expect_array(var, {3}, {1.25, 0, 0.5});
  EXPECT_THROW(ref::welford(F({4}, {1, 2, 3, 4})), std::invalid_argument);
}

TEST(RefSegmentSum, SumsRowsById) {
  // Rows 0,1 -> segment 0; segment 1 has no rows; rows 2,3,4 -> segment 2; segment 3 empty.
  Array x = F({5, 2}, {1, 10, 2, 20, 3, 30, 4, 40, 5, 50});
  expect_array(ref::segment_sum(x, ints({0, 0, 2, 2, 2}, DType::i64), 4), {4, 2}, {3, 30, 0, 0, 12, 120, 0, 0});
  EXPECT_THROW(ref::segment_sum(x, ints({0, 0, 2, 2, 4}, DType::i32), 4), std::invalid_argument);
  EXPECT_THROW(ref::segment_sum(x, ints({0, 0}, DType::i64), 4), std::invalid_argument);
}

TEST(RefSegmentCumsum, RunsRestartWhereTheIdChanges) {
  // Rows 0,1 -> id 1; rows 2,3,4 -> id 3 (ids skipped: no row of their own, nothing changes).
  Array x = F({5, 2}, {1, 10, 2, 20, 3, 30, 4, 40, 5, 50});
  expect_array(ref::segment_cumsum(x, ints({1, 1, 3, 3, 3}, DType::i32)), {5, 2},
               {1, 10, 3, 30, 3, 30, 7, 70, 12, 120});
  EXPECT_THROW(ref::segment_cumsum(x, ints({0, 0}, DType::i64)), std::invalid_argument);
}

}  // namespace
}  // namespace parhelion

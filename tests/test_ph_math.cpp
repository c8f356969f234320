// Accuracy / special-value tests for src/backend/cpu/runtime/ph_math.h.
// References are computed in double with the C++ standard library; the f16 /
// bf16 references are built independently of the bit tricks in the header
// (value tables + nearest-with-ties-to-even search).
//
// Standalone build (from the repo root):
//   g++ -std=c++20 -O2 -I src/backend/cpu/runtime tests/test_ph_math.cpp -lgtest -lgtest_main -pthread
#include "ph_math.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float fromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Inputs: a uniform grid over [lo, hi] plus every `stride`-th float bit
// pattern that falls inside [lo, hi] (covers all binades, incl. tiny values).
std::vector<float> sweep(float lo, float hi, int grid, uint32_t stride) {
  std::vector<float> v;
  v.reserve(grid + 1);
  for (int i = 0; i <= grid; ++i) v.push_back(lo + (hi - lo) * (float)((double)i / grid));
  for (uint64_t u = 0; u < 0x7f800000u; u += stride) {
    float p = fromBits((uint32_t)u), n = -p;
    if (p >= lo && p <= hi) v.push_back(p);
    if (n >= lo && n <= hi) v.push_back(n);
  }
  return v;
}

// Max relative error of f against ref over xs; |ref| below `floor` is judged
// absolutely against `floor` instead (for outputs that are ~0).
double maxRelErr(const std::vector<float>& xs, const std::function<float(float)>& f,
                 const std::function<double(double)>& ref, double floor, float* worst) {
  double m = 0;
  for (float x : xs) {
    double r = ref((double)x), y = (double)f(x);
    double e = std::fabs(y - r) / std::max(std::fabs(r), floor);
    if (!(e <= m)) {
      m = e;
      *worst = x;
    }  // also catches NaN results
  }
  return m;
}

double maxAbsErr(const std::vector<float>& xs, const std::function<float(float)>& f,
                 const std::function<double(double)>& ref, float* worst) {
  double m = 0;
  for (float x : xs) {
    double e = std::fabs((double)f(x) - ref((double)x));
    if (!(e <= m)) {
      m = e;
      *worst = x;
    }
  }
  return m;
}

void report(const char* name, double err, float worst) {
  std::printf("  %-8s max err %.3e at x=%.9g\n", name, err, (double)worst);
}

double refSigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
// 0.5*x*(1 + tanh(u)) rewritten as x*sigmoid(2u): same function, but without
// the cancellation that makes the tanh form useless (even in double) for x < -6.
double geluArg(double x) { return std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x); }
double refGelu(double x) { return x * refSigmoid(2.0 * geluArg(x)); }

TEST(PhMath, Exp) {
  auto xs = sweep(-87.0f, 88.0f, 200000, 2003);
  float w = 0;
  double e = maxRelErr(
      xs, ph_rt::exp, [](double x) { return std::exp(x); }, 0, &w);
  report("exp", e, w);
  EXPECT_LE(e, 3e-7);
  // Down to the smallest normal result, full accuracy; below it (subnormal
  // results) the result is flushed to +0, never negative, NaN or garbage.
  auto low = sweep(-87.3365f, -87.0f, 20000, 1u << 30);
  for (float x : low) {
    double r = std::exp((double)x), y = ph_rt::exp(x);
    EXPECT_LE(std::fabs(y - r), 3e-7 * r) << x;
  }
  auto sub = sweep(-104.0f, -87.34f, 20000, 1u << 29);
  for (float x : sub) EXPECT_EQ(bits(ph_rt::exp(x)), 0u) << x;
  for (float x : {-104.0f, -104.5f, -150.0f, -1e30f, -std::numeric_limits<float>::max(), -kInf}) {
    EXPECT_EQ(bits(ph_rt::exp(x)), 0u) << x;
  }
  for (float x : {88.73f, 89.0f, 100.0f, 1e30f, std::numeric_limits<float>::max(), kInf}) {
    EXPECT_EQ(ph_rt::exp(x), kInf) << x;
  }
  EXPECT_TRUE(std::isfinite(ph_rt::exp(88.72f)));
  EXPECT_EQ(ph_rt::exp(0.0f), 1.0f);
  EXPECT_EQ(ph_rt::exp(-0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(ph_rt::exp(kNaN)));
  EXPECT_TRUE(std::isnan(ph_rt::exp(-kNaN)));
}

TEST(PhMath, Exp2) {
  auto xs = sweep(-126.0f, 127.99f, 200000, 2003);
  float w = 0;
  double e = maxRelErr(
      xs, ph_rt::exp2, [](double x) { return std::exp2(x); }, 0, &w);
  report("exp2", e, w);
  EXPECT_LE(e, 3e-7);
  // Integers are exact powers of two; below 2^-126 the result is flushed to +0, from 2^128 on
  // it is +inf (and just below it, finite: the exponent add does not spill into NaN bits).
  for (int n = -126; n <= 127; ++n) EXPECT_EQ(ph_rt::exp2(static_cast<float>(n)), std::ldexp(1.0f, n)) << n;
  for (float x : {-126.01f, -127.5f, -149.0f, -1e30f, -kInf}) EXPECT_EQ(bits(ph_rt::exp2(x)), 0u) << x;
  for (float x : {128.0f, 128.5f, 1e30f, kInf}) EXPECT_EQ(ph_rt::exp2(x), kInf) << x;
  for (float x : {127.5f, 127.99f}) {
    EXPECT_TRUE(std::isfinite(ph_rt::exp2(x))) << x;
    EXPECT_NEAR(ph_rt::exp2(x) / std::exp2(static_cast<double>(x)), 1.0, 3e-7) << x;
  }
  EXPECT_EQ(ph_rt::exp2(-0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(ph_rt::exp2(kNaN)));
}

TEST(PhMath, Log) {
  // All positive normals and subnormals (strided) plus a dense grid near 1.
  auto xs = sweep(0.5f, 2.0f, 200000, 1009);
  float w = 0;
  for (float x : sweep(0.0f, std::numeric_limits<float>::max(), 0, 1009)) {
    if (x > 0) xs.push_back(x);
  }
  double e = maxRelErr(
      xs, ph_rt::log, [](double x) { return std::log(x); }, 0, &w);
  report("log", e, w);
  EXPECT_LE(e, 3e-7);
  EXPECT_EQ(ph_rt::log(1.0f), 0.0f);
  EXPECT_EQ(ph_rt::log(0.0f), -kInf);
  EXPECT_EQ(ph_rt::log(-0.0f), -kInf);
  EXPECT_EQ(ph_rt::log(kInf), kInf);
  EXPECT_EQ(ph_rt::log(std::numeric_limits<float>::denorm_min()), (float)std::log(1.401298464324817e-45));
  for (float x : {-1e-40f, -1.0f, -3.0f, -1e30f, -kInf, kNaN, -kNaN}) {
    EXPECT_TRUE(std::isnan(ph_rt::log(x))) << x;
  }
}

TEST(PhMath, Tanh) {
  auto xs = sweep(-12.0f, 12.0f, 400000, 2003);
  float w = 0;
  double e = maxAbsErr(
      xs, ph_rt::tanh, [](double x) { return std::tanh(x); }, &w);
  report("tanh", e, w);
  EXPECT_LE(e, 2e-7);
  for (float x : xs) EXPECT_EQ(bits(ph_rt::tanh(-x)), bits(ph_rt::tanh(x)) ^ 0x80000000u) << x;
  // Relative accuracy near 0 (the polynomial branch): tanh(x) ~ x.
  for (float x : {1e-30f, 1e-10f, 1e-4f, 0.01f, 0.3f, 0.6f}) {
    EXPECT_NEAR(ph_rt::tanh(x) / std::tanh((double)x), 1.0, 3e-7) << x;
  }
  EXPECT_EQ(bits(ph_rt::tanh(0.0f)), bits(0.0f));
  EXPECT_EQ(bits(ph_rt::tanh(-0.0f)), bits(-0.0f));
  for (float x : {9.5f, 20.0f, 50.0f, 1e30f, kInf}) {
    EXPECT_EQ(ph_rt::tanh(x), 1.0f) << x;
    EXPECT_EQ(ph_rt::tanh(-x), -1.0f) << x;
  }
  EXPECT_TRUE(std::isnan(ph_rt::tanh(kNaN)));
}

TEST(PhMath, SigmoidSiluGelu) {
  auto xs = sweep(-80.0f, 80.0f, 400000, 4001);
  float w = 0;
  double e = maxRelErr(xs, ph_rt::sigmoid, refSigmoid, 0, &w);
  report("sigmoid", e, w);
  EXPECT_LE(e, 4e-7);
  e = maxRelErr(
      xs, ph_rt::silu, [](double x) { return x * refSigmoid(x); }, 1e-37, &w);
  report("silu", e, w);
  EXPECT_LE(e, 5e-7);
  // gelu's left tail is ~x*exp(-2u) with 2u ~ 1.6x + 0.07x^3 computed in
  // float, so its relative error is ~|2u| times the rounding of 2u (inherent to
  // a float evaluation, e.g. ~4e-6 at x = -9.5). Scale the tolerance by that;
  // below x ~ -10.1 exp(-2u) overflows and the result is -0 (true |y| < 1e-37).
  double ge = 0;
  for (float x : xs) {
    double r = refGelu(x), y = ph_rt::gelu(x);
    if (std::fabs(r) < 1e-37) {  // underflowed tail: absolute check only
      EXPECT_LT(std::fabs(y - r), 1e-37) << x;
      continue;
    }
    double e2 = std::fabs(y - r) / (std::fabs(r) * (1.0 + std::fabs(2.0 * geluArg(x))));
    if (!(e2 <= ge)) {
      ge = e2;
      w = x;
    }
  }
  report("gelu", ge, w);
  EXPECT_LE(ge, 3e-7);
  auto gx = sweep(0.0f, 80.0f, 200000, 4001);
  e = maxRelErr(gx, ph_rt::gelu, refGelu, 1e-37, &w);  // floor: subnormal outputs
  report("gelu>=0", e, w);
  EXPECT_LE(e, 3e-7);
  for (float x : {-200.0f, -1e30f, -kInf}) {
    EXPECT_EQ(ph_rt::sigmoid(x), 0.0f) << x;
    EXPECT_EQ(ph_rt::silu(x), 0.0f) << x;
    EXPECT_EQ(ph_rt::gelu(x), 0.0f) << x;
  }
  for (float x : {200.0f, 1e30f, kInf}) {
    EXPECT_EQ(ph_rt::sigmoid(x), 1.0f) << x;
    EXPECT_EQ(ph_rt::silu(x), x) << x;
    EXPECT_EQ(ph_rt::gelu(x), x) << x;
  }
  EXPECT_EQ(ph_rt::sigmoid(0.0f), 0.5f);
  EXPECT_EQ(ph_rt::silu(0.0f), 0.0f);
  EXPECT_EQ(ph_rt::gelu(0.0f), 0.0f);
  EXPECT_TRUE(std::isnan(ph_rt::sigmoid(kNaN)));
  EXPECT_TRUE(std::isnan(ph_rt::silu(kNaN)));
  EXPECT_TRUE(std::isnan(ph_rt::gelu(kNaN)));
}

TEST(PhMath, SqrtRsqrtAbs) {
  // sqrt must be bit-exact (exactly rounded), incl. subnormal inputs.
  for (uint64_t u = 0; u <= 0x7f800000u; u += 997) {
    float x = fromBits((uint32_t)u);
    ASSERT_EQ(bits(ph_rt::sqrt(x)), bits(std::sqrt(x))) << x;
    ASSERT_EQ(bits(ph_rt::rsqrt(x)), bits(1.0f / std::sqrt(x))) << x;
  }
  // Perfect squares and their neighbours (exact / near-exact cases).
  for (uint32_t i = 1; i < 4096; i += 3) {
    float sq = (float)(i * i);
    for (float x : {sq, std::nextafter(sq, 0.0f), std::nextafter(sq, kInf)}) {
      EXPECT_EQ(bits(ph_rt::sqrt(x)), bits(std::sqrt(x))) << x;
    }
  }
  EXPECT_EQ(bits(ph_rt::sqrt(0.0f)), bits(0.0f));
  EXPECT_EQ(bits(ph_rt::sqrt(-0.0f)), bits(-0.0f));
  EXPECT_EQ(ph_rt::sqrt(kInf), kInf);
  EXPECT_EQ(ph_rt::rsqrt(0.0f), kInf);
  EXPECT_EQ(ph_rt::rsqrt(kInf), 0.0f);
  for (float x : {-1e-45f, -1.0f, -kInf, kNaN}) {
    EXPECT_TRUE(std::isnan(ph_rt::sqrt(x))) << x;
    EXPECT_TRUE(std::isnan(ph_rt::rsqrt(x))) << x;
  }
  for (float x : {0.0f, -0.0f, 1.5f, -1.5f, -kInf, -1e-45f}) {
    EXPECT_EQ(bits(ph_rt::abs(x)), bits(std::fabs(x))) << x;
  }
  EXPECT_TRUE(std::isnan(ph_rt::abs(-kNaN)));
}

// ---- bf16 ----------------------------------------------------------------

// Reference: pick the nearer of truncation and truncation+1ulp, ties to even.
// The pattern above the largest finite bf16 is inf, valued 2^128 here, which
// yields exactly IEEE's overflow rule.
uint16_t refF32ToBf16(float x) {
  uint32_t u = bits(x);
  if (std::isnan(x)) return (uint16_t)((u >> 16) | 0x40);
  uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
  auto val = [](uint32_t b) {
    return (b & 0x7fffffffu) == 0x7f800000u ? std::ldexp(1.0, 128) : (double)std::fabs(fromBits(b));
  };
  double a = std::fabs((double)x), dl = a - val(lo), dh = val(hi) - a;
  if (u == lo || (u & 0x7fffffffu) == 0x7f800000u) return (uint16_t)(u >> 16);
  bool up = dh < dl || (dh == dl && ((lo >> 16) & 1));
  return (uint16_t)((up ? hi : lo) >> 16);
}

TEST(PhMath, Bf16) {
  for (uint64_t u = 0; u <= 0xffffffffu; u += 65521) {
    float x = fromBits((uint32_t)u);
    ASSERT_EQ(ph_rt::f32_to_bf16(x), refF32ToBf16(x)) << std::hex << u;
    ASSERT_EQ(bits(ph_rt::round_to_bf16(x)), static_cast<uint32_t>(refF32ToBf16(x)) << 16) << std::hex << u;
  }
  // Round trip of every bf16 pattern; NaNs only gain the quiet bit.
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = ph_rt::bf16_to_f32((uint16_t)h);
    ASSERT_EQ(bits(f), h << 16);
    uint16_t back = ph_rt::f32_to_bf16(f);
    if (std::isnan(f))
      ASSERT_EQ(back, (uint16_t)(h | 0x40)) << h;
    else
      ASSERT_EQ(back, h) << h;
  }
  // Ties to even, overflow, NaN with payload only in the dropped bits.
  EXPECT_EQ(ph_rt::f32_to_bf16(fromBits(0x3f808000u)), 0x3f80);  // 1+2^-8: tie, keep even
  EXPECT_EQ(ph_rt::f32_to_bf16(fromBits(0x3f818000u)), 0x3f82);  // tie, round up to even
  EXPECT_EQ(ph_rt::f32_to_bf16(fromBits(0x3f808001u)), 0x3f81);  // just above tie
  EXPECT_EQ(ph_rt::f32_to_bf16(fromBits(0xbf818000u)), 0xbf82);
  EXPECT_EQ(ph_rt::f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(ph_rt::f32_to_bf16(fromBits(0x7f7f7fffu)), 0x7f7f);
  EXPECT_EQ(ph_rt::f32_to_bf16(-kInf), 0xff80);
  EXPECT_EQ(ph_rt::f32_to_bf16(fromBits(0x7f800001u)), 0x7fc0);  // sNaN stays NaN
  EXPECT_EQ(ph_rt::f32_to_bf16(fromBits(0xffffffffu)), 0xffff);
  EXPECT_EQ(bits(ph_rt::round_to_bf16(fromBits(0x7f800001u))), 0x7fc00000u);
  EXPECT_EQ(bits(ph_rt::round_to_bf16(std::numeric_limits<float>::max())), 0x7f800000u);
}

// ---- f16 -----------------------------------------------------------------

double refF16Value(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0 ? std::ldexp((double)m, -24) : std::ldexp(1024.0 + m, e - 25);
  if (e == 31) v = m ? std::nan("") : INFINITY;
  return (h & 0x8000) ? -v : v;
}

// Nearest finite f16 magnitude (ties to even), or inf beyond 65520.
struct F16Table {
  std::vector<double> v;  // v[i] = value of pattern i, i in [0, 0x7c00]
  F16Table() {
    for (uint32_t i = 0; i <= 0x7c00; ++i) v.push_back(i == 0x7c00 ? 65536.0 : refF16Value((uint16_t)i));
  }
  uint16_t encode(float x) const {
    if (std::isnan(x)) return (uint16_t)(((bits(x) >> 16) & 0x8000) | 0x7e00 | ((bits(x) >> 13) & 0x3ff));
    double a = std::fabs((double)x);
    uint16_t s = std::signbit(x) ? 0x8000 : 0;
    if (a >= 65536.0) return s | 0x7c00;
    size_t i = std::upper_bound(v.begin(), v.end(), a) - v.begin() - 1;  // v[i] <= a
    if (v[i] == a) return s | (uint16_t)i;
    double dl = a - v[i], dh = v[i + 1] - a;
    bool up = dh < dl || (dh == dl && (i & 1));
    return s | (uint16_t)(up ? i + 1 : i);
  }
};

TEST(PhMath, F16) {
  F16Table t;
  // Decode every pattern; round trip every pattern (NaN: quiet bit added).
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = ph_rt::f16_to_f32((uint16_t)h);
    double r = refF16Value((uint16_t)h);
    if (std::isnan(r)) {
      ASSERT_TRUE(std::isnan(f)) << h;
      ASSERT_EQ(bits(f) >> 31, h >> 15);
      ASSERT_EQ(ph_rt::f32_to_f16(f), (uint16_t)(h | 0x200)) << h;
    } else {
      ASSERT_EQ((double)f, r) << h;
      ASSERT_EQ(bits(f) >> 31, h >> 15) << h;  // -0 stays -0
      ASSERT_EQ(ph_rt::f32_to_f16(f), h) << h;
    }
  }
  // Exact midpoints between neighbouring f16 values and the floats just
  // around them: the hard cases for ties-to-even.
  for (uint32_t i = 0; i < 0x7c00; ++i) {
    float mid = (float)(0.5 * (t.v[i] + t.v[i + 1]));
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, kInf)}) {
      ASSERT_EQ(ph_rt::f32_to_f16(x), t.encode(x)) << x;
      ASSERT_EQ(ph_rt::f32_to_f16(-x), t.encode(-x)) << x;
    }
  }
  for (uint64_t u = 0; u <= 0xffffffffu; u += 65521) {
    float x = fromBits((uint32_t)u);
    ASSERT_EQ(ph_rt::f32_to_f16(x), t.encode(x)) << std::hex << u;
  }
  // Handpicked.
  EXPECT_EQ(ph_rt::f32_to_f16(1.0f + 0x1p-11f), 0x3c00);      // tie -> even (down)
  EXPECT_EQ(ph_rt::f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(ph_rt::f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(ph_rt::f32_to_f16(65519.996f), 0x7bff);
  EXPECT_EQ(ph_rt::f32_to_f16(65520.0f), 0x7c00);  // tie at max -> inf
  EXPECT_EQ(ph_rt::f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(ph_rt::f32_to_f16(-kInf), 0xfc00);
  EXPECT_EQ(ph_rt::f32_to_f16(0x1p-25f), 0x0000);      // half min subnormal -> 0
  EXPECT_EQ(ph_rt::f32_to_f16(3 * 0x1p-25f), 0x0002);  // 1.5 ulp -> 2 (even)
  EXPECT_EQ(ph_rt::f32_to_f16(0x1p-24f), 0x0001);
  EXPECT_EQ(ph_rt::f32_to_f16(0x1p-14f - 0x1p-25f), 0x0400);  // max subnormal + tie -> min normal
  EXPECT_EQ(ph_rt::f32_to_f16(1e-10f), 0x0000);
  EXPECT_EQ(ph_rt::f32_to_f16(-1e-10f), 0x8000);
  EXPECT_EQ(ph_rt::f32_to_f16(fromBits(0x7f800001u)) & 0x7e00, 0x7e00);  // sNaN -> quiet NaN
  EXPECT_EQ(ph_rt::f16_to_f32(0x0001), 0x1p-24f);
  EXPECT_EQ(ph_rt::f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(ph_rt::f16_to_f32(0xfc00), -kInf);
}

}  // namespace

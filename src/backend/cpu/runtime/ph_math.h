// ph_math.h - branch-free float math for Parhelion-generated CPU kernels.
//
// Generated kernels are compiled without -ffast-math, so libm calls inside a
// `#pragma omp simd` loop stay scalar calls (or block vectorization entirely).
// Everything here is straight-line float/int arithmetic, bit casts and bitwise
// blends, which GCC 12 and Clang 14 vectorize for AVX2 and AVX-512 (checked
// with -O3 -march={native,haswell} -fopenmp-simd -ffp-contract=fast).
//
// Rules followed throughout (keep them when editing):
//  * No branches on data: special cases are computed unconditionally and
//    merged with selu()/self() (see there for why not `cond ? a : b`).
//  * No float->int conversions: they are UB for NaN/out-of-range inputs and
//    we need NaN to flow through. Integers are extracted from float bit
//    patterns instead, always in uint32_t arithmetic (no signed overflow).
//  * Polynomials are written as plain a*b+c; -ffp-contract=fast turns them
//    into FMAs, but the accuracy does not depend on that.
//  * Coefficients are Chebyshev-node interpolants (near-minimax) computed in
//    long double for this file, or plain Taylor terms where those suffice.
//
// Measured max error, all 2^32 inputs, vs double-precision std:: (AVX-512):
//   exp 9.3e-8 rel (normal results), log 8.7e-8 rel (all positive floats),
//   tanh 8.0e-8 abs, sigmoid 1.5e-7 rel, silu 1.8e-7 rel, gelu see gelu(),
//   sqrt/rsqrt exactly rounded (bit-identical to sqrtf and 1.0f/sqrtf).
#pragma once

#include <cstdint>
#include <cstring>

namespace ph_rt {

// memcpy rather than __builtin_bit_cast so the header also works with older
// compilers; a 4-byte memcpy compiles to a register move.
static inline uint32_t f2u(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
static inline float u2f(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

static inline float abs(float x) { return u2f(f2u(x) & 0x7fffffffu); }

// Selects that GCC cannot turn back into branches. With a plain ternary whose
// arm is a computed value, GCC's sinking pass moves that computation into the
// arm's basic block; under the default -ftrapping-math the if-converter then
// refuses to speculate the (possibly trapping) float ops and the whole loop
// stays scalar. A bitwise blend has no control flow to sink into. Even
// constant-armed ternaries are avoided: GCC jump-threads them (e.g. the exp
// input clamps) into per-case paths, which blocked AVX2 vectorization.
static inline uint32_t selu(bool c, uint32_t a, uint32_t b) {
  uint32_t m = 0u - (uint32_t)c;
  return (a & m) | (b & ~m);
}
static inline float self(bool c, float a, float b) { return u2f(selu(c, f2u(a), f2u(b))); }

// sqrt must be exactly rounded (kernels compare against the reference). With
// -fno-math-errno (or fast-math) __builtin_sqrtf becomes (v)sqrtps. Under the
// default -fmath-errno GCC keeps a scalar sqrtf call for the errno case and
// refuses to vectorize, so we compute it ourselves:
//  1. ~1e-10-accurate approximation in double (bit-trick seed + 3 Newton steps
//     on 1/sqrt: error 3.4e-2 -> 1.8e-3 -> 4.7e-6 -> 3.3e-11).
//  2. c = (float)s is then the correctly rounded result or one ulp off. The
//     midpoints between c and its neighbours have <= 25 significant bits, so
//     their squares are exact in double and comparing them with x decides the
//     rounding exactly (sqrt of a float is never exactly a midpoint).
static inline float sqrt(float x) {
#if defined(__NO_MATH_ERRNO__) || defined(__FAST_MATH__)
  return __builtin_sqrtf(x);
#else
  double d = (double)x;
  uint64_t db;
  std::memcpy(&db, &d, 8);
  uint64_t yb = 0x5fe6eb50c7b537a9ull - (db >> 1);
  double y;
  std::memcpy(&y, &yb, 8);
  const double h = 0.5 * d;
  y = y * (1.5 - h * y * y);
  y = y * (1.5 - h * y * y);
  y = y * (1.5 - h * y * y);
  float c = (float)(d * y);
  uint32_t cb = f2u(c);
  double cd = (double)c;
  // For c = +0 the "previous" float is a NaN pattern: compares are false, fine.
  double mhi = 0.5 * (cd + (double)u2f(cb + 1u));
  double mlo = 0.5 * (cd + (double)u2f(cb - 1u));
  cb = selu(mhi * mhi < d, cb + 1u, cb);
  cb = selu(mlo * mlo > d, cb - 1u, cb);
  float r = u2f(cb);
  r = self(x == u2f(0x7f800000u), x, r);  // the Newton steps give NaN for inf
  r = self(x < 0.0f, u2f(0x7fc00000u), r);
  return r;  // NaN in -> NaN out; -0 -> -0 via d*y
#endif
}
// A true division instead of an rsqrt14/Newton approximation: kernels (e.g.
// norms) expect the same result as the reference 1/sqrt.
static inline float rsqrt(float x) { return 1.0f / sqrt(x); }

// e^r * 2^n for |r| <= ln2/2 (n = ni, an integer): the core exp and exp2 share.
// e^r = 1 + r + r^2*Q(r); Q interpolated on [-ln2/2, ln2/2], err ~2e-9. Scale by 2^n by
// adding n to p's exponent field (p is in [0.7, 1.42]): one integer add instead of two
// multiplies, exact wherever the result is a normal float; an out-of-range n makes garbage
// bits, which the callers' selects replace.
static inline float exp_reduced(float r, int32_t ni) {
  float q = 1.39261836e-3f;
  q = q * r + 8.36317905e-3f;
  q = q * r + 4.16665546e-2f;
  q = q * r + 1.66665770e-1f;
  q = q * r + 0.5f;
  float p = (q * (r * r) + r) + 1.0f;
  return u2f(f2u(p) + ((uint32_t)ni << 23));
}

// exp(x) = 2^n * e^r with n = round(x/ln2), |r| <= ln2/2.
static inline float exp(float x) {
  // Round-to-nearest via the 1.5*2^23 trick: after the add the integer n sits
  // in the low mantissa bits of t, so no (UB-prone) float->int conversion.
  const float magic = 12582912.0f;  // 0x1.8p23
  float t = x * 1.44269504088896341f + magic;
  float n = t - magic;
  int32_t ni = (int32_t)(f2u(t) - f2u(magic));
  // Cody-Waite split of ln2: ln2_hi has 8 trailing zero bits, so n*ln2_hi is
  // exact for |n| <= 256 even when the compiler does not fuse.
  float r = x - n * 0.693145751953125f;
  r = r - n * 1.42860682030941723e-6f;
  // Below FLT_MIN (x < ln(FLT_MIN) = -87.3365) the result is flushed to +0 (an
  // absolute error under 1.2e-38: softmax and friends lose nothing, and this is
  // a third of their compute), above ln(FLT_MAX) it is +inf, and NaN passes through.
  float y = exp_reduced(r, ni);
  y = self(x < -87.3365402f, 0.0f, y);
  y = self(x > 88.7228317f, __builtin_inff(), y);
  return self(x != x, x, y);
}

// 2^x = 2^n * e^(r ln2) with n = round(x), r = x - n exact, |r ln2| <= ln2/2: exp's core
// without the Cody-Waite split (no rounding of n ln2 to undo).
static inline float exp2(float x) {
  const float magic = 12582912.0f;  // 0x1.8p23: round to nearest, n in t's low mantissa bits
  float t = x + magic;
  float n = t - magic;
  int32_t ni = (int32_t)(f2u(t) - f2u(magic));
  // As in exp: below 2^-126 flushed to +0, from 2^128 on +inf.
  float y = exp_reduced((x - n) * 0.693147180559945309f, ni);
  y = self(x < -126.0f, 0.0f, y);
  y = self(x >= 128.0f, __builtin_inff(), y);
  return self(x != x, x, y);
}

// log(x) = e*ln2 + log(m), m in [sqrt(1/2), sqrt(2)), f = m - 1 (exact).
static inline float log(float x) {
  // Subnormals: prescale by 2^23 so the exponent/mantissa split below works.
  // One select only, its exponent is reused for the correction of e (a second
  // select on the same condition gets jump-threaded into control flow).
  float scale = self(x < 1.17549435e-38f, 8388608.0f, 1.0f);
  uint32_t ix = f2u(x * scale);
  // Re-bias around sqrt(1/2) (0x3f3504f3) so that m lands in [0.707, 1.414):
  // keeps |log(m)| <= ln2/2 and the final e*ln2 + log(m) cancels at most 2x.
  uint32_t d = ix - 0x3f3504f3u;
  int32_t e = (int32_t)d >> 23;  // arithmetic shift
  float m = u2f(ix - ((uint32_t)e << 23));
  float ef = (float)(e - (int32_t)((f2u(scale) >> 23) - 127u));
  float f = m - 1.0f;
  // With s = f/(2+f): log(1+f) = 2*atanh(s) = 2s + T(s^2)*s and 2s = f - s*f,
  // hence log(1+f) = f - s*(f - T). The leading f is exact, so the rounding
  // of s only affects the O(f^2) correction. |s| <= 0.1716, s^2 <= 0.0295, the
  // Taylor series of T truncated after s^8 is good to ~2e-9 relative.
  float s = f / (2.0f + f);
  float z = s * s;
  float T = 2.0f / 9.0f;
  T = T * z + 2.0f / 7.0f;
  T = T * z + 2.0f / 5.0f;
  T = T * z + 2.0f / 3.0f;
  T = T * z;
  float l1p = f - s * (f - T);
  float r = ef * 0.693145751953125f + (l1p + ef * 1.42860682030941723e-6f);
  const float inf = u2f(0x7f800000u);
  r = self(x == inf, inf, r);
  r = self(x == 0.0f, -inf, r);  // covers -0 too
  r = self(x < 0.0f, u2f(0x7fc00000u), r);
  r = self(x != x, x, r);  // keep the input NaN's payload
  return r;
}

// tanh: odd polynomial near 0 (where 1 - 2/(e^2x+1) would cancel), the
// exp form elsewhere. Both are evaluated and selected, which is what the
// vectorizer would do with a branch anyway.
static inline float tanh(float x) {
  float a = abs(x);
  // tanh(a) = a + a^3*P(a^2), P interpolated on a in [0, 0.625].
  float z = a * a;
  float P = 2.29274482e-3f;
  P = P * z - 8.34394552e-3f;
  P = P * z + 2.17689187e-2f;
  P = P * z - 5.39592596e-2f;
  P = P * z + 1.33333036e-1f;
  P = P * z - 3.33333332e-1f;
  float small = (a * z) * P + a;
  // 1 - 2/(e^2a + 1): exp overflows to inf for a > 44 giving exactly 1, and the
  // expression is already 1.0f for a > ~9, so no explicit saturation needed.
  float big = 1.0f - 2.0f / (exp(2.0f * a) + 1.0f);
  float r = self(a < 0.625f, small, big);
  // Reattach the sign (also makes tanh(-0) = -0 and keeps NaN a NaN).
  return u2f(f2u(r) | (f2u(x) & 0x80000000u));
}

// 1/(1+e^-x): e^-x -> inf gives 0, e^-x -> 0 gives 1, never inf/inf.
static inline float sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }

// x*sigmoid(x). Written as a quotient so large negative x gives -0 without
// going through 0*x; the only inf/inf case is x = -inf, clamped to -FLT_MAX.
// Below x ~ -88.7 e^-x overflows and the result is -0 (true |value| < 3e-37).
static inline float silu(float x) {
  float xc = self(x < -3.40282347e38f, -3.40282347e38f, x);
  return xc / (1.0f + exp(-x));
}

// GELU, tanh approximation. Uses 0.5*(1+tanh(u)) = sigmoid(2u), which avoids
// the catastrophic cancellation of 1+tanh(u) for negative x and saves the tanh
// select. In the left tail the relative error is ~|2u| ulps (rounding of the
// float argument 2u, e.g. 4e-6 at x=-9.5; 1.6e-7*(1+|2u|) measured); below
// x ~ -10.1 e^-2u overflows and the result is -0 (true |value| < 3e-38).
static inline float gelu(float x) {
  // 2*sqrt(2/pi) and 2*sqrt(2/pi)*0.044715. x^3 may overflow to +-inf for
  // |x| > ~1e12; exp then gives 0 or inf and the quotient is still x or -0.
  const float k0 = 1.59576912160573071f, k1 = 0.0713548162726008f;
  float u2 = x * (k0 + k1 * (x * x));
  float xc = self(x < -3.40282347e38f, -3.40282347e38f, x);
  return xc / (1.0f + exp(-u2));
}

// ---- bf16 / f16 conversions (round to nearest even) -------------------------

static inline float bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

// x's bits with the upper half rounded to bf16 (the lower half is to be dropped).
static inline uint32_t bf16_rounded_bits(float x) {
  uint32_t u = f2u(x);
  // Adding 0x7fff plus the lsb of the kept half rounds ties to even; a carry
  // out of the mantissa bumps the exponent, and max-float rounds to inf as
  // IEEE requires. A NaN is truncated instead (rounding could carry into inf
  // or the sign), its quiet bit forced so that a payload living only in the
  // low 16 bits survives as a NaN. Both are selected as 32-bit words and
  // narrowed once: selecting the narrowed halves made GCC pack each operand
  // to 16 bits before the select (four vpermt2w per 32 elements, not one).
  bool is_nan = x != x;  // one float compare (masking and comparing the bits took two int ops)
  return selu(is_nan, u | 0x400000u, u + 0x7fffu + ((u >> 16) & 1u));
}

static inline uint16_t f32_to_bf16(float x) { return (uint16_t)(bf16_rounded_bits(x) >> 16); }

// The vector types of the builtins below (the row conversions', philox_row's). Not
// <immintrin.h>: parsing it tripled a small kernel's compile time (0.09 -> 0.28 s; codegen.cpp's
// prelude says the same of its stream stores), and these need a few builtins.
typedef float ph_v16sf __attribute__((vector_size(64)));
typedef float ph_v8sf __attribute__((vector_size(32)));
typedef short ph_v32hi __attribute__((vector_size(64)));
typedef short ph_v16hi __attribute__((vector_size(32)));
typedef short ph_v8hi __attribute__((vector_size(16)));
typedef unsigned long long ph_v8du __attribute__((vector_size(64)));
typedef unsigned long long ph_v4du __attribute__((vector_size(32)));
typedef unsigned int ph_v8su __attribute__((vector_size(32)));
typedef unsigned int ph_v4su __attribute__((vector_size(16)));
typedef int ph_v16si __attribute__((vector_size(64)));
typedef int ph_v8si __attribute__((vector_size(32)));
typedef long long ph_v8di __attribute__((vector_size(64)));

// n floats rounded to bf16, each as f32_to_bf16 rounds it: a row a store computed in f32
// (emit/row_stores.cpp). Where the compiler targets AVX-512-BF16, vcvtne2ps2bf16 rounds 32 at a
// time: the same bits for every input (NaNs quieted alike) but f32 denormals, which it flushes
// to zero; a group of 32 that holds one (vfpclassps class 0x20) is rounded by f32_to_bf16.
static inline void f32_row_to_bf16(uint16_t* __restrict d, const float* __restrict s, int64_t n) {
  int64_t done = 0;
#if defined(__AVX512BF16__) && defined(__AVX512DQ__)
  for (; done + 32 <= n; done += 32) {
    const float* from = s + done;
    uint16_t* to = d + done;
    ph_v16sf lo, hi;
    std::memcpy(&lo, from, sizeof lo);
    std::memcpy(&hi, from + 16, sizeof hi);
    if ((__builtin_ia32_fpclassps512_mask(lo, 0x20, 0xffff) | __builtin_ia32_fpclassps512_mask(hi, 0x20, 0xffff)) ==
        0) {
#if defined(__clang__)
      const ph_v32hi r = (ph_v32hi)__builtin_ia32_cvtne2ps2bf16_512(hi, lo);
#else
      const ph_v32hi r = (ph_v32hi)__builtin_ia32_cvtne2ps2bf16_v32hi(hi, lo);
#endif
      std::memcpy(to, &r, sizeof r);
    } else {
      for (int k = 0; k < 32; ++k) to[k] = f32_to_bf16(from[k]);
    }
  }
#endif
  for (int64_t k = 0; k < n - done; ++k) d[done + k] = f32_to_bf16(s[done + k]);
}

// x rounded to bf16 and widened back: bf16_to_f32(f32_to_bf16(x)) without the 16-bit value in
// between, which GCC packed to words and unpacked again (a cast to bf16 that stays in f32, as a
// dot operand on a host that widens bf16 does).
static inline float round_to_bf16(float x) { return u2f(bf16_rounded_bits(x) & 0xffff0000u); }

static inline float f16_to_f32(uint16_t h) {
  uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
  uint32_t em = (uint32_t)h & 0x7fffu;
  uint32_t e5 = em >> 10;
  // Normal: shift exponent+mantissa into place and rebias 15 -> 127.
  uint32_t normal = (em << 13) + (112u << 23);
  // Inf/NaN: rebias once more so exponent 31 becomes 255, payload preserved.
  uint32_t infnan = normal + (112u << 23);
  // Zero/subnormal: the value is mantissa * 2^-24, exact in float.
  uint32_t subn = f2u((float)(int32_t)em * 5.9604644775390625e-8f);
  uint32_t r = selu(e5 == 0, subn, selu(e5 == 31, infnan, normal));
  return u2f(r | sign);
}

static inline uint16_t f32_to_f16(float x) {
  uint32_t u = f2u(x);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  // Normal range: rebias 127 -> 15 and round the 13 dropped bits to nearest
  // even; a carry propagates into the exponent, up to 0x7c00 (inf) for
  // |x| >= 65520, exactly the IEEE overflow threshold.
  uint32_t normal = (a - (112u << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  // Subnormal range (|x| < 2^-14): adding 0.5f lines the f16 subnormal ulp
  // (2^-24) up with the float ulp at 0.5, so the FPU's own round-to-nearest-
  // even does the rounding; the low bits are the f16 mantissa (0x400 when it
  // rounds up to the smallest normal, which is also the right encoding).
  uint32_t subn = f2u(u2f(a) + 0.5f) - 0x3f000000u;
  uint32_t r = selu(a < 0x38800000u, subn, normal);
  r = selu(a >= 0x477ff000u, 0x7c00u, r);
  // NaN: keep the top payload bits, set the quiet bit so it cannot become inf.
  r = selu(a > 0x7f800000u, 0x7e00u | ((a >> 13) & 0x3ffu), r);
  return (uint16_t)(r | sign);
}

// n floats rounded to f16, each as f32_to_f16 rounds it (emit/row_stores.cpp): vcvtps2ph
// (AVX-512F, else F16C) rounding to nearest even (immediate 8: nearest, no exceptions) gives
// the same bits for every input, denormal results and NaN payloads included (all 2^32 checked
// on an AVX-512 host).
static inline void f32_row_to_f16(uint16_t* __restrict d, const float* __restrict s, int64_t n) {
  int64_t done = 0;
#if defined(__AVX512F__)
  for (; done + 16 <= n; done += 16) {
    ph_v16sf x;
    std::memcpy(&x, s + done, sizeof x);
    const ph_v16hi r = (ph_v16hi)__builtin_ia32_vcvtps2ph512_mask(x, 8, ph_v16hi{}, 0xffff);
    std::memcpy(d + done, &r, sizeof r);
  }
#elif defined(__F16C__) && defined(__AVX__)
  for (; done + 8 <= n; done += 8) {
    ph_v8sf x;
    std::memcpy(&x, s + done, sizeof x);
    const ph_v8hi r = (ph_v8hi)__builtin_ia32_vcvtps2ph256(x, 8);
    std::memcpy(d + done, &r, sizeof r);
  }
#endif
  for (int64_t k = 0; k < n - done; ++k) d[done + k] = f32_to_f16(s[done + k]);
}

// ---- fp8 conversions (round to nearest even, saturating) ---------------------
// f8e4m3 ("fn": no infinities, max finite 448, NaN 0x7f) and f8e5m2 (IEEE-like, max finite
// 57344, infinities). The language saturates: |x| is clamped to the max finite first (NaN kept
// aside), so rounding can never carry into an infinity or NaN code. Matches the host's
// conversions in src/runtime/dtype.cpp bit for bit (tests/test_numeric.cpp).

// The fp8 code (without sign) of a finite 0 <= a <= max finite, `m` mantissa bits, bias `bias`.
static inline uint32_t f8_encode_abs(float a, uint32_t m, uint32_t bias) {
  uint32_t ua = f2u(a);
  uint32_t sh = 23u - m;
  // Normal: round the dropped mantissa bits to nearest even, then rebias 127 -> bias; a carry
  // moves into the exponent.
  uint32_t normal = ((ua + ((1u << (sh - 1u)) - 1u) + ((ua >> sh) & 1u)) >> sh) - ((127u - bias) << m);
  // Subnormal (a < 2^(1-bias)): adding 2^k, whose ulp is the fp8 subnormal step 2^(1-bias-m),
  // lets the FPU round to nearest even; the low bits are the code (2^m when it rounds up to
  // the smallest normal, which is also that number's encoding).
  float magic = u2f((127u + 23u + 1u - bias - m) << 23);
  uint32_t subn = f2u(a + magic) - f2u(magic);
  return selu(ua < ((127u + 1u - bias) << 23), subn, normal);
}

static inline uint8_t f32_to_f8e4m3(float x) {
  uint32_t u = f2u(x);
  uint32_t sign = (u >> 24) & 0x80u;
  uint32_t au = u & 0x7fffffffu;
  // Clamp to 448 (0x43e00000); infinities saturate too (the format has none).
  uint32_t r = f8_encode_abs(u2f(selu(au > 0x43e00000u, 0x43e00000u, au)), 3u, 7u);
  r = selu(au > 0x7f800000u, 0x7fu, r);  // NaN
  return (uint8_t)(r | sign);
}

static inline uint8_t f32_to_f8e5m2(float x) {
  uint32_t u = f2u(x);
  uint32_t sign = (u >> 24) & 0x80u;
  uint32_t au = u & 0x7fffffffu;
  uint32_t r = f8_encode_abs(u2f(selu(au > 0x47600000u, 0x47600000u, au)), 2u, 15u);  // clamp to 57344
  r = selu(au == 0x7f800000u, 0x7cu, r);                                              // infinity stays
  r = selu(au > 0x7f800000u, 0x7fu, r);                                               // NaN
  return (uint8_t)(r | sign);
}

static inline float f8e4m3_to_f32(uint8_t h) {
  uint32_t c = (uint32_t)h & 0x7fu;
  uint32_t normal = (c << 20) + (120u << 23);             // rebias 7 -> 127
  uint32_t subn = f2u((float)(int32_t)c * 0.001953125f);  // mantissa * 2^-9
  uint32_t r = selu((c >> 3) == 0u, subn, normal);
  r = selu(c == 0x7fu, 0x7fc00000u, r);  // NaN
  return u2f(r | (((uint32_t)h & 0x80u) << 24));
}

// f8e5m2 is the top byte of an f16.
static inline float f8e5m2_to_f32(uint8_t h) { return f16_to_f32((uint16_t)((uint32_t)h << 8)); }

// ---- counter-based random numbers (ph::rand, ph::randn; docs/language.md defines them) ----
// Philox-4x32-10: ten rounds of two 32x32->64 products on counter (offset lo, offset hi, 0, 0)
// under key (seed lo, seed hi). Branch-free 64-bit integer code, which vectorizes (vpmuludq).
struct philox_words {
  uint32_t w0, w1;
};
static inline philox_words philox(int64_t seed, int64_t offset) {
  uint32_t c0 = (uint32_t)offset, c1 = (uint32_t)((uint64_t)offset >> 32), c2 = 0u, c3 = 0u;
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)((uint64_t)seed >> 32);
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {c0, c1};
}
// A word as a uniform f32 in [0, 1): signed, negatives folded by ~w, times a scale just below
// 2^-31 (the top value stays below 1 after rounding).
static inline float uniform_of(uint32_t w) {
  int32_t s = (int32_t)w;
  s = (int32_t)selu(s < 0, (uint32_t)~s, (uint32_t)s);
  return (float)s * 4.6566127342e-10f;
}
// cos(2 pi u): reduced exactly in u (u - round(u), then by symmetry to [0, 1/4]), a cosine
// Taylor polynomial on [0, pi/4] and a sine one on (pi/4, pi/2] (no cancellation near zero).
static inline float cos_2pi(float u) {
  const float magic = 12582912.0f;                 // 0x1.8p23: adding and subtracting rounds to an integer
  const float a = abs(u - ((u + magic) - magic));  // [0, 1/2]
  const bool flip = a > 0.25f;
  const float b = self(flip, 0.5f - a, a);  // [0, 1/4], exact
  const bool use_sin = b > 0.125f;
  const float x = self(use_sin, 0.25f - b, b) * 6.28318530717958648f;  // [0, pi/4]
  const float x2 = x * x;
  const float c =
      1.0f +
      x2 * (-0.5f + x2 * (4.16666667e-2f + x2 * (-1.38888889e-3f + x2 * (2.48015873e-5f + x2 * -2.75573192e-7f))));
  const float s =
      x * (1.0f + x2 * (-0.166666667f + x2 * (8.33333333e-3f + x2 * (-1.98412698e-4f + x2 * 2.75573192e-6f))));
  const float r = self(use_sin, s, c);
  return self(flip, -r, r);
}
static inline float philox_uniform(int64_t seed, int64_t offset) { return uniform_of(philox(seed, offset).w0); }
// Box-Muller on the first two words; u1 >= 1e-7 keeps the logarithm finite.
static inline float normal_of(uint32_t w0, uint32_t w1) {
  float u1 = uniform_of(w0);
  u1 = self(u1 < 1.0e-7f, 1.0e-7f, u1);
  return sqrt(-2.0f * log(u1)) * cos_2pi(uniform_of(w1));
}
static inline float philox_normal(int64_t seed, int64_t offset) {
  const philox_words w = philox(seed, offset);
  return normal_of(w.w0, w.w1);
}

// The first words of a row of counters (and the second where w1 is not null): w0[i], w1[i] =
// philox(seed, offsets[i]). The same bits as philox(), a vector of counters at a time: each word
// in a 64-bit lane, multiplied by vpmuludq, which reads a lane's low 32 bits only (so the high
// halves the xors leave are never cleared). GCC vectorizes philox()'s 32 x 32 -> 64-bit products
// as 64 x 64 (vpmullq on AVX-512, a longer sequence on AVX2) whatever the C says; this helper is
// what a simd loop of random numbers calls first (emit/random_rows.cpp).
#if defined(__AVX512F__)
typedef ph_v8du ph_philox_lanes;
typedef ph_v8su ph_philox_words;
static inline ph_philox_lanes ph_mul_lo32(ph_philox_lanes a, ph_philox_lanes b) {
#if defined(__clang__)
  return (ph_philox_lanes)__builtin_ia32_pmuludq512((ph_v16si)a, (ph_v16si)b);
#else
  return (ph_philox_lanes)__builtin_ia32_pmuludq512_mask((ph_v16si)a, (ph_v16si)b, (ph_v8di)a, (unsigned char)0xff);
#endif
}
#elif defined(__AVX2__)
typedef ph_v4du ph_philox_lanes;
typedef ph_v4su ph_philox_words;
static inline ph_philox_lanes ph_mul_lo32(ph_philox_lanes a, ph_philox_lanes b) {
  return (ph_philox_lanes)__builtin_ia32_pmuludq256((ph_v8si)a, (ph_v8si)b);
}
#endif
static inline void philox_row(int64_t seed, const int64_t* __restrict offsets, uint32_t* __restrict w0,
                              uint32_t* __restrict w1, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__) || defined(__AVX2__)
  constexpr int kLanes = sizeof(ph_philox_lanes) / 8;
  ph_philox_lanes k0[10], k1[10];  // each round's key, broadcast
  uint32_t s0 = (uint32_t)seed, s1 = (uint32_t)((uint64_t)seed >> 32);
  for (int r = 0; r < 10; ++r, s0 += 0x9E3779B9u, s1 += 0xBB67AE85u) {
    k0[r] = (ph_philox_lanes){} + s0;
    k1[r] = (ph_philox_lanes){} + s1;
  }
  const ph_philox_lanes m0 = (ph_philox_lanes){} + 0xD2511F53u, m1 = (ph_philox_lanes){} + 0xCD9E8D57u;
  for (; i + kLanes <= n; i += kLanes) {
    ph_philox_lanes c0, c1, c2 = {}, c3 = {};
    __builtin_memcpy(&c0, offsets + i, sizeof c0);
    c1 = c0 >> 32;
    for (int r = 0; r < 10; ++r) {
      const ph_philox_lanes p0 = ph_mul_lo32(c0, m0), p1 = ph_mul_lo32(c2, m1);
      c0 = (p1 >> 32) ^ c1 ^ k0[r];
      c2 = (p0 >> 32) ^ c3 ^ k1[r];
      c1 = p1;
      c3 = p0;
    }
    const ph_philox_words o0 = __builtin_convertvector(c0, ph_philox_words);
    __builtin_memcpy(w0 + i, &o0, sizeof o0);
    if (w1) {
      const ph_philox_words o1 = __builtin_convertvector(c1, ph_philox_words);
      __builtin_memcpy(w1 + i, &o1, sizeof o1);
    }
  }
#endif
  for (; i < n; ++i) {
    const philox_words w = philox(seed, offsets[i]);
    w0[i] = w.w0;
    if (w1) w1[i] = w.w1;
  }
}

}  // namespace ph_rt

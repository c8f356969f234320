#include "parhelion/dtype.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "parhelion/error.h"

namespace parhelion {

int64_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::f16:
      return 2;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::boolean:
      return 1;
    case DType::i8:
    case DType::u8:
    case DType::f8e4m3:
    case DType::f8e5m2:
      return 1;
  }
  throw InternalError("unknown dtype");
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::boolean:
      return "bool";
    case DType::i8:
      return "i8";
    case DType::u8:
      return "u8";
    case DType::f8e4m3:
      return "f8e4m3";
    case DType::f8e5m2:
      return "f8e5m2";
  }
  throw InternalError("unknown dtype");
}

std::optional<DType> parse_dtype(std::string_view n) {
  if (n == "f32" || n == "float32") return DType::f32;
  if (n == "bf16" || n == "bfloat16") return DType::bf16;
  if (n == "f16" || n == "float16") return DType::f16;
  if (n == "i32" || n == "int32") return DType::i32;
  if (n == "i64" || n == "int64") return DType::i64;
  if (n == "bool") return DType::boolean;
  if (n == "i8" || n == "int8") return DType::i8;
  if (n == "u8" || n == "uint8") return DType::u8;
  if (n == "f8e4m3" || n == "float8_e4m3fn") return DType::f8e4m3;
  if (n == "f8e5m2" || n == "float8_e5m2") return DType::f8e5m2;
  return std::nullopt;
}

bool is_fp8(DType t) { return t == DType::f8e4m3 || t == DType::f8e5m2; }
bool is_floating(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16 || is_fp8(t); }
bool is_integer(DType t) { return t == DType::i32 || t == DType::i64 || t == DType::i8 || t == DType::u8; }

DType compute_dtype(DType t) {
  if (is_floating(t)) return DType::f32;
  if (is_integer(t)) return DType::i64;
  return DType::boolean;
}

uint16_t f32_to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if (std::isnan(x)) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

float bf16_to_f32(uint16_t x) {
  uint32_t u = static_cast<uint32_t>(x) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  uint32_t sign = (u >> 16) & 0x8000;
  uint32_t absu = u & 0x7fffffff;
  if (absu > 0x7f800000) return static_cast<uint16_t>(sign | 0x7e00);   // NaN
  if (absu >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);  // overflow -> inf
  if (absu < 0x38800000) {                                              // result is subnormal (or zero) in f16
    // Scale into the subnormal range with an exact float add: rounding happens in hardware.
    float f;
    std::memcpy(&f, &absu, 4);
    f += 0.5f;  // 2^-1: its ulp equals the f16 subnormal step 2^-24
    uint32_t r;
    std::memcpy(&r, &f, 4);
    return static_cast<uint16_t>(sign | (r - 0x3f000000));
  }
  uint32_t mant_odd = (absu >> 13) & 1;
  absu += 0xc8000fff + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
  return static_cast<uint16_t>(sign | (absu >> 13));
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float f;
  if (exp == 0) {
    f = std::ldexp(static_cast<float>(mant), -24);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u |= sign;
    std::memcpy(&f, &u, 4);
    return f;
  }
  uint32_t u = exp == 0x1f ? (sign | 0x7f800000 | (mant << 13)) : (sign | ((exp + 112) << 23) | (mant << 13));
  std::memcpy(&f, &u, 4);
  return f;
}

namespace {

// fp8 with `m` mantissa bits and exponent bias `bias`: the same algorithm as the generated code's
// (backend/cpu/runtime/ph_math.h), written with branches. Finite values are first clamped to
// the max finite (saturation), so rounding can never overflow into an infinity or NaN code.
uint8_t f32_to_f8(float x, int m, int bias, float max_finite, bool has_inf) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const auto sign = static_cast<uint8_t>((u >> 24) & 0x80);
  if (std::isnan(x)) return static_cast<uint8_t>(sign | 0x7f);
  if (std::isinf(x) && has_inf) return static_cast<uint8_t>(sign | 0x7c);
  float a = std::min(std::fabs(x), max_finite);
  const float min_normal = std::ldexp(1.0f, 1 - bias);
  if (a < min_normal) {
    // Subnormal: a multiple of 2^(1 - bias - m); the nearest-even integer multiple is the code
    // (2^m, the smallest normal's code, when it rounds up to it). The scaling is exact.
    float k = std::nearbyint(std::ldexp(a, m + bias - 1));
    return static_cast<uint8_t>(sign | static_cast<uint32_t>(k));
  }
  uint32_t ua;
  std::memcpy(&ua, &a, 4);
  const int sh = 23 - m;
  uint32_t r = (ua + ((1u << (sh - 1)) - 1) + ((ua >> sh) & 1u)) >> sh;  // round to nearest even
  return static_cast<uint8_t>(sign | (r - (static_cast<uint32_t>(127 - bias) << m)));
}

float f8_to_f32(uint8_t c, int m, int bias) {
  const float sign = (c & 0x80) ? -1.0f : 1.0f;
  const int e = (c & 0x7f) >> m, mant = c & ((1 << m) - 1);
  if (e == 0) return sign * std::ldexp(static_cast<float>(mant), 1 - bias - m);
  return sign * std::ldexp(1.0f + static_cast<float>(mant) / static_cast<float>(1 << m), e - bias);
}

}  // namespace

uint8_t f32_to_f8e4m3(float x) { return f32_to_f8(x, 3, 7, 448.0f, false); }
float f8e4m3_to_f32(uint8_t x) {
  if ((x & 0x7f) == 0x7f) return std::numeric_limits<float>::quiet_NaN();
  return f8_to_f32(x, 3, 7);
}
uint8_t f32_to_f8e5m2(float x) { return f32_to_f8(x, 2, 15, 57344.0f, true); }
float f8e5m2_to_f32(uint8_t x) {
  if ((x & 0x7c) == 0x7c) {
    if (x & 0x03) return std::numeric_limits<float>::quiet_NaN();
    return (x & 0x80) ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  }
  return f8_to_f32(x, 2, 15);
}

}  // namespace parhelion

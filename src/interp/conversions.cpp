#include "interp/conversions.h"

#include <cmath>
#include <cstdint>

#include "parhelion/dtype.h"
#include "parhelion/error.h"

namespace parhelion::interp {
namespace {

constexpr double kExactInt = 9007199254740992.0;  // 2^53

[[noreturn]] void fail(const ir::SourceLoc& loc, const std::string& msg) { throw UserError(loc.str() + ": " + msg); }

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// A float truncated toward zero into [lo, hi]; NaN or out of range is an error (undefined
// behaviour of the C++ conversion the CPU backend emits).
double truncate_into(double v, double lo, double hi, DType to, const ir::SourceLoc& loc, const std::string& what) {
  double t = std::trunc(v);
  if (std::isnan(v) || t < lo || t > hi)
    fail(loc, what + ": " + number(v) + " does not convert to " + std::string(dtype_name(to)) +
                  " (NaN or out of range; the conversion is undefined)");
  return t;
}

// An integer wrapped into int32 (two's complement), as static_cast<int32_t>(int64_t) does.
double wrap_i32(double v) {
  auto i = static_cast<int64_t>(v);
  return static_cast<double>(static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(i))));
}

// An integer wrapped into 8 bits (two's complement), signed or not.
double wrap_8(double v, bool is_signed) {
  auto low = static_cast<uint8_t>(static_cast<uint64_t>(static_cast<int64_t>(v)));
  return is_signed ? static_cast<double>(static_cast<int8_t>(low)) : static_cast<double>(low);
}

// Rounding through a narrower float format (through f32 first: the language computes in f32).
double round16(double v, DType to) {
  float f = static_cast<float>(v);
  switch (to) {
    case DType::bf16:
      return bf16_to_f32(f32_to_bf16(f));
    case DType::f16:
      return f16_to_f32(f32_to_f16(f));
    case DType::f8e4m3:
      return f8e4m3_to_f32(f32_to_f8e4m3(f));
    case DType::f8e5m2:
      return f8e5m2_to_f32(f32_to_f8e5m2(f));
    default:
      throw InternalError("round16 of a non-narrow float");
  }
}

// The integer conversions shared by stores and casts (see to_storage).
double to_integer(double v, DType from, DType to, const ir::SourceLoc& loc, const std::string& what) {
  if (std::isnan(v) && from != DType::f32) return v;  // never written
  switch (to) {
    case DType::i32:
      if (from == DType::f32) return truncate_into(v, INT32_MIN, INT32_MAX, to, loc, what);
      return wrap_i32(v);
    case DType::i8:
    case DType::u8: {
      const bool s = to == DType::i8;
      if (from == DType::f32) return truncate_into(v, s ? -128 : 0, s ? 127 : 255, to, loc, what);
      return wrap_8(v, s);
    }
    default:
      throw InternalError("to_integer");
  }
}

}  // namespace

double exact_i64(double v, const ir::SourceLoc& loc) {
  if (std::abs(v) > kExactInt)
    throw Unrepresentable(loc.str() + ": i64 value " + number(v) +
                          " is beyond 2^53, where the reference interpreter is no longer exact");
  return v;
}

double to_storage(double v, DType from, DType storage, const ir::SourceLoc& loc, const std::string& what) {
  bool unwritten = std::isnan(v) && from != DType::f32;
  switch (storage) {
    case DType::f32:
      return static_cast<double>(static_cast<float>(v));
    case DType::bf16:
    case DType::f16:
      return round16(v, storage);
    case DType::i32:
      if (unwritten) return v;
      if (from == DType::f32) return truncate_into(v, INT32_MIN, INT32_MAX, storage, loc, what);
      return wrap_i32(v);
    case DType::i64:
      if (unwritten) return v;
      if (from == DType::f32)
        return exact_i64(truncate_into(v, -9.2233720368547758e18, 9.2233720368547758e18, storage, loc, what), loc);
      return v;
    case DType::boolean:
      if (unwritten) return v;
      return v != 0 ? 1.0 : 0.0;
    case DType::i8:
    case DType::u8:
      return to_integer(v, from, storage, loc, what);
    case DType::f8e4m3:
    case DType::f8e5m2:
      return round16(v, storage);
  }
  throw InternalError("unknown dtype");
}

double cast_to(double v, DType from, DType to, const ir::SourceLoc& loc) {
  bool unwritten = std::isnan(v) && from != DType::f32;
  switch (to) {
    case DType::f32:
      return v;
    case DType::bf16:
    case DType::f16:
      return round16(v, to);
    case DType::i32:
      if (unwritten) return v;
      if (from == DType::f32) return truncate_into(v, INT32_MIN, INT32_MAX, to, loc, "cast");
      return wrap_i32(v);
    case DType::i64:
      if (unwritten) return v;
      if (from == DType::f32)
        return exact_i64(truncate_into(v, -9.2233720368547758e18, 9.2233720368547758e18, to, loc, "cast"), loc);
      return v;
    case DType::boolean:
      if (unwritten) return v;
      return v != 0 ? 1.0 : 0.0;
    case DType::i8:
    case DType::u8:
      return to_integer(v, from, to, loc, "cast");
    case DType::f8e4m3:
    case DType::f8e5m2:
      return round16(v, to);
  }
  throw InternalError("unknown dtype");
}

}  // namespace parhelion::interp

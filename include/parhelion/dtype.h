// Data types of tensors and of values inside kernels.
//
// Tensors hold f32, bf16, f16, f8e4m3, f8e5m2 (floating data), i8, u8, i32, i64 (integers) or
// bool. Inside a kernel every floating value is computed in f32, every integer in i64 (u8
// zero-extends, the others sign-extend), and comparisons produce bool: a load widens, a store
// narrows, and `cast` to a narrower format rounds in place.
//
// Conversions (identical in the interpreter and every backend):
// - to bf16, f16: round to nearest even (overflow gives inf, as IEEE does);
// - to f8e4m3 (the "fn" variant: no infinities, max finite 448, NaN 0x7f/0xff) and f8e5m2 (IEEE
//   layout: max finite 57344, infinities): round to nearest even, and SATURATE: a finite value
//   beyond the max finite becomes +-max finite (the convention of scaled fp8 casts). NaN stays
//   NaN. An infinity becomes +-448 in f8e4m3 (which has none) and stays an infinity in f8e5m2
//   (as torch converts it);
// - float to integer: truncation toward zero (NaN or out of range is refused by the
//   interpreter and undefined on the cpu backend);
// - integer to a narrower integer (i32, i8, u8): wraps, two's complement (keeps the low bits).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace parhelion {

enum class DType : uint8_t { f32, bf16, f16, i32, i64, boolean, i8, u8, f8e4m3, f8e5m2 };

int64_t dtype_size(DType t);
std::string_view dtype_name(DType t);
std::optional<DType> parse_dtype(std::string_view name);
bool is_floating(DType t);
bool is_integer(DType t);

// The type a value of this dtype has inside a kernel (f32, i64 or boolean).
DType compute_dtype(DType t);

// Scalar conversions used by host code, references and tests (round to nearest even).
uint16_t f32_to_bf16(float x);
float bf16_to_f32(uint16_t x);
uint16_t f32_to_f16(float x);
float f16_to_f32(uint16_t x);
// fp8 (see the rules above): round to nearest even, saturating to the max finite.
uint8_t f32_to_f8e4m3(float x);
float f8e4m3_to_f32(uint8_t x);
uint8_t f32_to_f8e5m2(float x);
float f8e5m2_to_f32(uint8_t x);
bool is_fp8(DType t);

}  // namespace parhelion

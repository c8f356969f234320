// Data types of tensors and of values inside kernels.
//
// Tensors hold f32, bf16, f16 (floating data) or i32, i64 (indices). Inside a kernel every
// floating value is computed in f32, every integer in i64, and comparisons produce bool: a load
// widens, a store narrows (round to nearest even), and `cast` to bf16/f16 rounds in place.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace parhelion {

enum class DType : uint8_t { f32, bf16, f16, i32, i64, boolean };

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

}  // namespace parhelion

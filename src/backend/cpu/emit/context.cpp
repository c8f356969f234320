// EmitContext's helpers (context.h): naming tiles and scratch buffers, linear offsets and
// broadcast indices into blocks, and spelling C types and literals for generated code.

#include "backend/cpu/emit/context.h"

#include <cmath>
#include <cstdio>

#include "parhelion/error.h"

namespace parhelion::backend::cpu::emit {

std::string c_type(DType compute) {
  switch (compute) {
    case DType::f32:
      return "float";
    case DType::i64:
      return "int64_t";
    case DType::boolean:
      return "bool";
    default:
      throw InternalError("not a compute dtype");
  }
}

std::string storage_type(DType d) {
  switch (d) {
    case DType::f32:
      return "float";
    case DType::bf16:
    case DType::f16:
      return "uint16_t";
    case DType::i32:
      return "int32_t";
    case DType::i64:
      return "int64_t";
    case DType::boolean:
      return "uint8_t";
    case DType::i8:
      return "int8_t";
    case DType::u8:
    case DType::f8e4m3:
    case DType::f8e5m2:
      return "uint8_t";
  }
  throw InternalError("unknown dtype");
}

bool is16(DType d) { return d == DType::bf16 || d == DType::f16; }

std::string literal(double v, DType compute) {
  if (compute == DType::i64) return "int64_t(" + std::to_string(static_cast<long long>(v)) + "LL)";
  if (compute == DType::boolean) return v != 0 ? "true" : "false";
  if (std::isnan(v)) return "__builtin_nanf(\"\")";
  if (std::isinf(v)) return v > 0 ? "__builtin_inff()" : "(-__builtin_inff())";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9gf", v);
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s.insert(s.size() - 1, ".0");
  return "(" + s + ")";
}

const lower::ValuePlan* EmitContext::value_plan(int v) const {
  auto it = L_.values.find(v);
  return it == L_.values.end() ? nullptr : &it->second;
}

std::string EmitContext::scratch_name(const lower::Scratch& s) const {
  switch (s.kind) {
    case lower::Scratch::DotWorkspace:
      return "ws" + std::to_string(s.value);
    case lower::Scratch::StagingBuffer:
      return "stg" + std::to_string(s.staged);
    case lower::Scratch::VarBuffer:
      return "var" + std::to_string(s.var);
    case lower::Scratch::Materialized:
      break;
  }
  return "m" + std::to_string(s.value);
}

// The index of a value of shape `shape` inside a nest with indices `idx` (right-aligned,
// size-1 dims broadcast).
Idx EmitContext::broadcast(const std::vector<Dim>& shape, const Idx& idx) const {
  Idx r(shape.size());
  size_t off = idx.size() - shape.size();
  for (size_t k = 0; k < shape.size(); ++k) r[k] = shape[k].is_one() ? "0" : idx[off + k];
  return r;
}

std::string EmitContext::linear(const std::vector<int64_t>& capacity, const Idx& idx) const {
  std::string s;
  int64_t stride = 1;
  for (int k = static_cast<int>(idx.size()) - 1; k >= 0; --k) {
    if (idx[k] != "0") {
      std::string term = stride == 1 ? idx[k] : idx[k] + " * " + std::to_string(stride);
      s = s.empty() ? term : term + " + " + s;
    }
    stride *= capacity[k];
  }
  return s.empty() ? "0" : s;
}

std::string EmitContext::scratch_ref(const lower::Scratch& s, const Idx& idx) const {
  return scratch_name(s) + "[" + linear(s.capacity, idx) + "]";
}

}  // namespace parhelion::backend::cpu::emit

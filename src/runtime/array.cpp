#include "parhelion/array.h"

#include <cmath>
#include <random>
#include <sstream>
#include <stdexcept>

#include "parhelion/error.h"
#include "runtime/allocator.h"

namespace parhelion {

std::string shape_to_string(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? "," : "") << s[i];
  os << "]";
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s)
    if (__builtin_mul_overflow(n, d, &n))
      throw UserError("shape " + shape_to_string(s) + " has more elements than a 64-bit count can hold");
  return n;
}

size_t shape_bytes(const Shape& s, DType dtype) {
  for (int64_t d : s)
    if (d < 0) throw UserError("negative dimension in shape " + shape_to_string(s));
  size_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<size_t>(shape_numel(s)), static_cast<size_t>(dtype_size(dtype)), &bytes) ||
      bytes > static_cast<size_t>(INT64_MAX))
    throw UserError("shape " + shape_to_string(s) + " of " + std::string(dtype_name(dtype)) +
                    " needs more bytes than a 64-bit size can hold");
  return bytes;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (int i = static_cast<int>(s.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

Array Array::empty(Shape shape, DType dtype) {
  size_t bytes = shape_bytes(shape, dtype);
  Array a;
  a.storage_ = runtime::allocate(bytes, "an array " + std::string(dtype_name(dtype)) + shape_to_string(shape));
  a.data_ = a.storage_.get();
  a.strides_ = contiguous_strides(shape);
  a.shape_ = std::move(shape);
  a.dtype_ = dtype;
  return a;
}

Array Array::placeholder(Shape shape, DType dtype) {
  size_t bytes = shape_bytes(shape, dtype);
  Array a;
  a.storage_ = runtime::reserve_address_space(
      bytes, "a placeholder array " + std::string(dtype_name(dtype)) + shape_to_string(shape));
  a.data_ = a.storage_.get();
  a.strides_ = contiguous_strides(shape);
  a.shape_ = std::move(shape);
  a.dtype_ = dtype;
  return a;
}

Array Array::zeros(Shape shape, DType dtype) { return full(std::move(shape), 0.0, dtype); }

Array Array::full(Shape shape, double value, DType dtype) {
  Array a = empty(std::move(shape), dtype);
  for (int64_t i = 0, n = a.numel(); i < n; ++i) a.set(i, value);
  return a;
}

Array Array::random(Shape shape, DType dtype, uint64_t seed, double lo, double hi) {
  Array a = empty(std::move(shape), dtype);
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0, n = a.numel(); i < n; ++i) {
    double v = dist(gen);
    a.set(i, is_integer(dtype) ? std::floor(v) : v);
  }
  return a;
}

Array Array::wrap(void* data, Shape shape, Shape strides, DType dtype, std::shared_ptr<void> owner) {
  if (strides.size() != shape.size())
    throw UserError("Array::wrap: " + std::to_string(strides.size()) + " strides for a rank-" +
                    std::to_string(shape.size()) + " shape");
  Array a;
  a.storage_ = std::move(owner);
  a.data_ = data;
  a.shape_ = std::move(shape);
  a.strides_ = std::move(strides);
  a.dtype_ = dtype;
  return a;
}

Array Array::from_floats(Shape shape, std::span<const float> values, DType dtype) {
  Array a = empty(std::move(shape), dtype);
  if (static_cast<int64_t>(values.size()) != a.numel())
    throw UserError("Array::from_floats: " + std::to_string(values.size()) + " values for shape " +
                    shape_to_string(a.shape()));
  for (int64_t i = 0; i < a.numel(); ++i) a.set(i, values[i]);
  return a;
}

bool Array::is_contiguous() const { return strides_ == contiguous_strides(shape_); }

int64_t Array::offset_of(int64_t flat) const {
  int64_t off = 0;
  for (int d = rank() - 1; d >= 0; --d) {
    off += (flat % shape_[d]) * strides_[d];
    flat /= shape_[d];
  }
  return off;
}

double Array::get(int64_t flat) const {
  int64_t o = offset_of(flat);
  switch (dtype_) {
    case DType::f32:
      return static_cast<const float*>(data_)[o];
    case DType::bf16:
      return bf16_to_f32(static_cast<const uint16_t*>(data_)[o]);
    case DType::f16:
      return f16_to_f32(static_cast<const uint16_t*>(data_)[o]);
    case DType::i32:
      return static_cast<const int32_t*>(data_)[o];
    case DType::i64:
      return static_cast<double>(static_cast<const int64_t*>(data_)[o]);
    case DType::boolean:
      return static_cast<const uint8_t*>(data_)[o];
    case DType::i8:
      return static_cast<const int8_t*>(data_)[o];
    case DType::u8:
      return static_cast<const uint8_t*>(data_)[o];
    case DType::f8e4m3:
      return f8e4m3_to_f32(static_cast<const uint8_t*>(data_)[o]);
    case DType::f8e5m2:
      return f8e5m2_to_f32(static_cast<const uint8_t*>(data_)[o]);
  }
  throw InternalError("unknown dtype");
}

void Array::set(int64_t flat, double v) {
  int64_t o = offset_of(flat);
  switch (dtype_) {
    case DType::f32:
      static_cast<float*>(data_)[o] = static_cast<float>(v);
      return;
    case DType::bf16:
      static_cast<uint16_t*>(data_)[o] = f32_to_bf16(static_cast<float>(v));
      return;
    case DType::f16:
      static_cast<uint16_t*>(data_)[o] = f32_to_f16(static_cast<float>(v));
      return;
    case DType::i32:
      static_cast<int32_t*>(data_)[o] = static_cast<int32_t>(v);
      return;
    case DType::i64:
      static_cast<int64_t*>(data_)[o] = static_cast<int64_t>(v);
      return;
    case DType::boolean:
      static_cast<uint8_t*>(data_)[o] = v != 0;
      return;
    case DType::i8:  // wraps, as a store of an i64 does
      static_cast<int8_t*>(data_)[o] = static_cast<int8_t>(static_cast<uint8_t>(static_cast<int64_t>(v)));
      return;
    case DType::u8:
      static_cast<uint8_t*>(data_)[o] = static_cast<uint8_t>(static_cast<int64_t>(v));
      return;
    case DType::f8e4m3:
      static_cast<uint8_t*>(data_)[o] = f32_to_f8e4m3(static_cast<float>(v));
      return;
    case DType::f8e5m2:
      static_cast<uint8_t*>(data_)[o] = f32_to_f8e5m2(static_cast<float>(v));
      return;
  }
}

std::vector<float> Array::to_floats() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) out[i] = static_cast<float>(get(i));
  return out;
}

Array Array::to(DType dtype) const {
  Array a = empty(shape_, dtype);
  for (int64_t i = 0; i < numel(); ++i) a.set(i, get(i));
  return a;
}

Array Array::clone() const { return to(dtype_); }

double max_abs_diff(const Array& a, const Array& b) {
  if (a.shape() != b.shape())
    throw UserError("max_abs_diff: shapes " + shape_to_string(a.shape()) + " and " + shape_to_string(b.shape()) +
                    " differ");
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = a.get(i), y = b.get(i);
    if (std::isnan(x) != std::isnan(y)) return INFINITY;
    if (std::isinf(x) || std::isinf(y)) {
      if (x != y) return INFINITY;
      continue;
    }
    if (!std::isnan(x)) m = std::max(m, std::abs(x - y));
  }
  return m;
}

}  // namespace parhelion

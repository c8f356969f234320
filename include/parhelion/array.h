// Array: a concrete tensor in host memory (shape, strides in elements, dtype, storage).
//
// Arrays are what users pass to and get back from kernels. Storage comes from the runtime's
// allocator: 64-byte aligned, huge-page backed where large, and recycled, because on these
// machines the first touch of a fresh 4 KiB page costs about 11 us.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "parhelion/dtype.h"

namespace parhelion {

using Shape = std::vector<int64_t>;

std::string shape_to_string(const Shape& s);
// The element count; throws UserError if it overflows 64 bits.
int64_t shape_numel(const Shape& s);
// The bytes an array of this shape and dtype takes; throws UserError on a negative dimension
// or if the size overflows.
size_t shape_bytes(const Shape& s, DType dtype);
Shape contiguous_strides(const Shape& s);

class Array {
 public:
  Array() = default;
  // A new contiguous array; contents uninitialized.
  static Array empty(Shape shape, DType dtype);
  // An array with a shape, a dtype and an address range of its own, but no memory behind it
  // (address space only): for tracing and emitting, which read shapes, never data. Reading or
  // writing its elements faults.
  static Array placeholder(Shape shape, DType dtype);
  static Array zeros(Shape shape, DType dtype);
  static Array full(Shape shape, double value, DType dtype);
  // Seeded uniform values in [lo, hi) (integers: [lo, hi) truncated).
  static Array random(Shape shape, DType dtype, uint64_t seed, double lo = -1.0, double hi = 1.0);
  // Wraps memory the caller owns (kept alive by `owner`, may be null); strides in elements.
  static Array wrap(void* data, Shape shape, Shape strides, DType dtype, std::shared_ptr<void> owner = nullptr);
  static Array from_floats(Shape shape, std::span<const float> values, DType dtype = DType::f32);

  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? i + rank() : i); }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return dtype_; }
  bool defined() const { return data_ != nullptr || numel() == 0; }
  bool is_contiguous() const;
  void* data() const { return data_; }
  template <class T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }

  // Element access by flat row-major index (respects strides), converted to/from double.
  double get(int64_t flat_index) const;
  void set(int64_t flat_index, double value);
  std::vector<float> to_floats() const;
  Array to(DType dtype) const;  // converted copy (contiguous)
  Array clone() const;          // contiguous copy

 private:
  std::shared_ptr<void> storage_;
  void* data_ = nullptr;
  Shape shape_, strides_;
  DType dtype_ = DType::f32;
  int64_t offset_of(int64_t flat_index) const;
};

// Largest |a-b| over all elements (shapes must match; compares in double).
double max_abs_diff(const Array& a, const Array& b);

}  // namespace parhelion

// A value of the reference interpreter: a dense, row-major block of doubles with a concrete
// shape and a compute dtype (f32, i64 or bool), and the numpy broadcasting that pointwise ops,
// stores and Var assignments apply to it.
#pragma once

#include <cstdint>
#include <vector>

#include "parhelion/array.h"
#include "parhelion/dtype.h"

namespace parhelion::interp {

struct Value {
  DType dtype = DType::f32;
  Shape shape;
  std::vector<double> data;  // row-major, shape_numel(shape) elements

  static Value filled(DType dtype, Shape shape, double v) {
    Value r{dtype, std::move(shape), {}};
    r.data.assign(static_cast<size_t>(shape_numel(r.shape)), v);
    return r;
  }
  double scalar() const { return data.at(0); }
};

// For each element of a block of shape `to` (row-major), the flat index of the element of a
// block of shape `from` that numpy broadcasting reads there: `from` is right-aligned against
// `to`, and its size-1 dims stretch. `from` must broadcast to `to` (checked).
std::vector<int64_t> broadcast_map(const Shape& from, const Shape& to);

// `v` broadcast to `shape` (a copy).
Value broadcast_to(const Value& v, const Shape& shape);

}  // namespace parhelion::interp

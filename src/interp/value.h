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

// Where numpy broadcasting reads a block of shape `from` for each element of a block of shape
// `to` (row-major): `from` is right-aligned against `to`, and its size-1 dims stretch. `from`
// must broadcast to `to` (checked). The identity (equal shapes, the common case) stores nothing.
class Broadcast {
 public:
  Broadcast(const Shape& from, const Shape& to);
  // The flat index in `from` read at flat index `i` of `to`.
  int64_t operator[](size_t i) const { return identity_ ? static_cast<int64_t>(i) : map_[i]; }

 private:
  bool identity_ = false;
  std::vector<int64_t> map_;
};

// `v` broadcast to `shape` (a copy).
Value broadcast_to(const Value& v, const Shape& shape);

}  // namespace parhelion::interp

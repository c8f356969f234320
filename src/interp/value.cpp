#include "interp/value.h"

#include "parhelion/error.h"

namespace parhelion::interp {

Broadcast::Broadcast(const Shape& from, const Shape& to) {
  if (from == to) {
    identity_ = true;
    return;
  }
  PH_CHECK(from.size() <= to.size(), "broadcast of " + shape_to_string(from) + " to " + shape_to_string(to));
  const size_t lead = to.size() - from.size();
  // The stride of each output dim in `from` (0 where it is broadcast or absent).
  std::vector<int64_t> stride(to.size(), 0);
  int64_t s = 1;
  for (size_t k = from.size(); k-- > 0;) {
    PH_CHECK(from[k] == to[lead + k] || from[k] == 1,
             "shape " + shape_to_string(from) + " does not broadcast to " + shape_to_string(to));
    stride[lead + k] = from[k] == 1 ? 0 : s;
    s *= from[k];
  }
  const int64_t n = shape_numel(to);
  map_.resize(static_cast<size_t>(n));
  std::vector<int64_t> idx(to.size(), 0);
  int64_t at = 0;
  for (int64_t i = 0; i < n; ++i) {
    map_[static_cast<size_t>(i)] = at;
    // Odometer increment of idx, keeping `at` in step.
    for (size_t k = to.size(); k-- > 0;) {
      if (++idx[k] < to[k]) {
        at += stride[k];
        break;
      }
      at -= stride[k] * (to[k] - 1);
      idx[k] = 0;
    }
  }
}

Value broadcast_to(const Value& v, const Shape& shape) {
  if (v.shape == shape) return v;
  Value r{v.dtype, shape, {}};
  Broadcast map(v.shape, shape);
  r.data.resize(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < r.data.size(); ++i) r.data[i] = v.data[static_cast<size_t>(map[i])];
  return r;
}

}  // namespace parhelion::interp

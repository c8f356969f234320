#include "interp/views.h"

#include "parhelion/error.h"

namespace parhelion::interp {
namespace {

// The multi-index of flat row-major position `flat` in `shape`.
std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    idx[k] = shape[k] ? flat % shape[k] : 0;
    flat = shape[k] ? flat / shape[k] : 0;
  }
  return idx;
}

int64_t ravel(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t f = 0;
  for (size_t k = 0; k < shape.size(); ++k) f = f * shape[k] + idx[k];
  return f;
}

// Element `idx` (of a block broadcast to rank idx.size()) of value `v`, numpy broadcasting.
double at_broadcast(const Value& v, const std::vector<int64_t>& idx) {
  const size_t off = idx.size() - v.shape.size();
  std::vector<int64_t> j(v.shape.size());
  for (size_t k = 0; k < v.shape.size(); ++k) j[k] = v.shape[k] == 1 ? 0 : idx[off + k];
  return v.data[static_cast<size_t>(ravel(j, v.shape))];
}

}  // namespace

Value block_view(const ir::Op& op, const std::vector<const Value*>& in, const Shape& shape) {
  PH_CHECK(!in.empty(), "a block view without operands");
  const Value& a = *in[0];
  Value r = Value::filled(a.dtype, shape, 0);
  using ir::OpKind;
  switch (op.kind) {
    case OpKind::Reshape:
      // Tile dims keep their places and constant dims regroup in order: the row-major order of
      // the elements is the same, so the data is too.
      PH_CHECK(a.data.size() == r.data.size(), "reshape changes the element count");
      r.data = a.data;
      return r;
    case OpKind::Squeeze:
      r.data = a.data;
      return r;
    default:
      break;
  }
  for (size_t i = 0; i < r.data.size(); ++i) {
    std::vector<int64_t> idx = unravel(static_cast<int64_t>(i), shape);
    double x = 0;
    switch (op.kind) {
      case OpKind::Permute: {
        std::vector<int64_t> j(idx.size());
        for (size_t k = 0; k < idx.size(); ++k) j[static_cast<size_t>(op.dims[k])] = idx[k];
        x = a.data[static_cast<size_t>(ravel(j, a.shape))];
        break;
      }
      case OpKind::Expand:
        x = at_broadcast(a, idx);
        break;
      case OpKind::Split: {
        idx.push_back(op.axis);
        x = a.data[static_cast<size_t>(ravel(idx, a.shape))];
        break;
      }
      case OpKind::Join:
      case OpKind::Stack: {
        const size_t axis = op.kind == OpKind::Join ? idx.size() - 1 : static_cast<size_t>(op.axis);
        const int64_t which = idx[axis];
        idx.erase(idx.begin() + static_cast<int64_t>(axis));
        x = at_broadcast(*in.at(static_cast<size_t>(which)), idx);
        break;
      }
      case OpKind::Cat: {
        size_t which = 0;
        while (idx[op.axis] >= in[which]->shape[op.axis]) idx[op.axis] -= in[which++]->shape[op.axis];
        x = in[which]->data[static_cast<size_t>(ravel(idx, in[which]->shape))];
        break;
      }
      default:
        throw InternalError("not a block view: " + std::string(ir::op_name(op)));
    }
    r.data[i] = x;
  }
  return r;
}

}  // namespace parhelion::interp

#include "backend/pallas/views.h"

#include <algorithm>

#include "parhelion/error.h"

namespace parhelion::backend::pallas {
namespace {

std::string tuple(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (v.size() == 1 ? ",)" : ")");
}

const ir::Op& view_op(const ir::Function& fn, int t) {
  for (const ir::Op& op : fn.body)
    if (op.kind == ir::OpKind::View && op.tensor == t) return op;
  throw InternalError("view tensor " + fn.tensors.at(t).name + " has no View op");
}

std::string var(const ir::Function& fn, int t) {
  return fn.tensors.at(t).origin == ir::TensorInfo::View ? "(" + view_value(fn, t) + ")" : "t" + std::to_string(t);
}

}  // namespace

std::string view_value(const ir::Function& fn, int t) {
  const ir::TensorInfo& info = fn.tensors.at(t);
  PH_CHECK(info.origin == ir::TensorInfo::View, "view_value of a tensor that is not a view");
  const ir::Op& op = view_op(fn, t);
  const std::string base = var(fn, info.base);
  const ir::TensorInfo& b = fn.tensors[info.base];
  switch (op.view_kind) {
    case ir::ViewKind::reshape:
      return "jnp.reshape(" + base + ", " + tuple(info.shape) + ")";
    case ir::ViewKind::permute:
      return "jnp.transpose(" + base + ", " + tuple(op.dims) + ")";
    case ir::ViewKind::expand:
      return "jnp.broadcast_to(" + base + ", " + tuple(info.shape) + ")";
    case ir::ViewKind::narrow: {
      std::string idx;
      for (size_t d = 0; d < b.shape.size(); ++d)
        idx += (d ? ", " : "") + (static_cast<int>(d) == op.axis
                                      ? std::to_string(op.dims[0]) + ":" + std::to_string(op.dims[0] + op.dims[1])
                                      : std::string(":"));
      return base + "[" + idx + "]";
    }
  }
  throw InternalError("bad view kind");
}

std::vector<std::string> write_back_view(const ir::Function& fn, int view) {
  std::vector<std::string> lines;
  std::string cur = "t" + std::to_string(view);
  for (int t = view; fn.tensors[t].origin == ir::TensorInfo::View; t = fn.tensors[t].base) {
    const ir::TensorInfo& info = fn.tensors[t];
    const ir::TensorInfo& b = fn.tensors[info.base];
    const ir::Op& op = view_op(fn, t);
    std::string next = "_wb" + std::to_string(view) + "_" + std::to_string(info.base);
    switch (op.view_kind) {
      case ir::ViewKind::reshape:
        lines.push_back(next + " = jnp.reshape(" + cur + ", " + tuple(b.shape) + ")");
        break;
      case ir::ViewKind::permute: {
        std::vector<int64_t> inv(op.dims.size());
        for (size_t i = 0; i < op.dims.size(); ++i) inv[static_cast<size_t>(op.dims[i])] = static_cast<int64_t>(i);
        lines.push_back(next + " = jnp.transpose(" + cur + ", " + tuple(inv) + ")");
        break;
      }
      case ir::ViewKind::narrow: {
        std::string idx;
        for (size_t d = 0; d < b.shape.size(); ++d)
          idx += (d ? ", " : "") + (static_cast<int>(d) == op.axis
                                        ? std::to_string(op.dims[0]) + ":" + std::to_string(op.dims[0] + op.dims[1])
                                        : std::string(":"));
        lines.push_back(next + " = " + var(fn, info.base) + ".at[" + idx + "].set(" + cur + ")");
        break;
      }
      case ir::ViewKind::expand:
        throw UserError(op.loc.str() + ": a store through an expanded view (" + info.name +
                        ") cannot be expressed on the pallas backend: its elements alias each other");
    }
    cur = next;
  }
  lines.push_back("t" + std::to_string(fn.tensors[view].root) + " = " + cur);
  return lines;
}

}  // namespace parhelion::backend::pallas

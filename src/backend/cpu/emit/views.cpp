// Block views in the cpu emitter: every expression is per element, so a view is an index remap
// of its operand's expression (nothing is copied). Index strings of size-1 dims are "0".
#include <algorithm>
#include <string>

#include "backend/cpu/emit/launch_emitter.h"
#include "parhelion/error.h"

namespace parhelion::backend::cpu::emit {
std::string LaunchEmitter::view_expr(const Op& op, const Idx& idx) {
  const ir::Type& in = type(op.operands.empty() ? op.result : op.operands[0]);
  const std::vector<Dim>& out = type(op.result).shape;
  switch (op.kind) {
    case OpKind::Reshape: {
      // Segments of constant dims between tile dims: linearize the result's segment, unravel
      // it into the operand's (tile dims map one to one, in order).
      Idx inner(in.shape.size(), "0");
      size_t j = 0, k = 0;
      for (;;) {
        std::string lin;
        for (; j < out.size() && out[j].kind == Dim::Const; ++j) {
          if (out[j].size == 1) continue;
          lin = lin.empty() ? idx[j] : "(" + lin + ") * " + std::to_string(out[j].size) + " + " + idx[j];
        }
        const size_t k0 = k;
        int64_t after = 1;
        for (; k < in.shape.size() && in.shape[k].kind == Dim::Const; ++k)
          after *= std::max<int64_t>(1, in.shape[k].size);
        bool first = true;
        for (size_t m = k0; m < k; ++m) {
          const int64_t n = std::max<int64_t>(1, in.shape[m].size);
          after /= n;
          if (n == 1 || lin.empty()) continue;
          std::string q = after == 1 ? lin : "(" + lin + ") / " + std::to_string(after);
          inner[m] = first ? "(" + q + ")" : "((" + q + ") % " + std::to_string(n) + ")";
          first = false;
        }
        if (j < out.size() && k < in.shape.size()) {  // the next tile dim, the same in both
          inner[k++] = idx[j++];
          continue;
        }
        break;
      }
      return expr(op.operands[0], inner);
    }
    case OpKind::Permute: {
      Idx inner(idx.size());
      for (size_t k = 0; k < idx.size(); ++k) inner[static_cast<size_t>(op.dims[k])] = idx[k];
      return expr(op.operands[0], inner);
    }
    case OpKind::Expand:
      return expr(op.operands[0], broadcast(in.shape, idx));
    case OpKind::Squeeze: {
      Idx inner = idx;
      inner.insert(inner.begin() + op.axis, "0");
      return expr(op.operands[0], inner);
    }
    case OpKind::Split: {
      Idx inner = idx;
      inner.push_back(std::to_string(op.axis));
      return expr(op.operands[0], inner);
    }
    case OpKind::Join:
    case OpKind::Stack: {
      const size_t axis = op.kind == OpKind::Join ? idx.size() - 1 : static_cast<size_t>(op.axis);
      const std::string& sel = idx[axis];
      Idx rest = idx;
      rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(axis));
      // A literal position (an unrolled or size-1 dim) picks its operand; else a select chain.
      std::string e = operand(op, static_cast<int>(op.operands.size()) - 1, rest);
      for (int k = static_cast<int>(op.operands.size()) - 2; k >= 0; --k) {
        if (sel == std::to_string(k)) return operand(op, k, rest);
        e = "(" + sel + " == " + std::to_string(k) + " ? " + operand(op, k, rest) + " : " + e + ")";
      }
      if (sel == std::to_string(op.operands.size() - 1))
        return operand(op, static_cast<int>(op.operands.size()) - 1, rest);
      return e;
    }
    case OpKind::Cat: {
      const size_t axis = static_cast<size_t>(op.axis);
      std::vector<int64_t> starts;
      int64_t start = 0;
      for (int v : op.operands) {
        starts.push_back(start);
        start += type(v).shape[axis].size;
      }
      // A part is read only where the select takes it: its reads are masked by that (never
      // hoisted, and their indices checked only there), as a masked load's are by its mask.
      auto part = [&](size_t k) {
        Idx inner = idx;
        const Dim& d = type(op.operands[k]).shape[axis];
        inner[axis] = d.size == 1 ? "0"
                      : starts[k] ? "(" + idx[axis] + " - " + std::to_string(starts[k]) + ")"
                                  : idx[axis];
        std::string taken;
        if (k > 0) taken = idx[axis] + " >= " + std::to_string(starts[k]);
        if (k + 1 < op.operands.size())
          taken += (taken.empty() ? "" : " && ") + idx[axis] + " < " + std::to_string(starts[k + 1]);
        ++no_hoist_;
        mask_scope_.push_back(taken.empty() ? "true" : taken);
        std::string e = expr(op.operands[k], inner);
        mask_scope_.pop_back();
        --no_hoist_;
        return e;
      };
      std::string e = part(op.operands.size() - 1);
      for (size_t k = op.operands.size() - 1; k-- > 0;)
        e = "(" + idx[axis] + " < " + std::to_string(starts[k + 1]) + " ? " + part(k) + " : " + e + ")";
      return e;
    }
    default:
      break;
  }
  throw InternalError("not a block view: " + std::string(ir::op_name(op)));
}

}  // namespace parhelion::backend::cpu::emit

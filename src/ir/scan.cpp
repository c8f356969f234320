#include "ir/scan.h"

#include <set>

#include "ir/printer.h"
#include "ir/type_rules.h"

namespace parhelion::ir {

std::string scan_type(const Function& fn, const std::vector<Type>& inputs, int* axis, int component, Type* out) {
  if (inputs.empty()) return "a scan needs at least one block";
  if (component < 0 || component >= static_cast<int>(inputs.size()))
    return "scan: result component " + std::to_string(component) + " of " + std::to_string(inputs.size()) + " operands";
  const Type& first = inputs[0];
  for (size_t k = 1; k < inputs.size(); ++k)
    if (!(inputs[k].shape == first.shape))
      return "the blocks scanned together must have one shape; got " + dims_to_string(fn, first.shape) + " and " +
             dims_to_string(fn, inputs[k].shape);
  const int rank = first.rank();
  const int a = *axis < 0 ? *axis + rank : *axis;
  if (a < 0 || a >= rank)
    return "scan over axis " + std::to_string(*axis) + " of a block with shape " + dims_to_string(fn, first.shape) +
           " (rank " + std::to_string(rank) + ")";
  *axis = a;
  *out = Type{inputs[component].dtype, first.shape};
  return "";
}

bool is_combine_op(OpKind k) {
  switch (k) {
    case OpKind::Constant:
    case OpKind::Full:
    case OpKind::ScalarParam:
    case OpKind::Unary:
    case OpKind::Binary:
    case OpKind::Where:
    case OpKind::Cast:
      return true;
    default:
      return false;
  }
}

std::string combine_rule(const Function& fn, const ScanCombine& c, const std::vector<DType>& dtypes,
                         std::vector<int>* defined) {
  const size_t n = dtypes.size();
  if (c.params.size() != 2 * n)
    return "the combine function of a scan of " + std::to_string(n) + " blocks takes " + std::to_string(2 * n) +
           " values, got " + std::to_string(c.params.size());
  std::set<int> own;
  auto in_range = [&](int v) { return v >= 0 && v < static_cast<int>(fn.values.size()); };
  for (size_t k = 0; k < c.params.size(); ++k) {
    const int p = c.params[k];
    if (!in_range(p) || !own.insert(p).second) return "scan: bad combine parameter %" + std::to_string(p);
    const Type want{dtypes[k % n], {}};
    if (!(fn.type_of(p) == want))
      return "scan: combine parameter %" + std::to_string(p) + " has type " + type_to_string(fn, fn.type_of(p)) +
             ", expected " + type_to_string(fn, want);
  }
  for (const Op& op : c.ops) {
    if (!is_combine_op(op.kind))
      return op.loc.str() + ": the combine function of a scan may only compute with its arguments and numbers (" +
             std::string(op_name(op)) + " is not allowed in it)";
    for (int v : op.operands)
      if (!own.count(v))
        return op.loc.str() +
               ": the combine function of a scan may only use its arguments and values it computes from them "
               "(it reads %" +
               std::to_string(v) + ", computed outside it)";
    if (!in_range(op.result) || !own.insert(op.result).second)
      return op.loc.str() + ": scan: bad combine value %" + std::to_string(op.result);
    if (fn.type_of(op.result).rank() != 0)
      return op.loc.str() + ": the combine function of a scan computes on single elements; " +
             std::string(op_name(op)) + " made a block of shape " + dims_to_string(fn, fn.type_of(op.result).shape);
  }
  if (c.results.size() != n)
    return "the combine function of a scan of " + std::to_string(n) + " blocks must return " + std::to_string(n) +
           " values, got " + std::to_string(c.results.size());
  for (size_t k = 0; k < n; ++k) {
    const int r = c.results[k];
    if (!own.count(r)) return "scan: the combine returns %" + std::to_string(r) + ", which it does not define";
    const Type& t = fn.type_of(r);
    if (t.rank() != 0)
      return "the combine function of a scan must return single elements; result " + std::to_string(k) + " has shape " +
             dims_to_string(fn, t.shape);
    if (t.dtype != dtypes[k])
      return "the combine function of a scan must return the dtype of what it scans: result " + std::to_string(k) +
             " is " + std::string(dtype_name(t.dtype)) + ", the scanned block is " +
             std::string(dtype_name(dtypes[k])) + " (cast it)";
  }
  if (defined) defined->assign(own.begin(), own.end());
  return "";
}

}  // namespace parhelion::ir

#include "ir/dce.h"

#include <vector>

namespace parhelion::ir {
namespace {

bool has_side_effects(const Op& op) {
  switch (op.kind) {
    case OpKind::Alloc:
    case OpKind::Launch:
    case OpKind::Loop:
    case OpKind::If:
    case OpKind::Store:
    case OpKind::VarDecl:
    case OpKind::VarSet:
      return true;
    default:
      return false;
  }
}

void count_uses(const std::vector<Op>& ops, std::vector<int>& uses) {
  for (const Op& op : ops) {
    for (int v : op.operands) uses[v]++;
    for (const IndexItem& ix : op.index)
      if (ix.has_value()) uses[ix.value]++;
    count_uses(op.body, uses);
  }
}

bool sweep(std::vector<Op>& ops, const std::vector<int>& uses) {
  bool changed = false;
  std::vector<Op> kept;
  kept.reserve(ops.size());
  for (Op& op : ops) {
    if (!has_side_effects(op) && op.result >= 0 && uses[op.result] == 0) {
      changed = true;
      continue;
    }
    changed |= sweep(op.body, uses);
    kept.push_back(std::move(op));
  }
  ops = std::move(kept);
  return changed;
}

}  // namespace

void eliminate_dead_code(Function& fn) {
  for (bool changed = true; changed;) {
    std::vector<int> uses(fn.values.size(), 0);
    count_uses(fn.body, uses);
    changed = sweep(fn.body, uses);
  }
}

}  // namespace parhelion::ir

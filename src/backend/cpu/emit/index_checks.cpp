// Bounds checks of computed indices: a scalar that indexes a tensor dimension is checked where it
// is computed, before any use, and an out-of-range value records a ph_status and returns.

#include <map>
#include <string>

#include "backend/cpu/emit/launch_emitter.h"

namespace parhelion::backend::cpu::emit {

void LaunchEmitter::collect_index_uses() {
  const std::map<int, const Op*>& defs = launch_def_;
  ir::walk(L_.op->body, [&](const Op& op) {
    if (op.kind != OpKind::Load && op.kind != OpKind::Store && op.kind != OpKind::CopyStart) return;
    if (ir::is_masked(op)) return;  // checked per active element where used (expressions.cpp)
    const ir::TensorInfo& t = fn_.tensors[op.tensor];
    for (size_t d = 0; d < op.index.size(); ++d) {
      const ir::IndexItem& ix = op.index[d];
      if (!ix.has_value()) continue;
      auto def = defs.find(ix.value);
      if (def != defs.end() && def->second->kind == OpKind::Constant) continue;  // checked when traced
      if (ix.kind == ir::IndexItem::Slice) {  // the start of a slice: 0 <= start <= size - length
        index_uses_[ix.value].push_back({op.loc.str(),
                                         "the start of a slice of length " + std::to_string(ix.length) +
                                             " of dimension " + std::to_string(d) + " of " + t.name + " (size " +
                                             std::to_string(t.shape[d]) + ")",
                                         t.shape[d] - ix.length + 1});
        continue;
      }
      index_uses_[ix.value].push_back(
          {op.loc.str(),
           "dimension " + std::to_string(d) + " of " + t.name + " (size " + std::to_string(t.shape[d]) + ")",
           t.shape[d]});
    }
  });
}

std::string LaunchEmitter::c_string(const std::string& s) {
  std::string r = "\"";
  for (char c : s) r += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
  return r + "\"";
}

void LaunchEmitter::check_index(int v) {
  auto it = index_uses_.find(v);
  if (it == index_uses_.end()) return;
  std::string s = "s" + std::to_string(v);
  for (const IndexUse& u : it->second)
    line("if (__builtin_expect(static_cast<uint64_t>(" + s + ") >= " + std::to_string(u.size) + "u, 0)) { " +
         "ph_index_error(ph_st, " + c_string(u.where) + ", " + c_string(u.what) + ", " + s + "); return; }");
}

}  // namespace parhelion::backend::cpu::emit

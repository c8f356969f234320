#include "ir/value_tiles.h"

namespace parhelion::ir {

ValueTiles::ValueTiles(const Function& fn, const std::vector<Op>& launch_body) : fn_(fn) {
  walk(launch_body, [&](const Op& op) {
    if (op.result >= 0) defs_[op.result] = &op;
  });
}

const std::set<int>& ValueTiles::of(int v) const {
  if (auto it = memo_.find(v); it != memo_.end()) return it->second;
  std::set<int> tiles;
  if (auto d = defs_.find(v); d != defs_.end()) {
    const Op& op = *d->second;
    if (op.kind == OpKind::TileBegin || op.kind == OpKind::TileEnd || op.kind == OpKind::TileIndex ||
        op.kind == OpKind::TileId)
      for (int t = op.tile; t >= 0; t = fn_.tiles[t].parent) tiles.insert(t);
    std::vector<int> inputs = op.operands;
    for (const IndexItem& ix : op.index)
      if (ix.value >= 0) inputs.push_back(ix.value);
    for (int o : inputs) {
      const std::set<int>& more = of(o);
      tiles.insert(more.begin(), more.end());
    }
  }
  return memo_[v] = std::move(tiles);
}

}  // namespace parhelion::ir

// Jagged tiles' bounds: a tile over a range computed in the kernel indexes tensor dims whose
// sizes bound every range it can take (the run-time check enforces it), so that bound, known
// once the whole kernel is traced, is the tile's static range: the type rules, the block-size
// choices and the backends' plans all read it.
#include <algorithm>
#include <map>

#include "ir/ir.h"

namespace parhelion::ir {

void bound_jagged_tiles(Function& fn) {
  std::map<int, int64_t> bound;  // jagged tile -> the smallest dim it indexes
  walk(fn.body, [&](const Op& op) {
    if (op.kind != OpKind::Load && op.kind != OpKind::Store) return;
    const TensorInfo& t = fn.tensors[op.tensor];
    for (size_t d = 0; d < op.index.size(); ++d) {
      if (op.index[d].kind != IndexItem::Tile) continue;
      const int root = jagged_root(fn, op.index[d].tile);
      if (root < 0) continue;
      auto [it, fresh] = bound.try_emplace(root, t.shape[d]);
      if (!fresh) it->second = std::min(it->second, t.shape[d]);
    }
  });
  std::map<int, int> users;  // block-size symbol -> the tiles cut by it
  for (const TileInfo& t : fn.tiles) users[t.block]++;
  for (TileInfo& t : fn.tiles) {
    if (!t.is_jagged()) continue;
    auto it = bound.find(t.id);
    if (it == bound.end()) continue;
    t.begin = 0;
    t.end = it->second;
    BlockSize& b = fn.block_sizes[t.block];
    bool counted = false;
    for (const TensorInfo& x : fn.tensors)
      for (const BlockCount& c : x.counts) counted |= c.block == b.id;
    for (const TileInfo& u : fn.tiles) counted |= u.count_block == b.id;
    if (users[b.id] == 1 && b.fixed == 0 && !counted) b.extent = std::max<int64_t>(1, std::min(b.extent, t.end));
  }
  // A tile within another takes its range (tiles are numbered in trace order: parents first).
  for (TileInfo& t : fn.tiles)
    if (t.parent >= 0) {
      t.begin = fn.tiles[t.parent].begin;
      t.end = fn.tiles[t.parent].end;
    }
}

}  // namespace parhelion::ir

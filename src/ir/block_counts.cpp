// Sizes that are numbers of blocks (ph::num_blocks): bound when the config is. The Tile IR keeps
// each count's extent and block-size symbol, so that the same traced function can be bound to
// every config the tuner tries; every pass after the binding sees concrete shapes.
#include "ir/ir.h"
#include "parhelion/error.h"

namespace parhelion::ir {

namespace {
int64_t count_of(int64_t extent, const std::vector<int64_t>& block_size, int block) {
  const int64_t b = block_size.at(block);
  PH_CHECK(b > 0, "a block count over an unbound block size");
  return (extent + b - 1) / b;
}
}  // namespace

void resolve_block_counts(Function& fn, const std::vector<int64_t>& block_size) {
  for (TensorInfo& t : fn.tensors) {
    if (t.counts.empty()) continue;
    for (const BlockCount& c : t.counts) t.shape.at(c.dim) = count_of(c.extent, block_size, c.block);
    t.strides = contiguous_strides(t.shape);  // only allocations have counts: always contiguous
  }
  for (TileInfo& t : fn.tiles) {  // (a parent's id is smaller than its nested tiles')
    if (t.count_block >= 0) t.end = t.begin + count_of(t.count_extent, block_size, t.count_block);
    if (t.parent >= 0) {
      t.begin = fn.tiles.at(t.parent).begin;
      t.end = fn.tiles.at(t.parent).end;
    }
  }
}

bool has_block_counts(const Function& fn) {
  for (const TensorInfo& t : fn.tensors)
    if (!t.counts.empty()) return true;
  for (const TileInfo& t : fn.tiles)
    if (t.count_block >= 0) return true;
  return false;
}

}  // namespace parhelion::ir

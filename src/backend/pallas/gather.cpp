#include "backend/pallas/gather.h"

#include <algorithm>

#include "ir/printer.h"

namespace parhelion::backend::pallas {
namespace {

using ir::IndexItem;
using ir::Op;
using ir::OpKind;

// The launch and the innermost loop around `target` (nullptr: none).
struct Place {
  const Op* launch = nullptr;
  const Op* loop = nullptr;
};
bool locate(const std::vector<Op>& body, const Op* target, Place at, Place& out) {
  for (const Op& op : body) {
    if (&op == target) {
      out = at;
      return true;
    }
    Place in = at;
    if (op.kind == OpKind::Launch) in = {&op, nullptr};
    if (op.kind == OpKind::Loop) in.loop = &op;
    if (locate(op.body, target, in, out)) return true;
  }
  return false;
}

// (plan.h's pallas_unit_tile, before block sizes are bound: a unit tile's block is fixed.)
bool unit_tile(const ir::Function& fn, int tile) {
  const ir::TileInfo& t = fn.tiles[tile];
  return t.is_grid || fn.block_sizes[t.block].fixed == 1;
}

// A tile of the launch's own grid, over a range from 0 (a BlockSpec's index map computes its
// block from the grid alone).
bool launch_tile(const ir::Function& fn, const Op& launch, int tile) {
  const ir::TileInfo& t = fn.tiles[tile];
  return t.parent < 0 && t.begin == 0 &&
         std::find(launch.loop_tiles.begin(), launch.loop_tiles.end(), tile) != launch.loop_tiles.end();
}

const Op* def_in(const Op& launch, int v) {
  const Op* d = nullptr;
  ir::walk(launch.body, [&](const Op& o) {
    if (o.result == v) d = &o;
  });
  return d;
}

int gather_dim(const Op& load) {
  for (size_t d = 0; d < load.index.size(); ++d)
    if (load.index[d].kind == IndexItem::Gather) return static_cast<int>(d);
  return -1;
}

}  // namespace

const Op* dma_gather_index_load(const ir::Function& fn, const Op& load) {
  Place at;
  if (!locate(fn.body, &load, {}, at) || !at.launch) return nullptr;
  const int d = gather_dim(load);
  return d < 0 ? nullptr : def_in(*at.launch, load.index[d].value);
}

namespace {

// What dma gathers and scatters share: the rows of the leading dim of a table of rank 1 or 2,
// at grid level, through an index block read directly from an integer tensor.
std::string dma_rows_refusal(const ir::Function& fn, const Op& load) {
  Place at;
  if (!locate(fn.body, &load, {}, at) || !at.launch) return "it is not in a launch";
  // In an inner loop over a range of its own, each trip moves its rows at the trip's column
  // offset; a tile over the launch tile's block (ph::tile(outer)) is not emitted so.
  int loop_tile = -1;
  if (at.loop) {
    if (at.loop->loop_tiles.size() != 1 || fn.tiles[at.loop->loop_tiles[0]].parent >= 0 ||
        fn.tiles[at.loop->loop_tiles[0]].begin != 0)
      return "it is inside a loop over the launch tile's block or over a range that does not start at 0";
    loop_tile = at.loop->loop_tiles[0];
  }
  int gathers = 0;
  for (const IndexItem& ix : load.index) gathers += ix.kind == IndexItem::Gather;
  if (gathers != 1) return "it has more than one index block";
  if (load.index[0].kind != IndexItem::Gather)
    return "it gathers along dim " + std::to_string(gather_dim(load)) + ", not the table's leading dim (a row)";
  if (load.index.size() > 2) return "its table has more than 2 dims";
  for (size_t d = 1; d < load.index.size(); ++d) {
    const IndexItem& ix = load.index[d];
    if (ix.kind == IndexItem::All) continue;
    if (ix.kind != IndexItem::Tile || !(launch_tile(fn, *at.launch, ix.tile) || ix.tile == loop_tile) ||
        unit_tile(fn, ix.tile))
      return "its row dims are not indexed by the launch's tiles (or its inner loop's), with blocks above 1";
  }
  const Op* idx = def_in(*at.launch, load.index[0].value);
  const std::string computed =
      "its index block is a computed value, not a block loaded directly from an index tensor (ids[t]): a TPU "
      "kernel reads DMA row numbers as scalars from SMEM, and only a tensor's block can be placed there";
  if (!idx || idx->kind != OpKind::Load || ir::has_gather(*idx) || ir::is_masked(*idx)) return computed;
  Place iat;
  locate(fn.body, idx, {}, iat);
  if (iat.loop && iat.loop != at.loop) return computed + " (its index block is loaded inside another loop)";
  const ir::TensorInfo& it = fn.tensors[idx->tensor];
  if (it.dtype != DType::i32 && it.dtype != DType::i64) return computed + " (its index tensor is not i32 or i64)";
  bool written = false;
  ir::walk(at.launch->body, [&](const Op& o) { written |= o.kind == OpKind::Store && o.tensor == idx->tensor; });
  if (written) return "its index tensor " + it.name + " is written by the same launch";
  for (const IndexItem& ix : idx->index) {
    if (ix.kind == IndexItem::Slice || ix.kind == IndexItem::Gather) return computed;
    if (ix.kind == IndexItem::Tile && !launch_tile(fn, *at.launch, ix.tile)) return computed;
  }
  return "";
}

}  // namespace

std::string dma_gather_refusal(const ir::Function& fn, const Op& load) { return dma_rows_refusal(fn, load); }

std::string onehot_in_loop_refusal(const ir::Function& fn, const Op& load) {
  Place at;
  if (!locate(fn.body, &load, {}, at) || !at.loop) return "";
  for (const IndexItem& ix : load.index)
    if (ix.kind == IndexItem::Tile && (!at.launch || !launch_tile(fn, *at.launch, ix.tile)))
      return "its table is indexed by the inner loop's tile " + ir::tile_name(fn, ix.tile) +
             ", so the table's block would be resident in VMEM for every trip";
  return "";
}

std::string scatter_refusal(const ir::Function& fn, const Op& store) {
  if (ir::is_masked(store)) return "it is masked (ph::store): a row DMA cannot skip some of a row's elements";
  std::string why = dma_rows_refusal(fn, store);
  if (!why.empty()) return why;
  // Its output is in HBM and written row by row while the step runs: no other access to it.
  Place at;
  locate(fn.body, &store, {}, at);
  int others = 0;
  ir::walk(at.launch->body, [&](const Op& o) {
    others += (o.kind == OpKind::Load || o.kind == OpKind::Store) && o.tensor == store.tensor && &o != &store;
  });
  if (others) return "the launch also reads or writes " + fn.tensors[store.tensor].name + " elsewhere";
  return "";
}

std::vector<std::string> gather_strategies(const ir::Function& fn, const Op& load, int64_t vmem_bytes) {
  const ir::TensorInfo& t = fn.tensors[load.tensor];
  Place at;
  locate(fn.body, &load, {}, at);
  // (a one-hot gather holds the whole table in VMEM at grid level: in an inner loop, only a
  // table block that is the grid step's)
  const bool onehot = is_floating(t.dtype) && onehot_in_loop_refusal(fn, load).empty();
  const bool dma = dma_gather_refusal(fn, load).empty();
  // Neither: the one-hot choice stays, and the plan refuses it naming both reasons.
  if (!dma) return {kGatherOneHot};
  if (!onehot) return {kGatherDma};  // an integer table, or a table block that changes per trip
  const int d = gather_dim(load);
  int64_t rows = t.shape[d], bytes = dtype_size(t.dtype);
  for (size_t k = 0; k < t.shape.size(); ++k)
    if (static_cast<int>(k) != d) bytes *= t.shape[k];
  const bool small = rows <= kOneHotMaxRows && 2 * rows * bytes <= vmem_bytes / 8;
  if (small) return {kGatherOneHot, kGatherDma};
  return {kGatherDma, kGatherOneHot};
}

}  // namespace parhelion::backend::pallas

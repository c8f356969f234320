#include "backend/pallas/default_config.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "backend/pallas/plan.h"
#include "ir/ir.h"
#include "lower/config_space.h"
#include "lower/lower.h"
#include "parhelion/error.h"

namespace parhelion::backend::pallas {

namespace {

// Per block-size symbol: the dims of tensors written in place that a launch tile of it indexes
// in a grid-level block (directly, or through a tile over its block). A tensor is written in
// place when it has a value before the launch: an argument, a filled allocation, an earlier
// launch's output, a view (the emitter aliases it: check_ragged_blocks). Inner loops' own
// tiles and whole-tensor blocks (scatters, atomic updates at indices from data) take any block,
// but for the launch tiles beside an atomic update's index block (see below).
std::map<int, std::vector<int64_t>> in_place_dims(const ir::Function& fn) {
  std::map<int, std::vector<int64_t>> dims;
  std::set<int> valued;
  for (int i = 0; i < fn.num_tensor_params; ++i) valued.insert(i);
  auto root = [&](int t) { return fn.tensors[t].origin == ir::TensorInfo::View ? fn.tensors[t].root : t; };
  for (const ir::Op& op : fn.body) {
    if (op.kind == ir::OpKind::Alloc && op.has_fill) valued.insert(op.tensor);
    if (op.kind != ir::OpKind::Launch) continue;
    std::set<int> written;
    const ir::Op& launch = op;
    ir::walk(op.body, [&](const ir::Op& o) {
      if (o.kind != ir::OpKind::Store) return;
      written.insert(root(o.tensor));
      // An atomic update through an index block, and a store through a jagged tile, keep the
      // whole tensor in VMEM, and take a launch tile's block beside the rows only when it spans
      // the dim or divides it (plan.cpp, add_whole_atomic, check_whole_tensor_block): prefer
      // such blocks, as for an update in place.
      if ((ir::is_atomic(o) && ir::has_gather(o)) || ir::indexes_jagged_tile(fn, o)) {
        for (size_t d = 0; d < o.index.size(); ++d)
          if (o.index[d].kind == ir::IndexItem::Tile &&
              std::find(launch.loop_tiles.begin(), launch.loop_tiles.end(), o.index[d].tile) != launch.loop_tiles.end())
            dims[fn.tiles[o.index[d].tile].block].push_back(fn.tensors[o.tensor].shape[d]);
        return;
      }
      const bool view = fn.tensors[o.tensor].origin == ir::TensorInfo::View;
      if (!view && !valued.count(root(o.tensor))) return;
      std::set<int> block_tiles;
      if (ir::has_gather(o) || (ir::is_atomic(o) && !atomic_block_tiles(fn, launch, o, &block_tiles))) return;
      for (size_t d = 0; d < o.index.size(); ++d)
        if (o.index[d].kind == ir::IndexItem::Tile) {
          const ir::TileInfo& t = fn.tiles[o.index[d].tile];
          const int tile = t.parent >= 0 ? t.parent : t.id;
          if (std::find(launch.loop_tiles.begin(), launch.loop_tiles.end(), tile) != launch.loop_tiles.end())
            dims[fn.tiles[tile].block].push_back(fn.tensors[o.tensor].shape[d]);
        }
    });
    valued.insert(written.begin(), written.end());
  }
  return dims;
}

bool whole_in_place(const std::map<int, std::vector<int64_t>>& in_place, int block_id, int64_t block) {
  auto it = in_place.find(block_id);
  if (it == in_place.end()) return true;
  for (int64_t e : it->second)
    if (block < e && e % block != 0) return false;
  return true;
}

}  // namespace

// Pallas: every block as large as a legal choice up to 512 allows, halved (largest first) until
// the launch takes at most half of VMEM; inner loops pipelined (the target's first strategy).
Config default_config(const ir::Function& fn, const ConfigSpec& spec, const backend::Backend& backend) {
  Config c = lower::base_config(spec);
  c.block_sizes.clear();
  std::vector<size_t> pick(spec.block_sizes.size());
  const std::map<int, std::vector<int64_t>> in_place = in_place_dims(fn);
  for (size_t i = 0; i < spec.block_sizes.size(); ++i) {
    const auto& ch = spec.block_sizes[i].choices;
    // (A tile over a range shorter than the dims it indexes, e.g. ph::range(2, 5) of 5 rows,
    // can have no block that is a multiple of (8, 128) or the whole dim.)
    if (ch.empty())
      throw UserError(spec.block_sizes[i].defined_at +
                      ": the pallas backend has no legal TPU block for this loop: its blocks must be multiples of "
                      "(8, 128) or span whole dims of the tensors it indexes, and its range (extent " +
                      std::to_string(spec.block_sizes[i].extent) + ") allows neither");
    // A tile over ph::range(b, e) moves whole blocks at grid level and in pipelines: prefer a
    // block that divides b, when there is one. A tensor updated in place (an argument, a filled
    // allocation, an earlier launch's output: every atomic update's) takes no ragged last
    // block (check_ragged_blocks): prefer a block that divides its dims or spans them.
    auto fits_ranges = [&](int64_t block) {
      for (const ir::TileInfo& t : fn.tiles)
        if (t.block == spec.block_sizes[i].block_id && t.parent < 0 && t.begin % block != 0) return false;
      if (auto it = in_place.find(spec.block_sizes[i].block_id); it != in_place.end())
        for (int64_t e : it->second)
          if (block < e && e % block != 0) return false;
      return true;
    };
    bool any = false;
    for (int64_t b : ch) any |= fits_ranges(b);
    pick[i] = 0;
    for (size_t j = 0; j < ch.size(); ++j)
      if ((ch[j] <= 512 || j == 0) && (!any || fits_ranges(ch[j]) || !fits_ranges(ch[pick[i]]))) pick[i] = j;
    // (no fitting block up to 512, e.g. a lane dim of 1000 updated in place: the smallest above)
    for (size_t j = 0; any && !fits_ranges(ch[pick[i]]) && j < ch.size(); ++j)
      if (fits_ranges(ch[j])) pick[i] = j;
    c.block_sizes.push_back(ch[pick[i]]);
  }
  // A launch with atomic updates runs the grid dims their blocks depend on first, so that the
  // steps updating one block are consecutive (plan.h, atomic_legal_order; any other order is
  // refused).
  {
    const lower::BlockProgram bp = lower::plan(fn, c, backend);
    for (const lower::LaunchPlan& L : bp.launches)
      if (L.loop_order_knob >= 0)
        c.loop_orders[L.loop_order_knob] = atomic_legal_order(fn, *L.op, c.loop_orders[L.loop_order_knob]);
  }
  // Pipelined inner loops first; if the plan refuses one (an atomic update in a pipelined loop,
  // a loop nested in one), every inner loop falls back to resident, so that the default is legal.
  auto legal = [&](const Config& cfg) {
    try {
      plan_pallas(lower::plan(fn, cfg, backend));
      return true;
    } catch (const UserError&) {
      return false;
    }
  };
  if (!legal(c))
    for (auto& il : c.inner_loops) il.strategy = lower::strategy_name(lower::Strategy::Resident);
  // Still refused (a block beside rows held whole in VMEM that cuts its dim unevenly, where the
  // preferences above found none): each block size in turn takes its other choices, the nearest
  // first (larger before smaller), until the plan takes the config. A default is legal whenever
  // one block size stands in the way.
  for (size_t i = 0; i < pick.size() && !legal(c); ++i) {
    const auto& ch = spec.block_sizes[i].choices;
    std::vector<size_t> order;
    for (size_t j = 0; j < ch.size(); ++j)
      if (j != pick[i]) order.push_back(j);
    auto distance = [&](size_t j) { return j > pick[i] ? 2 * (j - pick[i]) - 1 : 2 * (pick[i] - j); };
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return distance(a) < distance(b); });
    for (size_t j : order) {
      Config t = c;
      t.block_sizes[i] = ch[j];
      if (!legal(t)) continue;
      c = t;
      pick[i] = j;
      break;
    }
  }
  auto vmem = [&] {
    int64_t most = 0;
    for (const PallasLaunch& pl : plan_pallas(lower::plan(fn, c, backend))) most = std::max(most, pl.vmem_bytes);
    return most;
  };
  // (a kernel without tunable blocks has nothing to shrink: check() says whether it fits; a
  // legal config stays legal, each step checked, so legality is planned once more per step)
  const bool was_legal = legal(c);
  for (int round = 0; round < 64 && !pick.empty() && vmem() > backend.machine().fast_memory_bytes / 2; ++round) {
    size_t big = 0;
    for (size_t i = 0; i < pick.size(); ++i)
      if (pick[i] > 0 && (pick[big] == 0 || c.block_sizes[i] > c.block_sizes[big])) big = i;
    if (pick[big] == 0) break;
    // (down to the next block that keeps an in-place update's blocks whole, when there is one,
    // and that the plan takes; none: this block size stays)
    const auto& ch = spec.block_sizes[big].choices;
    size_t next = pick[big] - 1;
    for (size_t j = pick[big]; j-- > 0;)
      if (whole_in_place(in_place, spec.block_sizes[big].block_id, ch[j])) {
        next = j;
        break;
      }
    Config t = c;
    t.block_sizes[big] = ch[next];
    if (was_legal && !legal(t)) break;
    c = t;
    pick[big] = next;
  }
  return c;
}

}  // namespace parhelion::backend::pallas

#include "lower/knobs.h"

#include "ir/collectives.h"

#include <algorithm>
#include <set>

#include "backend/backend.h"
#include "ir/collectives.h"
#include "ir/views.h"
#include "lower/cache_hints.h"

namespace parhelion::lower {
namespace {

using ir::Op;
using ir::OpKind;

template <class T>
int position(const std::vector<T>& v, const T& x) {
  auto it = std::find(v.begin(), v.end(), x);
  return it == v.end() ? -1 : static_cast<int>(it - v.begin());
}

// The loads and stores directly in `body` (not in nested loops) that index `tile` exactly once
// and whose block the loop's strategy can move: loads of tensors the launch does not write
// (a staged copy of a tensor being written would go stale; `written` holds roots), and with `every_block` also its
// stores and the loads of written tensors. A block whose scalar index is computed inside the
// loop (a row number loaded per trip) cannot be moved: its copy is made before the trip
// (resident: before the loop) computes the index.
void collect_movable(const ir::Function& fn, const std::vector<Op>& body, int tile, const std::set<int>& written,
                     bool every_block, const std::set<int>& defined_in_loop, std::vector<const Op*>& out) {
  for (const Op& op : body) {
    if (op.kind == OpKind::Loop) continue;
    bool invariant_index = true;
    for (const ir::IndexItem& ix : op.index)
      if (ix.has_value() && defined_in_loop.count(ix.value)) invariant_index = false;
    if (!invariant_index) continue;
    // A gather or a masked access has no block to copy: it is read (written) in place.
    if (ir::has_gather(op) || ir::is_masked(op)) continue;
    if ((op.kind == OpKind::Load && (every_block || !written.count(ir::root_of(fn, op.tensor)))) ||
        (every_block && op.kind == OpKind::Store)) {
      int uses = 0;
      for (const ir::IndexItem& ix : op.index) uses += ix.kind == ir::IndexItem::Tile && ix.tile == tile;
      // A grid loop's blocks are single elements: not worth moving, unless the target
      // computes only on moved blocks (a TPU: every block must reach VMEM).
      if (uses == 1 && (every_block || !fn.tiles[tile].is_grid)) out.push_back(&op);
    }
    collect_movable(fn, op.body, tile, written, every_block, defined_in_loop, out);
  }
}

// Whether `loop` lies inside another loop of `body` (a launch's body).
bool nested_in_loop(const std::vector<Op>& body, const Op& loop) {
  bool nested = false;
  for (const Op& op : body) {
    if (op.kind != OpKind::Loop || &op == &loop) continue;
    ir::walk(op.body, [&](const Op& inner) { nested |= &inner == &loop; });
  }
  for (const Op& op : body)
    if (op.kind == OpKind::If) nested |= nested_in_loop(op.body, loop);
  return nested;
}

// Whether `loop` is the only loop in `launch` and a direct child of its body.
bool sole_loop(const Op& launch, const Op& loop) {
  int loops = 0;
  ir::walk(launch.body, [&](const Op& op) { loops += op.kind == OpKind::Loop; });
  bool top = false;
  for (const Op& op : launch.body) top |= &op == &loop;
  return loops == 1 && top;
}

std::vector<InnerLoopSite> inner_loop_sites(const ir::Function& fn, bool every_block) {
  std::vector<InnerLoopSite> sites;
  for (const Op& launch : fn.body) {
    if (launch.kind != OpKind::Launch) continue;
    std::set<int> written;
    ir::walk(launch.body, [&](const Op& op) {
      if (op.kind == OpKind::Store) written.insert(ir::root_of(fn, op.tensor));  // (a view writes its root)
    });
    // Copies (of any launch: a device ahead of this one may be making them) land in a tensor
    // while this one runs: never staged.
    ir::walk(fn.body, [&](const Op& op) {
      if (op.kind == OpKind::CopyStart) written.insert(ir::root_of(fn, op.tensor));
    });
    ir::walk(launch.body, [&](const Op& op) {
      if (op.kind != OpKind::Loop || op.loop_tiles.size() != 1) return;
      // A loop over an enclosing tile's block streams: its range moves with that block, and
      // the staging plans (a slot per trip, a resident copy of a static extent) assume a fixed one.
      // So does a jagged loop: its range is known only when it is entered.
      if (fn.tiles[op.loop_tiles[0]].parent >= 0 || fn.tiles[op.loop_tiles[0]].is_jagged()) return;
      InnerLoopSite s{
          &op, &launch, {}, nested_in_loop(launch.body, op), sole_loop(launch, op), ir::has_collectives(launch.body)};
      std::set<int> defined_in_loop;
      ir::walk(op.body, [&](const Op& inner) {
        // (On a target that moves every block, a constant index is the same on every trip,
        // wherever it is written; the cpu's staging does not take scalar indices.)
        if (inner.result >= 0 && !(every_block && inner.kind == OpKind::Constant)) defined_in_loop.insert(inner.result);
      });
      collect_movable(fn, op.body, op.loop_tiles[0], written, every_block, defined_in_loop, s.blocks);
      if (!s.blocks.empty()) sites.push_back(std::move(s));
    });
  }
  return sites;
}

}  // namespace

std::vector<AtomicSite> atomic_sites(const ir::Function& fn, const Op& launch) {
  std::vector<AtomicSite> sites;
  ir::walk(launch.body, [&](const Op& op) {
    if (!ir::is_atomic(op)) return;
    const int root = ir::root_of(fn, op.tensor);
    auto it = std::find_if(sites.begin(), sites.end(), [&](const AtomicSite& s) { return s.tensor == root; });
    if (it == sites.end()) it = sites.insert(sites.end(), AtomicSite{&launch, &op, root, false});
    it->through_view |= op.tensor != root;
  });
  return sites;
}

int KnobTable::block_size_knob(int block_id) const { return position(block_sizes, block_id); }
int KnobTable::loop_order_knob(const Op& launch) const { return position(loop_orders, &launch); }
int KnobTable::micro_kernel_knob(const Op& dot) const { return position(micro_kernels, &dot); }
int KnobTable::gather_knob(const Op& load) const { return position(gathers, &load); }
int KnobTable::launch_group_knob(const Op& launch) const { return position(launch_groups, &launch); }
int KnobTable::cache_hint_knob(const Op& launch) const { return position(cache_hints, &launch); }
int KnobTable::atomic_knob(const Op& launch, int root_tensor) const {
  for (size_t i = 0; i < atomics.size(); ++i)
    if (atomics[i].launch == &launch && atomics[i].tensor == root_tensor) return static_cast<int>(i);
  return -1;
}
int KnobTable::inner_loop_knob(const Op& loop) const {
  for (size_t i = 0; i < inner_loops.size(); ++i)
    if (inner_loops[i].loop == &loop) return static_cast<int>(i);
  return -1;
}

KnobTable derive_knobs(const ir::Function& fn, const backend::Capabilities& caps) {
  KnobTable t;
  for (const ir::BlockSize& b : fn.block_sizes)
    if (b.fixed == 0) t.block_sizes.push_back(b.id);
  // (a launch with collectives runs its steps in the order of its tiles: no order knob)
  for (const Op& op : fn.body)
    if (op.kind == OpKind::Launch && op.loop_tiles.size() >= 2 && !ir::has_collectives(op.body))
      t.loop_orders.push_back(&op);
  ir::walk(fn.body, [&](const Op& op) {
    if (op.kind == OpKind::Dot) t.micro_kernels.push_back(&op);
  });
  t.inner_loops = inner_loop_sites(fn, caps.inner_loops_move_every_block);
  if (caps.gathers_have_strategies)
    ir::walk(fn.body, [&](const Op& op) {
      if (op.kind == OpKind::Load && ir::has_gather(op)) t.gathers.push_back(&op);
    });
  if (caps.atomics_have_strategies)
    for (const Op& op : fn.body)
      if (op.kind == OpKind::Launch)
        for (const AtomicSite& s : atomic_sites(fn, op)) t.atomics.push_back(s);
  if (!caps.launch_groups.empty())
    for (const Op& op : fn.body) {
      if (op.kind != OpKind::Launch || op.loop_tiles.size() < 2 || ir::has_collectives(op.body)) continue;
      bool dot = false;
      ir::walk(op.body, [&](const Op& o) { dot |= o.kind == OpKind::Dot; });
      if (dot) t.launch_groups.push_back(&op);
    }
  if (caps.cache_hints)
    for (const Op& op : fn.body)
      if (op.kind == OpKind::Launch && has_cache_hint_sites(fn, op)) t.cache_hints.push_back(&op);
  return t;
}

}  // namespace parhelion::lower

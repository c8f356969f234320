#include "backend/pallas/plan.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "backend/pallas/gather.h"
#include "backend/pallas/tpu.h"
#include "ir/collectives.h"
#include "ir/printer.h"
#include "ir/type_rules.h"
#include "ir/views.h"
#include "parhelion/error.h"
#include "runtime/format_bytes.h"

namespace parhelion::backend::pallas {

using ir::Op;
using ir::OpKind;
using lower::BlockProgram;
using lower::InnerLoop;
using lower::LaunchPlan;
using lower::Strategy;

std::string scalar_index_map(const BlockProgram& p, const ir::Op& launch, const ir::Op* def) {
  if (!def) return "";
  if (def->kind == OpKind::Constant) return std::to_string(static_cast<int64_t>(def->number));
  const bool of_launch_tile =
      (def->kind == OpKind::TileId || def->kind == OpKind::TileBegin) &&
      std::find(launch.loop_tiles.begin(), launch.loop_tiles.end(), def->tile) != launch.loop_tiles.end();
  if (!of_launch_tile) return "";
  const std::string g = "g_" + ir::tile_name(*p.fn, def->tile);
  if (def->kind == OpKind::TileId) return g;
  // A squeezed dim's block index is an element index: the block's first element.
  const int64_t b = p.block_of_tile(def->tile), begin = p.fn->tiles[def->tile].begin;
  std::string e = b == 1 ? g : g + " * " + std::to_string(b);
  return begin == 0 ? e : e + " + " + std::to_string(begin);
}

bool writes_every_block(const BlockProgram& p, const PallasLaunch& pl, const PallasSlot& s) {
  if (s.mode == PallasSlot::Hbm) return false;                // (accesses and copies write regions of it, in place)
  if (!s.written || s.mode == PallasSlot::Dma) return false;  // (a scatter writes the rows it names)
  if (s.whole_tensor) return true;
  const ir::Function& fn = *p.fn;
  const ir::TensorInfo& t = fn.tensors[s.tensor];
  const std::vector<int>& launch = pl.plan->op->loop_tiles;
  for (size_t d = 0; d < s.first->index.size(); ++d) {
    const ir::IndexItem& ix = s.first->index[d];
    if (ix.kind == ir::IndexItem::All || ix.kind == ir::IndexItem::Slice) continue;
    if (ix.kind != ir::IndexItem::Tile) return false;
    const ir::TileInfo& ti = fn.tiles[ix.tile];
    const bool moves = std::find(launch.begin(), launch.end(), ix.tile) != launch.end() || ix.tile == s.loop_tile ||
                       std::count(s.trip_tiles.begin(), s.trip_tiles.end(), ix.tile) > 0;
    if (!moves || ti.parent >= 0 || ti.is_jagged() || ti.begin != 0 || ti.end != t.shape[d]) return false;
  }
  return true;
}

bool pallas_unit_tile(const BlockProgram& p, int tile) {
  const ir::TileInfo& t = p.fn->tiles[tile];
  return t.is_grid || p.fn->block_sizes[t.block].fixed == 1;
}

const char* mode_name(PallasSlot::Mode m) {
  switch (m) {
    case PallasSlot::Grid:
      return "grid";
    case PallasSlot::Resident:
      return "resident";
    case PallasSlot::Pipeline:
      return "pipeline";
    case PallasSlot::Dma:
      return "dma";
    case PallasSlot::Smem:
      return "smem";
    case PallasSlot::Hbm:
      return "hbm";
    case PallasSlot::Stream:
      return "stream";
  }
  return "?";
}

bool atomic_block_tiles(const ir::Function& fn, const Op& launch, const Op& update, std::set<int>* tiles) {
  auto launch_tile = [&](int t) {
    return std::find(launch.loop_tiles.begin(), launch.loop_tiles.end(), t) != launch.loop_tiles.end();
  };
  if (ir::has_gather(update) || ir::indexes_jagged_tile(fn, update)) return false;
  for (const ir::IndexItem& ix : update.index) {
    if (ix.kind == ir::IndexItem::Tile) {
      // (a ph::tile(outer) trip is a slice of its launch tile's block; an inner loop's own tile
      // is not a grid dim: its block spans the loop, or moves per trip)
      const int t = fn.tiles[ix.tile].parent >= 0 ? fn.tiles[ix.tile].parent : ix.tile;
      if (launch_tile(t)) tiles->insert(t);
    } else if (ix.kind == ir::IndexItem::Scalar) {
      const Op* d = nullptr;
      ir::walk(launch.body, [&](const Op& o) {
        if (o.result == ix.value) d = &o;
      });
      if (d && d->kind == OpKind::Constant) continue;
      if (d && (d->kind == OpKind::TileId || d->kind == OpKind::TileBegin) && launch_tile(d->tile)) {
        tiles->insert(d->tile);
        continue;
      }
      return false;  // an integer computed in the kernel: no index map can compute it
    }
    // (`all` and slices: the whole dim is the block, at block index 0)
  }
  return true;
}

std::vector<int> atomic_legal_order(const ir::Function& fn, const Op& launch, const std::vector<int>& order) {
  std::set<int> dep;
  ir::walk(launch.body, [&](const Op& o) {
    std::set<int> t;
    if (ir::is_atomic(o) && atomic_block_tiles(fn, launch, o, &t)) dep.insert(t.begin(), t.end());
  });
  std::vector<int> out;
  for (int pass = 0; pass < 2; ++pass)
    for (int i : order)
      if (dep.count(launch.loop_tiles[i]) == (pass == 0 ? 1u : 0u)) out.push_back(i);
  return out;
}

namespace {

// The same tensor dims indexed by the same tiles (a slot's block is shaped by its tiles).
bool same_tiles(const std::vector<ir::IndexItem>& a, const std::vector<ir::IndexItem>& b) {
  if (a.size() != b.size()) return false;
  for (size_t d = 0; d < a.size(); ++d) {
    if (a[d].kind != b[d].kind || a[d].tile != b[d].tile) return false;
    // A scalar index selects the block (its index map); a slice is cut from a whole-dim block.
    if (a[d].kind == ir::IndexItem::Scalar && a[d].value != b[d].value) return false;
  }
  return true;
}

int64_t vmem_dtype_bytes(DType d) { return d == DType::i64 ? 4 : dtype_size(d); }

class Planner {
 public:
  Planner(const BlockProgram& p, const LaunchPlan& L) : p_(p), fn_(*p.fn), L_(L) {}

  PallasLaunch run() {
    out_.index = L_.index;
    out_.plan = &L_;
    out_.grid = L_.grid;
    find_grid_loop();
    for (const lower::GridDim& g : out_.grid) out_.total_steps *= g.steps;
    find_landing();
    visit(L_.op->body, nullptr);
    plan_copy_sources();
    check_outputs();
    if (out_.grid_loop) plan_grid_loop();
    out_.row_stats = plan_row_stats(p_, *L_.op);
    plan_order();
    single_buffer_resident();
    share_resident_copies();
    plan_rolled_loops();
    account();
    return std::move(out_);
  }

 private:
  int in_when_ = 0;  // the depth of ph::when regions being visited
  void unsupported(const Op& op, const std::string& what) {
    throw UserError(op.loc.str() + ": the pallas backend does not support " + what + " yet (kernel " + fn_.name + ")");
  }

  void visit(const std::vector<Op>& body, const Op* loop) {
    for (const Op& op : body) {
      if (op.kind == OpKind::Loop) {
        if (op.loop_tiles.size() != 1) unsupported(op, "inner loops over several tiles at once");
        const ir::TileInfo& t = fn_.tiles[op.loop_tiles[0]];
        if (loop) check_nested_loop(op, *loop);
        if (t.is_jagged()) check_jagged_loop(op);
        if (t.parent >= 0) {
          // A trace-time loop over the launch tile's block in VMEM: its blocks are slices of
          // the grid-level blocks, which must hold whole inner blocks.
          if (std::find(L_.op->loop_tiles.begin(), L_.op->loop_tiles.end(), t.parent) == L_.op->loop_tiles.end())
            unsupported(op, "a tile over the block of a tile that is not the launch's (ph::tile(outer))");
          if (pallas_unit_tile(p_, t.parent) || pallas_unit_tile(p_, t.id))
            unsupported(op, "ph::tile(outer) with an outer or inner block of 1");
          visit(op.body, nullptr);
          continue;
        }
        open_loops_.push_back(&op);
        visit(op.body, &op);
        open_loops_.pop_back();
        continue;
      }
      if (op.kind == OpKind::If) {  // a pl.when region: its accesses belong to the enclosing loop
        ++in_when_;
        visit(op.body, loop);
        --in_when_;
        continue;
      }
      if (op.kind == OpKind::Load || op.kind == OpKind::Store) add(op, loop);
      if (op.kind == OpKind::Dot) check_dot(op);
      if (op.kind == OpKind::CopyStart) add_copy(op);
      if (op.kind == OpKind::CopyWait) {
        // (a pallas_call's DMA semaphores are its own: a copy is waited for in the launch that
        // starts it)
        bool started = false;
        ir::walk(L_.op->body, [&](const Op& o) { started |= o.kind == OpKind::CopyStart && o.channel == op.channel; });
        if (!started) unsupported(op, "waiting for a copy started in another launch");
      }
      if (op.kind == OpKind::Barrier) {
        auto& groups = out_.comm.barrier_groups;
        if (std::find(groups.begin(), groups.end(), op.dims) == groups.end()) groups.push_back(op.dims);
      }
    }
  }

  // --- a launch with collectives (plan.h, LaunchCollectives) ---

  // The tensors copies land in during this launch stay in HBM (a peer writes them there), each
  // access a DMA through VMEM (add_hbm). A copy's destination is the tensor itself, not a view
  // of it (whose BlockSpec would be another array than the one the peer writes). In a launch of
  // several grid steps, so do the tensors copies send in place: a copy may be waited for at a
  // later step, when the pipeline has refilled a VMEM block with the next step's (the language
  // lets the copy read the loaded region until its wait_send, which HBM keeps).
  void find_landing() {
    out_.comm.any = ir::has_collectives(L_.op->body);
    ir::walk(L_.op->body, [&](const Op& op) {
      if (op.kind != OpKind::CopyStart) return;
      if (fn_.tensors[op.tensor].origin == ir::TensorInfo::View)
        unsupported(op, "a copy into a view (" + fn_.tensors[op.tensor].name + "): copy into the tensor it views");
      out_.comm.landing.insert(op.tensor);
      out_.comm.in_hbm.insert(op.tensor);
      const Op* load = ir::copy_block_load(fn_, op);
      if (load && out_.total_steps > 1) out_.comm.in_hbm.insert(ir::root_of(fn_, load->tensor));
    });
  }
  std::string in_hbm_why(int tensor) const {
    return out_.comm.landing.count(tensor) ? "copies land in it" : "copies send from it across grid steps";
  }

  // A load or store of a landing tensor: one slot in HBM for the tensor, and a VMEM buffer of
  // the access's region. The region must be whole blocks at offsets the emitter can name: a
  // launch tile's block or a trace-time loop's trip (dividing its range), a slice, an integer.
  void add_hbm(const Op& op) {
    const ir::TensorInfo& t = fn_.tensors[op.tensor];
    if (ir::is_atomic(op))
      unsupported(op, "an atomic update of " + t.name + ", kept in HBM (" + in_hbm_why(op.tensor) + ")");
    // (a scalar mask moves the region or not; an elementwise one would write back elements it
    // leaves, where a copy may be landing)
    if (op.kind == OpKind::Store && ir::is_masked(op) && fn_.type_of(op.operands[1]).rank() != 0)
      unsupported(op, "an elementwise-masked store into " + t.name + ", kept in HBM (" + in_hbm_why(op.tensor) +
                          "): its region is DMAed whole; mask with a scalar, or store into another tensor");
    check_whole_blocks(op);
    const int slot = hbm_slot(op);
    (op.kind == OpKind::Load ? out_.slots[slot].read : out_.slots[slot].written) = true;
    out_.slot_of[&op] = slot;
    ir::Type region;
    ir::load_type(fn_, op.tensor, op.index, &region);
    region.dtype = t.dtype;
    const int64_t bytes = value_bytes(region);
    out_.comm.hbm_of[&op] = static_cast<int>(out_.comm.hbm.size());
    out_.comm.hbm.push_back({&op, bytes});
    out_.comm.vmem_bytes += bytes;
  }

  // A region of a landing tensor (an access, or a copy's destination) is DMAed whole: its tiles
  // must be a launch tile's or a trace-time loop's whose blocks divide their range.
  void check_whole_blocks(const Op& op) {
    const ir::TensorInfo& t = fn_.tensors[op.tensor];
    const std::string what = op.kind == OpKind::CopyStart ? "a copy into " : "an access of ";
    const std::string why = " (kept in HBM: " + in_hbm_why(op.tensor) + ")";
    ir::Type region;
    ir::load_type(fn_, op.tensor, op.index, &region);
    bool kept = false;  // (a dim that stays in the region: Mosaic has no 0-d VMEM buffer to DMA through)
    for (const ir::Dim& d : region.shape) kept |= !(d.kind == ir::Dim::Tile && pallas_unit_tile(p_, d.tile));
    if (!kept) unsupported(op, what + "a single element of " + t.name + why + ": DMA a block of it");
    for (const ir::IndexItem& ix : op.index) {
      if (ix.kind == ir::IndexItem::Gather)
        unsupported(op, "a gather or scatter on a tensor copies land in (" + t.name + ")");
      if (ix.kind != ir::IndexItem::Tile) continue;
      const ir::TileInfo& ti = fn_.tiles[ix.tile];
      if (ti.parent >= 0 || ti.is_jagged())
        unsupported(op, what + t.name + why + " through a tile over another tile's block, or a jagged tile");
      if (!pallas_unit_tile(p_, ix.tile) && ti.extent() % std::min(p_.block_of_tile(ix.tile), ti.extent()) != 0)
        unsupported(op, what + t.name + why + " through a ragged last block of " + ir::tile_name(fn_, ix.tile) + " (" +
                            std::to_string(ti.extent()) + " elements in blocks of " +
                            std::to_string(p_.block_of_tile(ix.tile)) +
                            "): it is DMAed in whole blocks; use a block size that divides it");
    }
  }

  // The slot of a tensor kept in HBM (one per tensor: its block is the whole tensor, and each
  // access or copy names its region in it), made at its first access or copy.
  int hbm_slot(const Op& first) {
    for (size_t k = 0; k < out_.slots.size(); ++k)
      if (out_.slots[k].tensor == first.tensor && out_.slots[k].mode == PallasSlot::Hbm) return static_cast<int>(k);
    PallasSlot s;
    s.tensor = first.tensor;
    s.first = &first;
    s.mode = PallasSlot::Hbm;
    s.block = fn_.tensors[first.tensor].shape;
    s.written = out_.comm.landing.count(first.tensor) > 0;  // (copies land in it)
    out_.slots.push_back(s);
    return static_cast<int>(out_.slots.size()) - 1;
  }

  void add_copy(const Op& op) {
    hbm_slot(op);  // (the destination's, even when nothing else accesses it)
    check_whole_blocks(op);
    out_.comm.copy_of[&op] = static_cast<int>(out_.comm.copies.size());
    out_.comm.copies.push_back({&op, nullptr, 0});
  }

  // Each copy's source: the block's unmasked load, copied from where it is (HBM, or its VMEM
  // block), or else a staging buffer (plan.h, CopySource).
  void plan_copy_sources() {
    for (CopySource& c : out_.comm.copies) {
      if (const Op* d = ir::copy_block_load(fn_, *c.op)) {
        const PallasSlot::Mode m = out_.slots[out_.slot_of.at(d)].mode;
        if (m != PallasSlot::Hbm && m != PallasSlot::Grid && m != PallasSlot::Resident)
          unsupported(*c.op, std::string("a copy of a block loaded through ") + mode_name(m) +
                                 " (a block loaded unmasked is sent in place: copy one loaded from a tensor in "
                                 "HBM or VMEM)");
        c.load = d;
        continue;
      }
      ir::Type block = fn_.type_of(c.op->operands[0]);
      block.dtype = fn_.tensors[c.op->tensor].dtype;  // (staged in the destination's dtype)
      c.bytes = value_bytes(block);
      out_.comm.vmem_bytes += c.bytes;
    }
  }

  // A loop inside another inner loop's trip (a K loop in a jagged loop over a group's rows): a
  // trace-time loop of static slices (the backend offers nested loops only `resident`) of
  // blocks that hold the whole extent of both loops' tiles, so the enclosing loop must keep its
  // blocks whole in VMEM too (jagged or resident); an emit_pipeline has one trip's block only.
  void check_nested_loop(const Op& op, const Op& enclosing) {
    const ir::TileInfo& t = fn_.tiles[op.loop_tiles[0]];
    if (t.is_jagged() || t.parent >= 0)
      unsupported(
          op, std::string(t.is_jagged() ? "a jagged loop" : "a ph::tile(outer) loop") + " inside another inner loop");
    const ir::TileInfo& outer = fn_.tiles[enclosing.loop_tiles[0]];
    if (outer.parent >= 0) unsupported(op, "an inner loop inside a ph::tile(outer) loop");
    if (const InnerLoop* il = L_.inner_loop(outer.id); !outer.is_jagged() && il && il->strategy == Strategy::Pipeline)
      throw UserError(op.loc.str() + ": the pallas backend cannot nest this loop in the pipelined loop over " +
                      ir::tile_name(fn_, outer.id) + " at " + enclosing.loc.str() + " (config inner_loops[" +
                      std::to_string(il->knob) +
                      "] = pipeline): emit_pipeline holds one trip's block, and a nested loop slices blocks that "
                      "span the enclosing loop's extent; give that loop the strategy \"resident\" (kernel " +
                      fn_.name + ")");
  }

  // --- an inner loop on the grid (strategy `grid`) -------------------------------------------
  // The launch's sole loop (the config space offers `grid` nowhere else) becomes the last grid
  // dim: one trip per step, its trips' blocks the BlockSpecs of the launch's own pipeline.
  void find_grid_loop() {
    for (const Op& op : L_.op->body) {
      if (op.kind != OpKind::Loop) continue;
      const InnerLoop* il = L_.inner_loop(op.loop_tiles[0]);
      if (!il || il->strategy != Strategy::Grid) continue;
      out_.grid_loop = &op;
      out_.grid.push_back({il->tile, il->begin, il->extent, il->block, il->trips});
    }
    int grid_loops = 0;
    ir::walk(L_.op->body, [&](const Op& op) {
      const InnerLoop* il = op.kind == OpKind::Loop ? L_.inner_loop(op.loop_tiles[0]) : nullptr;
      grid_loops += il && il->strategy == Strategy::Grid;
    });
    PH_CHECK(grid_loops == (out_.grid_loop ? 1 : 0), "a grid-strategy loop that is not its launch's sole loop");
  }

  [[noreturn]] void grid_loop_error(const Op& at, const std::string& why) {
    const InnerLoop* il = L_.inner_loop(out_.grid_loop->loop_tiles[0]);
    throw UserError(at.loc.str() + ": the pallas backend cannot run the loop over " + ir::tile_name(fn_, il->tile) +
                    " at " + out_.grid_loop->loc.str() + " on the grid (config inner_loops[" +
                    std::to_string(il->knob) + "] = grid): " + why +
                    "; give that loop the strategy \"pipeline\" or \"resident\" (kernel " + fn_.name + ")");
  }

  // The blocks: each step's own (a trip's) or, for the launch tiles' blocks, kept across the
  // trips of one outer block. What a grid step cannot keep apart from the next is refused: a
  // block read-modify-written by several steps in order (atomics, whole tensors), SMEM stores
  // and row DMAs. Then the body's ops before the loop are split into those that run at every
  // step and those that run at the first trip only (plan.h, first_trip_ops).
  void plan_grid_loop() {
    const int tile = out_.grid_loop->loop_tiles[0];
    const int pos = static_cast<int>(out_.grid.size()) - 1;
    for (PallasSlot& s : out_.slots) {
      if (s.whole_tensor || s.atomic != ir::AtomicFn::none)
        grid_loop_error(*s.first,
                        "its blocks would be updated in order across the launch (" + fn_.tensors[s.tensor].name + ")");
      if (s.mode == PallasSlot::Smem || s.mode == PallasSlot::Dma)
        grid_loop_error(*s.first, std::string("a ") + mode_name(s.mode) + " access of " + fn_.tensors[s.tensor].name +
                                      " in a launch whose steps are trips");
      bool by_loop = false;
      for (const ir::IndexItem& ix : s.first->index) by_loop |= ix.kind == ir::IndexItem::Tile && ix.tile == tile;
      // A launch-level block that keeps its prior contents takes them at the first trip only:
      // later trips see what the earlier ones stored.
      if (s.keeps_prior && !by_loop) s.revisit_dims = {pos};
    }
    std::vector<const Op*> before;
    for (const Op& op : L_.op->body) {
      if (&op == out_.grid_loop) break;
      before.push_back(&op);
    }
    // Every value an op reads, in its regions too.
    auto uses = [](const Op& op, const auto& f) {
      std::vector<const Op*> stack{&op};
      while (!stack.empty()) {
        const Op* o = stack.back();
        stack.pop_back();
        for (int v : o->operands) f(v);
        for (const ir::IndexItem& ix : o->index)
          if (ix.has_value()) f(ix.value);
        for (const Op& b : o->body) stack.push_back(&b);
      }
    };
    // First-trip ops: effects (stores, the state's set-up), reads of the state, and what they feed.
    std::map<int, const Op*> first_values;
    for (const Op* op : before) {
      bool first = op->kind == OpKind::Store || op->kind == OpKind::VarDecl || op->kind == OpKind::VarSet ||
                   op->kind == OpKind::VarGet || !op->body.empty();
      uses(*op, [&](int v) { first |= first_values.count(v) > 0; });
      if (!first) continue;
      out_.first_trip_ops.insert(op);
      if (op->result >= 0) first_values[op->result] = op;
    }
    // The loop's body and the ops after it run at other steps than the first trip's ops.
    bool after = false;
    std::vector<const Op*> later;
    for (const Op& op : L_.op->body) {
      if (after || &op == out_.grid_loop) later.push_back(&op);
      after |= &op == out_.grid_loop;
    }
    std::set<int> needed;
    for (const Op* op : later)
      uses(*op, [&](int v) {
        if (auto f = first_values.find(v); f != first_values.end())
          grid_loop_error(*op, "it reads a value computed at " + f->second->loc.str() +
                                   " from the loop's state or after a store, which runs at the first trip only");
        needed.insert(v);
      });
    // A pure op before the loop that only first-trip ops read runs there too (a Var's initial
    // block is not rebuilt at every step).
    for (auto it = before.rbegin(); it != before.rend(); ++it) {
      const Op* op = *it;
      if (out_.first_trip_ops.count(op)) continue;
      if (op->result >= 0 && needed.count(op->result)) {
        uses(*op, [&](int v) { needed.insert(v); });
        continue;
      }
      out_.first_trip_ops.insert(op);
    }
  }

  // Whether a load in a jagged loop streams its rows (PallasSlot::Stream) instead of holding the
  // whole dim in VMEM: it reads through the loop's own tile (no enclosing loop's), its other
  // dims are whole, constant or a launch tile's blocks that divide the dim (each trip's DMA
  // copies one whole block: nothing past the tensor's end), the loop is bounded inside the dim
  // (a trip's b rows start at min(off, bound - b): codegen.cpp, jagged_loop), and the launch
  // writes nothing of the tensor (a copy in VMEM would be stale).
  bool streams_jagged_rows(const Op& op, int loop_tile, const std::vector<int>& trip_tiles) {
    // (a launch with collectives keeps its blocks resident: a copy may send the loaded block in
    // place, which the next trip's DMA would overwrite)
    if (op.kind != OpKind::Load || !trip_tiles.empty() || ir::has_gather(op) || out_.comm.any) return false;
    const ir::TensorInfo& t = fn_.tensors[op.tensor];
    const ir::TileInfo& jt = fn_.tiles[loop_tile];
    for (size_t d = 0; d < op.index.size(); ++d) {
      const ir::IndexItem& ix = op.index[d];
      if (ix.kind == ir::IndexItem::All) continue;
      if (ix.kind == ir::IndexItem::Scalar) {
        const Op* c = def(ix.value);
        if (!c || c->kind != OpKind::Constant) return false;
        continue;
      }
      if (ix.kind != ir::IndexItem::Tile) return false;  // (a slice of a whole-dim block, a gather)
      if (ix.tile == loop_tile) {
        if (jt.end >= ir::kUnboundedRange || jt.end > t.shape[d] || p_.block_of_tile(loop_tile) > jt.end) return false;
        continue;
      }
      const ir::TileInfo& ti = fn_.tiles[ix.tile];
      if (!launch_tile(ix.tile) || ti.parent >= 0 || ti.is_jagged() || ti.end > t.shape[d]) return false;
      // (the DMA's block is min(block, dim): it must be the emitter's, min(block, extent), and cut
      // the range evenly)
      if (!pallas_unit_tile(p_, ix.tile) && ti.extent() % std::min(p_.block_of_tile(ix.tile), t.shape[d]) != 0)
        return false;
    }
    const int root = ir::root_of(fn_, op.tensor);
    bool written = false;
    ir::walk(L_.op->body,
             [&](const Op& o) { written |= o.kind == OpKind::Store && ir::root_of(fn_, o.tensor) == root; });
    return !written;
  }

  // The inner loops open around the access being visited (outermost first).
  std::vector<const Op*> open_loops_;
  bool indexes_open_loop(int tile) const {
    for (const Op* l : open_loops_)
      if (l->loop_tiles[0] == tile) return true;
    return false;
  }
  bool launch_tile(int tile) const {
    return std::find(L_.op->loop_tiles.begin(), L_.op->loop_tiles.end(), tile) != L_.op->loop_tiles.end();
  }

  // Every block a BlockSpec copies between HBM and VMEM (a grid-level block, an emit_pipeline
  // trip's, a grid-strategy trip's, a resident loop's whole extent) has legal TPU dims
  // (tpu_block_legal: multiples of (8, 128) or whole). The config space offers only such block
  // sizes; a block the kernel fixes (`.block(64)`) may not be. Inside a resident loop's block, a
  // trip is a slice in VMEM, which may start anywhere: an unaligned inner block keeps its whole
  // dim in the outer block. So a pipelined or grid-strategy loop whose window is unaligned is
  // refused with the strategy that takes it, and the default config falls back to it.
  void check_block_shape(const Op& op, const PallasSlot& s) {
    if (s.mode == PallasSlot::Dma || s.mode == PallasSlot::Smem || s.whole_tensor) return;
    const ir::TensorInfo& t = fn_.tensors[op.tensor];
    const int rank = static_cast<int>(s.block.size());
    for (int d = 0; d < rank; ++d) {
      const ir::IndexItem& ix = op.index[d];
      // (a streamed trip's rows are a DMA's into a VMEM buffer, at any start: only its other dims
      // are the blocks a resident slot would have had)
      if (s.mode == PallasSlot::Stream && ix.kind == ir::IndexItem::Tile && ix.tile == s.loop_tile) continue;
      // A resident loop's trips of one element along a block's last two dims would squeeze a
      // dim there that the Tile IR keeps (a tile of block 1, unlike a ph::grid index, which the
      // IR drops too), beside values that keep theirs: refused as before (blocks of 2 or more
      // slice; a block of 1 along a leading dim squeezes as everywhere).
      if (s.mode == PallasSlot::Resident && ix.kind == ir::IndexItem::Tile && ix.tile == s.loop_tile &&
          pallas_unit_tile(p_, ix.tile) && !fn_.tiles[ix.tile].is_grid && d + 2 >= rank && t.shape[d] > 1)
        unsupported(op, "a resident loop of block 1 along one of a block's last two dims (dim " + std::to_string(d) +
                            " of " + t.name + "; give the loop a block of 8 rows or 128 lanes, or more)");
      // (A unit tile's dim is squeezed out of the block: a block of 1 there, as JAX counts it,
      // unless the tile is a ph::grid index, whose squeeze, like a scalar index's, is checked
      // where it is planned: one row per DMA is how emit_pipeline moves such a block.)
      const bool unit_tile = s.block[d] < 0 && ix.kind == ir::IndexItem::Tile && !fn_.tiles[ix.tile].is_grid;
      const int64_t b = unit_tile ? 1 : s.block[d];
      if (b <= 0 || tpu_block_legal(b, t.shape[d], rank - 1 - d, rank, dtype_size(t.dtype))) continue;
      const std::string tile = ix.kind == ir::IndexItem::Tile ? ir::tile_name(fn_, ix.tile) : "?";
      const std::string where = "the block of " + std::to_string(b) + " along dim " + std::to_string(d) + " of " +
                                t.name + " (" + std::to_string(t.shape[d]) + "), through " + tile;
      const std::string rule = rank == 1 ? "a rank-1 TPU block is the whole dim, a multiple of 1024, or a power of "
                                           "two of at least 128 x the elements per 32-bit word"
                                         : "a TPU block's last two dims are multiples of (8, 128) (16 rows for "
                                           "16-bit data, 32 for 8-bit) or whole dims";
      if (s.loop_tile >= 0 && ix.kind == ir::IndexItem::Tile && ix.tile == s.loop_tile) {
        const InnerLoop* il = L_.inner_loop(s.loop_tile);
        throw UserError(op.loc.str() + ": the pallas backend cannot copy " + where + " per trip of its loop (config " +
                        "inner_loops[" + std::to_string(il->knob) + "] = " + lower::strategy_name(il->strategy) +
                        "): " + rule + "; give that loop the strategy \"resident\" (the whole dim stays in VMEM " +
                        "and each trip slices it), or a legal block (kernel " + fn_.name + ")");
      }
      throw UserError(op.loc.str() + ": the pallas backend cannot use " + where + " as a grid-level block: " + rule +
                      "; leave the block size to the config, or fix a legal one (kernel " + fn_.name + ")");
    }
  }

  // A launch tile beside a jagged store's rows: the whole tensor is in VMEM, and each grid step
  // writes its block of this dim at the tile's offset, which Mosaic cuts dynamically along the
  // lane dim at multiples of 128 and along the sublane dim at whole tiles (8 rows of 32 bits,
  // 16 of 16 bits, 32 of 8 bits); any offset along a leading dim. The blocks must cut the dim
  // evenly (no ragged last block past the tensor's end).
  void check_whole_tensor_block(const Op& op, size_t d) {
    const ir::TensorInfo& t = fn_.tensors[op.tensor];
    const int tile = op.index[d].tile;
    const int64_t b = p_.block_of_tile(tile), dim = t.shape[d];
    if (b >= dim) return;
    const bool lane = d + 1 == op.index.size(), sublane = d + 2 == op.index.size();
    const int64_t align = lane ? 128 : sublane ? tpu_sublane_tile(dtype_size(t.dtype)) : 1;
    if (dim % b != 0 || b % align != 0)
      unsupported(op, "a store through a jagged tile beside the launch tile " + ir::tile_name(fn_, tile) +
                          " whose block (" + std::to_string(b) + ") does not cut dim " + std::to_string(d) + " of " +
                          t.name + " (" + std::to_string(dim) + ") evenly" +
                          (align > 1 ? " at multiples of " + std::to_string(align) : std::string()) +
                          ": the whole tensor is in VMEM, and each step writes its block at the tile's offset");
  }

  // A jagged loop: a fori_loop over its entry's trips, each reading a block of the loop's block
  // size at a start clamped inside the dims it indexes (codegen.cpp, jagged_loop).
  void check_jagged_loop(const Op& op) {
    const ir::TileInfo& t = fn_.tiles[op.loop_tiles[0]];
    if (pallas_unit_tile(p_, t.id))
      unsupported(op, "a jagged loop of block 1 (give it a block of 8 or more, or the config's)");
    ir::walk(op.body, [&](const Op& o) {
      if (o.kind != OpKind::Load && o.kind != OpKind::Store) return;
      for (size_t d = 0; d < o.index.size(); ++d)
        if (o.index[d].kind == ir::IndexItem::Tile && ir::jagged_root(fn_, o.index[d].tile) == t.id &&
            d + 1 == o.index.size() && fn_.tensors[o.tensor].shape[d] > 1)
          unsupported(o, "a jagged tile on a tensor's last (lane) dim (" + fn_.tensors[o.tensor].name +
                             "): its rows start anywhere, and Mosaic aligns a lane offset to 128");
    });
  }

  // The dots the MXU can take: matrices on both sides (a unit tile squeezes its dim out of TPU
  // blocks), and equal batch dims or a shared 2-D right operand.
  void check_dot(const Op& op) {
    auto source = [&](int v) {  // a transposed operand is its source, viewed
      for (const Op* d = def(v); d && d->kind == OpKind::Transpose; d = def(v)) v = d->operands[0];
      return v;
    };
    auto kept_rank = [&](int v) {
      int n = 0;
      for (const ir::Dim& d : fn_.type_of(v).shape) n += !(d.kind == ir::Dim::Tile && pallas_unit_tile(p_, d.tile));
      return n;
    };
    auto matrix_dim_squeezed = [&](int v) {
      const ir::Type& t = fn_.type_of(v);
      for (int k = t.rank() - 2; k < t.rank(); ++k)
        if (k >= 0 && t.shape[k].kind == ir::Dim::Tile && pallas_unit_tile(p_, t.shape[k].tile)) return true;
      return false;
    };
    const int a = source(op.operands[0]), b = source(op.operands[1]);
    const int ra = kept_rank(a), rb = kept_rank(b);
    if (ra < 2 || rb < 2 || matrix_dim_squeezed(op.operands[0]) || matrix_dim_squeezed(op.operands[1]))
      throw UserError(op.loc.str() +
                      ": the pallas backend cannot emit this dot: an operand's matrix dim is indexed by a tile of "
                      "block 1 (or a grid index), which TPU blocks squeeze out; give that loop a block size of at "
                      "least 8 (or leave it to the config)");
    const bool shared_b = ra > 2 && rb == 2 && a == op.operands[0];
    if (ra != rb && !shared_b)
      throw UserError(op.loc.str() +
                      ": the pallas backend needs both dot operands to have the same batch dims, or a 2-D "
                      "right operand");
  }

  // The index map expression of a scalar index ("" when the grid cannot compute it).
  // Whether two subscripts select the same blocks at every grid step: the same tiles, and
  // scalars with the same index map (two constants 0 written apart are one block index).
  bool same_blocks(const std::vector<ir::IndexItem>& a, const std::vector<ir::IndexItem>& b) {
    if (same_tiles(a, b)) return true;
    if (a.size() != b.size()) return false;
    for (size_t d = 0; d < a.size(); ++d) {
      if (a[d].kind != b[d].kind || a[d].tile != b[d].tile || !same_scalar_block(a[d], b[d])) return false;
    }
    return true;
  }
  // (true for items that are not scalars)
  bool same_scalar_block(const ir::IndexItem& a, const ir::IndexItem& b) {
    if (a.kind != ir::IndexItem::Scalar || a.value == b.value) return true;
    return !index_map_of(a.value).empty() && index_map_of(a.value) == index_map_of(b.value);
  }

  // A scalar read at indices computed in the kernel (offsets[g + 1], a jagged loop's bounds): the
  // tensor goes whole into SMEM, which the scalar core reads at any index (a load only; SMEM
  // holds 32-bit words, and little of them).
  static constexpr int64_t kSmemElements = 16384;
  // (So is a scalar read at a grid index on one of a tensor's last two dims, which a TPU block
  // cannot squeeze: offsets[g] of a rank-1 tensor.)
  bool smem_scalar(const Op& op) {
    if (op.kind != OpKind::Load || ir::is_masked(op)) return false;
    bool computed = false;
    const ir::TensorInfo& t = fn_.tensors[op.tensor];
    for (size_t d = 0; d < op.index.size(); ++d) {
      const ir::IndexItem& ix = op.index[d];
      const bool unit_tile =
          ix.kind == ir::IndexItem::Tile && pallas_unit_tile(p_, ix.tile) &&
          std::find(L_.op->loop_tiles.begin(), L_.op->loop_tiles.end(), ix.tile) != L_.op->loop_tiles.end();
      if (ix.kind != ir::IndexItem::Scalar && !unit_tile) return false;
      const bool lane_or_sublane = d + 2 >= op.index.size() && t.shape[d] != 1;
      computed |=
          ix.kind == ir::IndexItem::Scalar ? index_map_of(ix.value).empty() || lane_or_sublane : lane_or_sublane;
    }
    // (i64 tensors are int32 arrays in JAX without x64)
    const DType dt = fn_.tensors[op.tensor].dtype;
    return computed && (dtype_size(dt) <= 4 || dt == DType::i64);
  }

  void add_smem(const Op& op) {
    const ir::TensorInfo& t = fn_.tensors[op.tensor];
    const int64_t n = shape_numel(t.shape);
    if (n > kSmemElements)
      unsupported(op, "a scalar read at a computed index from " + t.name + ", whose " + std::to_string(n) +
                          " elements do not fit SMEM (" + std::to_string(kSmemElements) + " at most)");
    for (size_t k = 0; k < out_.slots.size(); ++k)
      if (out_.slots[k].tensor == op.tensor && out_.slots[k].mode == PallasSlot::Smem && !out_.slots[k].written) {
        out_.slot_of[&op] = static_cast<int>(k);
        return;
      }
    PallasSlot s;
    s.tensor = op.tensor;
    s.first = &op;
    s.read = true;
    s.mode = PallasSlot::Smem;
    s.block.assign(t.shape.size(), -1);
    s.block_bytes = n * 4;
    out_.slot_of[&op] = static_cast<int>(out_.slots.size());
    out_.slots.push_back(std::move(s));
  }

  // A store whose every dim is squeezed (out[g] = acc of a 0-d Var, partials[t.id()] = s): a
  // block of no dims, which Mosaic cannot store to VMEM ("Cannot store scalars to VMEM",
  // _masked_swap_lowering_rule in jax/_src/pallas/mosaic/lowering.py) and which no legal
  // rank-1 BlockSpec holds. Its indices come from the grid (index maps), not from data.
  bool scalar_store(const Op& op) {
    if (op.kind != OpKind::Store || ir::is_atomic(op) || op.index.empty()) return false;
    for (const ir::IndexItem& ix : op.index) {
      const bool unit_launch_tile =
          ix.kind == ir::IndexItem::Tile && pallas_unit_tile(p_, ix.tile) && launch_tile(ix.tile);
      const bool mapped = ix.kind == ir::IndexItem::Scalar && !index_map_of(ix.value).empty();
      if (!unit_launch_tile && !mapped) return false;
    }
    return true;
  }

  // Such a store goes to the whole tensor in SMEM (32-bit words, stored one scalar at a time),
  // written back once after the launch: its grid dims run in order on one core (plan_order;
  // SMEM is a core's own). Each step writes its element, so every element must be some step's:
  // each dim indexed by a distinct grid dim that spans it (a grid tile over the whole dim, a
  // launch tile's t.id() with one step per element, a constant into a dim of 1).
  void add_smem_store(const Op& op) {
    const ir::TensorInfo& t = fn_.tensors[op.tensor];
    const std::string what = "a scalar stored into " + t.name + " at grid indices (the pallas backend stores it into " +
                             "SMEM: Mosaic stores no scalars to VMEM)";
    if (!(t.dtype == DType::f32 || t.dtype == DType::i32 || t.dtype == DType::i64))
      unsupported(op, what + " of dtype " + std::string(dtype_name(t.dtype)) +
                          ": SMEM holds 32-bit words (store into an f32 or i32 tensor, or store a row of 128 "
                          "lanes at a leading index)");
    const int64_t n = shape_numel(t.shape);
    if (n > kSmemElements)
      unsupported(op, what + ", whose " + std::to_string(n) + " elements do not fit SMEM (" +
                          std::to_string(kSmemElements) + " at most)");
    if (ir::is_masked(op) || in_when_ > 0)
      unsupported(op, what +
                          " under a mask or a ph::when: the elements it leaves would need the tensor's "
                          "prior contents in SMEM");
    std::set<int> grid_dims;
    for (size_t d = 0; d < op.index.size(); ++d) {
      const ir::IndexItem& ix = op.index[d];
      int tile = -1;
      int64_t steps = 1;
      if (ix.kind == ir::IndexItem::Tile) {
        tile = ix.tile;
        const ir::TileInfo& ti = fn_.tiles[tile];
        if (ti.begin != 0) tile = -2;  // (a sub-range leaves elements before it)
      } else if (const Op* dv = def(ix.value); dv->kind == OpKind::TileId || dv->kind == OpKind::TileBegin) {
        tile = pallas_unit_tile(p_, dv->tile) || dv->kind == OpKind::TileId ? dv->tile : -2;
        if (tile >= 0 && fn_.tiles[tile].begin != 0) tile = -2;
      }
      for (const lower::GridDim& g : L_.grid)
        if (g.tile == tile) steps = g.steps;
      // (a dim of ph::num_blocks(bs) has one element per block of a tile over the same extent)
      bool counted = false;
      for (const ir::BlockCount& c : t.counts)
        counted |= tile >= 0 && c.dim == static_cast<int>(d) && c.block == fn_.tiles[tile].block &&
                   c.extent == fn_.tiles[tile].extent();
      const bool spans =
          tile == -1 ? t.shape[d] == 1 : tile >= 0 && (counted || steps == t.shape[d]) && grid_dims.insert(tile).second;
      if (!spans)
        unsupported(op, what + " that leaves elements of dim " + std::to_string(d) + " (" + std::to_string(t.shape[d]) +
                            ") to no grid step: each dim must be indexed by its own grid loop over the whole dim");
    }
    PallasSlot s;
    s.tensor = op.tensor;
    s.first = &op;
    s.written = true;
    s.mode = PallasSlot::Smem;
    s.whole_tensor = true;
    s.block.assign(t.shape.size(), -1);
    s.block_bytes = n * 4;
    out_.slot_of[&op] = static_cast<int>(out_.slots.size());
    out_.slots.push_back(std::move(s));
  }

  std::string index_map_of(int v) { return scalar_index_map(p_, *L_.op, def(v)); }

  const Op* def(int v) {
    if (defs_.empty())
      ir::walk(L_.op->body, [&](const Op& o) {
        if (o.result >= 0) defs_[o.result] = &o;
      });
    auto it = defs_.find(v);
    return it == defs_.end() ? nullptr : it->second;
  }

  // A pallas_call writes each output through one BlockSpec: a tensor a launch writes must be
  // written through one block pattern.
  void check_outputs() {
    std::set<int> written;
    for (const PallasSlot& s : out_.slots)
      if (s.written && !written.insert(s.tensor).second)
        throw UserError(s.first->loc.str() + ": the pallas backend needs each tensor a launch writes to be " +
                        "written through one block pattern (kernel " + fn_.name + ")");
  }

  void add(const Op& op, const Op* loop) {
    if (out_.comm.in_hbm.count(ir::root_of(fn_, op.tensor))) {
      if (fn_.tensors[op.tensor].origin == ir::TensorInfo::View)
        unsupported(op, "a view of a tensor kept in HBM (" + fn_.tensors[op.tensor].name + ", " +
                            in_hbm_why(ir::root_of(fn_, op.tensor)) + ")");
      return add_hbm(op);
    }
    const ir::TensorInfo& t = fn_.tensors[op.tensor];
    // The slot belongs to the innermost open loop whose tile the access indexes (a load of
    // x[rows, ph::all] in a K loop nested in the jagged loop over rows is the jagged loop's);
    // the enclosing loops' tiles it indexes besides are whole in its block (trip_tiles).
    int loop_tile = -1;
    std::vector<int> trip_tiles;
    auto indexes = [&](int tile) {
      for (const ir::IndexItem& ix : op.index)
        if (ix.kind == ir::IndexItem::Tile && ix.tile == tile) return true;
      return false;
    };
    for (auto it = open_loops_.rbegin(); loop && it != open_loops_.rend(); ++it) {
      const int tile = (*it)->loop_tiles[0];
      if (!indexes(tile)) continue;
      (loop_tile < 0 ? loop_tile : trip_tiles.emplace_back()) = tile;
    }
    // An atomic update at indices computed from data has no block index map: its block is the
    // whole tensor (a jagged tile's whole dim is, below).
    std::set<int> dep_tiles;
    if (ir::is_atomic(op) && !ir::indexes_jagged_tile(fn_, op) && !atomic_block_tiles(fn_, *L_.op, op, &dep_tiles))
      return add_whole_atomic(op, loop);
    // A scatter is per-row DMAs into the output in HBM, a dma gather per-row DMAs from the
    // table in HBM (gather.h).
    if (op.kind == OpKind::Store && ir::has_gather(op)) return add_dma_rows(op, true);
    if (op.kind == OpKind::Load && ir::has_gather(op)) {
      if (p_.gather_strategy(op) == kGatherDma) return add_dma_rows(op, false);
      check_gather(op);
    }
    if (smem_scalar(op)) return add_smem(op);
    if (scalar_store(op)) return add_smem_store(op);
    // Elements a masked store or a store into a slice leaves keep their prior contents; so do
    // those of a store under a condition (a block written back whole, whether or not it ran).
    // An atomic update reads the block's contents, combines and writes them back (TPU cores
    // have no atomics across cores; the steps that meet on a block run in order, plan_order).
    bool keeps_prior = op.kind == OpKind::Store && (ir::is_masked(op) || in_when_ > 0 || ir::is_atomic(op));
    for (size_t d = 0; d < op.index.size(); ++d) {
      const ir::IndexItem& ix = op.index[d];
      // A TPU block's last two dims are multiples of (8, 128) or whole: a scalar there squeezes
      // a dim of size 1 out of a longer one, which Mosaic cannot lay out.
      if (ix.kind == ir::IndexItem::Scalar && d + 2 >= op.index.size() && t.shape[d] != 1)
        unsupported(op, "an integer index on one of a tensor's last two dims (" + t.name + " dim " + std::to_string(d) +
                            "): a TPU block's last two dims are multiples of (8, 128) or whole; "
                            "give the indexed dim a leading position (e.g. partials of shape {ph::num_blocks(bm), 1, "
                            "n} written at [t.id(), 0, tn])");
      // A scalar index is a squeezed dim whose block index the BlockSpec's index map computes
      // from the grid: a constant, or the block number (t.id()) of a launch tile.
      if (ix.kind == ir::IndexItem::Scalar && index_map_of(ix.value).empty())
        unsupported(op, "indexing with a computed integer other than a constant or a launch tile's t.id()");
      if (ix.kind == ir::IndexItem::Slice) {
        // Cut from a whole-dim block in VMEM; a store updates the slice's range of it and the
        // rest of the block keeps its prior contents.
        keeps_prior |= op.kind == OpKind::Store;
        const Op* start = def(ix.value);
        if (!start || start->kind != OpKind::Constant) check_slice_start(op, d);
      }
      if (ix.kind == ir::IndexItem::Tile) keeps_prior |= check_range_tile(op, d) && op.kind == OpKind::Store;
    }
    // Loads and stores of one tensor at the same tile indices, in the same loop, share a slot.
    for (size_t k = 0; k < out_.slots.size(); ++k) {
      PallasSlot& s = out_.slots[k];
      if (s.tensor != op.tensor || s.loop_tile != loop_tile || s.trip_tiles != trip_tiles ||
          s.mode == PallasSlot::Dma || s.mode == PallasSlot::Smem || !same_blocks(s.first->index, op.index))
        continue;
      (op.kind == OpKind::Load ? s.read : s.written) = true;
      s.keeps_prior |= keeps_prior;
      if (ir::is_atomic(op)) s.atomic = ir::atomic_fn(op);
      out_.slot_of[&op] = static_cast<int>(k);
      return;
    }
    PallasSlot s;
    s.tensor = op.tensor;
    s.first = &op;
    (op.kind == OpKind::Load ? s.read : s.written) = true;
    s.keeps_prior = keeps_prior;
    s.atomic = ir::atomic_fn(op);
    s.loop_tile = loop_tile;
    s.trip_tiles = trip_tiles;
    bool jagged = false;  // through the tile of a jagged loop, this slot's or an enclosing one's
    for (int tile : trip_tiles) jagged |= fn_.tiles[tile].is_jagged();
    jagged |= loop_tile >= 0 && fn_.tiles[loop_tile].is_jagged();
    if (loop_tile >= 0) {
      const InnerLoop* il = L_.inner_loop(loop_tile);
      s.mode = il->strategy == Strategy::Pipeline             ? PallasSlot::Pipeline
               : il->strategy == Strategy::Resident || jagged ? PallasSlot::Resident
                                                              : PallasSlot::Grid;
      // A jagged store writes rows of the whole dim in VMEM, which is written back whole. The
      // rows depend on the data, not on the grid step: the block is the whole tensor, its index
      // the same at every step, so it stays in VMEM across the launch (its steps run in order,
      // see the emitter's dimension semantics) and is written back once, at the end.
      // Beside the rows, a launch tile's block of a dim is cut from the whole tensor at the
      // step's offset (check_whole_tensor_block).
      if (jagged && op.kind == OpKind::Store) {
        s.keeps_prior = true;
        s.whole_tensor = true;
        for (size_t d = 0; d < op.index.size(); ++d) {
          const ir::IndexItem& ix = op.index[d];
          if (ix.kind == ir::IndexItem::All) continue;
          if (ix.kind == ir::IndexItem::Tile && (ix.tile == loop_tile || indexes_open_loop(ix.tile))) continue;
          if (ix.kind == ir::IndexItem::Tile && launch_tile(ix.tile)) {
            check_whole_tensor_block(op, d);
            continue;
          }
          unsupported(op,
                      "a store through a jagged tile beside other than whole dims, enclosing loops' tiles and launch "
                      "tiles (write x[rows, ph::all] or x[rows, tn])");
        }
      }
      // A pipelined output block is written back after its trip, and the next trip's copy of the
      // same block may already be in flight: the read-modify-writes of one block would not see
      // each other. A resident slot keeps the loop's blocks in VMEM for the whole grid step.
      if (s.mode == PallasSlot::Pipeline && ir::is_atomic(op))
        throw UserError(op.loc.str() + ": the pallas backend cannot pipeline " +
                        std::string(ir::atomic_name(ir::atomic_fn(op))) + " into " + t.name +
                        " through the loop over " + ir::tile_name(fn_, loop_tile) + " (config inner_loops[" +
                        std::to_string(il->knob) +
                        "] = pipeline): a TPU updates a block read-modify-write in VMEM, and emit_pipeline "
                        "writes each trip's block back while the next one comes in; give that loop the strategy "
                        "\"resident\" (kernel " +
                        fn_.name + ")");
      // (A scalar index here has an index map, a constant or a launch tile's number, which the
      // pipeline's BlockSpec takes like the grid's: its lambda closes over the grid indices.)
      s.buffers = il->strategy == Strategy::Pipeline ? il->buffers : 2;
      if (jagged && streams_jagged_rows(op, loop_tile, trip_tiles)) s.mode = PallasSlot::Stream;
    }
    int64_t elems = 1;
    for (size_t d = 0; d < op.index.size(); ++d) {
      const ir::IndexItem& ix = op.index[d];
      int64_t b = t.shape[d];  // `all` and gathered dims: the whole dim is resident
      // (the whole tensor; an enclosing loop's tile: its whole extent, sliced by each trip)
      if (s.whole_tensor ||
          (ix.kind == ir::IndexItem::Tile && std::count(trip_tiles.begin(), trip_tiles.end(), ix.tile))) {
        s.block.push_back(b);
        elems *= b;
        continue;
      }
      if (ix.kind == ir::IndexItem::Scalar) {
        s.block.push_back(-1);
        continue;
      }
      if (ix.kind == ir::IndexItem::Tile) {
        // A unit tile is squeezed, except the loop tile of a resident slot: its whole extent
        // is in VMEM, indexed by the trip's offset.
        if (pallas_unit_tile(p_, ix.tile) && !(ix.tile == loop_tile && s.mode == PallasSlot::Resident)) {
          s.block.push_back(-1);
          continue;
        }
        const ir::TileInfo& ti = fn_.tiles[ix.tile];
        if (ti.parent >= 0) {  // a slice of the enclosing tile's block
          b = std::min(p_.block_of_tile(ti.parent), t.shape[d]);
          // (An inner block at least the outer one's is one trip over the whole VMEM block.)
          if (p_.block_of_tile(ix.tile) < b && b % p_.block_of_tile(ix.tile) != 0)
            unsupported(op, "ph::tile(outer) whose inner block (" + std::to_string(p_.block_of_tile(ix.tile)) +
                                ") does not divide the outer block in VMEM (" + std::to_string(b) + " rows of " +
                                t.name + ")");
        } else if (!(ix.tile == loop_tile && s.mode == PallasSlot::Resident)) {
          b = std::min(p_.block_of_tile(ix.tile), t.shape[d]);
        }
      }
      s.block.push_back(b);
      elems *= b;
    }
    s.block_bytes = elems * dtype_size(t.dtype);
    check_block_shape(op, s);
    out_.slot_of[&op] = static_cast<int>(out_.slots.size());
    out_.slots.push_back(std::move(s));
  }

  // An atomic update at indices computed from data (a gather index block, a scalar loaded or
  // computed in the kernel): no BlockSpec index map can name its block, so the block is the
  // whole tensor, resident in VMEM across the launch (every grid dim "arbitrary", plan_order;
  // its prior contents in at the very first step, written back once at the end). A gather
  // updates the rows its index block names one after another (codegen: _atomic_rows); a
  // scalar index selects a leading dim of the VMEM copy.
  void add_whole_atomic(const Op& op, const Op* loop) {
    const ir::TensorInfo& t = fn_.tensors[op.tensor];
    const std::string what = std::string(ir::atomic_name(ir::atomic_fn(op))) + " into " + t.name;
    int gathers = 0, scalars = 0;
    for (size_t d = 0; d < op.index.size(); ++d) {
      const ir::IndexItem& ix = op.index[d];
      switch (ix.kind) {
        case ir::IndexItem::Gather: {
          ++gathers;
          if (d != 0)
            unsupported(op, what + " through an index block on dim " + std::to_string(d) +
                                " (an atomic scatter updates rows: index dim 0)");
          const ir::Dim& rows = fn_.type_of(ix.value).shape[0];
          if (rows.kind == ir::Dim::Tile && pallas_unit_tile(p_, rows.tile))
            unsupported(op, what + " through an index block over a tile of block 1 (index with a scalar instead)");
          // (over a jagged tile, a trip updates only its window of the index block: codegen)
          break;
        }
        case ir::IndexItem::Scalar:
          ++scalars;
          // (a scalar squeezes its dim out of the VMEM copy: a leading dim, as in every TPU block)
          if (d + 2 >= op.index.size() && t.shape[d] != 1)
            unsupported(op, what +
                                " at an integer index computed in the kernel on one of the tensor's last two "
                                "dims (dim " +
                                std::to_string(d) +
                                "): a TPU indexes its VMEM copy dynamically only along leading dims; give the "
                                "indexed dim a leading position (e.g. a tensor of shape {n, 1, m} at [i, 0, ph::all])");
          break;
        case ir::IndexItem::All:
          break;
        case ir::IndexItem::Tile: {
          // The whole tensor is in VMEM: a tile beside the computed index must span its dim
          // (one block at offset 0), which is what whole-dim VMEM indexing can take; or, beside
          // the rows of an index block into a matrix, be a launch tile whose blocks cut the
          // columns evenly at multiples of 128 (the step updates that column block of the copy,
          // at a lane offset Mosaic takes when 128-aligned; codegen, atomic_whole).
          const ir::TileInfo& ti = fn_.tiles[ix.tile];
          const int64_t b = p_.block_of_tile(ix.tile), dim = t.shape[d];
          const bool whole = ti.begin == 0 && ti.end == dim && !pallas_unit_tile(p_, ix.tile);
          const bool launch =
              std::find(L_.op->loop_tiles.begin(), L_.op->loop_tiles.end(), ix.tile) != L_.op->loop_tiles.end();
          const bool columns = whole && launch && d == 1 && op.index.size() == 2 &&
                               op.index[0].kind == ir::IndexItem::Gather && b % 128 == 0 && dim % b == 0;
          if (!(whole && b >= dim) && !columns)
            unsupported(op, what + " at indices computed from data beside a tile (" + ir::tile_name(fn_, ix.tile) +
                                ") that does not span dim " + std::to_string(d) + " of " + t.name +
                                " in one block: the whole tensor is in VMEM; index that dim with ph::all (beside "
                                "an index block's rows, a launch tile whose block is a multiple of 128 dividing "
                                "the columns also does)");
          break;
        }
        case ir::IndexItem::Slice:
          unsupported(op, what + " into a ph::slice at indices computed from data");
      }
    }
    if (gathers > 1 || (gathers && scalars))
      unsupported(op, what + " through more than one computed index (one index block, or integers)");
    if (gathers && op.index.size() > 2)
      unsupported(op, what + " through an index block into a tensor of rank " + std::to_string(op.index.size()) +
                          " (at most 2)");
    (void)loop;  // (at grid level: every trip of an inner loop updates the one resident copy)
    for (size_t k = 0; k < out_.slots.size(); ++k)
      if (out_.slots[k].tensor == op.tensor && out_.slots[k].whole_tensor &&
          out_.slots[k].atomic != ir::AtomicFn::none) {
        out_.slot_of[&op] = static_cast<int>(k);
        return;
      }
    PallasSlot s;
    s.tensor = op.tensor;
    s.first = &op;
    s.written = true;
    s.keeps_prior = true;
    s.atomic = ir::atomic_fn(op);
    s.whole_tensor = true;
    s.block = t.shape;
    s.block_bytes = shape_numel(t.shape) * dtype_size(t.dtype);
    out_.slot_of[&op] = static_cast<int>(out_.slots.size());
    out_.slots.push_back(std::move(s));
  }

  // The dimension semantics. Each atomic update's steps that meet on one block must run one
  // after another on one core, with the block resident in VMEM between them: the grid dims its
  // block index depends on (D) must come before every other dim (then the steps of one block
  // are consecutive: the Pallas TPU accumulator pattern) and the others run in order
  // ("arbitrary"); D may stay "parallel" (a core takes whole runs). A whole-tensor block (a
  // jagged store, an atomic update at data-dependent indices) is shared by every step.
  void plan_order() {
    const size_t nd = out_.grid.size();
    out_.arbitrary.assign(nd, false);
    auto names = [&](const std::vector<int>& pos) {
      std::string s;
      for (int g : pos) s += (s.empty() ? "" : ", ") + ir::tile_name(fn_, out_.grid[g].tile);
      return "(" + s + ")";
    };
    std::vector<int> all(nd);
    for (size_t g = 0; g < nd; ++g) all[g] = static_cast<int>(g);
    for (PallasSlot& s : out_.slots) {
      if (!s.written || (!s.whole_tensor && s.atomic == ir::AtomicFn::none)) continue;
      const std::string tensor = "t" + std::to_string(s.tensor) + " (" + fn_.tensors[s.tensor].name + ")";
      const std::string what = s.atomic == ir::AtomicFn::none
                                   ? "store to " + tensor
                                   : std::string(ir::atomic_name(s.atomic)) + " to " + tensor;
      if (s.whole_tensor) {
        s.revisit_dims = all;
        for (size_t g = 0; g < nd; ++g) out_.arbitrary[g] = true;
        out_.order_notes.push_back(
            what + " at " + s.first->loc.str() + ": " +
            (s.mode == PallasSlot::Smem       ? "scalars at grid indices, so the whole tensor stays in SMEM"
             : s.atomic == ir::AtomicFn::none ? "rows through a jagged tile, so the whole tensor stays in VMEM"
                                              : "indices computed from data, so the whole tensor stays in VMEM") +
            " across the launch; grid dims " + names(all) + " run in order (\"arbitrary\")" +
            (s.atomic == ir::AtomicFn::none ? ""
                                            : "; its rows are read-modify-written one index after another (a repeated "
                                              "index counts each time; an index out of range updates nothing)"));
        continue;
      }
      std::set<int> tiles;
      atomic_block_tiles(fn_, *L_.op, *s.first, &tiles);
      std::vector<int> dep, rest;
      for (size_t g = 0; g < nd; ++g) (tiles.count(out_.grid[g].tile) ? dep : rest).push_back(static_cast<int>(g));
      // (a dim of one step never revisits: it may sit anywhere)
      for (int r : rest)
        for (int d : dep)
          if (r < d && out_.grid[r].steps > 1 && out_.grid[d].steps > 1) order_error(s, what, dep, rest);
      s.revisit_dims = rest;
      for (int r : rest) out_.arbitrary[r] = true;
      out_.order_notes.push_back(what + " at " + s.first->loc.str() + ": " +
                                 (rest.empty() ? std::string("every grid step has its own block")
                                               : "grid dims " + names(rest) + " run in order (\"arbitrary\")") +
                                 "; each block is read-modify-written in VMEM");
    }
    // A launch with collectives runs its steps in order on every backend (src/ir/collectives.h).
    if (out_.comm.any && nd > 0) {
      for (size_t g = 0; g < nd; ++g) out_.arbitrary[g] = true;
      out_.order_notes.push_back("collectives: grid dims " + names(all) +
                                 " run in order (\"arbitrary\"), as a launch with collectives does on every backend");
    }
    // A loop on the grid carries its state in VMEM from trip to trip: its trips run in order.
    if (out_.grid_loop) {
      out_.arbitrary.back() = true;
      out_.order_notes.push_back("the loop over " + ir::tile_name(fn_, out_.grid.back().tile) + " at " +
                                 out_.grid_loop->loc.str() +
                                 " runs on the grid: its trips run in order (\"arbitrary\"), its state in VMEM "
                                 "scratch, set up at the first trip and read out at the last");
    }
    // Mosaic takes "parallel" dims only as a prefix of the grid (a dim of one step may sit before
    // D): after an "arbitrary" dim, every dim runs in order.
    for (size_t g = 1; g < nd; ++g) out_.arbitrary[g] = out_.arbitrary[g] || out_.arbitrary[g - 1];
  }

  [[noreturn]] void order_error(const PallasSlot& s, const std::string& what, const std::vector<int>& dep,
                                const std::vector<int>& rest) {
    auto tiles_of = [&](const std::vector<int>& pos) {
      std::string r;
      for (int g : pos) r += (r.empty() ? "" : ", ") + ir::tile_name(fn_, out_.grid[g].tile);
      return r;
    };
    std::vector<int> order, grid_pos(out_.grid.size());
    for (size_t g = 0; g < out_.grid.size(); ++g) {
      const auto& lt = L_.op->loop_tiles;
      order.push_back(static_cast<int>(std::find(lt.begin(), lt.end(), out_.grid[g].tile) - lt.begin()));
      grid_pos[g] = static_cast<int>(g);
    }
    auto list = [](const std::vector<int>& v) {
      std::string r;
      for (int x : v) r += (r.empty() ? "" : ", ") + std::to_string(x);
      return "[" + r + "]";
    };
    const std::string knob = "loop_orders[" + std::to_string(L_.loop_order_knob) + "]";
    throw UserError(s.first->loc.str() + ": the pallas backend cannot run " + what +
                    " in this loop order: a TPU has no atomics across cores, so the grid steps that update one "
                    "block must run one after another while it stays in VMEM, and its block index depends on "
                    "grid dims (" +
                    tiles_of(dep) + "), which must come before (" + tiles_of(rest) + "); the launch's loop order is (" +
                    tiles_of(grid_pos) + ") (config " + knob + " = " + list(order) + "): use " + knob + " = " +
                    list(atomic_legal_order(fn_, *L_.op, order)) + " (kernel " + fn_.name + ")");
  }

  // A tile over a sub-range [b, e) of a tensor dim (ph::tile(ph::range(b, e)), or e short of
  // the dim): a BlockSpec (a pipeline's block) moves whole blocks of R = min(block, dim)
  // elements, so its index map adds b / R and b must be a multiple of R; a resident trip slices
  // the whole dim in VMEM exactly, at any b. Returns whether the blocks also cover elements
  // outside [b, e) that are in the tensor (a ragged last block, a resident whole dim): written
  // back whole, they must keep those.
  bool check_range_tile(const Op& op, size_t d) {
    const ir::TileInfo& ti = fn_.tiles[op.index[d].tile];
    if (ti.is_jagged()) return true;  // (a whole dim in VMEM: the trips write their rows of it)
    const int64_t dim = fn_.tensors[op.tensor].shape[d];
    if (ti.parent >= 0) {
      // Sliced from its parent's block, whose index map the parent's range offsets; the trips
      // write whole inner blocks, so a parent block that runs past its range's end inside the
      // tensor would clobber the rows there.
      const ir::TileInfo& par = fn_.tiles[ti.parent];
      const int64_t b = p_.block_of_tile(par.id), r = std::min(b, dim),
                    v = std::max<int64_t>(1, std::min(b, par.extent()));
      if (par.begin % r != 0 || (op.kind == OpKind::Store && par.end < dim && (par.extent() % v != 0 || r > v)))
        unsupported(op, "ph::tile(outer) where outer is a tile over ph::range(" + std::to_string(par.begin) + ", " +
                            std::to_string(par.end) + ") whose start is not a multiple of its block (" +
                            std::to_string(r) + ") or whose last block runs past its end inside " +
                            fn_.tensors[op.tensor].name);
      return false;
    }
    const InnerLoop* il = L_.inner_loop(ti.id);
    // (A resident slot holds the whole dim: the trips write [b, e) of it, the rest is kept.)
    if (il && il->strategy == Strategy::Resident) return ti.begin != 0 || ti.end < dim;
    const int64_t b = p_.block_of_tile(ti.id), r = std::min(b, dim), v = std::max<int64_t>(1, std::min(b, ti.extent()));
    if (ti.begin % r != 0)
      unsupported(op, "a tile over ph::range(" + std::to_string(ti.begin) + ", " + std::to_string(ti.end) +
                          ") whose start is not a multiple of its block (" + std::to_string(r) + ") " +
                          (!il                              ? "at grid level"
                           : il->strategy == Strategy::Grid ? "in a loop on the grid"
                                                            : "in a pipelined loop") +
                          " (a TPU BlockSpec moves whole blocks: use a block size that divides " +
                          std::to_string(ti.begin) + (il ? ", or the resident strategy)" : ")"));
    return ti.end < dim && (ti.extent() % v != 0 || r > v);
  }

  // --- computed ph::slice starts -----------------------------------------------------------
  // A TPU kernel cannot report an error, so a start computed in the kernel is checked here, at
  // every grid step and loop trip of the config: it may read tile offsets and ends, t.id(),
  // constants and integer arithmetic, all fixed once the config is (not data loaded from a
  // tensor). Every value must be in range; along the last (lane) dim Mosaic needs a dynamic
  // offset aligned to 128, so a start that moves there must always be a multiple of 128.
  struct TilePos {
    int64_t off = 0, n = 0, id = 0;
  };

  // The tiles the start reads (a nested tile's parent first); the first op it cannot evaluate.
  const Op* start_tiles(int v, std::vector<int>* tiles) {
    const Op* d = def(v);
    if (!d) return nullptr;
    auto add_tile = [&](int t) {
      std::vector<int> chain;
      for (int u = t; u >= 0; u = fn_.tiles[u].parent) chain.insert(chain.begin(), u);
      for (int u : chain)
        if (std::find(tiles->begin(), tiles->end(), u) == tiles->end()) tiles->push_back(u);
    };
    switch (d->kind) {
      case OpKind::Constant:
        return nullptr;
      case OpKind::TileBegin:
      case OpKind::TileEnd:
      case OpKind::TileId:
        add_tile(d->tile);
        return nullptr;
      case OpKind::DeviceIndex:  // (every coordinate along its axis: a key below 0, device_key)
        if (std::find(tiles->begin(), tiles->end(), device_key(d->axis)) == tiles->end())
          tiles->push_back(device_key(d->axis));
        return nullptr;
      case OpKind::Cast:
        if (is_floating(fn_.type_of(d->operands[0]).dtype)) return d;
        return start_tiles(d->operands[0], tiles);
      case OpKind::Binary: {
        switch (static_cast<ir::BinaryFn>(d->fn)) {
          case ir::BinaryFn::add:
          case ir::BinaryFn::sub:
          case ir::BinaryFn::mul:
          case ir::BinaryFn::floordiv:
          case ir::BinaryFn::mod:
          case ir::BinaryFn::maximum:
          case ir::BinaryFn::minimum:
            break;
          default:
            return d;
        }
        for (int o : d->operands)
          if (const Op* bad = start_tiles(o, tiles)) return bad;
        return nullptr;
      }
      default:
        return d;
    }
  }

  // The value of a start at one position (the emitted kernel computes the same in int32; the
  // range check keeps the values small). Integer // and % by zero give 0, as the language says.
  int64_t eval_start(int v, const std::map<int, TilePos>& at) {
    const Op* d = def(v);
    switch (d->kind) {
      case OpKind::Constant:
        return static_cast<int64_t>(d->number);
      case OpKind::TileBegin:
        return at.at(d->tile).off;
      case OpKind::TileEnd:
        return at.at(d->tile).off + at.at(d->tile).n;
      case OpKind::TileId:
        return at.at(d->tile).id;
      case OpKind::DeviceIndex:
        return at.at(device_key(d->axis)).off;
      case OpKind::Cast:
        return eval_start(d->operands[0], at);
      default:
        break;
    }
    const int64_t a = eval_start(d->operands[0], at), b = eval_start(d->operands[1], at);
    switch (static_cast<ir::BinaryFn>(d->fn)) {
      case ir::BinaryFn::add:
        return a + b;
      case ir::BinaryFn::sub:
        return a - b;
      case ir::BinaryFn::mul:
        return a * b;
      case ir::BinaryFn::floordiv: {
        if (b == 0) return 0;
        int64_t q = a / b;
        return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
      }
      case ir::BinaryFn::mod: {
        if (b == 0) return 0;
        int64_t r = a % b;
        return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
      }
      case ir::BinaryFn::maximum:
        return std::max(a, b);
      case ir::BinaryFn::minimum:
        return std::min(a, b);
      default:
        break;
    }
    PH_CHECK(false, "start_tiles admitted an op eval_start cannot evaluate");
    return 0;
  }

  // A tile's offset, valid length and block number at each of its positions, as the emitter
  // forms them (grid steps, loop trips, the trips of a tile over its parent's block).
  // A slice start computed from the device's coordinate along mesh axis `axis` is checked at each
  // of its values, as a tile's offsets are: it takes the key -1 - axis among the tiles.
  static int device_key(int axis) { return -1 - axis; }
  std::string position_name(int key) const {
    return key >= 0 ? ir::tile_name(fn_, key) : "ph::device_index(\"" + fn_.mesh[-1 - key].name + "\")";
  }

  std::vector<TilePos> tile_positions(int tile, const std::map<int, TilePos>& at) {
    std::vector<TilePos> out;
    if (tile < 0) {
      for (int64_t k = 0; k < fn_.mesh[-1 - tile].size; ++k) out.push_back({k, 1, k});
      return out;
    }
    const ir::TileInfo& t = fn_.tiles[tile];
    for (const lower::GridDim& g : L_.grid)
      if (g.tile == tile) {
        for (int64_t k = 0; k < g.steps; ++k) {
          const int64_t off = g.begin + k * g.block;
          out.push_back({off, std::min(g.block, g.begin + g.extent - off), k});
        }
        return out;
      }
    const int64_t b = std::max<int64_t>(1, std::min(p_.block_of_tile(tile), t.extent()));
    if (t.parent >= 0) {
      const TilePos& par = at.at(t.parent);
      for (int64_t lo = 0; lo < par.n; lo += b) out.push_back({par.off + lo, std::min(b, par.n - lo), lo / b});
      return out;
    }
    for (int64_t off = t.begin; off < t.end; off += b)
      out.push_back({off, std::min(b, t.end - off), (off - t.begin) / b});
    return out;
  }

  void check_slice_start(const Op& op, size_t dim) {
    const ir::IndexItem& ix = op.index[dim];
    const ir::TensorInfo& t = fn_.tensors[op.tensor];
    std::vector<int> tiles;
    if (const Op* bad = start_tiles(ix.value, &tiles))
      unsupported(
          op, "a ph::slice whose start is computed with " + std::string(ir::op_name(*bad)) +
                  " (pallas computes slice starts from tile offsets and ends, t.id(), ph::device_index, constants and "
                  "integer + - * // % min max; a start loaded from a tensor is not supported yet)");
    if (!def(ix.value)) unsupported(op, "a ph::slice whose start is defined outside the launch");
    std::set<int64_t> values;
    int64_t positions = 0, unaligned = -1;
    std::map<int, TilePos> at;
    const bool lane = dim + 1 == op.index.size();
    std::function<void(size_t)> each = [&](size_t k) {
      if (k == tiles.size()) {
        if (++positions > (int64_t{1} << 20))
          unsupported(op,
                      "a computed ph::slice start over more than 2^20 grid steps and trips (the pallas backend "
                      "checks every one when it compiles)");
        const int64_t v = eval_start(ix.value, at);
        if (v < 0 || v + ix.length > t.shape[dim]) {
          std::string where;
          for (int u : tiles)
            where += (where.empty() ? "" : ", ") + position_name(u) + " at " + (u >= 0 ? "offset " : "") +
                     std::to_string(at[u].off);
          throw UserError(op.loc.str() +
                          ": the pallas backend checks a computed ph::slice start when it compiles (a "
                          "TPU kernel cannot report an error): " +
                          (where.empty() ? "" : "with " + where + ", ") + "the slice of length " +
                          std::to_string(ix.length) + " starting at " + std::to_string(v) +
                          " is out of bounds for dimension " + std::to_string(dim) + " of " + t.name +
                          ", which has size " + std::to_string(t.shape[dim]) + " (kernel " + fn_.name + ", config " +
                          p_.config.to_json() + ")");
        }
        if (v % 128 != 0 && unaligned < 0) unaligned = v;
        values.insert(v);
        return;
      }
      for (const TilePos& pos : tile_positions(tiles[k], at)) {
        at[tiles[k]] = pos;
        each(k + 1);
      }
      at.erase(tiles[k]);
    };
    each(0);
    if (values.size() == 1) {
      out_.static_starts[ix.value] = *values.begin();
      return;
    }
    if (lane && unaligned >= 0)
      unsupported(op,
                  "a ph::slice of " + t.name +
                      "'s last dim whose computed start is not always a multiple of "
                      "128 (it takes the value " +
                      std::to_string(unaligned) +
                      "; Mosaic cuts the lane dim at a dynamic offset only at multiples of 128: use such a start, a "
                      "static start, or slice a dim before the last)");
  }

  // A gather is a one-hot matmul against the gathered dim, resident whole in VMEM (the slot's
  // block spans it): one index block, a block of rank 1 or 2 around it, at grid level, from a
  // floating tensor (an out-of-range index gives NaN, which an integer cannot hold).
  void check_gather(const Op& op) {
    if (const std::string in_loop = onehot_in_loop_refusal(fn_, op); !in_loop.empty()) {
      const std::string why = dma_gather_refusal(fn_, op);
      unsupported(op, "a one-hot gather inside an inner loop (" + in_loop +
                          "): give this gather the strategy \"dma\" (config gathers[" +
                          std::to_string(p_.knobs.gather_knob(op)) + "])" +
                          (why.empty() ? "" : ", which cannot take it either: " + why));
    }
    int gathers = 0, kept = 0;
    for (const ir::IndexItem& ix : op.index) {
      gathers += ix.kind == ir::IndexItem::Gather;
      kept += ix.kind != ir::IndexItem::Tile || !pallas_unit_tile(p_, ix.tile);
      if (ix.kind == ir::IndexItem::Gather) {
        const ir::Dim& d = fn_.type_of(ix.value).shape[0];
        if (d.kind == ir::Dim::Tile && pallas_unit_tile(p_, d.tile))
          unsupported(op, "a gather whose index block runs over a tile of block 1 (index with a scalar instead)");
      }
    }
    if (gathers > 1) unsupported(op, "a gather with more than one index block");
    if (kept > 2) unsupported(op, "a gather from a block of rank " + std::to_string(kept) + " (at most 2)");
    if (!is_floating(fn_.tensors[op.tensor].dtype)) {
      const std::string why = dma_gather_refusal(fn_, op);
      unsupported(op, "a one-hot gather from an integer or boolean tensor (" + fn_.tensors[op.tensor].name +
                          "; a one-hot matmul is not exact for integers): give this gather the strategy \"dma\" " +
                          "(config gathers[" + std::to_string(p_.knobs.gather_knob(op)) + "])" +
                          (why.empty() ? "" : ", which cannot take it either: " + why));
    }
  }

  // A gather with the dma strategy, or a scatter: the tensor's slot stays in HBM, its rows move
  // by DMA through a VMEM buffer of the block (the index block's rows, the row's width block).
  void add_dma_rows(const Op& op, bool scatter) {
    const ir::TensorInfo& t = fn_.tensors[op.tensor];
    const std::string why = scatter ? scatter_refusal(fn_, op) : dma_gather_refusal(fn_, op);
    if (!why.empty() && scatter)
      unsupported(op, "this scatter into " + t.name +
                          " (a store through a block of indices, emitted as one DMA per "
                          "row): " +
                          why + ";");
    if (!why.empty())
      throw UserError(op.loc.str() + ": the pallas backend cannot gather from " + t.name + " by DMA (config gathers[" +
                      std::to_string(p_.knobs.gather_knob(op)) + "] = \"dma\"): " + why + "; use \"onehot\" (kernel " +
                      fn_.name + ")");
    const ir::Dim& rows = fn_.type_of(op.index[0].value).shape[0];
    if (rows.kind == ir::Dim::Tile && pallas_unit_tile(p_, rows.tile))
      unsupported(op, "a gather whose index block runs over a tile of block 1 (index with a scalar instead)");
    const Op* idx = dma_gather_index_load(fn_, op);
    PH_CHECK(idx && out_.slot_of.count(idx), "a dma gather's index load has no slot");
    DmaRows g;
    g.op = &op;
    g.scatter = scatter;
    g.index_slot = out_.slot_of.at(idx);
    g.rows =
        rows.kind == ir::Dim::Const ? rows.size : std::min(p_.block_of_tile(rows.tile), fn_.tiles[rows.tile].extent());
    g.buffer.push_back(g.rows);
    if (op.index.size() == 2)
      g.buffer.push_back(op.index[1].kind == ir::IndexItem::Tile
                             ? std::min(p_.block_of_tile(op.index[1].tile), t.shape[1])
                             : t.shape[1]);
    g.buffer_bytes = dtype_size(t.dtype);
    for (int64_t b : g.buffer) g.buffer_bytes *= b;
    PallasSlot s;  // the tensor in HBM: no VMEM block
    s.tensor = op.tensor;
    s.first = &op;
    (scatter ? s.written : s.read) = true;
    s.mode = PallasSlot::Dma;
    s.block = t.shape;
    g.table_slot = static_cast<int>(out_.slots.size());
    out_.slot_of[&op] = g.table_slot;
    out_.slots.push_back(std::move(s));
    out_.dma_rows_of[&op] = static_cast<int>(out_.dma_rows.size());
    out_.dma_rows.push_back(std::move(g));
  }

  // VMEM: every slot's buffers, the Vars' scratch, and room for the two largest intermediate
  // blocks (Mosaic keeps values that exceed the vector registers in VMEM).
  // A resident input whose block index does not depend on the fastest grid dim that takes more
  // than one step (K and V of attention: their block changes per head, not per query block)
  // keeps one buffer: a second would only prefetch the next head's block, at the cost of twice
  // the VMEM of the loop's whole extent. Its copy at a change of block is then exposed (the TPU
  // model charges it so).
  void single_buffer_resident() {
    int fastest = -1;
    for (size_t g = 0; g < out_.grid.size(); ++g)
      if (out_.grid[g].steps > 1) fastest = static_cast<int>(g);
    if (fastest < 0) return;
    const int fast_tile = out_.grid[fastest].tile;
    for (PallasSlot& s : out_.slots) {
      if (s.mode != PallasSlot::Resident || s.written || s.loop_tile < 0) continue;
      bool depends = false;
      for (const ir::IndexItem& ix : s.first->index) {
        if (ix.kind == ir::IndexItem::Tile) depends |= ix.tile == fast_tile || fn_.tiles[ix.tile].parent == fast_tile;
        if (ix.kind == ir::IndexItem::Scalar) {
          const Op* d = def(ix.value);
          depends |= !d || (d->kind != OpKind::Constant && d->tile == fast_tile);
        }
      }
      if (!depends) s.buffers = 1;
    }
  }

  // Two read-only resident slots whose BlockSpecs would be the same (tensor, block, buffers, and
  // at every dim the same block index: 0 along each one's own loop, whose whole extent the
  // block holds; the same launch tile or scalar index map elsewhere) are one copy in VMEM: the
  // later one shares the earlier one's operand. Each still slices the block by its own loop.
  void share_resident_copies() {
    auto shareable = [](const PallasSlot& s) {
      return s.mode == PallasSlot::Resident && s.read && !s.written && !s.keeps_prior && !s.whole_tensor &&
             s.atomic == ir::AtomicFn::none && s.loop_tile >= 0 && s.trip_tiles.empty() && s.shares < 0;
    };
    for (size_t j = 0; j < out_.slots.size(); ++j) {
      PallasSlot& b = out_.slots[j];
      if (!shareable(b)) continue;
      for (size_t i = 0; i < j; ++i) {
        const PallasSlot& a = out_.slots[i];
        if (!shareable(a) || a.tensor != b.tensor || a.block != b.block || a.buffers != b.buffers) continue;
        if (!same_block_index(a, b)) continue;
        b.shares = static_cast<int>(i);
        break;
      }
    }
  }

  // A trace-time loop (resident, or with no blocks of its own) of more than kMaxUnrolledTrips
  // trips runs as a fori_loop over its whole trips (then its ragged last trip, if any, at a
  // static offset): the S=8192 resident attention would otherwise be 128 unrolled dots. Its
  // trips slice the resident blocks at an offset known at run time only, which Mosaic takes
  // along a block's last two dims only at a multiple of the VMEM tile (128 lanes; 8 rows of 32
  // bits, 16 of 16 bits): a loop whose range start or block is not is left unrolled (static
  // slices may sit anywhere). Row DMAs (gather.h) slice their buffers statically: unrolled too.
  void plan_rolled_loops() {
    ir::walk(L_.op->body, [&](const Op& op) {
      if (op.kind != OpKind::Loop || &op == out_.grid_loop) return;
      const int tile = op.loop_tiles[0];
      const ir::TileInfo& t = fn_.tiles[tile];
      const InnerLoop* il = L_.inner_loop(tile);
      if (t.is_jagged() || t.parent >= 0 || !il) return;
      const int64_t b = std::min(p_.block_of_tile(tile), t.extent());
      if (t.extent() / b <= kMaxUnrolledTrips) return;
      bool own_blocks = false, aligned = true;
      for (const PallasSlot& s : out_.slots) {
        const bool own = s.loop_tile == tile;
        own_blocks |= own;
        if (!(own && s.mode == PallasSlot::Resident) &&
            std::find(s.trip_tiles.begin(), s.trip_tiles.end(), tile) == s.trip_tiles.end())
          continue;
        for (size_t d = 0; d < s.first->index.size(); ++d) {
          const ir::IndexItem& ix = s.first->index[d];
          if (ix.kind != ir::IndexItem::Tile || ix.tile != tile || s.block[d] < 0) continue;
          int rank_pos = 0;
          for (size_t e = d + 1; e < s.block.size(); ++e) rank_pos += s.block[e] >= 0;
          const int64_t align = rank_pos == 0   ? 128
                                : rank_pos == 1 ? tpu_sublane_tile(vmem_dtype_bytes(fn_.tensors[s.tensor].dtype))
                                                : 1;
          aligned &= t.begin % align == 0 && b % align == 0;
        }
      }
      if (own_blocks && il->strategy != Strategy::Resident) return;  // (pipelined: emit_pipeline)
      bool row_dmas = false;
      ir::walk(op.body, [&](const Op& o) { row_dmas |= out_.dma_rows_of.count(&o) > 0; });
      if (aligned && !row_dmas) out_.rolled_loops.insert(tile);
    });
  }

  bool same_block_index(const PallasSlot& a, const PallasSlot& b) {
    const std::vector<ir::IndexItem>&x = a.first->index, &y = b.first->index;
    if (x.size() != y.size()) return false;
    for (size_t d = 0; d < x.size(); ++d) {
      if (x[d].kind != y[d].kind || x[d].kind == ir::IndexItem::Gather) return false;
      if (x[d].kind == ir::IndexItem::Tile) {
        const bool own_a = x[d].tile == a.loop_tile, own_b = y[d].tile == b.loop_tile;
        if (own_a != own_b) return false;
        if (own_a) {  // (the whole dim at index 0, as the loop's range lies anywhere in it)
          if (a.block[d] != fn_.tensors[a.tensor].shape[d]) return false;
          continue;
        }
        if (x[d].tile != y[d].tile) return false;
      }
      if (!same_scalar_block(x[d], y[d])) return false;
    }
    return true;
  }

  void account() {
    std::string detail;
    auto item = [&](const std::string& what, int n, int64_t bytes) {
      out_.vmem_bytes += n * bytes;
      detail += (detail.empty() ? "" : ", ") + what + " " + std::to_string(n) + " x " + format_bytes(bytes);
    };
    for (const PallasSlot& s : out_.slots) {
      if (s.mode == PallasSlot::Dma || s.mode == PallasSlot::Smem || s.mode == PallasSlot::Hbm)
        continue;                   // in HBM, in SMEM (an Hbm slot's buffers are counted below)
      if (s.shares >= 0) continue;  // (another slot's copy)
      std::string what =
          fn_.tensors[s.tensor].name + (s.mode == PallasSlot::Grid ? "" : std::string(" ") + mode_name(s.mode));
      // (outputs of a pipeline are double-buffered at most: see the pallas emitter)
      item(what, s.mode == PallasSlot::Pipeline && !s.written ? s.buffers : std::min(s.buffers, 2), s.block_bytes);
      // The prior contents of a block that stores keep in part come in as an input of their own
      // (counted whether or not the tensor has contents yet: the emitter decides that).
      if (s.keeps_prior && s.written && !s.read) item(what + " prior", 2, s.block_bytes);
    }
    int64_t vars = 0, big1 = 0, big2 = 0;
    for (const ir::VarInfo& v : fn_.vars) {
      bool here = false;
      ir::walk(L_.op->body, [&](const Op& op) { here |= op.kind == OpKind::VarDecl && op.var == v.id; });
      // (a lane-dense Var holds 128 lanes per row: row_stats.h)
      if (here) vars += value_bytes(v.type) * (out_.row_stats.vars.count(v.id) ? 128 : 1);
    }
    ir::walk(L_.op->body, [&](const Op& op) {
      if (op.result < 0 || op.kind == OpKind::Load) return;
      int64_t b = value_bytes(fn_.type_of(op.result));
      if (b > big1) {
        big2 = big1;
        big1 = b;
      } else if (b > big2) {
        big2 = b;
      }
    });
    // A gather's one-hot matrix (index block x the gathered dim, f32) is built in VMEM too.
    int64_t onehot = 0;
    ir::walk(L_.op->body, [&](const Op& op) {
      if (op.kind != OpKind::Load || out_.dma_rows_of.count(&op)) return;
      for (size_t d = 0; d < op.index.size(); ++d)
        if (op.index[d].kind == ir::IndexItem::Gather) {
          ir::Type it = fn_.type_of(op.index[d].value);
          onehot = std::max(onehot, value_bytes(it) * fn_.tensors[op.tensor].shape[d]);
        }
    });
    // (so is an atomic update's through an index block into a rank-1 table: _atomic_rows)
    ir::walk(L_.op->body, [&](const Op& op) {
      if (!ir::is_atomic(op) || !ir::has_gather(op) || op.index.size() != 1) return;
      onehot = std::max(onehot, value_bytes(fn_.type_of(op.index[0].value)) * fn_.tensors[op.tensor].shape[0]);
    });
    if (onehot) item("one-hot", 1, onehot);
    for (const DmaRows& g : out_.dma_rows) item(fn_.tensors[g.op->tensor].name + " dma rows", 1, g.buffer_bytes);
    if (vars) item("scratch", 1, vars);
    if (big1 + big2) item("intermediates", 1, big1 + big2);
    if (out_.comm.vmem_bytes) item("landing and staging buffers", 1, out_.comm.vmem_bytes);
    out_.vmem_detail = detail;
  }

  int64_t value_bytes(const ir::Type& t) const {
    int64_t n = 1;
    for (const ir::Dim& d : t.shape)
      if (d.kind == ir::Dim::Const)
        n *= d.size;
      else if (!pallas_unit_tile(p_, d.tile))
        n *= p_.block_of_tile(d.tile);
    return n * vmem_dtype_bytes(t.dtype);
  }

  const BlockProgram& p_;
  const ir::Function& fn_;
  const LaunchPlan& L_;
  PallasLaunch out_;
  std::map<int, const Op*> defs_;
};

}  // namespace

std::vector<PallasLaunch> plan_pallas(const BlockProgram& p) {
  std::vector<PallasLaunch> out;
  for (const LaunchPlan& L : p.launches) out.push_back(Planner(p, L).run());
  return out;
}

}  // namespace parhelion::backend::pallas

#include "backend/pallas/plan.h"

#include <algorithm>
#include <map>
#include <set>

#include "backend/pallas/gather.h"
#include "ir/printer.h"
#include "parhelion/error.h"
#include "runtime/format_bytes.h"

namespace parhelion::backend::pallas {

using ir::Op;
using ir::OpKind;
using lower::BlockProgram;
using lower::InnerLoop;
using lower::LaunchPlan;
using lower::Strategy;

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
  }
  return "?";
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
    visit(L_.op->body, nullptr);
    check_outputs();
    account();
    return std::move(out_);
  }

 private:
  void unsupported(const Op& op, const std::string& what) {
    throw UserError(op.loc.str() + ": the pallas backend does not support " + what + " yet (kernel " + fn_.name + ")");
  }

  void visit(const std::vector<Op>& body, const Op* loop) {
    for (const Op& op : body) {
      if (op.kind == OpKind::Loop) {
        if (op.loop_tiles.size() != 1) unsupported(op, "inner loops over several tiles at once");
        if (loop) unsupported(op, "nested inner loops");
        const ir::TileInfo& t = fn_.tiles[op.loop_tiles[0]];
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
        visit(op.body, &op);
        continue;
      }
      if (op.kind == OpKind::Load || op.kind == OpKind::Store) add(op, loop);
      if (op.kind == OpKind::Dot) check_dot(op);
    }
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
  std::string index_map_of(int v) {
    const Op* d = def(v);
    if (!d) return "";
    if (d->kind == OpKind::Constant) return std::to_string(static_cast<int64_t>(d->number));
    if (d->kind == OpKind::TileId &&
        std::find(L_.op->loop_tiles.begin(), L_.op->loop_tiles.end(), d->tile) != L_.op->loop_tiles.end())
      return "g_" + ir::tile_name(fn_, d->tile);
    return "";
  }

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
    const ir::TensorInfo& t = fn_.tensors[op.tensor];
    int loop_tile = -1;
    // A masked store would need a read-modify-write of its block (an output block is written
    // back whole): not emitted yet. A scatter is per-row DMAs into the output in HBM (gather.h).
    if (op.kind == OpKind::Store && ir::is_masked(op)) unsupported(op, "a masked store (ph::store)");
    if (op.kind == OpKind::Store && ir::has_gather(op)) return add_dma_rows(op, true);
    if (op.kind == OpKind::Load && ir::has_gather(op)) {
      if (p_.gather_strategy(op) == kGatherDma) return add_dma_rows(op, false);
      check_gather(op, loop);
    }
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
        // Cut from a whole-dim block in VMEM at a static offset. A TPU kernel cannot report an
        // out-of-range start, and a store would write back the rest of the whole-dim block.
        if (op.kind == OpKind::Store) unsupported(op, "storing into a ph::slice");
        const Op* start = def(ix.value);
        if (!start || start->kind != OpKind::Constant) unsupported(op, "a ph::slice with a computed start");
      }
      if (ix.kind == ir::IndexItem::Tile) {
        const ir::TileInfo& ti = fn_.tiles[ix.tile];
        if (ti.begin != 0) unsupported(op, "tiles of a range that does not start at 0");
        if (loop && ix.tile == loop->loop_tiles[0]) loop_tile = ix.tile;
      }
    }
    // Loads and stores of one tensor at the same tile indices, in the same loop, share a slot.
    for (size_t k = 0; k < out_.slots.size(); ++k) {
      PallasSlot& s = out_.slots[k];
      if (s.tensor != op.tensor || s.loop_tile != loop_tile || s.mode == PallasSlot::Dma ||
          !same_tiles(s.first->index, op.index))
        continue;
      (op.kind == OpKind::Load ? s.read : s.written) = true;
      out_.slot_of[&op] = static_cast<int>(k);
      return;
    }
    PallasSlot s;
    s.tensor = op.tensor;
    s.first = &op;
    (op.kind == OpKind::Load ? s.read : s.written) = true;
    s.loop_tile = loop_tile;
    if (loop_tile >= 0) {
      const InnerLoop* il = L_.inner_loop(loop_tile);
      s.mode = il->strategy == Strategy::Pipeline   ? PallasSlot::Pipeline
               : il->strategy == Strategy::Resident ? PallasSlot::Resident
                                                    : PallasSlot::Grid;
      s.buffers = il->strategy == Strategy::Pipeline ? il->buffers : 2;
      for (const ir::IndexItem& ix : op.index)
        if (ix.kind == ir::IndexItem::Scalar && s.mode == PallasSlot::Pipeline)
          unsupported(op, "an integer index in a pipelined inner loop (give the loop the resident strategy)");
    }
    int64_t elems = 1;
    for (size_t d = 0; d < op.index.size(); ++d) {
      const ir::IndexItem& ix = op.index[d];
      int64_t b = t.shape[d];  // `all` and gathered dims: the whole dim is resident
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
    out_.slot_of[&op] = static_cast<int>(out_.slots.size());
    out_.slots.push_back(std::move(s));
  }

  // A gather is a one-hot matmul against the gathered dim, resident whole in VMEM (the slot's
  // block spans it): one index block, a block of rank 1 or 2 around it, at grid level, from a
  // floating tensor (an out-of-range index gives NaN, which an integer cannot hold).
  void check_gather(const Op& op, const Op* loop) {
    if (loop) {
      const std::string why = dma_gather_refusal(fn_, op);
      unsupported(op,
                  "a one-hot gather inside an inner loop (its table would be resident in VMEM for every trip): "
                  "give this gather the strategy \"dma\" (config gathers[" +
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
  void account() {
    std::string detail;
    auto item = [&](const std::string& what, int n, int64_t bytes) {
      out_.vmem_bytes += n * bytes;
      detail += (detail.empty() ? "" : ", ") + what + " " + std::to_string(n) + " x " + format_bytes(bytes);
    };
    for (const PallasSlot& s : out_.slots) {
      if (s.mode == PallasSlot::Dma) continue;  // in HBM
      std::string what =
          fn_.tensors[s.tensor].name + (s.mode == PallasSlot::Grid ? "" : std::string(" ") + mode_name(s.mode));
      // (outputs of a pipeline are double-buffered at most: see the pallas emitter)
      item(what, s.mode == PallasSlot::Pipeline && !s.written ? s.buffers : std::min(s.buffers, 2), s.block_bytes);
    }
    int64_t vars = 0, big1 = 0, big2 = 0;
    for (const ir::VarInfo& v : fn_.vars) {
      bool here = false;
      ir::walk(L_.op->body, [&](const Op& op) { here |= op.kind == OpKind::VarDecl && op.var == v.id; });
      if (here) vars += value_bytes(v.type);
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
    if (onehot) item("one-hot", 1, onehot);
    for (const DmaRows& g : out_.dma_rows) item(fn_.tensors[g.op->tensor].name + " dma rows", 1, g.buffer_bytes);
    if (vars) item("scratch", 1, vars);
    if (big1 + big2) item("intermediates", 1, big1 + big2);
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

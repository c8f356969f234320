#include "lower/pallas_plan.h"

#include <algorithm>

#include "ir/printer.h"
#include "parhelion/error.h"

namespace parhelion::lower {

using ir::Op;
using ir::OpKind;

bool pallas_unit_tile(const BlockProgram& p, int tile) {
  const ir::TileInfo& t = p.fn->tiles[tile];
  return t.is_grid || p.fn->block_sizes[t.block].fixed == 1;
}

namespace {

int64_t vmem_dtype_bytes(DType d) { return d == DType::i64 ? 4 : dtype_size(d); }

class Planner {
 public:
  Planner(const BlockProgram& p, const LaunchPlan& L) : p_(p), fn_(*p.fn), L_(L) {}

  PallasLaunch run() {
    out_.index = L_.index;
    out_.plan = &L_;
    visit(L_.op->body, nullptr);
    account();
    return std::move(out_);
  }

 private:
  const InnerLoop* inner(int tile) const {
    for (const InnerLoop& il : L_.inner_loops)
      if (il.tile == tile) return &il;
    return nullptr;
  }

  void unsupported(const Op& op, const std::string& what) {
    throw UserError(op.loc.str() + ": the pallas backend does not support " + what + " yet (kernel " + fn_.name + ")");
  }

  void visit(const std::vector<Op>& body, const Op* loop) {
    for (const Op& op : body) {
      if (op.kind == OpKind::Loop) {
        if (op.loop_tiles.size() != 1) unsupported(op, "inner loops over several tiles at once");
        if (loop) unsupported(op, "nested inner loops");
        visit(op.body, &op);
        continue;
      }
      if (op.kind == OpKind::Load || op.kind == OpKind::Store) add(op, loop);
    }
  }

  void add(const Op& op, const Op* loop) {
    const ir::TensorInfo& t = fn_.tensors[op.tensor];
    int loop_tile = -1;
    for (const ir::IndexItem& ix : op.index) {
      if (ix.kind == ir::IndexItem::Scalar) unsupported(op, "indexing with a computed integer");
      if (ix.kind == ir::IndexItem::Tile) {
        const ir::TileInfo& ti = fn_.tiles[ix.tile];
        if (ti.begin != 0) unsupported(op, "tiles of a range that does not start at 0");
        if (loop && ix.tile == loop->loop_tiles[0]) loop_tile = ix.tile;
      }
    }
    std::string sig = std::to_string(op.tensor) + "@" + std::to_string(loop_tile);
    for (const ir::IndexItem& ix : op.index)
      sig += "," + std::to_string(static_cast<int>(ix.kind)) + ":" + std::to_string(ix.tile);
    if (auto it = by_sig_.find(sig); it != by_sig_.end()) {
      PallasSlot& s = out_.slots[it->second];
      (op.kind == OpKind::Load ? s.read : s.written) = true;
      out_.slot_of[&op] = it->second;
      return;
    }
    PallasSlot s;
    s.tensor = op.tensor;
    s.first = &op;
    (op.kind == OpKind::Load ? s.read : s.written) = true;
    s.loop_tile = loop_tile;
    s.strategy = "grid";
    if (loop_tile >= 0) {
      const InnerLoop* il = inner(loop_tile);
      s.strategy = il->strategy;
      s.buffers = il->strategy == "pipeline" ? il->buffers : 2;
    }
    int64_t elems = 1;
    for (size_t d = 0; d < op.index.size(); ++d) {
      const ir::IndexItem& ix = op.index[d];
      int64_t b = t.shape[d];
      if (ix.kind == ir::IndexItem::Tile) {
        if (pallas_unit_tile(p_, ix.tile)) {
          s.block.push_back(-1);
          continue;
        }
        if (!(ix.tile == loop_tile && s.strategy == "resident")) b = std::min(p_.block_of_tile(ix.tile), t.shape[d]);
      }
      s.block.push_back(b);
      elems *= b;
    }
    s.block_bytes = elems * dtype_size(t.dtype);
    by_sig_[sig] = static_cast<int>(out_.slots.size());
    out_.slot_of[&op] = static_cast<int>(out_.slots.size());
    out_.slots.push_back(std::move(s));
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
      std::string what = fn_.tensors[s.tensor].name + (s.strategy == "grid" ? "" : " " + s.strategy);
      // (outputs of a pipeline are double-buffered at most: see the pallas emitter)
      item(what, s.strategy == "pipeline" && !s.written ? s.buffers : std::min(s.buffers, 2), s.block_bytes);
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
  std::map<std::string, int> by_sig_;
};

}  // namespace

std::vector<PallasLaunch> plan_pallas(const BlockProgram& p) {
  std::vector<PallasLaunch> out;
  for (const LaunchPlan& L : p.launches) out.push_back(Planner(p, L).run());
  return out;
}

}  // namespace parhelion::lower

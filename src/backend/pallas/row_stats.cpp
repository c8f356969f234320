#include "backend/pallas/row_stats.h"

#include <vector>

#include "backend/pallas/plan.h"  // (pallas_unit_tile)

namespace parhelion::backend::pallas {
namespace {

using ir::Dim;
using ir::Op;
using ir::OpKind;

class RowStatsPlanner {
 public:
  RowStatsPlanner(const lower::BlockProgram& p, const Op& launch) : p_(p), fn_(*p.fn), launch_(launch) {}

  RowStats run() {
    // Every f32 Var of rank 1 or more (in the value: unit tiles are squeezed) may be lane-dense;
    // drop those set from a value that is not a column until none is.
    ir::walk(launch_.body, [&](const Op& op) {
      if (op.kind == OpKind::VarDecl && fn_.vars[op.var].type.dtype == DType::f32 &&
          !kept(fn_.vars[op.var].type.shape).empty())
        out_.vars.insert(op.var);
    });
    for (bool changed = true; changed;) {
      out_.columns.clear();
      changed = false;
      std::set<int> dropped;
      walk(launch_.body, &dropped);
      for (int v : dropped) changed |= out_.vars.erase(v) > 0;
    }
    return std::move(out_);
  }

 private:
  std::vector<Dim> kept(const std::vector<Dim>& shape) const {
    std::vector<Dim> k;
    for (const Dim& d : shape)
      if (!(d.kind == Dim::Tile && pallas_unit_tile(p_, d.tile))) k.push_back(d);
    return k;
  }
  std::vector<Dim> kept_of(int value) const { return kept(fn_.type_of(value).shape); }

  // Program order, into loop and `when` bodies (a value defined in one is used only there).
  void walk(const std::vector<Op>& body, std::set<int>* dropped) {
    for (const Op& op : body) {
      if (!op.body.empty()) walk(op.body, dropped);
      if (op.kind == OpKind::VarSet && out_.vars.count(op.var) && !out_.columns.count(op.operands[0]))
        dropped->insert(op.var);
      if (op.result >= 0 && column(op)) out_.columns.insert(op.result);
    }
  }

  bool column(const Op& op) const {
    const std::vector<Dim> r = kept_of(op.result);
    switch (op.kind) {
      case OpKind::Reduce: {
        // Over the last dim of a block of rank 2 or more, not a unit tile (which is the value).
        const ir::Type& in = fn_.type_of(op.operands[0]);
        const std::vector<Dim> k = kept(in.shape);
        const Dim& d = in.shape[op.axis];
        return !op.keepdim && k.size() >= 2 && !out_.columns.count(op.operands[0]) &&
               !(d.kind == Dim::Tile && pallas_unit_tile(p_, d.tile)) && kept_axis(in.shape, op.axis) + 1 == k.size() &&
               fn_.type_of(op.result).dtype == DType::f32;
      }
      case OpKind::VarGet:
        return out_.vars.count(op.var) > 0;
      case OpKind::Unary:
      case OpKind::Binary:
      case OpKind::Where:
      case OpKind::Cast: {
        if (op.kind == OpKind::Binary && (static_cast<ir::BinaryFn>(op.fn) == ir::BinaryFn::rand ||
                                          static_cast<ir::BinaryFn>(op.fn) == ir::BinaryFn::randn))
          return false;
        // Every operand a column or a scalar: a Var whose reads are assumed columns is kept so
        // only when what is set into it comes from row reductions (acc + a.b is no column).
        if (r.empty()) return false;
        bool any = false;
        for (int x : op.operands) {
          const std::vector<Dim> k = kept_of(x);
          if (k.empty()) continue;
          if (k != r || !out_.columns.count(x)) return false;
          any = true;
        }
        return any;
      }
      default:
        return false;
    }
  }

  size_t kept_axis(const std::vector<Dim>& shape, int axis) const {
    size_t a = 0;
    for (int i = 0; i < axis; ++i) a += !(shape[i].kind == Dim::Tile && pallas_unit_tile(p_, shape[i].tile));
    return a;
  }

  const lower::BlockProgram& p_;
  const ir::Function& fn_;
  const Op& launch_;
  RowStats out_;
};

}  // namespace

RowStats plan_row_stats(const lower::BlockProgram& p, const ir::Op& launch) { return RowStatsPlanner(p, launch).run(); }

}  // namespace parhelion::backend::pallas

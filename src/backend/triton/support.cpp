#include "backend/triton/support.h"

#include <string>

#include "parhelion/error.h"

namespace parhelion::backend::triton {

namespace {

using ir::Op;
using ir::OpKind;

[[noreturn]] void refuse(const Op& op, const std::string& what) {
  throw UserError(op.loc.str() + ": the triton backend does not support " + what +
                  " yet (docs/triton.md lists what it emits); use --target cpu or --target pallas for this kernel");
}

// An index item the backend addresses: a tile, a whole dim, a scalar or slice start that the
// kernel cannot compute out of range (a constant, or a block's first index).
void check_index(const ir::Function& fn, const Op& op, const std::map<int, const Op*>& defs) {
  for (const ir::IndexItem& ix : op.index) {
    if (ix.kind == ir::IndexItem::Gather) refuse(op, "gathers and scatters (an index through a block of indices)");
    if (ix.kind == ir::IndexItem::Tile) {
      const ir::TileInfo& t = fn.tiles[ix.tile];
      if (t.parent >= 0) refuse(op, "tiles within a tile's block (ph::tile(outer))");
      if (ir::jagged_root(fn, ix.tile) >= 0) refuse(op, "jagged tiles (ranges computed in the kernel)");
    }
    if (ix.kind == ir::IndexItem::Scalar || ix.kind == ir::IndexItem::Slice) {
      auto d = defs.find(ix.value);
      const bool safe =
          d != defs.end() && (d->second->kind == OpKind::Constant || d->second->kind == OpKind::TileBegin);
      if (!safe)
        refuse(op,
               "an index computed in the kernel (it must be checked against its dim, which the generated code "
               "cannot report yet)");
    }
  }
}

}  // namespace

void check_supported(const lower::BlockProgram& p) {
  const ir::Function& fn = *p.fn;
  std::map<int, const Op*> defs;
  ir::walk(fn.body, [&](const Op& op) {
    if (op.result >= 0) defs[op.result] = &op;
  });
  ir::walk(fn.body, [&](const Op& op) {
    switch (op.kind) {
      case OpKind::Load:
      case OpKind::Store:
        if (ir::is_atomic(op)) refuse(op, "atomic updates");
        check_index(fn, op, defs);
        break;
      case OpKind::Loop:
        if (!op.operands.empty() || op.loop_tiles.size() != 1) refuse(op, "jagged loops");
        if (fn.tiles[op.loop_tiles[0]].parent >= 0) refuse(op, "loops over a tile's block (ph::tile(outer))");
        break;
      case OpKind::Launch:
        for (int t : op.loop_tiles)
          if (fn.tiles[t].parent >= 0 || fn.tiles[t].is_jagged()) refuse(op, "this launch's tiles");
        break;
      case OpKind::Scan:
        refuse(op, "scans");
      case OpKind::Reshape:
      case OpKind::Permute:
      case OpKind::Expand:
      case OpKind::Squeeze:
      case OpKind::Split:
      case OpKind::Join:
      case OpKind::Stack:
      case OpKind::Cat:
        refuse(op, "block views (" + std::string(ir::op_name(op)) + ")");
      case OpKind::Binary:
        if (static_cast<ir::BinaryFn>(op.fn) == ir::BinaryFn::rand ||
            static_cast<ir::BinaryFn>(op.fn) == ir::BinaryFn::randn)
          refuse(op, "random numbers (ph::rand, ph::randn)");
        break;
      default:
        break;
    }
  });
}

}  // namespace parhelion::backend::triton

#include "backend/triton/support.h"

#include <string>

#include "parhelion/dtype.h"
#include "parhelion/error.h"

namespace parhelion::backend::triton {

namespace {

using ir::Op;
using ir::OpKind;

[[noreturn]] void refuse(const Op& op, const std::string& what) {
  throw UserError(op.loc.str() + ": the triton backend does not support " + what +
                  " yet (docs/triton.md lists what it emits); use --target cpu or --target pallas for this kernel");
}

// An index item the backend addresses: a tile (within a jagged tile's range only as that tile),
// a whole dim, a scalar, a slice or a block of indices (computed ones are checked against their
// dim at run time: codegen.cpp, checked_index).
void check_index(const ir::Function& fn, const Op& op) {
  for (const ir::IndexItem& ix : op.index) {
    if (ix.kind != ir::IndexItem::Tile) continue;
    const ir::TileInfo& t = fn.tiles[ix.tile];
    if (ir::jagged_root(fn, ix.tile) >= 0 && !t.is_jagged()) refuse(op, "tiles within a jagged tile's range");
  }
}

}  // namespace

void check_supported(const lower::BlockProgram& p) {
  const ir::Function& fn = *p.fn;
  ir::walk(fn.body, [&](const Op& op) {
    switch (op.kind) {
      case OpKind::Load:
      case OpKind::Store:
        if (ir::is_atomic(op)) {
          const DType d = fn.tensors[op.tensor].dtype;
          // (Triton has atomic adds of f16, not max or min of it; bf16 adds compile, but its
          // interpreter cannot run them, so nothing here would verify them)
          if (d == DType::f16 && ir::atomic_fn(op) != ir::AtomicFn::add)
            refuse(op, std::string(ir::atomic_name(ir::atomic_fn(op))) +
                           " of f16 tensors (Triton has atomic adds of them, and max and min of f32, i32 and i64)");
          if (d != DType::f32 && d != DType::i32 && d != DType::i64 && d != DType::f16)
            refuse(op, "atomic updates of " + std::string(dtype_name(d)) +
                           " tensors (f32, i32 and i64 ones are, and atomic adds of f16)");
        }
        check_index(fn, op);
        break;
      case OpKind::Loop:
        if (op.loop_tiles.size() != 1) refuse(op, "loops over several tiles at once");
        if (!op.operands.empty() && !fn.tiles[op.loop_tiles[0]].is_jagged()) refuse(op, "this loop's range");
        break;
      case OpKind::Launch:
        for (int t : op.loop_tiles)
          if (fn.tiles[t].parent >= 0 || fn.tiles[t].is_jagged()) refuse(op, "this launch's tiles");
        break;
      case OpKind::Reshape:  // (a dim of n, not a power of two, is padded: its elements would move)
        for (int v : {op.operands[0], op.result})
          for (const ir::Dim& d : fn.type_of(v).shape)
            if (d.kind == ir::Dim::Const && (d.size & (d.size - 1)) != 0)
              refuse(op, "reshaping a block with a dim of " + std::to_string(d.size) + " (not a power of two)");
        break;
      case OpKind::Stack:
      case OpKind::Cat:
        refuse(op, "block views (" + std::string(ir::op_name(op)) + ")");
      default:
        break;
    }
  });
}

}  // namespace parhelion::backend::triton

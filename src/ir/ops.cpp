// Names of ops and functions, shared by the printer, the verifier and the backends.
#include "ir/ir.h"
#include "parhelion/error.h"

namespace parhelion::ir {

std::string_view op_name(const Op& op) {
  switch (op.kind) {
    case OpKind::Alloc:
      return op.has_fill ? "full" : "empty";
    case OpKind::Launch:
      return "launch";
    case OpKind::Loop:
      return "loop";
    case OpKind::Load:
      return "load";
    case OpKind::Store:
      return atomic_name(atomic_fn(op));
    case OpKind::Constant:
      return "const";
    case OpKind::ScalarParam:
      return "scalar_param";
    case OpKind::TileBegin:
      return "tile_begin";
    case OpKind::TileEnd:
      return "tile_end";
    case OpKind::TileIndex:
      return "tile_index";
    case OpKind::Arange:
      return "arange";
    case OpKind::Full:
      return "full";
    case OpKind::Unary:
      return unary_name(static_cast<UnaryFn>(op.fn));
    case OpKind::Binary:
      return binary_name(static_cast<BinaryFn>(op.fn));
    case OpKind::Where:
      return "where";
    case OpKind::Cast:
      return "cast";
    case OpKind::Reduce:
      return reduce_name(static_cast<ReduceFn>(op.fn));
    case OpKind::Unsqueeze:
      return "unsqueeze";
    case OpKind::Dot:
      return "dot";
    case OpKind::Transpose:
      return "transpose";
    case OpKind::VarDecl:
      return "var";
    case OpKind::VarGet:
      return "var_get";
    case OpKind::VarSet:
      return "var_set";
    case OpKind::Reshape:
      return "reshape";
    case OpKind::Permute:
      return "permute";
    case OpKind::Expand:
      return "expand";
    case OpKind::Squeeze:
      return "squeeze";
    case OpKind::Split:
      return "split";
    case OpKind::Join:
      return "join";
    case OpKind::Stack:
      return "stack";
    case OpKind::Cat:
      return "cat";
    case OpKind::View:
      return "view";
    case OpKind::TileId:
      return "tile_id";
    case OpKind::If:
      return "if";
    case OpKind::Scan:
      return "scan";
    case OpKind::DeviceIndex:
      return "device_index";
    case OpKind::CopyStart:
      return "copy_start";
    case OpKind::CopyWait:
      return static_cast<CopyEnd>(op.fn) == CopyEnd::send ? "copy_wait_send" : "copy_wait_recv";
    case OpKind::Barrier:
      return "barrier";
    case OpKind::Signal:
      return "signal";
    case OpKind::SemWait:
      return "wait";
  }
  throw InternalError("unknown op kind");
}

std::string_view unary_name(UnaryFn f) {
  static constexpr std::string_view names[] = {"neg",  "exp",   "log", "sqrt",       "rsqrt",   "tanh",  "sigmoid",
                                               "silu", "gelu",  "abs", "not",        "bit_not", "round", "floor",
                                               "ceil", "trunc", "erf", "gelu_exact", "exp2"};
  return names[static_cast<int>(f)];
}

std::string_view binary_name(BinaryFn f) {
  static constexpr std::string_view names[] = {
      "add", "sub", "mul", "div",      "maximum", "minimum", "pow",    "lt",      "le",  "gt",  "ge",   "eq",
      "ne",  "and", "or",  "floordiv", "mod",     "bit_and", "bit_or", "bit_xor", "shl", "shr", "rand", "randn"};
  return names[static_cast<int>(f)];
}

std::string_view reduce_name(ReduceFn f) {
  static constexpr std::string_view names[] = {"sum", "amax", "amin", "mean"};
  return names[static_cast<int>(f)];
}

bool uses_random(const Function& fn) {
  bool any = false;
  walk(fn.body, [&](const Op& op) {
    any |= op.kind == OpKind::Binary &&
           (static_cast<BinaryFn>(op.fn) == BinaryFn::rand || static_cast<BinaryFn>(op.fn) == BinaryFn::randn);
  });
  return any;
}

bool is_comparison(BinaryFn f) {
  return f == BinaryFn::lt || f == BinaryFn::le || f == BinaryFn::gt || f == BinaryFn::ge || f == BinaryFn::eq ||
         f == BinaryFn::ne;
}

bool is_cheap_unary(UnaryFn f) {
  switch (f) {
    case UnaryFn::neg:
    case UnaryFn::abs:
    case UnaryFn::logical_not:
    case UnaryFn::bit_not:
    case UnaryFn::round:
    case UnaryFn::floor:
    case UnaryFn::ceil:
    case UnaryFn::trunc:
      return true;
    default:
      return false;
  }
}

bool has_gather(const Op& op) {
  for (const IndexItem& ix : op.index)
    if (ix.kind == IndexItem::Gather) return true;
  return false;
}

int jagged_root(const Function& fn, int tile) {
  for (int t = tile; t >= 0; t = fn.tiles.at(t).parent)
    if (fn.tiles[t].is_jagged()) return t;
  return -1;
}

bool indexes_jagged_tile(const Function& fn, const Op& op) {
  for (const IndexItem& ix : op.index)
    if (ix.kind == IndexItem::Tile && jagged_root(fn, ix.tile) >= 0) return true;
  return false;
}

bool is_atomic(const Op& op) { return op.kind == OpKind::Store && op.fn != 0; }
AtomicFn atomic_fn(const Op& op) { return op.kind == OpKind::Store ? static_cast<AtomicFn>(op.fn) : AtomicFn::none; }

std::string_view atomic_name(AtomicFn f) {
  switch (f) {
    case AtomicFn::none:
      return "store";
    case AtomicFn::add:
      return "atomic_add";
    case AtomicFn::max:
      return "atomic_max";
    case AtomicFn::min:
      return "atomic_min";
  }
  return "?";
}

bool is_masked(const Op& op) {
  return (op.kind == OpKind::Load && op.operands.size() == 2) || (op.kind == OpKind::Store && op.operands.size() == 2);
}

bool is_pointwise(OpKind k) {
  switch (k) {
    case OpKind::Load:
    case OpKind::Constant:
    case OpKind::Full:
    case OpKind::TileIndex:
    case OpKind::Arange:
    case OpKind::Unary:
    case OpKind::Binary:
    case OpKind::Where:
    case OpKind::Cast:
    case OpKind::Unsqueeze:
    case OpKind::Transpose:
    case OpKind::VarGet:
    case OpKind::ScalarParam:
    case OpKind::TileBegin:
    case OpKind::TileEnd:
    case OpKind::Reshape:
    case OpKind::Permute:
    case OpKind::Expand:
    case OpKind::Squeeze:
    case OpKind::Split:
    case OpKind::Join:
    case OpKind::Stack:
    case OpKind::Cat:
    case OpKind::TileId:
      return true;
    default:
      return false;
  }
}

}  // namespace parhelion::ir

// The C++ expression of a block value at one element: fused pointwise trees inline into their
// consumer's innermost loop, loads from a tensor or from the staged buffer that holds it, and the
// dtype conversions on the way in and out of memory.

#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cpu/emit/launch_emitter.h"
#include "ir/type_rules.h"
#include "parhelion/error.h"

namespace parhelion::backend::cpu::emit {

std::string LaunchEmitter::expr(int v, const Idx& idx) {
  if (type(v).rank() == 0) return "s" + std::to_string(v);
  if (auto n = named_values_.find(v); n != named_values_.end()) return n->second;
  if (int m = L_.materialized(v); m >= 0) return read(scratch_ref(L_.scratch[m], idx), type(v).dtype);
  return op_expr(*def_.at(v), idx);
}

std::string LaunchEmitter::operand(const Op& op, int k, const Idx& idx) {
  int v = op.operands[k];
  return expr(v, broadcast(type(v).shape, idx));
}

// The expression of a pointwise op at element `idx` of its own shape.
std::string LaunchEmitter::op_expr(const Op& op, const Idx& idx) {
  DType rt = type(op.result).dtype;
  switch (op.kind) {
    case OpKind::Load:
      if (ir::is_masked(op)) return masked_load_expr(op, idx);
      return read(load_expr(op, idx), type(op.result).dtype);
    case OpKind::Constant:
    case OpKind::Full:
      return literal(op.number, rt);
    case OpKind::ScalarParam:  // an integer argument (ph::Int) is exact in the double it is passed as
      if (rt == DType::i64) return "static_cast<int64_t>(ph_scalars[" + std::to_string(op.param) + "])";
      return "sp" + std::to_string(op.param);
    case OpKind::TileBegin:
      return "off_" + tname(op.tile);
    case OpKind::TileEnd:
      return "(off_" + tname(op.tile) + " + n_" + tname(op.tile) + ")";
    case OpKind::TileIndex:
      return "(off_" + tname(op.tile) + " + " + idx[0] + ")";
    case OpKind::TileId: {
      // A launch's tile: its grid coordinate; a loop's: its trip, counted from the range's
      // start (the enclosing block's offset for a tile within another).
      const ir::TileInfo& t = fn_.tiles[op.tile];
      for (const lower::GridDim& g : L_.grid)
        if (g.tile == op.tile) return "g_" + tname(op.tile);
      const std::string base = t.parent >= 0   ? "off_" + tname(t.parent)
                               : t.is_jagged() ? "lo_" + tname(op.tile)
                                               : std::to_string(t.begin);
      return "((off_" + tname(op.tile) + " - " + base + ") / " + std::to_string(block_of(op.tile)) + ")";
    }
    case OpKind::Arange:
      return "static_cast<int64_t>(" + idx[0] + ")";
    case OpKind::DeviceIndex:
      return device_index_expr(op);
    case OpKind::VarGet: {
      const lower::Scratch& s = L_.scratch[L_.var_scratch.at(op.var)];
      return read(scratch_ref(s, idx), s.dtype);
    }
    case OpKind::Unary:
      return unary_expr(static_cast<UnaryFn>(op.fn), type(op.operands[0]).dtype, operand(op, 0, idx));
    case OpKind::Binary: {
      std::string a = operand(op, 0, idx), b = operand(op, 1, idx);
      if (const std::string r = random_row(op, a, b); !r.empty()) return r;
      // Division by a value hoisted out of the innermost loop (a row sum, a norm) becomes a
      // multiplication by its reciprocal, computed once: vdivps per element would bound
      // softmax-like kernels. Costs at most one extra rounding (<= 1 ulp more).
      if (static_cast<BinaryFn>(op.fn) == BinaryFn::div && rt == DType::f32 && is_hoisted(b) &&
          type(op.operands[1]).dtype == DType::f32)
        return "(" + a + " * (1.0f / " + b + "))";
      return binary_expr(static_cast<BinaryFn>(op.fn), rt, type(op.operands[0]).dtype, type(op.operands[1]).dtype, a,
                         b);
    }
    case OpKind::Where: {
      if (auto c = where_choice_.find(op.result); c != where_choice_.end() && c->second > 0) {  // decided here
        std::string chosen = operand(op, c->second, idx);
        if (rt == DType::f32 && type(op.operands[c->second]).dtype != DType::f32)
          chosen = "static_cast<float>(" + chosen + ")";
        return chosen;
      }
      std::string a = operand(op, 1, idx), b = operand(op, 2, idx);
      if (rt == DType::f32 && type(op.operands[1]).dtype != DType::f32) a = "static_cast<float>(" + a + ")";
      if (rt == DType::f32 && type(op.operands[2]).dtype != DType::f32) b = "static_cast<float>(" + b + ")";
      // Arms that read only their blocks' own elements are computed at every element and
      // blended: a load under a condition needs a masked load, which AVX2 has for 32- and 64-bit
      // elements only, and GCC leaves a loop with a conditional 16-bit load scalar (dropout bf16
      // [8192, 4096]: 395 -> 276 ms, AMD EPYC Zen 1, 2 threads). An arm that may read out of
      // range where it is not chosen stays behind the ternary.
      bool reads = false;
      if (rt == DType::f32 && speculatable(op.operands[1], reads) && speculatable(op.operands[2], reads) && reads)
        return "ph_rt::self(" + operand(op, 0, idx) + ", " + a + ", " + b + ")";
      return "(" + operand(op, 0, idx) + " ? " + a + " : " + b + ")";
    }
    case OpKind::Cast:
      return cast_expr(op.dtype, type(op.operands[0]).dtype, operand(op, 0, idx));
    case OpKind::Unsqueeze: {
      Idx inner = idx;
      inner.erase(inner.begin() + op.axis);
      return expr(op.operands[0], inner);
    }
    case OpKind::Transpose: {
      Idx inner = idx;
      std::swap(inner[inner.size() - 1], inner[inner.size() - 2]);
      return expr(op.operands[0], inner);
    }
    case OpKind::Reshape:
    case OpKind::Permute:
    case OpKind::Expand:
    case OpKind::Squeeze:
    case OpKind::Split:
    case OpKind::Join:
    case OpKind::Stack:
    case OpKind::Cat:
      return view_expr(op, idx);
    default:
      throw InternalError(std::string("no expression for op ") + std::string(ir::op_name(op)));
  }
}

// Whether block `v` may be computed at elements where a where does not choose it: its fused tree
// reads only its blocks' own elements (loads through tiles and whole dims, unmasked; buffers),
// which are in range at every element of the block. A gathered or sliced read, a scalar index or
// a masked load may be out of range there. `reads`: set where the tree reads a tensor.
bool LaunchEmitter::speculatable(int v, bool& reads) const {
  if (type(v).rank() == 0 || named_values_.count(v) || L_.materialized(v) >= 0) return true;
  const Op& op = *def_.at(v);
  switch (op.kind) {
    case OpKind::Load:
      if (ir::is_masked(op)) return false;
      for (const ir::IndexItem& ix : op.index)
        if (ix.kind != ir::IndexItem::Tile && ix.kind != ir::IndexItem::All) return false;
      reads = true;
      return true;
    case OpKind::Constant:
    case OpKind::Full:
    case OpKind::ScalarParam:
    case OpKind::TileBegin:
    case OpKind::TileEnd:
    case OpKind::TileIndex:
    case OpKind::TileId:
    case OpKind::Arange:
      return true;
    case OpKind::Cast:  // (a float out of an integer's range, converted, is undefined behaviour)
      if (is_integer(op.dtype) && !is_integer(type(op.operands[0]).dtype)) return false;
      return speculatable(op.operands[0], reads);
    case OpKind::Unary:
    case OpKind::Binary:  // (integer division and shifts are defined at every operand: codegen.cpp)
    case OpKind::Where:
    case OpKind::Unsqueeze:
    case OpKind::Transpose:
      return std::all_of(op.operands.begin(), op.operands.end(), [&](int o) { return speculatable(o, reads); });
    default:  // views (a cat reads its parts behind selects of its own), and anything else
      return false;
  }
}

// A load that an inner loop staged reads its buffer: the block dims row-major in the slot of
// the current trip (pipeline), or at the trip's offset within the whole extent (resident).
std::string LaunchEmitter::address(const Op& op, const Idx& idx) {
  if (op.kind == OpKind::Load) {
    if (int k = L_.staged_load(op.result); k >= 0) return stg_name(k) + "[" + staged_offset(k, idx) + "]";
  }
  return tensor_address(op, idx);
}

std::string LaunchEmitter::tensor_address(const Op& op, const Idx& idx) {
  return "T" + std::to_string(op.tensor) + "[" + tensor_offset(op, idx) + "]";
}

// The element offset in its tensor of element `idx` of the block `op` loads or stores.
std::string LaunchEmitter::tensor_offset(const Op& op, const Idx& idx) {
  const ir::TensorInfo& t = fn_.tensors[op.tensor];
  std::string s;
  size_t j = 0;
  for (size_t d = 0; d < op.index.size(); ++d) {
    const ir::IndexItem& ix = op.index[d];
    std::string pos;
    if (ix.kind == ir::IndexItem::Tile) {
      if (fn_.tiles[ix.tile].is_grid)
        pos = offset_prefix_ + tname(ix.tile);
      else
        pos = "(" + offset_prefix_ + tname(ix.tile) + " + " + idx[j++] + ")";
    } else if (ix.kind == ir::IndexItem::All) {
      pos = idx[j++];
    } else if (ix.kind == ir::IndexItem::Gather) {
      // Element j of the block reads position index[j]: checked here, per element, so that
      // only valid (and, under a mask, active) elements are checked and read.
      // (Hoisted, check included, out of a loop the index does not depend on: a gathered row.)
      pos = checked_position(op, d, expr(ix.value, {idx[j]}), ix.value, idx[j]);
      ++j;
      if (p_.config.index_checks) pos = read(pos, DType::i64);
    } else if (ix.kind == ir::IndexItem::Slice) {
      pos = "(" + expr(ix.value, {}) + " + " + idx[j++] + ")";
    } else if (ir::is_masked(op)) {
      // Under a mask a scalar index is checked where it is used (an inactive element's index
      // need not be in range), not where it is computed (index_checks.cpp skips these).
      pos = checked_position(op, d, expr(ix.value, {}));
    } else {
      pos = "(" + expr(ix.value, {}) + ")";
    }
    if (t.shape[d] == 1 && !ix.has_value()) continue;  // position is 0
    std::string term = t.strides[d] == 1 ? pos : pos + " * " + std::to_string(t.strides[d]);
    s += (s.empty() ? "" : " + ") + term;
  }
  return s.empty() ? "0" : s;
}

// An index computed per element, checked against its dimension where the config asks for
// checks: an out-of-range one records the launch's ph_status (the call then throws) and reads
// position 0 instead, so that nothing outside the tensor is touched meanwhile.
std::string LaunchEmitter::checked_position(const Op& op, size_t d, const std::string& value, int index,
                                            const std::string& at) {
  if (!p_.config.index_checks) return "(" + value + ")";
  const ir::TensorInfo& t = fn_.tensors[op.tensor];
  // Per element of a simd loop (not hoisted out of it), or read through such an index: checked
  // ahead of the loop.
  if (checks_ahead_ && (no_hoist_ > 0 || mentions(value, hoist_var_) || reads_unchecked(value))) {
    CheckSite c{"", value, t.shape[d], "", ""};
    for (const std::string& m : mask_scope_) c.mask += (c.mask.empty() ? "" : " && ") + ("(" + m + ")");
    if (!mentions(value, hoist_var_)) {
      // The same at every trip: checked once where its masks hold, if they too are the same at
      // every trip (a row gathered by a cat's second part reads its index only past the seam).
      if (!mentions(c.mask, hoist_var_)) c.first = c.last = value;
    } else if (index >= 0 && at == hoist_var_ && !loop_first_.empty() && linear_index(index)) {
      c.first = expr(index, {loop_first_});
      c.last = expr(index, {loop_last_});
    }
    check_sites_.push_back(c);
    return "(" + value + ")";
  }
  const std::string what =
      "dimension " + std::to_string(d) + " of " + t.name + " (size " + std::to_string(t.shape[d]) + ")";
  return "ph_checked_index(" + value + ", " + std::to_string(t.shape[d]) + ", ph_st, " + c_string(op.loc.str()) + ", " +
         c_string(what) + ")";
}

// A store of a block loaded unchanged from a tensor of the same storage type (a copy, a gather,
// a concatenation's halves) moves the element's bits: "" when the value is anything else. A
// round trip through f32 would cost two conversions per element (most of a bf16 row copy) and
// could rewrite a NaN's payload, which a copy must keep.
std::string LaunchEmitter::copied_bits(const Op& store, const Idx& idx) {
  if (!is_copy(store)) return "";
  const int v = store.operands[0];
  return address(*def_.at(v), broadcast(type(v).shape, idx));
}

bool LaunchEmitter::is_copy(const Op& store) const {
  const int v = store.operands[0];
  if (type(v).rank() == 0 || L_.materialized(v) >= 0) return false;
  const Op& src = *def_.at(v);
  return src.kind == OpKind::Load && !ir::is_masked(src) &&
         fn_.tensors[src.tensor].dtype == fn_.tensors[store.tensor].dtype;
}

// Linear: a tile's index, scalars, and sums, differences and negations of those, and their
// multiples by constants of at most 2^20 (a product of them too large to wrap past 2^63 over
// any tile's extent). A linear index's values along a loop lie between its values at its ends.
bool LaunchEmitter::linear_index(int v, bool may_scale) const {
  if (type(v).rank() == 0) return true;
  const Op& op = *def_.at(v);
  switch (op.kind) {
    case OpKind::TileIndex:
      return true;
    case OpKind::Expand:
    case OpKind::Unsqueeze:
    case OpKind::Squeeze:
      return linear_index(op.operands[0], may_scale);
    case OpKind::Unary:
      return static_cast<ir::UnaryFn>(op.fn) == ir::UnaryFn::neg && linear_index(op.operands[0], may_scale);
    case OpKind::Binary: {
      const auto f = static_cast<ir::BinaryFn>(op.fn);
      const int a = op.operands[0], b = op.operands[1];
      if (f == ir::BinaryFn::add || f == ir::BinaryFn::sub)
        return linear_index(a, may_scale) && linear_index(b, may_scale);
      if (f != ir::BinaryFn::mul || !may_scale) return false;
      auto small_constant = [&](int x) {
        const auto d = def_.find(x);
        return type(x).rank() == 0 && d != def_.end() && d->second->kind == OpKind::Constant &&
               std::abs(d->second->number) <= 1048576.0;
      };
      // (one multiple on any path: a multiple of a multiple could grow past 2^20)
      return (small_constant(a) && linear_index(b, false)) || (small_constant(b) && linear_index(a, false));
    }
    default:
      return false;
  }
}

// A masked load: `mask ? x[...] : other`, the read only on the taken side. Its reads are never
// hoisted out of the loop (a hoisted read would run for masked-off elements too).
std::string LaunchEmitter::masked_load_expr(const Op& op, const Idx& idx) {
  // In a version of the statement where a where's condition is decided (decided_wheres.cpp), a
  // mask that is that condition, or its negation, is decided too: concat's halves are plain loads
  // in the blocks on either side of the seam.
  if (const std::optional<bool> holds = decided_mask(op.operands[0]))
    return *holds ? load_expr(op, idx) : operand(op, 1, idx);
  const std::string mask = operand(op, 0, idx), other = operand(op, 1, idx);
  ++no_hoist_;
  mask_scope_.push_back(mask);
  std::string v = load_expr(op, idx);
  mask_scope_.pop_back();
  --no_hoist_;
  return "(" + mask + " ? " + v + " : " + other + ")";
}

std::string LaunchEmitter::load_expr(const Op& op, const Idx& idx) {
  return from_storage(fn_.tensors[op.tensor].dtype, address(op, idx));
}

std::string LaunchEmitter::from_storage(DType dt, const std::string& a) {
  switch (dt) {
    case DType::f32:
      return a;
    case DType::bf16:
      return "ph_rt::bf16_to_f32(" + a + ")";
    case DType::f16:
      return "ph_rt::f16_to_f32(" + a + ")";
    case DType::i32:
      return "static_cast<int64_t>(" + a + ")";
    case DType::i64:
      return a;
    case DType::boolean:
      return "(" + a + " != 0)";
    case DType::i8:
    case DType::u8:  // zero-extends (uint8_t)
      return "static_cast<int64_t>(" + a + ")";
    case DType::f8e4m3:
      return "ph_rt::f8e4m3_to_f32(" + a + ")";
    case DType::f8e5m2:
      return "ph_rt::f8e5m2_to_f32(" + a + ")";
  }
  throw InternalError("bad dtype");
}

std::string LaunchEmitter::stored_expr(DType dt, int v, const Idx& idx) {
  if (type(v).rank() == 0 || L_.materialized(v) >= 0) return store_value(dt, type(v).dtype, expr(v, idx));
  return stored_op_expr(dt, *def_.at(v), idx);
}

bool LaunchEmitter::rounds_to(const Op& op, DType dt) { return op.kind == OpKind::Cast && op.dtype == dt && is16(dt); }

std::string LaunchEmitter::stored_op_expr(DType dt, const Op& op, const Idx& idx) {
  if (rounds_to(op, dt)) return store_value(dt, type(op.operands[0]).dtype, operand(op, 0, idx));
  return store_value(dt, type(op.result).dtype, op_expr(op, idx));
}

std::string LaunchEmitter::stored_operand(const Op& store, const Idx& idx) {
  const int v = store.operands[0];
  return stored_expr(fn_.tensors[store.tensor].dtype, v, broadcast(type(v).shape, idx));
}

std::string LaunchEmitter::unrounded_operand(const Op& store, const Idx& idx) {
  const int v = store.operands[0];
  const Idx at = broadcast(type(v).shape, idx);
  if (type(v).rank() > 0 && L_.materialized(v) < 0) {
    const Op& def = *def_.at(v);
    if (rounds_to(def, fn_.tensors[store.tensor].dtype))
      return store_value(DType::f32, type(def.operands[0]).dtype, operand(def, 0, at));
  }
  return stored_expr(DType::f32, v, at);
}

std::string LaunchEmitter::store_value(DType dt, DType from, const std::string& v) {
  switch (dt) {
    case DType::f32:
      return from == DType::f32 ? v : "static_cast<float>(" + v + ")";
    case DType::bf16:
      return "ph_rt::f32_to_bf16(static_cast<float>(" + v + "))";
    case DType::f16:
      return "ph_rt::f32_to_f16(static_cast<float>(" + v + "))";
    case DType::i32:
      return "static_cast<int32_t>(" + v + ")";
    case DType::i64:
      return "static_cast<int64_t>(" + v + ")";
    case DType::boolean:
      return "static_cast<uint8_t>(" + v + " != 0)";
    case DType::i8:  // an integer wraps (through its low byte); a float truncates toward zero
      return "static_cast<int8_t>(static_cast<uint8_t>(static_cast<int64_t>(" + v + ")))";
    case DType::u8:
      return "static_cast<uint8_t>(static_cast<int64_t>(" + v + "))";
    case DType::f8e4m3:
      return "ph_rt::f32_to_f8e4m3(static_cast<float>(" + v + "))";
    case DType::f8e5m2:
      return "ph_rt::f32_to_f8e5m2(static_cast<float>(" + v + "))";
  }
  throw InternalError("bad dtype");
}

std::string LaunchEmitter::unary_expr(UnaryFn f, DType dt, const std::string& a) {
  switch (f) {
    case UnaryFn::neg:
      return "(-" + a + ")";
    case UnaryFn::exp:
      return "ph_rt::exp(" + a + ")";
    case UnaryFn::exp2:
      return "ph_rt::exp2(" + a + ")";
    case UnaryFn::log:
      return "ph_rt::log(" + a + ")";
    case UnaryFn::sqrt:
      return "ph_rt::sqrt(" + a + ")";
    case UnaryFn::rsqrt:
      return "ph_rt::rsqrt(" + a + ")";
    case UnaryFn::tanh:
      return "ph_rt::tanh(" + a + ")";
    case UnaryFn::sigmoid:
      return "ph_rt::sigmoid(" + a + ")";
    case UnaryFn::silu:
      return "ph_rt::silu(" + a + ")";
    case UnaryFn::gelu:
      return "ph_rt::gelu(" + a + ")";
    case UnaryFn::abs:
      return dt == DType::f32 ? "ph_rt::abs(" + a + ")" : "ph_abs_i64(" + a + ")";
    case UnaryFn::logical_not:
      return "(!" + a + ")";
    case UnaryFn::bit_not:
      return "(~" + a + ")";
    case UnaryFn::round:  // ties to even; an integer is already integral
      return dt == DType::f32 ? "__builtin_roundevenf(" + a + ")" : a;
    case UnaryFn::floor:
      return dt == DType::f32 ? "__builtin_floorf(" + a + ")" : a;
    case UnaryFn::ceil:
      return dt == DType::f32 ? "__builtin_ceilf(" + a + ")" : a;
    case UnaryFn::trunc:
      return dt == DType::f32 ? "__builtin_truncf(" + a + ")" : a;
    case UnaryFn::erf:
      return "__builtin_erff(" + a + ")";
    case UnaryFn::gelu_exact:
      return "ph_gelu_exact(" + a + ")";
  }
  throw InternalError("bad unary");
}

std::string LaunchEmitter::binary_expr(BinaryFn f, DType result, DType ta, DType tb, std::string a, std::string b) {
  if (ir::binary_operands_in_f32(f, result)) {
    if (ta != DType::f32) a = "static_cast<float>(" + a + ")";
    if (tb != DType::f32) b = "static_cast<float>(" + b + ")";
  }
  switch (f) {
    case BinaryFn::add:
      return "(" + a + " + " + b + ")";
    case BinaryFn::sub:
      return "(" + a + " - " + b + ")";
    case BinaryFn::mul:
      return "(" + a + " * " + b + ")";
    case BinaryFn::div:
      return "(" + a + " / " + b + ")";
    case BinaryFn::maximum:
      return "ph_max(" + a + ", " + b + ")";
    case BinaryFn::minimum:
      return "ph_min(" + a + ", " + b + ")";
    case BinaryFn::pow:
      return "ph_pow(" + a + ", " + b + ")";
    case BinaryFn::lt:
      return "(" + a + " < " + b + ")";
    case BinaryFn::le:
      return "(" + a + " <= " + b + ")";
    case BinaryFn::gt:
      return "(" + a + " > " + b + ")";
    case BinaryFn::ge:
      return "(" + a + " >= " + b + ")";
    case BinaryFn::eq:
      return "(" + a + " == " + b + ")";
    case BinaryFn::ne:
      return "(" + a + " != " + b + ")";
    case BinaryFn::logical_and:
      return "(" + a + " && " + b + ")";
    case BinaryFn::logical_or:
      return "(" + a + " || " + b + ")";
    case BinaryFn::floordiv:
      return result == DType::f32 ? "__builtin_floorf(" + a + " / " + b + ")" : "ph_floordiv_i64(" + a + ", " + b + ")";
    case BinaryFn::mod:
      return result == DType::f32 ? "ph_mod_f32(" + a + ", " + b + ")" : "ph_mod_i64(" + a + ", " + b + ")";
    case BinaryFn::bit_and:
      return "(" + a + " & " + b + ")";
    case BinaryFn::bit_or:
      return "(" + a + " | " + b + ")";
    case BinaryFn::bit_xor:
      return "(" + a + " ^ " + b + ")";
    case BinaryFn::shl:
      return "ph_shl_i64(" + a + ", " + b + ")";
    case BinaryFn::shr:
      return "ph_shr_i64(" + a + ", " + b + ")";
    case BinaryFn::rand:
      return "ph_rt::philox_uniform(" + a + ", " + b + ")";
    case BinaryFn::randn:
      return "ph_rt::philox_normal(" + a + ", " + b + ")";
  }
  throw InternalError("bad binary");
}

std::string LaunchEmitter::cast_expr(DType to, DType from, const std::string& a) {
  switch (to) {
    case DType::f32:
      return from == DType::f32 ? a : "static_cast<float>(" + a + ")";
    case DType::bf16:
      return "ph_rt::round_to_bf16(static_cast<float>(" + a + "))";
    case DType::f16:
      return "ph_rt::f16_to_f32(ph_rt::f32_to_f16(static_cast<float>(" + a + ")))";
    case DType::i32:
      return "static_cast<int64_t>(static_cast<int32_t>(" + a + "))";
    case DType::i64:
      return "static_cast<int64_t>(" + a + ")";
    case DType::boolean:
      return "(" + a + " != 0)";
    case DType::i8:
      return "static_cast<int64_t>(static_cast<int8_t>(static_cast<uint8_t>(static_cast<int64_t>(" + a + "))))";
    case DType::u8:
      return "static_cast<int64_t>(static_cast<uint8_t>(static_cast<int64_t>(" + a + ")))";
    case DType::f8e4m3:
      return "ph_rt::f8e4m3_to_f32(ph_rt::f32_to_f8e4m3(static_cast<float>(" + a + ")))";
    case DType::f8e5m2:
      return "ph_rt::f8e5m2_to_f32(ph_rt::f32_to_f8e5m2(static_cast<float>(" + a + ")))";
  }
  throw InternalError("bad cast");
}

}  // namespace parhelion::backend::cpu::emit

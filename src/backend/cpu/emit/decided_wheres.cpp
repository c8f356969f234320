// Wheres decided per block. A mask that compares tile indices (causal attention's
// `where(q.index() >= k.index(), s, -inf)`, a sliding window, a triangle) holds for every element
// of most blocks, or for none: only the blocks that straddle its boundary need the comparison.
// A statement whose fused expressions hold such a where is emitted in three versions, chosen once
// per block by comparing the bounds of the two sides: the condition true everywhere (the where is
// its first value), nowhere (its second), or the general code; a second such where in the
// statement versions each of those in turn. In a version the condition is known, not
// approximated; the chosen operand can then take the forms the emitter gives any plain operand
// (an fma with its consumer under -ffp-contract, a division by a hoisted value as a multiply by
// its reciprocal), so a value may differ from the general code's by the ulp those forms cost,
// as it may between configs. (Bounds are exact for the blocks' own indices; i64 constants near
// 2^63, where an endpoint sum could overflow, are not a kernel's.)
//
// Bounds are those of the i64 blocks built from tile indices, aranges, scalars and constants by
// + and -, as C++ expressions of the step's tile offsets and counts (exact: i64 arithmetic).

#include <set>
#include <string>
#include <vector>

#include "backend/cpu/emit/launch_emitter.h"

namespace parhelion::backend::cpu::emit {

std::optional<LaunchEmitter::Bounds> LaunchEmitter::index_bounds(int v) {
  const ir::Type& t = type(v);
  if (t.dtype != DType::i64) return std::nullopt;
  if (t.rank() == 0) return Bounds{"s" + std::to_string(v), "s" + std::to_string(v)};
  if (L_.materialized(v) >= 0) return std::nullopt;
  const Op& op = *def_.at(v);
  switch (op.kind) {
    case OpKind::TileIndex:
      return Bounds{"off_" + tname(op.tile), "(off_" + tname(op.tile) + " + " + extent(t.shape[0]) + " - 1)"};
    case OpKind::Arange:
      return Bounds{"int64_t{0}", "(" + extent(t.shape[0]) + " - 1)"};
    case OpKind::Constant:
    case OpKind::Full:
      return Bounds{literal(op.number, DType::i64), literal(op.number, DType::i64)};
    case OpKind::Unsqueeze:
      return index_bounds(op.operands[0]);
    case OpKind::Binary: {
      const auto f = static_cast<BinaryFn>(op.fn);
      if (f != BinaryFn::add && f != BinaryFn::sub) return std::nullopt;
      const auto a = index_bounds(op.operands[0]), b = index_bounds(op.operands[1]);
      if (!a || !b) return std::nullopt;
      if (f == BinaryFn::add) return Bounds{"(" + a->lo + " + " + b->lo + ")", "(" + a->hi + " + " + b->hi + ")"};
      return Bounds{"(" + a->lo + " - " + b->hi + ")", "(" + a->hi + " - " + b->lo + ")"};
    }
    default:
      return std::nullopt;
  }
}

std::optional<LaunchEmitter::Decided> LaunchEmitter::decided_condition(int cond) {
  if (type(cond).rank() == 0 || L_.materialized(cond) >= 0) return std::nullopt;
  const Op& op = *def_.at(cond);
  if (op.kind == OpKind::Unsqueeze) return decided_condition(op.operands[0]);
  if (op.kind == OpKind::Unary && static_cast<UnaryFn>(op.fn) == UnaryFn::logical_not) {
    auto c = decided_condition(op.operands[0]);
    if (c) std::swap(c->all_true, c->all_false);
    return c;
  }
  if (op.kind != OpKind::Binary) return std::nullopt;
  const auto f = static_cast<BinaryFn>(op.fn);
  if (f == BinaryFn::logical_and || f == BinaryFn::logical_or) {
    const auto a = decided_condition(op.operands[0]), b = decided_condition(op.operands[1]);
    if (!a || !b) return std::nullopt;
    const bool both = f == BinaryFn::logical_and;
    return Decided{"(" + a->all_true + (both ? " && " : " || ") + b->all_true + ")",
                   "(" + a->all_false + (both ? " || " : " && ") + b->all_false + ")"};
  }
  if (f != BinaryFn::lt && f != BinaryFn::le && f != BinaryFn::gt && f != BinaryFn::ge) return std::nullopt;
  const auto a = index_bounds(op.operands[0]), b = index_bounds(op.operands[1]);
  if (!a || !b) return std::nullopt;
  // x < y everywhere when x's largest is below y's smallest, nowhere when x's smallest is at or
  // above y's largest (<= alike); > and >= are < and <= with the sides swapped.
  auto less = [](const Bounds& x, const Bounds& y, bool or_equal) {
    return Decided{"(" + x.hi + (or_equal ? " <= " : " < ") + y.lo + ")",
                   "(" + x.lo + (or_equal ? " > " : " >= ") + y.hi + ")"};
  };
  switch (f) {
    case BinaryFn::lt:
      return less(*a, *b, false);
    case BinaryFn::le:
      return less(*a, *b, true);
    case BinaryFn::gt:
      return less(*b, *a, false);
    default:  // ge
      return less(*b, *a, true);
  }
}

std::vector<int> LaunchEmitter::decided_wheres(const Op& op) {
  // The values the statement computes inline: its operands' fused trees (a materialized value
  // is read from its buffer, a Var from its own, a rank-0 value is a named scalar), and for a
  // reduction that computes its producer in its loop (softmax's exp), the producer's tree.
  std::vector<int> roots;
  std::set<int> inline_materialized;  // materialized values this statement computes itself
  switch (op.kind) {
    case OpKind::Reduce:
      if (type(op.result).rank() == 0) return {};  // its scalar is declared outside the statement
      roots = op.operands;
      if (const lower::ValuePlan* r = value_plan(op.result); r && r->computes >= 0) {
        roots.push_back(r->computes);
        inline_materialized.insert(r->computes);
      }
      break;
    case OpKind::Store:
      if (ir::is_atomic(op)) return {};
      roots = op.operands;
      break;
    case OpKind::VarDecl:
    case OpKind::VarSet:
      if (op.kind == OpKind::VarSet && in_place_dot(op)) return {};
      roots = op.operands;
      break;
    case OpKind::Loop:
    case OpKind::If:
    case OpKind::Dot:
    case OpKind::Scan:
      return {};
    default:
      if (op.result < 0 || type(op.result).rank() == 0 || L_.materialized(op.result) < 0) return {};
      roots = {op.result};
      inline_materialized.insert(op.result);
  }
  std::vector<int> wheres;
  std::set<int> seen;
  std::vector<int> work;
  for (int v : roots) work.push_back(v);
  while (!work.empty()) {
    const int v = work.back();
    work.pop_back();
    if (v < 0 || !seen.insert(v).second || type(v).rank() == 0) continue;
    if (L_.materialized(v) >= 0 && !inline_materialized.count(v)) continue;  // read from its buffer
    const Op& d = *def_.at(v);
    if (d.kind == OpKind::Load || d.kind == OpKind::VarGet || d.kind == OpKind::Reduce || d.kind == OpKind::Scan ||
        d.kind == OpKind::Dot)
      continue;
    if (d.kind == OpKind::Where && decided_condition(d.operands[0])) wheres.push_back(v);
    for (int o : d.operands) work.push_back(o);
  }
  return wheres;
}

std::optional<bool> LaunchEmitter::decided_mask(int mask) const {
  for (const auto& [w, choice] : where_choice_) {
    if (choice == 0) continue;
    const int cond = def_.at(w)->operands[0];
    if (mask == cond) return choice == 1;
    const auto m = def_.find(mask);
    if (m != def_.end() && m->second->kind == OpKind::Unary &&
        static_cast<UnaryFn>(m->second->fn) == UnaryFn::logical_not && m->second->operands[0] == cond)
      return choice == 2;
  }
  return std::nullopt;
}

bool LaunchEmitter::versioned_statement(const Op& op) {
  // Versions nest, one where at a time: at most this many deep (9 copies of a statement).
  constexpr size_t kMaxNested = 2;
  if (where_choice_.size() >= kMaxNested) return false;
  int w = -1;
  for (int v : decided_wheres(op))
    if (!where_choice_.count(v)) {
      w = v;
      break;
    }
  if (w < 0) return false;
  const Op& where = *def_.at(w);
  const Decided d = *decided_condition(where.operands[0]);
  auto version = [&](int choice) {  // 1 or 2: the where's operand; 0: its general code
    ++depth_;
    where_choice_[w] = choice;
    statement(op);  // (versions the next decided where inside, if any)
    where_choice_.erase(w);
    --depth_;
  };
  line("if (" + d.all_true + ") {  // the mask at " + where.loc.str() + " holds on all of this block");
  version(1);
  line("} else if (" + d.all_false + ") {  // on none of it");
  version(2);
  line("} else {");
  version(0);
  line("}");
  return true;
}

}  // namespace parhelion::backend::cpu::emit

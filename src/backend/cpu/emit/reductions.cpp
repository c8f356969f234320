// Reductions (sum, mean, max, min) of a block along one axis: along the innermost axis into kLanes
// partial accumulators that stay in vector registers, along an outer axis into the output block.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "backend/cpu/emit/launch_emitter.h"
#include "parhelion/error.h"

namespace parhelion::backend::cpu::emit {

// sum(where(i == j, x, 0)) along the innermost axis, where i is the reduced dim's tile index and
// j does not vary along that dim (cross_entropy's target logit, `where(cols.index() == label, x,
// 0)`): one element at most is x and the others add 0, so the sum is 0 + x at j's position in
// the block, or 0 where j is outside it. Returns the where, and which side of its `==` is i; the
// reduction then reads one element instead of the row (a third of cross_entropy's passes).
std::optional<LaunchEmitter::OneHotPick> LaunchEmitter::one_hot_pick(const Op& reduce) const {
  const ir::Type& in = type(reduce.operands[0]);
  const Dim& rd = in.shape[reduce.axis];
  if (static_cast<ReduceFn>(reduce.fn) != ReduceFn::sum || type(reduce.result).dtype != DType::f32 ||
      reduce.axis != in.rank() - 1 || rd.kind != Dim::Tile)
    return std::nullopt;
  auto defined = [&](int v) -> const Op* {
    if (L_.materialized(v) >= 0 || named_values_.count(v)) return nullptr;
    auto d = def_.find(v);
    return d == def_.end() ? nullptr : d->second;
  };
  // (not where the reduction's loop also computes and stores its operand's producer)
  if (const lower::ValuePlan* r = value_plan(reduce.result); r && r->computes >= 0) return std::nullopt;
  const Op* where = defined(reduce.operands[0]);
  if (!where || where->kind != OpKind::Where) return std::nullopt;
  // The picked value is read at one computed position, inside the simd loop over the outer dims:
  // a gather's index there would be checked ahead of that loop, where the position is not yet
  // computed. So it may read tensors only through tiles, whole dims and scalars (no gathers,
  // slices or masks).
  std::vector<int> todo = {where->operands[1]};
  for (std::set<int> seen; !todo.empty();) {
    const int v = todo.back();
    todo.pop_back();
    if (!seen.insert(v).second || type(v).rank() == 0) continue;
    const Op* d = defined(v);
    if (!d) {
      if (L_.materialized(v) >= 0 || named_values_.count(v)) continue;  // a buffer's element
      return std::nullopt;
    }
    switch (d->kind) {
      case OpKind::Load:
        if (ir::is_masked(*d)) return std::nullopt;
        for (const ir::IndexItem& item : d->index)
          if (item.kind == ir::IndexItem::Gather || item.kind == ir::IndexItem::Slice) return std::nullopt;
        break;
      case OpKind::Constant:
      case OpKind::Full:
      case OpKind::TileIndex:
      case OpKind::Unary:
      case OpKind::Binary:
      case OpKind::Where:
      case OpKind::Cast:
      case OpKind::Unsqueeze:
      case OpKind::Expand:
      case OpKind::VarGet:
        break;
      default:
        return std::nullopt;
    }
    for (int a : d->operands) todo.push_back(a);
  }
  const Op* zero = defined(where->operands[2]);
  if (!zero || (zero->kind != OpKind::Constant && zero->kind != OpKind::Full) || zero->number != 0) return std::nullopt;
  const Op* eq = defined(where->operands[0]);
  if (!eq || eq->kind != OpKind::Binary || static_cast<BinaryFn>(eq->fn) != BinaryFn::eq) return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    const Op* index = defined(eq->operands[side]);
    const ir::Type& other = type(eq->operands[1 - side]);
    // (i is rank 1, so it lies along the innermost dim; j, right-aligned, must be 1 there)
    if (index && index->kind == OpKind::TileIndex && index->tile == rd.tile && other.dtype == DType::i64 &&
        (other.rank() == 0 || other.shape.back().is_one()))
      return OneHotPick{where, eq, side};
  }
  return std::nullopt;
}

namespace {

std::string reduce_init(ReduceFn f, DType dt) {
  return f == ReduceFn::max   ? (dt == DType::f32 ? "(-__builtin_inff())" : "INT64_MIN")
         : f == ReduceFn::min ? (dt == DType::f32 ? "__builtin_inff()" : "INT64_MAX")
                              : literal(0, dt);
}

std::string reduce_combine(ReduceFn f, const std::string& acc, const std::string& x) {
  if (f == ReduceFn::max) return "ph_max(" + acc + ", " + x + ")";
  if (f == ReduceFn::min) return "ph_min(" + acc + ", " + x + ")";
  return acc + " + " + x;
}

// What `op` reads: its operands and the values of its index (a gather's block, a scalar index).
void push_reads(const Op& op, std::vector<int>& todo) {
  todo.insert(todo.end(), op.operands.begin(), op.operands.end());
  for (const auto& ix : op.index)
    if (ix.has_value()) todo.push_back(ix.value);
}

// A reduction's result from its total over `count` elements (a mean divides).
std::string reduce_finalize(ReduceFn f, const std::string& total, const std::string& count) {
  return f == ReduceFn::mean ? "(" + total + ") / static_cast<float>(" + count + ")" : total;
}

// The output element of input element `idx` of reduction `op`.
Idx reduced_idx(const Op& op, const Idx& idx) {
  Idx o = idx;
  if (op.keepdim)
    o[op.axis] = "0";
  else
    o.erase(o.begin() + op.axis);
  return o;
}

}  // namespace

// `acc = acc + sum(x, axis)` where lowering lets the sum add into the Var (ValuePlan::adds_into,
// lower/fusion.h): the sum adds into the Var's buffer where it is and the assignment emits
// nothing. Saves zeroing, filling and adding the sum's own block: per trip of rms_norm_backward's
// and layer_norm_backward's row tiles, a pass over [N] to zero the column sums and one to add
// them, as long as the sum's own pass where a tile is a row or two. The sum adds its lanes into
// the Var, or for a sum along an outer axis each row into it: the Var's partial sums round as the
// sum's own would, from the Var's value on instead of from 0 (the total is the same to rounding).
int LaunchEmitter::var_of_sum(const Op& op) const {
  const lower::ValuePlan* v = value_plan(op.result);
  return v ? v->adds_into : -1;
}

const Op* LaunchEmitter::in_place_sum(const Op& var_set) const {
  const auto add = def_.find(var_set.operands[0]);
  if (add == def_.end() || add->second->kind != OpKind::Binary) return nullptr;
  for (int v : add->second->operands)
    if (const auto d = def_.find(v); d != def_.end() && var_of_sum(*d->second) == var_set.var) return d->second;
  return nullptr;
}

bool LaunchEmitter::reduces_rows(const Op& op) {
  if (op.kind != OpKind::Reduce) return false;
  const ir::Type& in = type(op.operands[0]);
  return op.axis == in.rank() - 1 && !in.shape[op.axis].is_one() && type(op.result).rank() > 0 && !one_hot_pick(op) &&
         decided_wheres(op).empty();
}

// Reductions along the innermost axis of blocks of one shape read the same rows: rms_norm's
// backward reduces x * x and grad_out * w * x along each row, layer_norm's the two terms of its
// dx. Each in a loop of its own reads each row once per reduction (from the L2 where the step's
// rows outgrow the L1); sharing one loop reads it once. A later reduction joins the loop of an
// earlier one when the statements between them write nothing it reads: what it reads is computed
// inside the loop, where the earlier one is, so no statement between may produce it (a buffer, a
// Var, a scalar; read as an operand or as an index) and none may be a loop, an if, a store, a dot,
// a scan or a collective, whose effects are not tracked here. A scalar between them that reads no such thing (a
// constant, a scalar argument, arithmetic on those) is computed before the loop instead. Returns the reductions after
// `ops[first]` that join its loop, other than those `claimed` by an earlier one's, and the
// scalars to compute first; their defining ops and those between them are entered in def_
// (their trees are generated at the first one).
LaunchEmitter::RowGroup LaunchEmitter::row_siblings(const std::vector<Op>& ops, size_t first,
                                                    const std::set<const Op*>& claimed) {
  constexpr size_t kMaxGroup = 4;  // two vectors of accumulators each: 8 of 32 registers
  const Op& lead = ops[first];
  if (!reduces_rows(lead)) return {};
  const std::vector<Dim>& rows = type(lead.operands[0]).shape;
  std::set<int> written_values = {lead.result}, written_vars;
  RowGroup group;
  std::vector<const Op*> scalars;  // movable scalars seen so far (`claimed` holds those already moved)
  for (size_t j = first + 1; j < ops.size() && group.siblings.size() + 1 < kMaxGroup; ++j) {
    const Op& op = ops[j];
    if (op.result >= 0) def_[op.result] = &op;
    const lower::ValuePlan* plan = value_plan(op.result);
    // (a sum into a Var adds where it is: moved up, it would change the Var before what is between)
    if (op.kind == OpKind::Reduce && !claimed.count(&op) && var_of_sum(op) < 0 && type(op.operands[0]).shape == rows &&
        reduces_rows(op)) {
      // Whether its loop's element reads only what exists at the lead's statement.
      bool ready = true;
      std::vector<int> todo;
      push_reads(op, todo);
      if (plan && plan->computes >= 0) todo.push_back(plan->computes);  // its producer, computed in the loop
      for (std::set<int> seen; ready && !todo.empty();) {
        const int v = todo.back();
        todo.pop_back();
        if (!seen.insert(v).second) continue;
        const bool computed_here = plan && v == plan->computes;  // (not by a statement between)
        if (written_values.count(v) && !computed_here) ready = false;
        const lower::ValuePlan* vp = value_plan(v);
        if (vp && vp->in_reduction >= 0 && !computed_here && written_values.count(vp->in_reduction)) ready = false;
        if (!ready || (!computed_here && L_.materialized(v) >= 0)) continue;
        // (a scalar is a named value: one produced between is written_values', else it is ready)
        auto d = def_.find(v);
        if (d == def_.end() || type(v).rank() == 0) continue;
        if (d->second->kind == OpKind::VarGet && written_vars.count(d->second->var)) ready = false;
        push_reads(*d->second, todo);
      }
      if (ready) {
        group.siblings.push_back(&op);
        group.scalars_first = scalars;
        continue;
      }
    }
    if (claimed.count(&op)) continue;  // a scalar computed before an earlier group's loop: there
    std::vector<int> reads;
    push_reads(op, reads);
    if (op.result >= 0 && ir::is_pointwise(op.kind) && type(op.result).rank() == 0 &&
        !(op.kind == OpKind::VarGet && written_vars.count(op.var)) &&
        std::all_of(reads.begin(), reads.end(),
                    [&](int a) { return type(a).rank() == 0 && !written_values.count(a); })) {
      scalars.push_back(&op);  // computed before the loop if a later reduction joins it
      continue;
    }
    // Statements between: what they produce is recorded; any other kind ends the search.
    if (op.kind == OpKind::VarSet || op.kind == OpKind::VarDecl) {
      if (op.kind == OpKind::VarSet && in_place_dot(op)) break;
      written_vars.insert(op.var);
    } else if (op.kind != OpKind::Reduce && !(ir::is_pointwise(op.kind) && op.result >= 0)) {
      break;
    }
    // (a fused value is computed where it is used, from what the walk above checks)
    if (op.result >= 0 &&
        (type(op.result).rank() == 0 || L_.materialized(op.result) >= 0 || (plan && plan->in_reduction >= 0)))
      written_values.insert(op.result);
  }
  return group;
}

void LaunchEmitter::reduce(const Op& op, const std::vector<const Op*>& siblings) {
  auto f = static_cast<ReduceFn>(op.fn);
  const ir::Type& in = type(op.operands[0]);
  const ir::Type& out = type(op.result);
  DType dt = out.dtype;
  std::string ty = c_type(dt);
  std::string init = reduce_init(f, dt);
  const Dim& rd = in.shape[op.axis];
  const std::string count = extent(rd);
  bool scalar = out.rank() == 0;
  const int m = L_.materialized(op.result);
  PH_CHECK(scalar || m >= 0, "reduction result not materialized");
  // (a sum into a Var writes the Var's buffer, adding to it: ValuePlan::adds_into)
  auto into_var = [&](const Op& r) { return var_of_sum(r) >= 0; };
  auto out_ref = [&](const Op& r, const Idx& o) {
    if (into_var(r)) return scratch_ref(L_.scratch[L_.var_scratch.at(var_of_sum(r))], o);
    return type(r.result).rank() == 0 ? "s" + std::to_string(r.result)
                                      : scratch_ref(L_.scratch[L_.materialized(r.result)], o);
  };
  // `out = total`, or for a sum into a Var `out = out + total`.
  auto set_out = [&](const Op& r, const Idx& o, const std::string& total) {
    const std::string ref = out_ref(r, o);
    line(ref + " = " + (into_var(r) ? ref + " + " + total : total) + ";");
  };
  if (scalar) line(ty + " s" + std::to_string(op.result) + ";");
  std::string title = std::string(ir::reduce_name(f)) + " over axis " + std::to_string(op.axis) + " at " + op.loc.str();
  if (into_var(op)) title += ", added into var v" + std::to_string(var_of_sum(op));
  for (const Op* s : siblings)
    title += ", " + std::string(ir::reduce_name(static_cast<ReduceFn>(s->fn))) + " at " + s->loc.str();
  line("{  // " + title);
  ++depth_;
  if (op.axis == in.rank() - 1) {
    // Reduce along the innermost dimension into kLanes independent partial accumulators:
    // the compiler keeps them in vector registers (an `omp simd reduction` clause makes
    // g++ spill its accumulator every iteration), and two vectors hide the add latency.
    std::vector<Dim> outer(in.shape.begin(), in.shape.end() - 1);
    if (const std::optional<OneHotPick> pick = one_hot_pick(op)) {
      PH_CHECK(siblings.empty(), "a one-hot pick shares no loop");
      const Op& index = *def_.at(pick->eq->operands[pick->index_side]);
      nest(outer, [&](const Idx& oidx) {
        Idx at_first = oidx, at_pick = oidx;
        at_first.push_back("0");
        at_pick.push_back("ph_pick");
        line("{");
        ++depth_;
        // (in uint64: a label near INT64_MIN minus the offset would overflow an int64)
        line("const int64_t ph_pick = static_cast<int64_t>(static_cast<uint64_t>(" +
             operand(*pick->eq, 1 - pick->index_side, at_first) + ") - static_cast<uint64_t>(" + op_expr(index, {"0"}) +
             "));");
        line(ty + " ph_acc = " + init + ";");
        ++no_hoist_;  // (the read depends on ph_pick, which the hoisting does not see)
        const std::string picked = operand(*pick->where, 1, at_pick);
        --no_hoist_;
        line("if (static_cast<uint64_t>(ph_pick) < static_cast<uint64_t>(" + count + ")) ph_acc = ph_acc + " + picked +
             ";");
        set_out(op, reduced_idx(op, at_first), "ph_acc");
        --depth_;
        line("}");
      });
      --depth_;
      line("}");
      if (scalar) check_index(op.result);
      return;
    }
    // One accumulator (and NaN flags) per reduction of the loop, named apart.
    struct Row {
      const Op* op;
      ReduceFn f;
      DType dt;
      std::string suffix, acc, nan;  // the names of its values: accv<suffix>, nanv<suffix>, ...
      // A float max or min keeps its lanes with plain compares (vmaxps: a 2-cycle chain) and
      // keeps a NaN seen in a lane apart (a blend whose compare is off the chain), where ph_max's
      // NaN test on the accumulator put a compare, a mask merge and a blend on it: cross_entropy's
      // row max took 40% of the kernel. The result: one of the row's NaNs where it has any
      // (ph_max gave the first; a NaN's payload and sign are not promised), else the max (equal
      // elements keep the later one, as ph_max does). Same-build A/B, 2 threads, AMD EPYC Zen 5
      // (a noisy host: medians of 3-5 interleaved runs): softmax [4096, 4096] bf16 2.97 -> 2.74
      // ms, cross_entropy [2048, 32000] bf16 14.96 -> 14.18 ms, attention [1, 8, 2048, 64] f32
      // 26.1 -> 24.7 ms.
      bool nan_flags;
      const lower::ValuePlan* plan;  // where its loop computes and stores its producer
      const Op* cast;                // what that loop stores when it is a cast of the producer
    };
    std::vector<Row> group;
    for (const Op* r : siblings) PH_CHECK(r->axis == op.axis, "a shared row loop reduces along one axis");
    std::vector<const Op*> members = {&op};
    members.insert(members.end(), siblings.begin(), siblings.end());
    for (size_t g = 0; g < members.size(); ++g) {
      const Op& r = *members[g];
      const std::string suffix = g > 0 ? std::to_string(g) : "";
      Row row{&r,
              static_cast<ReduceFn>(r.fn),
              type(r.result).dtype,
              suffix,
              "accv" + suffix,
              "nanv" + suffix,
              false,
              value_plan(r.result),
              nullptr};
      row.nan_flags = row.dt == DType::f32 && (row.f == ReduceFn::max || row.f == ReduceFn::min);
      // (the cast is later in the block: not in def_ yet)
      if (row.plan && row.plan->stores >= 0 && row.plan->stores != row.plan->computes)
        row.cast = launch_def_.at(row.plan->stores);
      group.push_back(row);
    }
    nest(
        outer,
        [&](const Idx& oidx) {
          Idx full = oidx;
          if (rd.is_one()) {
            PH_CHECK(siblings.empty(), "a reduction of size-1 rows shares no loop");
            full.push_back("0");
            std::string x = reduce_combine(f, init, expr(op.operands[0], full));
            x = reduce_finalize(f, x, count);
            set_out(op, reduced_idx(op, full), x);
            return;
          }
          for (const Row& row : group) {
            line(c_type(row.dt) + " " + row.acc + "[kLanes];");
            line("for (int k = 0; k < kLanes; ++k) " + row.acc + "[k] = " + reduce_init(row.f, row.dt) + ";");
            if (row.nan_flags) {
              line("float " + row.nan + "[kLanes];");
              line("for (int k = 0; k < kLanes; ++k) " + row.nan + "[k] = 0.0f;");
            }
          }
          line("int64_t ir = 0;");
          Idx lane = full;
          lane.push_back("(ir + k)");
          Idx tail = full;
          tail.push_back("ir");
          // (`lane_at` names the accumulator's slot: "k" in the vector loop, "0" in the tail.)
          auto accumulate = [&](const Row& row, const std::string& lane_at, const std::string& x) {
            const std::string acc = row.acc + "[" + lane_at + "]";
            if (!row.nan_flags) {
              line(acc + " = " + reduce_combine(row.f, acc, x) + ";");
              return;
            }
            const std::string nan = row.nan + "[" + lane_at + "]";
            line("const float ph_x" + row.suffix + " = " + x + ";");
            const std::string xv = "ph_x" + row.suffix;
            line(acc + " = " + acc + (row.f == ReduceFn::max ? " > " : " < ") + xv + " ? " + acc + " : " + xv + ";");
            line(nan + " = " + xv + " != " + xv + " ? " + xv + " : " + nan + ";");
          };
          // The element at `at`: read it, or (for a deferred producer) compute and store it.
          auto element = [&](const Row& row, const Idx& at, const std::string& lane_at) {
            if (!row.plan || row.plan->computes < 0) {
              accumulate(row, lane_at, expr(row.op->operands[0], at));
              return;
            }
            const Op& producer = *def_.at(row.plan->computes);
            const std::string e = "e" + row.suffix;
            line("const " + c_type(type(producer.result).dtype) + " " + e + " = " + op_expr(producer, at) + ";");
            const lower::Scratch& stored = L_.scratch[L_.materialized(row.plan->stores)];
            if (!row.cast) {
              line(scratch_ref(stored, at) + " = " + e + ";");
            } else {  // a cast of it, from `e` (the producer has no buffer)
              named_values_[row.plan->computes] = e;
              line(scratch_ref(stored, at) + " = " +
                   (is16(stored.dtype) ? stored_op_expr(stored.dtype, *row.cast, at) : op_expr(*row.cast, at)) + ";");
              named_values_.erase(row.plan->computes);
            }
            accumulate(row, lane_at, e);
          };
          hoisted_loop("ir", "for (; ir + kLanes <= " + count + "; ir += kLanes) {", "", [&] {
            // (the next step's lines of these elements, spread over the row: cache_hints.cpp)
            for (const Row& row : group) prefetch_next_rows(*row.op, lane, lane.size() - 1, "ir", "kLanes");
            line("#pragma omp simd");
            line("for (int64_t k = 0; k < kLanes; ++k) {");
            ++depth_;
            for (const Row& row : group) element(row, lane, "k");
            --depth_;
            line("}");
          });
          line("for (; ir < " + count + "; ++ir) {");
          ++depth_;
          for (const Row& row : group) element(row, tail, "0");
          --depth_;
          line("}");
          // The lanes fold pairwise, halving each time, each halving a simd loop of constant
          // width: g++ makes it one vector operation (a fold one lane at a time, or a loop over
          // the widths, stays a chain of kLanes - 1 scalar operations, each max with a NaN
          // branch: as long as the vector loop over a row of 512).
          full.push_back("0");
          for (const Row& row : group) {
            for (int w = kReductionLanes / 2; w > 0; w /= 2) {
              const std::string width = std::to_string(w);
              line("#pragma omp simd");
              line("for (int k = 0; k < " + width + "; ++k) " + row.acc +
                   "[k] = " + reduce_combine(row.f, row.acc + "[k]", row.acc + "[k + " + width + "]") + ";");
            }
            if (row.nan_flags) {
              for (int w = kReductionLanes / 2; w > 0; w /= 2) {
                const std::string width = std::to_string(w), n = row.nan;
                line("#pragma omp simd");
                line("for (int k = 0; k < " + width + "; ++k) " + n + "[k] = " + n + "[k] != " + n + "[k] ? " + n +
                     "[k] : " + n + "[k + " + width + "];");
              }
              line("if (" + row.nan + "[0] != " + row.nan + "[0]) " + row.acc + "[0] = " + row.nan + "[0];");
            }
            const std::string total = row.acc + "[0]";
            set_out(*row.op, reduced_idx(*row.op, full), reduce_finalize(row.f, total, count));
          }
        },
        "", SIZE_MAX);
  } else {
    PH_CHECK(siblings.empty(), "only reductions along rows share a loop");
    // Reduce along an outer dimension: accumulate into the output block, vectorized along
    // the innermost (kept) dimension.
    if (!into_var(op)) nest(out.shape, [&](const Idx& o) { line(out_ref(op, o) + " = " + init + ";"); });
    nest(in.shape, [&](const Idx& idx) {
      std::string r = out_ref(op, reduced_idx(op, idx));
      line(r + " = " + reduce_combine(f, r, expr(op.operands[0], idx)) + ";");
    });
    if (f == ReduceFn::mean)
      nest(out.shape,
           [&](const Idx& o) { line(out_ref(op, o) + " = " + reduce_finalize(f, out_ref(op, o), count) + ";"); });
  }
  --depth_;
  line("}");
  if (scalar) check_index(op.result);  // a reduced scalar used as a subscript
}

}  // namespace parhelion::backend::cpu::emit

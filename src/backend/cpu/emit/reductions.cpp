// Reductions (sum, mean, max, min) of a block along one axis: along the innermost axis into kLanes
// partial accumulators that stay in vector registers, along an outer axis into the output block.

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

void LaunchEmitter::reduce(const Op& op) {
  auto f = static_cast<ReduceFn>(op.fn);
  const ir::Type& in = type(op.operands[0]);
  const ir::Type& out = type(op.result);
  DType dt = out.dtype;
  std::string ty = c_type(dt);
  std::string init = f == ReduceFn::max   ? (dt == DType::f32 ? "(-__builtin_inff())" : "INT64_MIN")
                     : f == ReduceFn::min ? (dt == DType::f32 ? "__builtin_inff()" : "INT64_MAX")
                                          : literal(0, dt);
  auto combine = [&](const std::string& acc, const std::string& x) {
    if (f == ReduceFn::max) return "ph_max(" + acc + ", " + x + ")";
    if (f == ReduceFn::min) return "ph_min(" + acc + ", " + x + ")";
    return acc + " + " + x;
  };
  // A float max or min keeps its lanes with plain compares (vmaxps: a 2-cycle chain) and keeps
  // a NaN seen in a lane apart (a blend whose compare is off the chain), where ph_max's NaN test
  // on the accumulator put a compare, a mask merge and a blend on it: cross_entropy's row max
  // took 40% of the kernel. The result: one of the row's NaNs where it has any (ph_max gave the
  // first; a NaN's payload and sign are not promised), else the max (equal elements keep the
  // later one, as ph_max does). Same-build A/B, 2 threads, AMD EPYC Zen 5 (a noisy host: medians of 3-5
  // interleaved runs): softmax [4096, 4096] bf16 2.97 -> 2.74 ms, cross_entropy [2048, 32000]
  // bf16 14.96 -> 14.18 ms, attention [1, 8, 2048, 64] f32 26.1 -> 24.7 ms.
  const bool nan_flags = dt == DType::f32 && (f == ReduceFn::max || f == ReduceFn::min);
  const Dim& rd = in.shape[op.axis];
  const std::string count = extent(rd);
  auto finalize = [&](const std::string& acc) {
    return f == ReduceFn::mean ? "(" + acc + ") / static_cast<float>(" + count + ")" : acc;
  };
  // The output element of input element `idx`.
  auto out_idx = [&](const Idx& idx) {
    Idx o = idx;
    if (op.keepdim)
      o[op.axis] = "0";
    else
      o.erase(o.begin() + op.axis);
    return o;
  };
  bool scalar = out.rank() == 0;
  const int m = L_.materialized(op.result);
  PH_CHECK(scalar || m >= 0, "reduction result not materialized");
  auto out_ref = [&](const Idx& o) { return scalar ? "s" + std::to_string(op.result) : scratch_ref(L_.scratch[m], o); };
  if (scalar) line(ty + " s" + std::to_string(op.result) + ";");
  line("{  // " + std::string(ir::reduce_name(f)) + " over axis " + std::to_string(op.axis) + " at " + op.loc.str());
  ++depth_;
  if (op.axis == in.rank() - 1) {
    // Reduce along the innermost dimension into kLanes independent partial accumulators:
    // the compiler keeps them in vector registers (an `omp simd reduction` clause makes
    // g++ spill its accumulator every iteration), and two vectors hide the add latency.
    std::vector<Dim> outer(in.shape.begin(), in.shape.end() - 1);
    if (const std::optional<OneHotPick> pick = one_hot_pick(op)) {
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
        line(out_ref(out_idx(at_first)) + " = ph_acc;");
        --depth_;
        line("}");
      });
      --depth_;
      line("}");
      if (scalar) check_index(op.result);
      return;
    }
    nest(
        outer,
        [&](const Idx& oidx) {
          Idx full = oidx;
          if (rd.is_one()) {
            full.push_back("0");
            line(out_ref(out_idx(full)) + " = " + finalize(combine(init, expr(op.operands[0], full))) + ";");
            return;
          }
          line(ty + " accv[kLanes];");
          line("for (int k = 0; k < kLanes; ++k) accv[k] = " + init + ";");
          if (nan_flags) {
            line("float nanv[kLanes];");
            line("for (int k = 0; k < kLanes; ++k) nanv[k] = 0.0f;");
          }
          line("int64_t ir = 0;");
          Idx lane = full;
          lane.push_back("(ir + k)");
          Idx tail = full;
          tail.push_back("ir");
          // The element at `at`: read it, or (for a deferred producer) compute and store it.
          const lower::ValuePlan* r = value_plan(op.result);
          // What the loop stores when that is a cast of the producer (later in the block: not in def_ yet).
          const Op* cast = nullptr;
          if (r && r->stores >= 0 && r->stores != r->computes)
            ir::walk(L_.op->body, [&](const Op& o) { cast = o.result == r->stores ? &o : cast; });
          // (`lane` names the accumulator's slot: "k" in the vector loop, "0" in the tail.)
          auto accumulate = [&](const std::string& lane_at, const std::string& x) {
            const std::string acc = "accv[" + lane_at + "]";
            if (!nan_flags) {
              line(acc + " = " + combine(acc, x) + ";");
              return;
            }
            line("const float ph_x = " + x + ";");
            line(acc + " = " + acc + (f == ReduceFn::max ? " > " : " < ") + "ph_x ? " + acc + " : ph_x;");
            line("nanv[" + lane_at + "] = ph_x != ph_x ? ph_x : nanv[" + lane_at + "];");
          };
          auto element = [&](const Idx& at, const std::string& lane_at) {
            if (!r || r->computes < 0) {
              accumulate(lane_at, expr(op.operands[0], at));
              return;
            }
            const Op& producer = *def_.at(r->computes);
            line("const " + c_type(type(producer.result).dtype) + " e = " + op_expr(producer, at) + ";");
            const lower::Scratch& stored = L_.scratch[L_.materialized(r->stores)];
            if (!cast) {
              line(scratch_ref(stored, at) + " = e;");
            } else {  // a cast of it, from `e` (the producer has no buffer)
              named_values_[r->computes] = "e";
              line(scratch_ref(stored, at) + " = " +
                   (is16(stored.dtype) ? stored_op_expr(stored.dtype, *cast, at) : op_expr(*cast, at)) + ";");
              named_values_.erase(r->computes);
            }
            accumulate(lane_at, "e");
          };
          hoisted_loop("ir", "for (; ir + kLanes <= " + count + "; ir += kLanes) {", "", [&] {
            // (the next step's lines of these elements, spread over the row: cache_hints.cpp)
            prefetch_next_rows(op, lane, lane.size() - 1, "ir", "kLanes");
            line("#pragma omp simd");
            line("for (int64_t k = 0; k < kLanes; ++k) {");
            ++depth_;
            element(lane, "k");
            --depth_;
            line("}");
          });
          line("for (; ir < " + count + "; ++ir) {");
          ++depth_;
          element(tail, "0");
          --depth_;
          line("}");
          // The lanes fold pairwise, halving each time, each halving a simd loop of constant
          // width: g++ makes it one vector operation (a fold one lane at a time, or a loop over
          // the widths, stays a chain of kLanes - 1 scalar operations, each max with a NaN
          // branch: as long as the vector loop over a row of 512).
          for (int w = kReductionLanes / 2; w > 0; w /= 2) {
            const std::string width = std::to_string(w);
            line("#pragma omp simd");
            line("for (int k = 0; k < " + width + "; ++k) accv[k] = " + combine("accv[k]", "accv[k + " + width + "]") +
                 ";");
          }
          if (nan_flags) {
            for (int w = kReductionLanes / 2; w > 0; w /= 2) {
              line("#pragma omp simd");
              line("for (int k = 0; k < " + std::to_string(w) +
                   "; ++k) nanv[k] = nanv[k] != nanv[k] ? nanv[k] : nanv[k + " + std::to_string(w) + "];");
            }
            line("if (nanv[0] != nanv[0]) accv[0] = nanv[0];");
          }
          full.push_back("0");
          line(out_ref(out_idx(full)) + " = " + finalize("accv[0]") + ";");
        },
        "", SIZE_MAX);
  } else {
    // Reduce along an outer dimension: accumulate into the output block, vectorized along
    // the innermost (kept) dimension.
    nest(out.shape, [&](const Idx& o) { line(out_ref(o) + " = " + init + ";"); });
    nest(in.shape, [&](const Idx& idx) {
      std::string r = out_ref(out_idx(idx));
      line(r + " = " + combine(r, expr(op.operands[0], idx)) + ";");
    });
    if (f == ReduceFn::mean)
      nest(out.shape, [&](const Idx& o) { line(out_ref(o) + " = " + finalize(out_ref(o)) + ";"); });
  }
  --depth_;
  line("}");
  if (scalar) check_index(op.result);  // a reduced scalar used as a subscript
}

}  // namespace parhelion::backend::cpu::emit

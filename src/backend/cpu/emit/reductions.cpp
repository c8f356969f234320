// Reductions (sum, mean, max, min) of a block along one axis: along the innermost axis into kLanes
// partial accumulators that stay in vector registers, along an outer axis into the output block.

#include <cstdint>
#include <string>

#include "backend/cpu/emit/launch_emitter.h"
#include "parhelion/error.h"

namespace parhelion::backend::cpu::emit {

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
          auto element = [&](const Idx& at, const std::string& lane_acc) {
            if (!r || r->computes < 0) {
              line(lane_acc + " = " + combine(lane_acc, expr(op.operands[0], at)) + ";");
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
            line(lane_acc + " = " + combine(lane_acc, "e") + ";");
          };
          hoisted_loop("ir", "for (; ir + kLanes <= " + count + "; ir += kLanes) {", "", [&] {
            // (the next step's lines of these elements, spread over the row: cache_hints.cpp)
            prefetch_next_rows(op, lane, lane.size() - 1, "ir", "kLanes");
            line("#pragma omp simd");
            line("for (int64_t k = 0; k < kLanes; ++k) {");
            ++depth_;
            element(lane, "accv[k]");
            --depth_;
            line("}");
          });
          line("for (; ir < " + count + "; ++ir) {");
          ++depth_;
          element(tail, "accv[0]");
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

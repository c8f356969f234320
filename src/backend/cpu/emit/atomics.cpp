// Atomic updates (ph::atomic_add, atomic_max, atomic_min) of a block, element by element, in the
// way the launch's AtomicTarget says (lower/block_ir.h):
//   - Atomic: a compare-and-swap loop on the element's storage (integer adds: one fetch-add).
//     Relaxed ordering suffices: nothing in the launch reads the tensor (the verifier's rule),
//     and the threads' join orders every update before the caller's next read.
//   - Partials: a plain update of the thread's own copy, at the same offset, in slow memory after
//     the thread's scratch. Float copies are f32 whatever the tensor's dtype (a bf16 sum rounds
//     once, when the copies are combined, not at every update). The launch's partials function,
//     also emitted here, fills a thread's copies with the identity before its grid steps and
//     combines all threads' copies into the tensors after them (the executor calls it).
//   - InPlace: one thread, a plain update of the tensor.

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cpu/codegen.h"
#include "backend/cpu/emit/launch_emitter.h"
#include "ir/type_rules.h"
#include "ir/views.h"
#include "parhelion/error.h"

namespace parhelion::backend::cpu::emit {
namespace {

bool is_float(DType d) { return compute_dtype(d) == DType::f32; }

// The element type of a partial copy of a tensor of dtype `d`.
std::string partial_type(DType d) { return is_float(d) ? "float" : storage_type(d); }

// `a` combined with `b` (both of the compute type of dtype `d`).
std::string combine(ir::AtomicFn f, const std::string& a, const std::string& b) {
  switch (f) {
    case ir::AtomicFn::add:
      return "(" + a + " + " + b + ")";
    case ir::AtomicFn::max:
      return "ph_max(" + a + ", " + b + ")";
    case ir::AtomicFn::min:
      return "ph_min(" + a + ", " + b + ")";
    case ir::AtomicFn::none:
      break;
  }
  throw InternalError("combine of a plain store");
}

// The identity of an update in a partial copy's element type: x op identity == x.
std::string identity(ir::AtomicFn f, DType d) {
  if (f == ir::AtomicFn::add) return "0";
  const bool lowest = f == ir::AtomicFn::max;
  if (is_float(d)) return lowest ? "-__builtin_inff()" : "__builtin_inff()";
  const std::string t = storage_type(d);
  return lowest ? "ph_lowest<" + t + ">()" : "ph_highest<" + t + ">()";
}

}  // namespace

std::string LaunchEmitter::partial_name(int tensor) { return "P" + std::to_string(tensor); }

void LaunchEmitter::declare_partials() {
  for (const lower::AtomicTarget& a : L_.atomics) {
    if (a.strategy != lower::AtomicTarget::Partials) continue;
    const std::string ty = partial_type(fn_.tensors[a.tensor].dtype);
    line(ty + "* __restrict " + partial_name(a.tensor) + " = reinterpret_cast<" + ty + "*>(ph_scratch + " +
         std::to_string(partials_at(L_) + a.offset) + ");  // this thread's partial " + fn_.tensors[a.tensor].name);
  }
}

void LaunchEmitter::atomic_update(const Op& op) {
  ir::Type region;
  ir::load_type(fn_, op.tensor, op.index, &region);
  const lower::AtomicTarget* target = L_.atomic_target(ir::root_of(fn_, op.tensor));
  PH_CHECK(target, "an atomic update without its AtomicTarget");
  const DType dt = fn_.tensors[op.tensor].dtype, compute = compute_dtype(dt);
  const DType from = type(op.operands[0]).dtype;
  const ir::AtomicFn f = ir::atomic_fn(op);
  static const char* const kHow[] = {"atomic instructions", "this thread's partial copy", "in place, one thread"};
  line("{  // " + std::string(ir::atomic_name(f)) + " at " + op.loc.str() + ": " + kHow[target->strategy]);
  ++depth_;
  // A plain update (a partial copy, in place) whose innermost loop runs along an index block
  // may meet the same element twice in that loop (a histogram's repeated bins): it must not be a
  // simd loop, whose vector form (AVX-512's gather and scatter) reads every lane's element before
  // writing any, and keeps one update of those that meet (Atomics.AHistogramCountsEveryRepeatedIndex
  // counted 15 too few on an AMD EPYC Zen 5). Along a tile or a whole dim the elements differ
  // (moe_matmul's rows, gathered by token, update distinct columns in the simd loop).
  bool may_repeat = false;
  if (target->strategy != lower::AtomicTarget::Atomic) {
    std::vector<const ir::IndexItem*> dims;  // the index item of each region dim
    for (const ir::IndexItem& it : op.index)
      if (it.kind != ir::IndexItem::Scalar) dims.push_back(&it);
    for (size_t d = region.shape.size(); d-- > 0;)
      if (!region.shape[d].is_one()) {  // the simd loop's dim (nest's innermost)
        may_repeat = d >= dims.size() || dims[d]->kind == ir::IndexItem::Gather;
        break;
      }
  }
  nest(
      region.shape,
      [&](const Idx& idx) {
        // (the value and the address are computed only where the mask holds)
        if (ir::is_masked(op)) mask_scope_.push_back(operand(op, 1, idx));
        std::string v = operand(op, 0, idx);
        if (from != compute) v = cast_expr(compute, from, v);
        std::string update;
        ++no_hoist_;  // the address is formed inside the mask's branch
        const std::string offset = tensor_offset(op, idx);
        --no_hoist_;
        if (ir::is_masked(op)) mask_scope_.pop_back();
        const std::string value = "ph_u";
        // (a plain update names the element once: its address, a checked index included, is formed once)
        if (target->strategy == lower::AtomicTarget::Partials) {
          const std::string e = partial_name(target->tensor) + "[" + offset + "]";
          update = "auto& ph_e = " + e + "; ph_e = " +
                   (is_float(dt) ? combine(f, "ph_e", value)
                                 : store_value(dt, compute, combine(f, from_storage(dt, "ph_e"), value))) +
                   ";";
        } else if (target->strategy == lower::AtomicTarget::InPlace) {
          const std::string e = "T" + std::to_string(op.tensor) + "[" + offset + "]";
          update = "auto& ph_e = " + e +
                   "; ph_e = " + store_value(dt, compute, combine(f, from_storage(dt, "ph_e"), value)) + ";";
        } else if (f == ir::AtomicFn::add && (dt == DType::i32 || dt == DType::i64)) {
          update = "__atomic_fetch_add(&T" + std::to_string(op.tensor) + "[" + offset + "], " +
                   store_value(dt, compute, value) + ", __ATOMIC_RELAXED);";
        } else {
          update = "ph_atomic_update(&T" + std::to_string(op.tensor) + "[" + offset + "], [&](" + storage_type(dt) +
                   " ph_o) { return " + store_value(dt, compute, combine(f, from_storage(dt, "ph_o"), value)) + "; });";
        }
        const std::string body = "{ const " + c_type(compute) + " ph_u = " + v + "; " + update + " }";
        line(ir::is_masked(op) ? "if (" + operand(op, 1, idx) + ") " + body : body);
      },
      "", may_repeat ? SIZE_MAX : 0);
  --depth_;
  line("}");
}

int64_t partials_at(const lower::LaunchPlan& L) { return (L.scratch_bytes + 63) / 64 * 64; }

std::string LaunchEmitter::partials_function() {
  bool any = false;
  for (const lower::AtomicTarget& a : L_.atomics) any |= a.strategy == lower::AtomicTarget::Partials;
  if (!any) return "";
  std::string s = "// launch " + std::to_string(L_.index) +
                  "'s partial copies: phase 0 fills thread ph_tid's with the identity; phase 1 combines every "
                  "thread's into the tensors, for thread ph_tid's share of the elements (rounding once).\n";
  s += "extern \"C\" void " + launch_symbol(L_.index) +
       "_partials(int ph_phase, void* const* ph_tensors, char* ph_area, int64_t ph_stride, int ph_threads, int "
       "ph_tid) {\n";
  for (const lower::AtomicTarget& a : L_.atomics) {
    if (a.strategy != lower::AtomicTarget::Partials) continue;
    const DType dt = fn_.tensors[a.tensor].dtype, compute = compute_dtype(dt);
    const std::string ty = partial_type(dt), st = storage_type(dt), n = std::to_string(a.elements);
    const std::string at = std::to_string(partials_at(L_) + a.offset);
    s += "  {  // " + std::string(ir::atomic_name(a.fn)) + " " + fn_.tensors[a.tensor].name + "\n";
    s += "    if (ph_phase == 0) {\n";
    s += "      " + ty + "* p = reinterpret_cast<" + ty + "*>(ph_area + ph_tid * ph_stride + " + at + ");\n";
    s += "      for (int64_t e = 0; e < " + n + "; ++e) p[e] = " + identity(a.fn, dt) + ";\n";
    s += "    } else {\n";
    s += "      " + st + "* t = static_cast<" + st + "*>(ph_tensors[" + std::to_string(a.tensor) + "]);\n";
    s += "      const int64_t lo = " + n + " * ph_tid / ph_threads, hi = " + n + " * (ph_tid + 1) / ph_threads;\n";
    s += "      for (int64_t e = lo; e < hi; ++e) {\n";
    s += "        " + c_type(compute) + " acc = " + from_storage(dt, "t[e]") + ";\n";
    s += "        for (int th = 0; th < ph_threads; ++th) {\n";
    const std::string pe = "reinterpret_cast<const " + ty + "*>(ph_area + th * ph_stride + " + at + ")[e]";
    s += "          acc = " + combine(a.fn, "acc", is_float(dt) ? pe : from_storage(dt, pe)) + ";\n";
    s += "        }\n";
    s += "        t[e] = " + store_value(dt, compute, "acc") + ";\n";
    s += "      }\n    }\n  }\n";
  }
  s += "}\n";
  return s;
}

}  // namespace parhelion::backend::cpu::emit

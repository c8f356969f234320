// Dots: each becomes, per batch index, one call of the runtime's packed GEMM (ph_rt_table->gemm)
// on operands read in place (tensor, staged buffer, materialized value or Var buffer), with the
// result written to scratch or accumulated straight into the Var it is added to.

#include <string>
#include <utility>

#include "backend/cpu/codegen.h"
#include "backend/cpu/emit/launch_emitter.h"
#include "parhelion/error.h"
#include "runtime/gemm/gemm.h"

namespace parhelion::backend::cpu::emit {

namespace {

// The runtime GEMM's code for an operand's storage dtype (abi.h).
const char* gemm_dtype_code(DType d) { return d == DType::bf16 ? "PH_BF16" : d == DType::f16 ? "PH_F16" : "PH_F32"; }

}  // namespace

LaunchEmitter::Operand2D LaunchEmitter::operand_2d(int v, const Idx& batch) {
  Idx idx = batch;
  idx.push_back("0");
  idx.push_back("0");
  const int m = L_.materialized(v);
  const Op& d = *def_.at(v);
  if (m < 0 && d.kind == OpKind::Transpose) {
    Operand2D o = operand_2d(d.operands[0], batch);
    std::swap(o.rs, o.cs);
    return o;
  }
  const char* dcode = gemm_dtype_code(L_.gemm_operand_dtype(fn_, v));  // what the workspace is sized for
  if (m >= 0 || d.kind == OpKind::VarGet) {
    const lower::Scratch& s = L_.scratch[m >= 0 ? m : L_.var_scratch.at(d.var)];
    return {"(" + scratch_name(s) + " + " + linear(s.capacity, idx) + ")", std::to_string(s.capacity.back()), "1",
            dcode};
  }
  if (int k = L_.staged_load(v); k >= 0) {
    const lower::StagedBlock& b = L_.staged[k];
    Idx at = broadcast(type(v).shape, idx);
    int64_t rs = b.capacity.back();
    return {"(" + stg_name(k) + " + " + staged_offset(k, at) + ")", std::to_string(rs), "1", dcode};
  }
  return tensor_block_2d(d, type(v).shape, idx, dcode);
}

// The matrix at `idx` (a batch index, then 0, 0) of the block of shape `shape` that `access`, a
// load or a store, reads or writes in its tensor.
LaunchEmitter::Operand2D LaunchEmitter::tensor_block_2d(const Op& access, const std::vector<Dim>& shape, const Idx& idx,
                                                        const char* dcode) {
  // The tensor dimensions behind the block's last two dims.
  const ir::TensorInfo& t = fn_.tensors[access.tensor];
  std::vector<int> dims;
  for (size_t k = 0; k < access.index.size(); ++k) {
    const ir::IndexItem& ix = access.index[k];
    if (ix.kind == ir::IndexItem::All || ix.kind == ir::IndexItem::Slice ||
        (ix.kind == ir::IndexItem::Tile && !fn_.tiles[ix.tile].is_grid))
      dims.push_back(static_cast<int>(k));
  }
  Idx at = broadcast(shape, idx);
  return {"(T" + std::to_string(access.tensor) + " + " + tensor_offset(access, at) + ")",
          std::to_string(t.strides[dims[dims.size() - 2]]), std::to_string(t.strides[dims.back()]), dcode};
}

// C = [acc +] A . B for every batch index, through the runtime's packed micro-kernels. A dot
// that adds into a rescaled Var runs at the Var's assignment instead (rescaled_accumulation).
void LaunchEmitter::dot(const Op& op) {
  if (L_.dot(op.result)->rescaled >= 0) {
    line("// dot at " + op.loc.str() + ": at its Var's assignment, after the rescale");
    return;
  }
  gemm_calls(op);
}

// `acc = acc * s + dot(a, b)`: the Var is rescaled in place (acc * s, evaluated as the
// assignment would), then the dot adds into it.
void LaunchEmitter::rescaled_accumulation(const Op& var_set, const Op& dot) {
  assign_var(var_set.var, L_.dot(dot.result)->rescaled,
             "rescale var v" + std::to_string(var_set.var) + " at " + var_set.loc.str() + ", then add the dot into it");
  gemm_calls(dot);
}

void LaunchEmitter::gemm_calls(const Op& op) {
  const ir::Type& r = type(op.result);
  const ir::Type& a = type(op.operands[0]);
  const lower::DotPlan& plan = *L_.dot(op.result);
  const bool in_place = plan.accumulate_into >= 0;
  // C: the Var's buffer, the dot's own, or the output block the Var would be stored to.
  const lower::Scratch* c = plan.writes_output >= 0 ? nullptr
                            : in_place              ? &L_.scratch[L_.var_scratch.at(plan.accumulate_into)]
                                                    : &L_.scratch[L_.materialized(op.result)];
  const lower::Scratch& ws = L_.scratch[plan.workspace];
  std::vector<Dim> batch(r.shape.begin(), r.shape.end() - 2);
  line("{  // dot at " + op.loc.str());
  ++depth_;
  nest(batch, [&](const Idx& b) {
    Idx cidx = b;
    cidx.push_back("0");
    cidx.push_back("0");
    if (op.operands.size() > 2) {  // C starts as the accumulator
      std::vector<Dim> mn(r.shape.end() - 2, r.shape.end());
      Idx saved = b;
      nest(mn, [&](const Idx& ij) {
        Idx full = saved;
        full.insert(full.end(), ij.begin(), ij.end());
        line(scratch_ref(*c, full) + " = " + expr(op.operands[2], full) + ";");
      });
    }
    Operand2D A = operand_2d(op.operands[0], Idx(b.end() - (a.rank() - 2), b.end()));
    const ir::Type& bt = type(op.operands[1]);
    Operand2D B = operand_2d(op.operands[1], Idx(b.end() - (bt.rank() - 2), b.end()));
    line("ph_gemm_args g;");
    line("g.m = " + extent(r.shape[r.rank() - 2]) + "; g.n = " + extent(r.shape[r.rank() - 1]) +
         "; g.k = " + extent(a.shape[a.rank() - 1]) + ";");
    line("g.a = " + A.ptr + "; g.a_rs = " + A.rs + "; g.a_cs = " + A.cs + "; g.a_dtype = " + A.dtype + ";");
    line("g.b = " + B.ptr + "; g.b_rs = " + B.rs + "; g.b_cs = " + B.cs + "; g.b_dtype = " + B.dtype + ";");
    if (c) {
      line("g.c = " + scratch_name(*c) + " + " + linear(c->capacity, cidx) +
           "; g.ldc = " + std::to_string(c->capacity.back()) + ";");
    } else {  // (rows contiguous: AccumulatingDot::stored_whole)
      const Operand2D out = tensor_block_2d(*output_stores_.at(plan.writes_output), r.shape, cidx, "PH_F32");
      PH_CHECK(out.cs == "1", "a dot writes an output block whose rows are not contiguous");
      line("g.c = " + out.ptr + "; g.ldc = " + out.rs + ";  // the output block, stored to by %" +
           std::to_string(plan.writes_output));
    }
    // (where the loop's first trip writes the Var, the trip at its range's start overwrites the
    // block: the tile's begin, or the enclosing tile's offset for a tile over its block)
    std::string accumulate = op.operands.size() > 2 || in_place ? "1" : "0";
    if (const int t = plan.first_trip_writes; t >= 0) {
      const int parent = fn_.tiles[t].parent;
      accumulate =
          "off_" + tname(t) + " != " + (parent >= 0 ? "off_" + tname(parent) : std::to_string(fn_.tiles[t].begin));
    }
    line("g.accumulate = " + accumulate +
         "; g.kernel = " + std::to_string(runtime::gemm_kernel_index(plan.micro_kernel)) +
         "; g.workspace = " + scratch_name(ws) + "; g.workspace_bytes = " + std::to_string(ws.bytes) + ";");
    line("g.b_panels = " + kept_panels(plan) + ";");
    line("ph_rt_table->gemm(&g);");
  });
  --depth_;
  line("}");
}

// The slot of a dot's kept B panels for this call: the trip of the loop that indexes B.
std::string LaunchEmitter::kept_panels(const lower::DotPlan& plan) {
  if (plan.kept_b_slots == 0) return "nullptr";
  std::string at = "ph_kept + " + std::to_string(plan.kept_b_offset);
  if (plan.kept_b_tile >= 0) {
    const lower::InnerLoop& il = *L_.inner_loop(plan.kept_b_tile);
    at += " + (off_" + tname(plan.kept_b_tile) + " - " + std::to_string(il.begin) + ") / " + std::to_string(il.block) +
          " * " + std::to_string(plan.kept_b_slot_bytes);
  }
  return "static_cast<void*>(" + at + ")";
}

// The kept panels' area. Their keys are cleared by the launch's kept-panels function, not here:
// a thread runs this entry point once for each range of steps it claims, and the panels packed
// for one range serve the next (the launch writes nothing behind B).
void LaunchEmitter::declare_kept_panels() {
  if (L_.kept_panels_bytes == 0) return;
  line("char* const ph_kept = ph_scratch + " + std::to_string(kept_panels_at(L_)) + ";  // kept B panels");
}

// A launch call starts from no panels, since what an earlier call packed may since have been
// overwritten. Clearing the keys at every range of steps instead re-packed every B once per
// claim: a 2-thread matmul_layernorm [2048,2048,1024] claims 10 ranges, and packing B was 11%
// of its time (AMD EPYC Zen 5).
std::string LaunchEmitter::kept_panels_function() {
  if (L_.kept_panels_bytes == 0) return "";
  std::string s =
      "// launch " + std::to_string(L_.index) + "'s kept B panels: their keys cleared in one thread's area.\n";
  s += "extern \"C\" void " + launch_symbol(L_.index) + "_kept(char* ph_scratch) {\n";
  s += "  char* const ph_kept = ph_scratch + " + std::to_string(kept_panels_at(L_)) + ";\n";
  for (const lower::DotPlan& d : L_.dots)
    if (d.kept_b_slots > 0)
      s += "  for (int64_t ph_s = 0; ph_s < " + std::to_string(d.kept_b_slots) +
           "; ++ph_s) __builtin_memset(ph_kept + " + std::to_string(d.kept_b_offset) + " + ph_s * " +
           std::to_string(d.kept_b_slot_bytes) + ", 0, sizeof(ph_gemm_panels_key));\n";
  return s + "}\n";
}

int64_t kept_panels_at(const lower::LaunchPlan& L) { return partials_at(L) + L.partials_bytes; }

// `acc = acc [* s] + dot(...)` whose dot lowering made accumulate into acc's buffer.
const Op* LaunchEmitter::in_place_dot(const Op& var_set) const {
  const Op* add = def_.count(var_set.operands[0]) ? def_.at(var_set.operands[0]) : nullptr;
  if (!add || add->kind != OpKind::Binary) return nullptr;
  for (int v : add->operands)
    if (const lower::DotPlan* d = L_.dot(v); d && d->accumulate_into == var_set.var) return def_.at(v);
  return nullptr;
}

}  // namespace parhelion::backend::cpu::emit

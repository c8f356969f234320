#include "backend/cpu/codegen.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <sstream>

#include "backend/cpu/runtime_source.h"
#include "ir/printer.h"
#include "runtime/gemm/gemm.h"
#include "ir/type_rules.h"
#include "parhelion/error.h"

namespace parhelion::backend::cpu {
namespace {

using ir::BinaryFn;
using ir::Dim;
using ir::Op;
using ir::OpKind;
using ir::ReduceFn;
using ir::UnaryFn;
using Idx = std::vector<std::string>;

std::string c_type(DType compute) {
  switch (compute) {
    case DType::f32:
      return "float";
    case DType::i64:
      return "int64_t";
    case DType::boolean:
      return "bool";
    default:
      throw InternalError("not a compute dtype");
  }
}

std::string storage_type(DType d) {
  switch (d) {
    case DType::f32:
      return "float";
    case DType::bf16:
    case DType::f16:
      return "uint16_t";
    case DType::i32:
      return "int32_t";
    case DType::i64:
      return "int64_t";
    case DType::boolean:
      return "uint8_t";
  }
  throw InternalError("unknown dtype");
}

bool is16(DType d) { return d == DType::bf16 || d == DType::f16; }

// The runtime GEMM's code for an operand's storage dtype (abi.h).
const char* gemm_dtype_code(DType d) { return d == DType::bf16 ? "PH_BF16" : d == DType::f16 ? "PH_F16" : "PH_F32"; }

std::string literal(double v, DType compute) {
  if (compute == DType::i64) return "int64_t(" + std::to_string(static_cast<long long>(v)) + "LL)";
  if (compute == DType::boolean) return v != 0 ? "true" : "false";
  if (std::isnan(v)) return "__builtin_nanf(\"\")";
  if (std::isinf(v)) return v > 0 ? "__builtin_inff()" : "(-__builtin_inff())";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9gf", v);
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s.insert(s.size() - 1, ".0");
  return "(" + s + ")";
}

class LaunchEmitter {
 public:
  LaunchEmitter(const lower::BlockProgram& p, const lower::LaunchPlan& L) : p_(p), L_(L), fn_(*p.fn) {}

  std::string run() {
    line("extern \"C\" void " + launch_symbol(L_.index) +
         "(void* const* ph_tensors, const double* ph_scalars, char* ph_scratch, int64_t ph_step_begin, "
         "int64_t ph_step_end, const ph_runtime* ph_rt_table, ph_status* ph_st) {");
    ++depth_;
    declare_tensors();
    for (size_t i = 0; i < fn_.scalar_params.size(); ++i)
      line("const float sp" + std::to_string(i) + " = static_cast<float>(ph_scalars[" + std::to_string(i) + "]);");
    line("(void)ph_scalars; (void)ph_scratch; (void)ph_rt_table; (void)ph_st;");
    if (p_.config.index_checks) collect_index_uses();
    for (const lower::Scratch& s : L_.scratch) {
      std::string ty = s.kind == lower::Scratch::StagingBuffer || is16(s.dtype) ? storage_type(s.dtype) : c_type(s.dtype);
      line(ty + "* __restrict " + scratch_name(s) + " = reinterpret_cast<" + ty + "*>(ph_scratch + " +
           std::to_string(s.offset) + ");");
    }
    // Resident blocks: the outer indices of the block each buffer holds, kept across the grid
    // steps this call runs, so that consecutive steps on the same block do not copy it again.
    for (const lower::InnerLoop& il : L_.inner_loops) {
      if (il.strategy != lower::Strategy::Resident) continue;
      for (int k : il.staged) {
        const lower::StagedBlock& b = L_.staged[k];
        line("bool ph_have" + std::to_string(k) + " = false; int64_t ph_key" + std::to_string(k) + "[" +
             std::to_string(std::max<size_t>(1, b.refill_key.size())) + "] = {0};");
        line("(void)ph_key" + std::to_string(k) + ";");
      }
    }
    line("for (int64_t ph_step = ph_step_begin; ph_step < ph_step_end; ++ph_step) {");
    ++depth_;
    line("int64_t ph_rest = ph_step;");
    for (int i = static_cast<int>(L_.grid.size()) - 1; i >= 0; --i) {
      const lower::GridDim& g = L_.grid[i];
      std::string t = tname(g.tile);
      if (i > 0) {
        line("const int64_t g_" + t + " = ph_rest % " + std::to_string(g.steps) +
             "; ph_rest /= " + std::to_string(g.steps) + ";");
      } else {
        line("const int64_t g_" + t + " = ph_rest;");
      }
      line("const int64_t off_" + t + " = " + std::to_string(g.begin) + " + g_" + t + " * " + std::to_string(g.block) +
           ";");
      line("const int64_t n_" + t + " = ph_min_i64(" + std::to_string(g.block) + ", " +
           std::to_string(g.begin + g.extent) + " - off_" + t + ");");
      line("(void)n_" + t + ";");
    }
    line("(void)ph_rest;");
    block(L_.op->body);
    --depth_;
    line("}");
    --depth_;
    line("}");
    return os_.str();
  }

 private:
  // --- output helpers ---
  void line(const std::string& s) { os_ << std::string(depth_ * 2, ' ') << s << "\n"; }
  std::string tname(int tile) const { return ir::tile_name(fn_, tile); }
  std::string scratch_name(const lower::Scratch& s) const {
    switch (s.kind) {
      case lower::Scratch::DotWorkspace:
        return "ws" + std::to_string(s.value);
      case lower::Scratch::StagingBuffer:
        return "stg" + std::to_string(s.staged);
      case lower::Scratch::VarBuffer:
        return "var" + std::to_string(s.var);
      case lower::Scratch::Materialized:
        break;
    }
    return "m" + std::to_string(s.value);
  }
  const ir::Type& type(int v) const { return fn_.type_of(v); }
  const lower::ValuePlan* value_plan(int v) const {
    auto it = L_.values.find(v);
    return it == L_.values.end() ? nullptr : &it->second;
  }
  int64_t block_of(int tile) const { return p_.block_of_tile(tile); }

  void declare_tensors() {
    std::vector<bool> used(fn_.tensors.size(), false);
    ir::walk(L_.op->body, [&](const Op& op) {
      if (op.tensor >= 0) used[op.tensor] = true;
    });
    for (size_t t = 0; t < fn_.tensors.size(); ++t) {
      if (!used[t]) continue;
      std::string ty = storage_type(fn_.tensors[t].dtype);
      line(ty + "* __restrict T" + std::to_string(t) + " = static_cast<" + ty + "*>(ph_tensors[" + std::to_string(t) +
           "]);");
    }
  }

  // --- loop nests ---
  // Emits loops over `shape` (valid elements only); `body(idx)` emits the innermost statements.
  // The innermost loop carries `#pragma omp simd`, and reads that do not depend on its index
  // (a row statistic broadcast along the row, a scalar) are hoisted out of it: g++ does not
  // always do so itself, and then leaves the whole loop scalar.
  void nest(const std::vector<Dim>& shape, const std::function<void(const Idx&)>& body,
            const std::string& simd_clause = "", size_t inner_from = 0) {
    // A nest opened inside another (a dot's accumulator copy inside its batch loop) names its
    // indices apart, so that it never reuses an enclosing loop's index.
    const std::string prefix = nest_depth_ == 0 ? "i" : "i" + std::to_string(nest_depth_) + "_";
    ++nest_depth_;
    struct Leave {
      int& depth;
      ~Leave() { --depth; }
    } leave{nest_depth_};
    Idx idx(shape.size());
    int innermost = -1;
    for (size_t d = 0; d < shape.size(); ++d)
      if (!shape[d].is_one()) innermost = static_cast<int>(d);
    int opened = 0;
    for (size_t k = 0; k < shape.size(); ++k) {
      const Dim& d = shape[k];
      if (d.is_one()) {
        idx[k] = "0";
        continue;
      }
      idx[k] = prefix + std::to_string(k);
    }
    for (size_t k = 0; k < shape.size(); ++k) {
      if (shape[k].is_one()) continue;
      if (static_cast<int>(k) == innermost && k >= inner_from) {
        std::string pragma = "#pragma omp simd" + (simd_clause.empty() ? "" : " " + simd_clause);
        hoisted_loop(idx[k], loop_header(shape[k], idx[k]), pragma, [&] { body(idx); });
        for (int j = 0; j < opened; ++j) {
          --depth_;
          line("}");
        }
        return;
      }
      line(loop_header(shape[k], idx[k]));
      ++depth_;
      ++opened;
    }
    body(idx);
    for (int j = 0; j < opened; ++j) {
      --depth_;
      line("}");
    }
  }

  std::string loop_header(const Dim& d, const std::string& i) {
    std::string bound = d.kind == Dim::Tile ? "n_" + tname(d.tile) : std::to_string(d.size);
    return "for (int64_t " + i + " = 0; " + i + " < " + bound + "; ++" + i + ") {";
  }

  // Emits `pragma` + `header` + body + "}", with the body's reads that do not mention `var`
  // hoisted into constants just before the loop.
  void hoisted_loop(const std::string& var, const std::string& header, const std::string& pragma,
                    const std::function<void()>& body) {
    std::ostringstream saved;
    std::swap(os_, saved);
    std::string saved_var = hoist_var_;
    std::vector<Hoisted> saved_decls;
    std::swap(saved_decls, hoisted_);
    hoist_var_ = var;
    ++depth_;
    body();
    --depth_;
    std::string inner = os_.str();
    std::swap(os_, saved);
    std::vector<Hoisted> decls;
    std::swap(decls, hoisted_);
    hoisted_ = std::move(saved_decls);
    hoist_var_ = saved_var;
    for (const Hoisted& h : decls) line("const " + h.type + " " + h.name + " = " + h.access + ";");
    if (!pragma.empty()) line(pragma);
    line(header);
    os_ << inner;
    line("}");
  }

  static bool mentions(const std::string& text, const std::string& var) {
    for (size_t p = text.find(var); p != std::string::npos; p = text.find(var, p + 1)) {
      bool left = p == 0 || !(std::isalnum(static_cast<unsigned char>(text[p - 1])) || text[p - 1] == '_');
      size_t e = p + var.size();
      bool right = e >= text.size() || !(std::isalnum(static_cast<unsigned char>(text[e])) || text[e] == '_');
      if (left && right) return true;
    }
    return false;
  }

  // `acc = acc + dot(...)` whose dot lowering made accumulate into acc's buffer.
  bool in_place_var_set(const Op& op) const {
    const Op* add = def_.count(op.operands[0]) ? def_.at(op.operands[0]) : nullptr;
    if (!add || add->kind != OpKind::Binary) return false;
    for (int v : add->operands)
      if (const lower::DotPlan* d = L_.dot(v); d && d->accumulate_into == op.var) return true;
    return false;
  }

  bool is_hoisted(const std::string& e) const {
    for (const Hoisted& h : hoisted_)
      if (h.name == e) return true;
    return false;
  }

  // A memory read, hoisted out of the current innermost loop when it does not depend on it.
  std::string read(const std::string& access, DType compute) {
    if (hoist_var_.empty() || mentions(access, hoist_var_)) return access;
    for (const Hoisted& h : hoisted_)
      if (h.access == access) return h.name;
    hoisted_.push_back({"h" + std::to_string(hoist_counter_++), c_type(compute), access});
    return hoisted_.back().name;
  }

  // The index of a value of shape `shape` inside a nest with indices `idx` (right-aligned,
  // size-1 dims broadcast).
  Idx broadcast(const std::vector<Dim>& shape, const Idx& idx) const {
    Idx r(shape.size());
    size_t off = idx.size() - shape.size();
    for (size_t k = 0; k < shape.size(); ++k) r[k] = shape[k].is_one() ? "0" : idx[off + k];
    return r;
  }

  std::string linear(const std::vector<int64_t>& capacity, const Idx& idx) const {
    std::string s;
    int64_t stride = 1;
    for (int k = static_cast<int>(idx.size()) - 1; k >= 0; --k) {
      if (idx[k] != "0") {
        std::string term = stride == 1 ? idx[k] : idx[k] + " * " + std::to_string(stride);
        s = s.empty() ? term : term + " + " + s;
      }
      stride *= capacity[k];
    }
    return s.empty() ? "0" : s;
  }

  std::string scratch_ref(const lower::Scratch& s, const Idx& idx) const {
    return scratch_name(s) + "[" + linear(s.capacity, idx) + "]";
  }

  // --- expressions ---
  std::string expr(int v, const Idx& idx) {
    if (type(v).rank() == 0) return "s" + std::to_string(v);
    if (int m = L_.materialized(v); m >= 0) return read(scratch_ref(L_.scratch[m], idx), type(v).dtype);
    return op_expr(*def_.at(v), idx);
  }

  std::string operand(const Op& op, int k, const Idx& idx) {
    int v = op.operands[k];
    return expr(v, broadcast(type(v).shape, idx));
  }

  // A load that an inner loop staged reads its buffer: the block dims row-major in the slot of
  // the current trip (pipeline), or at the trip's offset within the whole extent (resident).
  std::string address(const Op& op, const Idx& idx) {
    if (op.kind == OpKind::Load && !copying_) {
      if (int k = L_.staged_load(op.result); k >= 0) return stg_name(k) + "[" + staged_offset(k, idx) + "]";
    }
    return tensor_address(op, idx);
  }

  std::string stg_name(int k) const { return scratch_name(L_.scratch[L_.staged[k].scratch]); }

  // The element offset in a staged buffer of block element `idx` of the current trip.
  std::string staged_offset(int k, Idx idx) const {
    const lower::StagedBlock& b = L_.staged[k];
    const lower::InnerLoop& il = inner_loop(b.loop_tile);
    std::string t = tname(b.loop_tile);
    if (il.strategy == lower::Strategy::Resident) {
      idx[b.inner_dim] = "(off_" + t + " - " + std::to_string(il.begin) + " + " + idx[b.inner_dim] + ")";
      return linear(b.capacity, idx);
    }
    std::string base = b.slots > 1 ? "ph_slot_" + t + " * " + std::to_string(b.slot_elems) + " + " : "";
    return base + linear(b.capacity, idx);
  }

  const lower::InnerLoop& inner_loop(int tile) const {
    const lower::InnerLoop* il = L_.inner_loop(tile);
    PH_CHECK(il, "no inner loop for tile");
    return *il;
  }

  std::string tensor_address(const Op& op, const Idx& idx) {
    return "T" + std::to_string(op.tensor) + "[" + tensor_offset(op, idx) + "]";
  }

  // The element offset in its tensor of element `idx` of the block `op` loads or stores.
  std::string tensor_offset(const Op& op, const Idx& idx) {
    const ir::TensorInfo& t = fn_.tensors[op.tensor];
    std::string s;
    size_t j = 0;
    for (size_t d = 0; d < op.index.size(); ++d) {
      const ir::IndexItem& ix = op.index[d];
      std::string pos;
      if (ix.kind == ir::IndexItem::Tile) {
        if (fn_.tiles[ix.tile].is_grid)
          pos = "off_" + tname(ix.tile);
        else
          pos = "(off_" + tname(ix.tile) + " + " + idx[j++] + ")";
      } else if (ix.kind == ir::IndexItem::All) {
        pos = idx[j++];
      } else {
        pos = "(" + expr(ix.value, {}) + ")";
      }
      if (t.shape[d] == 1 && ix.kind != ir::IndexItem::Scalar) continue;  // position is 0
      std::string term = t.strides[d] == 1 ? pos : pos + " * " + std::to_string(t.strides[d]);
      s += (s.empty() ? "" : " + ") + term;
    }
    return s.empty() ? "0" : s;
  }

  // Where a dot reads an operand: a pointer to element (0, 0) of the block at batch index
  // `batch`, the element strides of its last two dims, and its dtype code.
  struct Operand2D {
    std::string ptr, rs, cs, dtype;
  };

  Operand2D operand_2d(int v, const Idx& batch) {
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
    if (m >= 0 || d.kind == OpKind::VarGet) {
      const lower::Scratch& s = L_.scratch[m >= 0 ? m : L_.var_scratch.at(d.var)];
      return {"(" + scratch_name(s) + " + " + linear(s.capacity, idx) + ")", std::to_string(s.capacity.back()), "1",
              gemm_dtype_code(s.dtype)};
    }
    PH_CHECK(d.kind == OpKind::Load, "dot operand neither loaded nor materialized");
    const char* dcode = gemm_dtype_code(fn_.tensors[d.tensor].dtype);
    if (int k = L_.staged_load(v); k >= 0) {
      const lower::StagedBlock& b = L_.staged[k];
      Idx at = broadcast(type(v).shape, idx);
      int64_t rs = b.capacity.back();
      return {"(" + stg_name(k) + " + " + staged_offset(k, at) + ")", std::to_string(rs), "1", dcode};
    }
    // The tensor dimensions behind the block's last two dims.
    const ir::TensorInfo& t = fn_.tensors[d.tensor];
    std::vector<int> dims;
    for (size_t k = 0; k < d.index.size(); ++k) {
      const ir::IndexItem& ix = d.index[k];
      if (ix.kind == ir::IndexItem::All || (ix.kind == ir::IndexItem::Tile && !fn_.tiles[ix.tile].is_grid))
        dims.push_back(static_cast<int>(k));
    }
    Idx at = broadcast(type(v).shape, idx);
    return {"(T" + std::to_string(d.tensor) + " + " + tensor_offset(d, at) + ")", std::to_string(t.strides[dims[dims.size() - 2]]),
            std::to_string(t.strides[dims.back()]), dcode};
  }

  // C = [acc +] A . B for every batch index, through the runtime's packed micro-kernels.
  void dot(const Op& op) {
    const ir::Type& r = type(op.result);
    const ir::Type& a = type(op.operands[0]);
    const lower::DotPlan& plan = *L_.dot(op.result);
    const bool in_place = plan.accumulate_into >= 0;
    const lower::Scratch& c = L_.scratch[in_place ? L_.var_scratch.at(plan.accumulate_into) : L_.materialized(op.result)];
    const lower::Scratch& ws = L_.scratch[plan.workspace];
    auto extent = [&](const Dim& d) { return d.kind == Dim::Tile ? "n_" + tname(d.tile) : std::to_string(d.size); };
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
          line(scratch_ref(c, full) + " = " + expr(op.operands[2], full) + ";");
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
      line("g.c = " + scratch_name(c) + " + " + linear(c.capacity, cidx) +
           "; g.ldc = " + std::to_string(c.capacity.back()) + ";");
      line("g.accumulate = " + std::string(op.operands.size() > 2 || in_place ? "1" : "0") + "; g.kernel = " +
           std::to_string(runtime::gemm_kernel_index(plan.micro_kernel)) + "; g.workspace = " + scratch_name(ws) + ";");
      line("ph_rt_table->gemm(&g);");
    });
    --depth_;
    line("}");
  }

  std::string load_expr(const Op& op, const Idx& idx) {
    std::string a = address(op, idx);
    switch (fn_.tensors[op.tensor].dtype) {
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
    }
    throw InternalError("bad dtype");
  }

  std::string store_value(DType dt, DType from, const std::string& v) {
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
    }
    throw InternalError("bad dtype");
  }

  std::string unary_expr(UnaryFn f, DType dt, const std::string& a) {
    switch (f) {
      case UnaryFn::neg:
        return "(-" + a + ")";
      case UnaryFn::exp:
        return "ph_rt::exp(" + a + ")";
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
    }
    throw InternalError("bad unary");
  }

  std::string binary_expr(BinaryFn f, DType result, DType ta, DType tb, std::string a, std::string b) {
    if (result == DType::f32) {  // mixed f32/i64 arithmetic computes in f32
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
    }
    throw InternalError("bad binary");
  }

  std::string cast_expr(DType to, DType from, const std::string& a) {
    switch (to) {
      case DType::f32:
        return from == DType::f32 ? a : "static_cast<float>(" + a + ")";
      case DType::bf16:
        return "ph_rt::bf16_to_f32(ph_rt::f32_to_bf16(static_cast<float>(" + a + ")))";
      case DType::f16:
        return "ph_rt::f16_to_f32(ph_rt::f32_to_f16(static_cast<float>(" + a + ")))";
      case DType::i32:
        return "static_cast<int64_t>(static_cast<int32_t>(" + a + "))";
      case DType::i64:
        return "static_cast<int64_t>(" + a + ")";
      case DType::boolean:
        return "(" + a + " != 0)";
    }
    throw InternalError("bad cast");
  }

  // The expression of a pointwise op at element `idx` of its own shape.
  std::string op_expr(const Op& op, const Idx& idx) {
    DType rt = type(op.result).dtype;
    switch (op.kind) {
      case OpKind::Load:
        return read(load_expr(op, idx), type(op.result).dtype);
      case OpKind::Constant:
      case OpKind::Full:
        return literal(op.number, rt);
      case OpKind::ScalarParam:
        return "sp" + std::to_string(op.param);
      case OpKind::TileBegin:
        return "off_" + tname(op.tile);
      case OpKind::TileEnd:
        return "(off_" + tname(op.tile) + " + n_" + tname(op.tile) + ")";
      case OpKind::TileIndex:
        return "(off_" + tname(op.tile) + " + " + idx[0] + ")";
      case OpKind::Arange:
        return "static_cast<int64_t>(" + idx[0] + ")";
      case OpKind::VarGet: {
        const lower::Scratch& s = L_.scratch[L_.var_scratch.at(op.var)];
        return read(scratch_ref(s, idx), s.dtype);
      }
      case OpKind::Unary:
        return unary_expr(static_cast<UnaryFn>(op.fn), type(op.operands[0]).dtype, operand(op, 0, idx));
      case OpKind::Binary: {
        std::string a = operand(op, 0, idx), b = operand(op, 1, idx);
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
        std::string a = operand(op, 1, idx), b = operand(op, 2, idx);
        if (rt == DType::f32 && type(op.operands[1]).dtype != DType::f32) a = "static_cast<float>(" + a + ")";
        if (rt == DType::f32 && type(op.operands[2]).dtype != DType::f32) b = "static_cast<float>(" + b + ")";
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
      default:
        throw InternalError(std::string("no expression for op ") + std::string(ir::op_name(op)));
    }
  }

  // --- index checks ---
  // A scalar that indexes a tensor dimension, and where: checked right where it is computed,
  // before any use, so that no out-of-range access happens.
  struct IndexUse {
    std::string where, what;
    int64_t size = 0;
  };

  void collect_index_uses() {
    std::map<int, const Op*> defs;
    ir::walk(L_.op->body, [&](const Op& op) {
      if (op.result >= 0) defs[op.result] = &op;
      if (op.kind != OpKind::Load && op.kind != OpKind::Store) return;
      const ir::TensorInfo& t = fn_.tensors[op.tensor];
      for (size_t d = 0; d < op.index.size(); ++d) {
        const ir::IndexItem& ix = op.index[d];
        if (ix.kind != ir::IndexItem::Scalar) continue;
        auto def = defs.find(ix.value);
        if (def != defs.end() && def->second->kind == OpKind::Constant) continue;  // checked when traced
        index_uses_[ix.value].push_back(
            {op.loc.str(),
             "dimension " + std::to_string(d) + " of " + t.name + " (size " + std::to_string(t.shape[d]) + ")",
             t.shape[d]});
      }
    });
  }

  static std::string c_string(const std::string& s) {
    std::string r = "\"";
    for (char c : s) r += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
    return r + "\"";
  }

  void check_index(int v) {
    auto it = index_uses_.find(v);
    if (it == index_uses_.end()) return;
    std::string s = "s" + std::to_string(v);
    for (const IndexUse& u : it->second)
      line("if (__builtin_expect(static_cast<uint64_t>(" + s + ") >= " + std::to_string(u.size) + "u, 0)) { " +
           "ph_index_error(ph_st, " + c_string(u.where) + ", " + c_string(u.what) + ", " + s + "); return; }");
  }

  // --- statements ---
  void block(const std::vector<Op>& ops) {
    for (size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      if (op.result >= 0) def_[op.result] = &op;
      if (const auto* v = value_plan(op.result); v && v->in_reduction >= 0) continue;  // written by its loop
      statement(op);
    }
  }

  bool pointwise(const Op& op) const { return ir::is_pointwise(op.kind); }

  void statement(const Op& op) {
    switch (op.kind) {
      case OpKind::Loop:
        return loop(op);
      case OpKind::Store:
        return store(op);
      case OpKind::VarDecl:
      case OpKind::VarSet:
        if (op.kind == OpKind::VarSet && in_place_var_set(op)) return;  // the dot added into the Var
        return var_write(op);
      case OpKind::Reduce:
        return reduce(op);
      case OpKind::Dot:
        return dot(op);
      default:
        break;
    }
    if (op.result < 0) return;
    const ir::Type& t = type(op.result);
    if (t.rank() == 0) {
      line("const " + c_type(t.dtype) + " s" + std::to_string(op.result) + " = " + op_expr(op, {}) + ";");
      check_index(op.result);
      return;
    }
    const int m = L_.materialized(op.result);
    if (m < 0) return;  // fused into its consumers
    const lower::Scratch& s = L_.scratch[m];
    line("{  // materialize %" + std::to_string(op.result) + " (" + std::string(ir::op_name(op)) + ")");
    ++depth_;
    nest(t.shape, [&](const Idx& idx) {
      std::string v = op_expr(op, idx);
      if (is16(s.dtype))
        v = std::string(s.dtype == DType::bf16 ? "ph_rt::f32_to_bf16(" : "ph_rt::f32_to_f16(") + v + ")";
      line(scratch_ref(s, idx) + " = " + v + ";");
    });
    --depth_;
    line("}");
  }

  void loop(const Op& op) {
    line("// loop at " + op.loc.str());
    for (int tile : op.loop_tiles) {
      const ir::TileInfo& t = fn_.tiles[tile];
      std::string n = tname(tile);
      int64_t b = block_of(tile);
      const lower::InnerLoop& il = inner_loop(tile);
      if (il.strategy == lower::Strategy::Resident) fill_resident(il);
      line("for (int64_t off_" + n + " = " + std::to_string(t.begin) + "; off_" + n + " < " + std::to_string(t.end) +
           "; off_" + n + " += " + std::to_string(b) + ") {");
      ++depth_;
      line("const int64_t n_" + n + " = ph_min_i64(" + std::to_string(b) + ", " + std::to_string(t.end) + " - off_" +
           n + ");");
      line("(void)n_" + n + ";");
      if (il.strategy == lower::Strategy::Pipeline) pipeline_trip(il);
    }
    block(op.body);
    for (size_t i = 0; i < op.loop_tiles.size(); ++i) {
      --depth_;
      line("}");
    }
  }

  // --- inner-loop staging ---
  // The load that defines staged block k (its first reader).
  const Op& staged_load_op(int k) {
    int v = L_.staged[k].loads.front();
    const Op* found = nullptr;
    ir::walk(L_.op->body, [&](const Op& o) {
      if (o.result == v) found = &o;
    });
    PH_CHECK(found, "staged load not found");
    return *found;
  }

  // Copies the block of staged buffer k at the current off_/n_ of its tiles into `slot`
  // (an offset expression), valid elements only.
  void copy_block(int k, const std::string& slot) {
    const Op& load = staged_load_op(k);
    const lower::StagedBlock& b = L_.staged[k];
    copying_ = true;
    nest(type(load.result).shape, [&](const Idx& idx) {
      line(stg_name(k) + "[" + (slot == "0" ? "" : slot + " + ") + linear(b.capacity, idx) +
           "] = " + tensor_address(load, idx) + ";");
    });
    copying_ = false;
  }

  // Resident: before the loop, bring the whole extent of each block it reads into fast memory,
  // unless this thread's previous grid step already did so for the same outer block.
  void fill_resident(const lower::InnerLoop& il) {
    std::string t = tname(il.tile);
    for (int k : il.staged) {
      const lower::StagedBlock& b = L_.staged[k];
      std::string ks = std::to_string(k);
      line("{  // resident: stage " + fn_.tensors[b.tensor].name + " over all of " + t + " (" +
           std::to_string(il.extent) + ")");
      ++depth_;
      std::string same = "ph_have" + ks, store_key;
      for (size_t i = 0; i < b.refill_key.size(); ++i) {
        const lower::IndexExpr& e = b.refill_key[i];
        std::string key = e.kind == lower::IndexExpr::Value ? expr(e.value, {}) : "off_" + tname(e.tile);
        same += " && ph_key" + ks + "[" + std::to_string(i) + "] == " + key;
        store_key += "ph_key" + ks + "[" + std::to_string(i) + "] = " + key + "; ";
      }
      line("if (!(" + same + ")) {");
      ++depth_;
      line("const int64_t off_" + t + " = " + std::to_string(il.begin) + ", n_" + t + " = " +
           std::to_string(il.extent) + ";");
      copy_block(k, "0");
      line(store_key + "ph_have" + ks + " = true;");
      --depth_;
      line("}");
      --depth_;
      line("}");
    }
  }

  // Pipeline: copy this trip's blocks into their slot; with two buffers or more, prefetch the
  // blocks `buffers - 1` trips ahead, so they are in the caches when their trip copies them.
  void pipeline_trip(const lower::InnerLoop& il) {
    std::string t = tname(il.tile);
    if (il.buffers > 1)
      line("const int64_t ph_slot_" + t + " = ((off_" + t + " - " + std::to_string(il.begin) + ") / " +
           std::to_string(il.block) + ") % " + std::to_string(il.buffers) + ";");
    for (int k : il.staged) {
      const lower::StagedBlock& b = L_.staged[k];
      line("{  // pipeline: stage " + fn_.tensors[b.tensor].name + " block of " + t);
      ++depth_;
      copy_block(k, il.buffers > 1 ? "ph_slot_" + t + " * " + std::to_string(b.slot_elems) : "0");
      --depth_;
      line("}");
    }
    if (il.buffers < 2) return;
    int64_t ahead = (il.buffers - 1) * il.block;
    line("if (off_" + t + " + " + std::to_string(ahead) + " < " + std::to_string(il.begin + il.extent) +
         ") {  // prefetch " + std::to_string(il.buffers - 1) + " trip(s) ahead");
    ++depth_;
    line("const int64_t ph_ahead = off_" + t + " + " + std::to_string(ahead) + ";");
    line("const int64_t off_" + t + " = ph_ahead, n_" + t + " = ph_min_i64(" + std::to_string(il.block) + ", " +
         std::to_string(il.begin + il.extent) + " - ph_ahead);");
    for (int k : il.staged) prefetch_block(k);
    --depth_;
    line("}");
  }

  void prefetch_block(int k) {
    const Op& load = staged_load_op(k);
    const std::vector<Dim>& shape = type(load.result).shape;
    const ir::TensorInfo& t = fn_.tensors[load.tensor];
    // The innermost block dim: prefetch one address per cache line when it is contiguous.
    int last_tensor_dim = -1;
    for (size_t d = 0; d < load.index.size(); ++d) {
      const ir::IndexItem& ix = load.index[d];
      if (ix.kind == ir::IndexItem::All || (ix.kind == ir::IndexItem::Tile && !fn_.tiles[ix.tile].is_grid))
        last_tensor_dim = static_cast<int>(d);
    }
    int64_t step =
        last_tensor_dim >= 0 && t.strides[last_tensor_dim] == 1 ? std::max<int64_t>(1, 64 / dtype_size(t.dtype)) : 1;
    Idx idx(shape.size());
    int opened = 0;
    copying_ = true;
    for (size_t d = 0; d < shape.size(); ++d) {
      idx[d] = "i" + std::to_string(d);
      std::string bound = shape[d].kind == Dim::Tile ? "n_" + tname(shape[d].tile) : std::to_string(shape[d].size);
      line("for (int64_t " + idx[d] + " = 0; " + idx[d] + " < " + bound + "; " + idx[d] +
           (d + 1 == shape.size() ? " += " + std::to_string(step) : "++") + ") {");
      ++depth_;
      ++opened;
    }
    line("__builtin_prefetch(&" + tensor_address(load, idx) + ", 0, 3);");
    copying_ = false;
    for (int j = 0; j < opened; ++j) {
      --depth_;
      line("}");
    }
  }

  void store(const Op& op) {
    // The stored region has the shape a load of the same index would have.
    ir::Type region;
    ir::load_type(fn_, op.tensor, op.index, &region);
    const std::vector<Dim>& shape = region.shape;
    DType dt = fn_.tensors[op.tensor].dtype;
    DType from = type(op.operands[0]).dtype;
    line("{  // store at " + op.loc.str());
    ++depth_;
    nest(shape,
         [&](const Idx& idx) { line(address(op, idx) + " = " + store_value(dt, from, operand(op, 0, idx)) + ";"); });
    --depth_;
    line("}");
  }

  void var_write(const Op& op) {
    const lower::Scratch& s = L_.scratch[L_.var_scratch.at(op.var)];
    const ir::Type& vt = fn_.vars[op.var].type;
    line("{  // " + std::string(op.kind == OpKind::VarDecl ? "init" : "assign") + " var v" + std::to_string(op.var) +
         " at " + op.loc.str());
    ++depth_;
    nest(vt.shape, [&](const Idx& idx) { line(scratch_ref(s, idx) + " = " + operand(op, 0, idx) + ";"); });
    --depth_;
    line("}");
  }

  void reduce(const Op& op) {
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
    std::string count = rd.kind == Dim::Tile ? "n_" + tname(rd.tile) : std::to_string(rd.size);
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
    auto out_ref = [&](const Idx& o) {
      return scalar ? "s" + std::to_string(op.result) : scratch_ref(L_.scratch[m], o);
    };
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
            auto element = [&](const Idx& at, const std::string& lane_acc) {
              const lower::ValuePlan* r = value_plan(op.result);
              if (!r || r->computes < 0) {
                line(lane_acc + " = " + combine(lane_acc, expr(op.operands[0], at)) + ";");
                return;
              }
              const Op& producer = *def_.at(r->computes);
              line("const " + c_type(type(producer.result).dtype) + " e = " + op_expr(producer, at) + ";");
              line(scratch_ref(L_.scratch[L_.materialized(producer.result)], at) + " = e;");
              line(lane_acc + " = " + combine(lane_acc, "e") + ";");
            };
            hoisted_loop("ir", "for (; ir + kLanes <= " + count + "; ir += kLanes) {", "", [&] {
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
            line(ty + " acc = accv[0];");
            line("for (int k = 1; k < kLanes; ++k) acc = " + combine("acc", "accv[k]") + ";");
            full.push_back("0");
            line(out_ref(out_idx(full)) + " = " + finalize("acc") + ";");
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

  const lower::BlockProgram& p_;
  const lower::LaunchPlan& L_;
  const ir::Function& fn_;
  std::map<int, const Op*> def_;
  bool copying_ = false;  // emitting a staging copy: loads read the tensor, not the buffer
  std::ostringstream os_;
  int depth_ = 0;
  std::string hoist_var_;  // the innermost loop's index while its body is generated
  struct Hoisted {
    std::string name, type, access;
  };
  std::vector<Hoisted> hoisted_;  // reads to emit before that loop, as constants
  int hoist_counter_ = 0;
  int nest_depth_ = 0;                               // how many nest() calls are open
  std::map<int, std::vector<IndexUse>> index_uses_;  // scalar value -> the dimensions it indexes
};

const char* kPrelude = R"(
static constexpr int kLanes = 32;  // partial accumulators per reduction (two AVX-512 vectors of f32)
static inline int64_t ph_min_i64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t ph_abs_i64(int64_t a) { return a < 0 ? -a : a; }
// maximum/minimum (and amax/amin) propagate NaN, as torch does, whichever operand holds it.
template <class T> static inline T ph_max(T a, T b) { return (a > b || a != a) ? a : b; }
template <class T> static inline T ph_min(T a, T b) { return (a < b || a != a) ? a : b; }
// pow as std::pow and torch define it: x^0 = 1^y = 1, NaN otherwise propagates, 0^y, and
// negative bases with integer exponents (odd ones keep the sign; infinite ones are even).
static inline float ph_pow(float a, float b) {
  if (b == 0.0f || a == 1.0f) return 1.0f;
  if (a != a || b != b) return __builtin_nanf("");
  if (a > 0.0f) return ph_rt::exp(b * ph_rt::log(a));
  const bool b_inf = __builtin_isinf(b);
  const bool odd = !b_inf && __builtin_fabsf(b) < 16777216.0f && __builtin_truncf(b) == b && __builtin_fmodf(b, 2.0f) != 0.0f;
  if (a == 0.0f) {  // +0 or -0: the sign survives odd powers
    if (b > 0.0f) return odd ? a : 0.0f;
    return odd ? __builtin_copysignf(__builtin_inff(), a) : __builtin_inff();
  }
  if (a == -1.0f && b_inf) return 1.0f;
  if (!b_inf && __builtin_truncf(b) != b) return __builtin_nanf("");  // a fractional power of a negative
  const float m = ph_rt::exp(b * ph_rt::log(-a));
  return odd ? -m : m;
}
// Records the first out-of-range index of a launch (threads race to be first; the caller reads
// the status after they have joined).
static inline void ph_index_error(ph_status* st, const char* where, const char* what, int64_t value) {
  int expected = 0;
  if (__atomic_compare_exchange_n(&st->failed, &expected, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    st->value = value;
    st->where = where;
    st->what = what;
  }
}
)";

}  // namespace

std::string launch_symbol(int index) { return "ph_launch_" + std::to_string(index); }

std::string generate_source(const lower::BlockProgram& p) {
  std::ostringstream os;
  os << "// Generated by Parhelion: kernel " << p.fn->name << ", target cpu\n";
  os << "// config " << p.config.to_json() << "\n";
  os << "#include <cstdint>\n#include <cstring>\n";
  os << runtime_header_source();
  os << runtime_abi_source();
  os << kPrelude << "\n";
  for (const lower::LaunchPlan& L : p.launches) {
    os << "// launch " << L.index << " at " << L.op->loc.str() << "\n";
    os << LaunchEmitter(p, L).run() << "\n";
  }
  return os.str();
}

}  // namespace parhelion::backend::cpu

// The cpu backend's code generator: generate_source() prints the translation unit (the runtime
// headers, the prelude of helpers generated kernels call, one entry point per launch), and the
// skeleton of each launch entry point: its tensor, scalar and scratch pointers, the loop over the
// grid steps it is given, and the statements of the launch body. The concerns inside statements
// (loop nests, expressions, dots, staging, reductions, index checks) are in emit/.
#include "backend/cpu/codegen.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "backend/cpu/emit/launch_emitter.h"
#include "backend/cpu/runtime_source.h"
#include "ir/type_rules.h"
#include "parhelion/error.h"

namespace parhelion::backend::cpu {
namespace emit {

std::string LaunchEmitter::run() {
  line("extern \"C\" void " + launch_symbol(L_.index) +
       "(void* const* ph_tensors, const double* ph_scalars, char* ph_scratch, int64_t ph_step_begin, "
       "int64_t ph_step_end, const ph_runtime* ph_rt_table, ph_status* ph_st) {");
  ++depth_;
  declare_tensors();
  for (size_t i = 0; i < fn_.scalar_params.size(); ++i)
    line("const float sp" + std::to_string(i) + " = static_cast<float>(ph_scalars[" + std::to_string(i) + "]);");
  line("(void)ph_scalars; (void)ph_scratch; (void)ph_rt_table; (void)ph_st;");
  ir::walk(L_.op->body, [&](const Op& op) {
    if (op.result >= 0) launch_def_[op.result] = &op;
    if (op.kind == OpKind::Store && !op.operands.empty() && L_.dot_writing_output(op.operands[0]))
      output_stores_[op.operands[0]] = &op;
  });
  if (p_.config.index_checks) collect_index_uses();
  for (const lower::Scratch& s : L_.scratch) {
    std::string ty = s.kind == lower::Scratch::StagingBuffer || is16(s.dtype) ? storage_type(s.dtype) : c_type(s.dtype);
    line(ty + "* __restrict " + scratch_name(s) + " = reinterpret_cast<" + ty + "*>(ph_scratch + " +
         std::to_string(s.offset) + ");");
  }
  declare_partials();       // atomics.cpp
  declare_kept_panels();    // dots.cpp
  declare_resident_keys();  // kept across the grid steps below (staging.cpp)
  line("for (int64_t ph_step = ph_step_begin; ph_step < ph_step_end; ++ph_step) {");
  ++depth_;
  decode_step("", "ph_step", true);
  if (std::any_of(L_.prefetches.begin(), L_.prefetches.end(), [](const lower::Prefetch& f) {
        return f.trip_tile < 0;
      })) {  // the step this thread runs next, whose blocks it prefetches
    line("const bool ph_pf_next = ph_step + 1 < ph_step_end;");
    decode_step("pf_", "ph_step + 1", false);
  }
  block(L_.op->body);
  --depth_;
  line("}");
  // Streamed stores are weakly ordered: fenced before the launch reports its steps done.
  if (!L_.streamed_stores.empty()) line("ph_stream_fence();");
  --depth_;
  line("}");
  return os_.str();
}

void LaunchEmitter::decode_step(const std::string& prefix, const std::string& step, bool counts) {
  const std::string rest = "ph_" + prefix + "rest";
  line("int64_t " + rest + " = " + step + ";");
  for (int i = static_cast<int>(L_.grid.size()) - 1; i >= 0; --i) {
    const lower::GridDim& g = L_.grid[i];
    const std::string t = tname(g.tile), gi = prefix + "g_" + t, off = prefix + "off_" + t;
    if (i > 0)
      line("const int64_t " + gi + " = " + rest + " % " + std::to_string(g.steps) + "; " + rest +
           " /= " + std::to_string(g.steps) + ";");
    else
      line("const int64_t " + gi + " = " + rest + ";");
    line("const int64_t " + off + " = " + std::to_string(g.begin) + " + " + gi + " * " + std::to_string(g.block) + ";");
    if (!counts) continue;
    line("const int64_t n_" + t + " = ph_min_i64(" + std::to_string(g.block) + ", " +
         std::to_string(g.begin + g.extent) + " - off_" + t + ");");
    line("(void)n_" + t + ";");
  }
  line("(void)" + rest + ";");
}

void LaunchEmitter::declare_tensors() {
  std::vector<bool> used(fn_.tensors.size(), false);
  ir::walk(L_.op->body, [&](const Op& op) {
    if (op.tensor >= 0) used[op.tensor] = true;
  });
  for (size_t t = 0; t < fn_.tensors.size(); ++t) {
    if (!used[t]) continue;
    std::string ty = storage_type(fn_.tensors[t].dtype);
    // On a mesh, copies (this device's to itself, other devices' between its waits) write the
    // tensors through other pointers: no __restrict there.
    line(ty + (L_.collectives ? "* T" : "* __restrict T") + std::to_string(t) + " = static_cast<" + ty +
         "*>(ph_tensors[" + std::to_string(t) + "]);");
  }
}

void LaunchEmitter::block(const std::vector<Op>& ops) {
  std::set<const Op*> emitted_early;  // reductions computed in an earlier one's loop, scalars before it
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    if (op.result >= 0) def_[op.result] = &op;
    if (const auto* v = value_plan(op.result); v && v->in_reduction >= 0) continue;  // written by its loop
    if (emitted_early.count(&op)) continue;
    if (op.kind == OpKind::Reduce) {  // (reductions.cpp)
      const RowGroup group = row_siblings(ops, i, emitted_early);
      if (!group.siblings.empty()) {  // (no per-block versions: reduces_rows)
        for (const Op* s : group.scalars_first) statement(*s);
        emitted_early.insert(group.scalars_first.begin(), group.scalars_first.end());
        emitted_early.insert(group.siblings.begin(), group.siblings.end());
        reduce(op, group.siblings);
        continue;
      }
    }
    statement(op);
  }
}

void LaunchEmitter::statement(const Op& op) {
  if (versioned_statement(op)) return;  // (decided_wheres.cpp)
  switch (op.kind) {
    case OpKind::Loop:
      return loop(op);
    case OpKind::If:
      line("if (" + expr(op.operands[0], {}) + ") {  // when at " + op.loc.str());
      ++depth_;
      block(op.body);
      --depth_;
      line("}");
      return;
    case OpKind::Store:
      return store(op);
    case OpKind::CopyStart:
    case OpKind::CopyWait:
    case OpKind::Barrier:
    case OpKind::Signal:
    case OpKind::SemWait:
      return collective(op);
    case OpKind::VarDecl:
    case OpKind::VarSet:
      if (op.kind == OpKind::VarSet && in_place_sum(op)) return;  // added into the Var (reductions.cpp)
      if (const Op* dot = op.kind == OpKind::VarSet ? in_place_dot(op) : nullptr) {
        if (L_.dot(dot->result)->rescaled >= 0) rescaled_accumulation(op, *dot);
        return;  // otherwise the dot has added into the Var where it is
      }
      return var_write(op);
    case OpKind::Reduce:
      return reduce(op);
    case OpKind::Scan:
      return scan(op);
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
  nest(
      t.shape,
      [&](const Idx& idx) {
        line(scratch_ref(s, idx) + " = " + (is16(s.dtype) ? stored_op_expr(s.dtype, op, idx) : op_expr(op, idx)) + ";");
      },
      "", 0, [&](const Idx& idx, size_t k) { prefetch_next_rows(op, idx, k, "0", extent(t.shape[k])); });
  --depth_;
  line("}");
}

void LaunchEmitter::store(const Op& op) {
  if (ir::is_atomic(op)) return atomic_update(op);
  if (output_stores_.count(op.operands[0])) {
    line("// store at " + op.loc.str() + ": the dot wrote the block in place of v" +
         std::to_string(def_.at(op.operands[0])->var));
    return;
  }
  // The stored region has the shape a load of the same index would have.
  ir::Type region;
  ir::load_type(fn_, op.tensor, op.index, &region);
  const std::vector<Dim>& shape = region.shape;
  const bool streamed = L_.streamed(op);
  line("{  // store at " + op.loc.str() + (streamed ? ", streamed past the caches" : ""));
  ++depth_;
  auto prefetch = [&](const Idx& idx, size_t k) { prefetch_next_rows(op, idx, k, "0", extent(shape[k])); };
  if (ir::is_masked(op)) {
    // Only the mask's true elements are written, and only their indices are checked: the
    // address is computed inside the branch, never hoisted.
    nest(
        shape,
        [&](const Idx& idx) {
          const std::string mask = operand(op, 1, idx);
          mask_scope_.push_back(mask);  // (the value, too, is computed only where it holds)
          const std::string v = stored_operand(op, idx);
          ++no_hoist_;
          const std::string a = address(op, idx);
          --no_hoist_;
          mask_scope_.pop_back();
          line("if (" + mask + ") " + a + " = " + v + ";");
        },
        "", 0, prefetch);
  } else if (const bool converted = converts_rows(op, shape); streamed || converted) {
    row_store(op, shape, streamed, converted);  // row_stores.cpp
  } else {
    nest(
        shape,
        [&](const Idx& idx) {
          std::string v = copied_bits(op, idx);
          line(address(op, idx) + " = " + (v.empty() ? stored_operand(op, idx) : v) + ";");
        },
        "", 0, prefetch);
  }
  --depth_;
  line("}");
}

void LaunchEmitter::var_write(const Op& op) {
  if (op.kind == OpKind::VarDecl)
    for (const lower::DotPlan& d : L_.dots)
      if (d.accumulate_into == op.var && d.first_trip_writes >= 0) {
        line("// init var v" + std::to_string(op.var) + " at " + op.loc.str() +
             ": its zeros are not stored, the first trip of " + tname(d.first_trip_writes) + " writes it (dot %" +
             std::to_string(d.result) + ")");
        return;
      }
  assign_var(op.var, op.operands[0],
             std::string(op.kind == OpKind::VarDecl ? "init" : "assign") + " var v" + std::to_string(op.var) + " at " +
                 op.loc.str());
}

void LaunchEmitter::assign_var(int var, int value, const std::string& comment) {
  const lower::Scratch& s = L_.scratch[L_.var_scratch.at(var)];
  line("{  // " + comment);
  ++depth_;
  nest(fn_.vars[var].type.shape, [&](const Idx& idx) {
    line(scratch_ref(s, idx) + " = " + expr(value, broadcast(type(value).shape, idx)) + ";");
  });
  --depth_;
  line("}");
}

}  // namespace emit

namespace {

// No <immintrin.h> here: parsing it (every ISA's intrinsics) was most of a kernel's compile time
// (g++ 12 -O3 on a Zen 1: a 700-line kernel 1.6-1.7 s with it, 0.6-0.8 s without; 19 small test
// kernels 24.1 s with it, 3.3 s without), and the kernels need only the stream stores below,
// written with the builtins the header wraps.
const char* kPrelude = R"(
static constexpr int kLanes = PH_REDUCTION_LANES;  // partial accumulators per reduction
static inline int64_t ph_min_i64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t ph_max_i64(int64_t a, int64_t b) { return a > b ? a : b; }
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
// Integer ops as the language defines them (docs/language.md, section 8): no division by zero, no
// INT64_MIN / -1 and no shift by 64 or more ever reaches the hardware (SIGFPE, UB).
static inline int64_t ph_floordiv_i64(int64_t a, int64_t b) {
  if (b == 0) return 0;
  if (b == -1) return (int64_t)(0 - (uint64_t)a);  // wraps at INT64_MIN
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static inline int64_t ph_mod_i64(int64_t a, int64_t b) {
  if (b == 0 || b == -1) return 0;
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
// torch.remainder on floats: fmod, moved to the divisor's sign.
static inline float ph_mod_f32(float a, float b) {
  float r = __builtin_fmodf(a, b);
  return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r;
}
static inline int64_t ph_shl_i64(int64_t a, int64_t n) {
  return (n < 0 || n > 63) ? 0 : (int64_t)((uint64_t)a << (n & 63));
}
static inline int64_t ph_shr_i64(int64_t a, int64_t n) { return a >> ((n < 0 || n > 63) ? 63 : n); }
// 0.5 x erfc(-x / sqrt 2): exact gelu, without the cancellation of 1 + erf(..) for x < 0; the
// clamp keeps -inf from giving -inf * 0.
static inline float ph_gelu_exact(float x) {
  const float xc = x < -3.40282347e38f ? -3.40282347e38f : x;
  return 0.5f * xc * __builtin_erfcf(-x * 0.70710678118654752f);
}
// An atomic update of one element: f(old) replaces old unless another thread changed it first
// (then f is applied again to the new value). Relaxed: see emit/atomics.cpp.
template <class S, class F> static inline void ph_atomic_update(S* p, F f) {
  S old, next;
  __atomic_load(p, &old, __ATOMIC_RELAXED);
  do next = f(old);
  while (!__atomic_compare_exchange(p, &old, &next, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
}
#if defined(__SSE2__)
// The widest vector the host stores past the caches (movntdq), and one such store to an address
// aligned to its size (what _mm512_stream_si512 and its narrower twins do). may_alias: the
// bytes it stores are read back as the tensor's own element type.
#if defined(__AVX512F__)
typedef long long ph_stream_vector __attribute__((vector_size(64), may_alias));
#elif defined(__AVX__)
typedef long long ph_stream_vector __attribute__((vector_size(32), may_alias));
#else
typedef long long ph_stream_vector __attribute__((vector_size(16), may_alias));
#endif
static inline void ph_stream_vector_store(char* d, const char* s) {
  ph_stream_vector v;
  std::memcpy(&v, s, sizeof v);  // an unaligned load
#if defined(__clang__)
  __builtin_nontemporal_store(v, reinterpret_cast<ph_stream_vector*>(d));
#elif defined(__AVX512F__)
  __builtin_ia32_movntdq512(reinterpret_cast<ph_stream_vector*>(d), v);
#elif defined(__AVX__)
  __builtin_ia32_movntdq256(reinterpret_cast<ph_stream_vector*>(d), v);
#else
  __builtin_ia32_movntdq(reinterpret_cast<ph_stream_vector*>(d), v);
#endif
}
#endif
// Writes `bytes` from a row buffer to `dst` past the caches: whole 64-byte lines with
// non-temporal stores (no read of the line first), the partial lines at either end plainly
// (elements of a neighbouring row, another thread's, may share them). Weakly ordered:
// ph_stream_fence() before other threads may read.
static inline void ph_stream_store(void* dst, const void* src, int64_t bytes) {
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  int64_t head = static_cast<int64_t>((64 - (reinterpret_cast<uintptr_t>(d) & 63)) & 63);
  if (head > bytes) head = bytes;
  std::memcpy(d, s, head);
  d += head, s += head, bytes -= head;
#if defined(__SSE2__)
  for (; bytes >= 64; bytes -= 64, d += 64, s += 64)
    for (int q = 0; q < 64; q += static_cast<int>(sizeof(ph_stream_vector))) ph_stream_vector_store(d + q, s + q);
#endif
  std::memcpy(d, s, bytes);
}
static inline void ph_stream_fence() {
#if defined(__SSE2__)
  __builtin_ia32_sfence();
#endif
}
template <class T> static constexpr T ph_lowest() { return T(-1) < T(0) ? T(uint64_t(1) << (sizeof(T) * 8 - 1)) : T(0); }
template <class T> static constexpr T ph_highest() { return T(~ph_lowest<T>()); }
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
// A per-element index (a gather's, or one under a mask): in range it is returned; out of range
// it is recorded as above and 0 is returned, so that the access stays inside the tensor until
// the launch ends and the call throws.
static inline int64_t ph_checked_index(int64_t v, int64_t size, ph_status* st, const char* where, const char* what) {
  if (__builtin_expect(static_cast<uint64_t>(v) >= static_cast<uint64_t>(size), 0)) {
    ph_index_error(st, where, what, v);
    return 0;
  }
  return v;
}
)";

}  // namespace

std::string launch_symbol(int index) { return "ph_launch_" + std::to_string(index); }

std::string generate_source(const lower::BlockProgram& p) {
  std::ostringstream os;
  os << "// Generated by Parhelion: kernel " << p.fn->name << ", target cpu\n";
  os << "// config " << p.config.to_json() << "\n";
  // A vector width set by the config (the knob vector_bits) is GCC's tuning of this file's loops,
  // as -mprefer-vector-width would be; before any code, so that the runtime's inline functions
  // are compiled alike. (Clang has no such pragma: the knob is offered with GCC only.)
  if (p.config.vector_bits != 0)
    os << "#if defined(__GNUC__) && !defined(__clang__)\n#pragma GCC target(\"prefer-vector-width="
       << p.config.vector_bits << "\")\n#endif\n";
  os << "#include <cstdint>\n#include <cstring>\n";
  os << runtime_header_source();
  os << runtime_abi_source();
  os << "#define PH_REDUCTION_LANES " << emit::kReductionLanes << "\n" << kPrelude << "\n";
  for (const lower::LaunchPlan& L : p.launches) {
    os << "// launch " << L.index << " at " << L.op->loc.str() << "\n";
    emit::LaunchEmitter e(p, L);
    os << e.run() << "\n" << e.partials_function() << e.kept_panels_function();
  }
  return os.str();
}

}  // namespace parhelion::backend::cpu

// The emitter of one launch: Block IR LaunchPlan -> the C++ of `extern "C" void ph_launch_N(...)`.
// One class, whose member functions are defined by concern across the files of emit/ (each says
// what it emits and why) and codegen.cpp (the launch skeleton and the statements); the state
// they share is EmitContext's (context.h). Only codegen.cpp's generate_source() uses it.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backend/cpu/emit/context.h"

namespace parhelion::backend::cpu::emit {

// Where a launch's per-thread partial copies start in each thread's area: after its scratch.
int64_t partials_at(const lower::LaunchPlan& L);
// Where its dots' kept B panels start (DotPlan::kept_b_slots): after the partials.
int64_t kept_panels_at(const lower::LaunchPlan& L);

class LaunchEmitter : private EmitContext {
 public:
  LaunchEmitter(const lower::BlockProgram& p, const lower::LaunchPlan& L) : EmitContext(p, L) {}

  // The launch's entry point, whole.
  std::string run();
  // The function that fills and combines the launch's per-thread partial copies of atomically
  // updated tensors (`ph_launch_N_partials`), or "" when it has none (atomics.cpp).
  std::string partials_function();
  // The function that clears the keys of the launch's kept B panels in one thread's area
  // (`ph_launch_N_kept`), or "" when it keeps none (dots.cpp): the executor calls it once per
  // thread and launch call, before the thread's first range of steps.
  std::string kept_panels_function();

 private:
  // --- the launch skeleton and statements (codegen.cpp) ---
  void declare_tensors();
  // The tile offsets of grid step `step` (`<prefix>g_t`, `<prefix>off_t`), and with `counts`
  // each tile's element count in the step (`n_t`, its last block ragged).
  void decode_step(const std::string& prefix, const std::string& step, bool counts);
  void block(const std::vector<Op>& ops);
  void statement(const Op& op);
  void store(const Op& op);
  // --- collectives: copies to peers, waits, barriers, semaphores (collectives.cpp) ---
  void collective(const Op& op);
  std::string device_index_expr(const Op& op);
  int collective_number(const Op& op) const;
  // --- stores a row at a time through a buffer: streamed, converted to 16 bits (row_stores.cpp) ---
  // Whether a bf16 or f16 store's rows are computed in f32 and converted a row at a time.
  bool converts_rows(const Op& op, const std::vector<Dim>& shape) const;
  void row_store(const Op& op, const std::vector<Dim>& shape, bool streamed, bool converted);
  // --- cache hints: next-step prefetches (cache_hints.cpp) ---
  // The prefetches `host` issues for elements [from, from + count) of the row of its loop nest
  // at `idx` (dim `k` the row's), of the next step's blocks.
  void prefetch_next_rows(const Op& host, Idx idx, size_t k, const std::string& from, const std::string& count);
  void var_write(const Op& op);
  // `{ // comment` and a loop nest setting Var `var` to `value` (of its shape, or broadcast to it).
  void assign_var(int var, int value, const std::string& comment);

  // --- loop nests and loop-invariant hoisting (loop_nest.cpp) ---
  // `before_inner(idx, k)`, if given, emits statements just before the innermost loop (dim k).
  void nest(const std::vector<Dim>& shape, const std::function<void(const Idx&)>& body,
            const std::string& simd_clause = "", size_t inner_from = 0,
            const std::function<void(const Idx&, size_t)>& before_inner = {});
  std::string loop_header(const Dim& d, const std::string& i);
  // The element count of block dim `d` in the current step: `n_t` for a tile, else its size.
  std::string extent(const Dim& d) const;
  // `first`, `last`: the loop index's first and last value, where known (its indices checked
  // ahead are then checked at the two ends where they move linearly along it).
  void hoisted_loop(const std::string& var, const std::string& header, const std::string& pragma,
                    const std::function<void()>& body, const std::string& first = "", const std::string& last = "");
  // A simd loop with its per-element index checks (`sites`) ahead of it, and its body without
  // them (`inner`) and with them (`checked_inner`).
  void checked_ahead_loop(const std::string& header, const std::string& pragma, const std::string& first,
                          const std::string& last, const std::vector<CheckSite>& sites, const std::string& inner,
                          const std::string& checked_inner);
  static bool mentions(const std::string& text, const std::string& var);

  // --- random numbers a simd loop draws, a row at a time (random_rows.cpp) ---
  // `ph::rand` / `ph::randn` with a scalar seed `seed` at offsets `offset`, in the body of a simd
  // loop over [loop_first_, loop_last_]: recorded, and read from the row that the loop's chunk
  // computes first; "" where it is computed per element instead.
  std::string random_row(const Op& op, const std::string& seed, const std::string& offset);
  // The simd loop over `var` from `first` to `last` with body `inner` (as generated), in chunks,
  // each chunk's random `rows` (what its body recorded) computed before it.
  void random_rows_loop(const std::string& var, const std::string& pragma, const std::string& first,
                        const std::string& last, const std::string& inner, const std::vector<RandomRow>& rows);
  // Whether `text` reads through an index whose check was moved ahead of the loop being generated.
  bool reads_unchecked(const std::string& text) const;
  bool is_hoisted(const std::string& e) const;
  std::string read(const std::string& access, DType compute);

  // --- expressions: loads, stores, pointwise ops (expressions.cpp) ---
  std::string expr(int v, const Idx& idx);
  std::string operand(const Op& op, int k, const Idx& idx);
  std::string op_expr(const Op& op, const Idx& idx);
  bool speculatable(int v, bool& reads) const;
  // A block view (reshape, permute, ..., cat) at element `idx`: its operand at remapped indices (views.cpp).
  std::string view_expr(const Op& op, const Idx& idx);
  std::string address(const Op& op, const Idx& idx);
  std::string tensor_address(const Op& op, const Idx& idx);
  std::string tensor_offset(const Op& op, const Idx& idx);
  std::string load_expr(const Op& op, const Idx& idx);
  // An element of storage dtype `dt` (an lvalue or value of its storage type) as its compute type.
  static std::string from_storage(DType dt, const std::string& e);
  std::string masked_load_expr(const Op& op, const Idx& idx);
  // `index`, `at`: the index's value id and the element it is taken at, where it is a block.
  std::string checked_position(const Op& op, size_t d, const std::string& value, int index = -1,
                               const std::string& at = "");
  // Whether block `v`'s elements are a linear function of the element's position (`may_scale`:
  // multiples by a constant allowed).
  bool linear_index(int v, bool may_scale = true) const;
  static std::string store_value(DType dt, DType from, const std::string& v);
  // Value `v` at `idx` (of its own shape), or op `op`'s value, converted for storage as `dt`. A
  // cast to a 16-bit `dt` fused into it is not rounded twice: narrowing the widened rounded value
  // again gives the same bits (checked for all 2^32 inputs, bf16 and f16), and the vector code
  // of the second rounding is as long as the first's.
  std::string stored_expr(DType dt, int v, const Idx& idx);
  std::string stored_op_expr(DType dt, const Op& op, const Idx& idx);
  // Whether `op` is a cast to 16-bit `dt`: stored as `dt`, it is rounded once, by the store.
  static bool rounds_to(const Op& op, DType dt);
  // The value a store writes at `idx`, converted for its tensor's dtype.
  std::string stored_operand(const Op& store, const Idx& idx);
  std::string copied_bits(const Op& store, const Idx& idx);
  // Whether a store writes a block loaded unchanged from a tensor of its storage type (copied_bits).
  bool is_copy(const Op& store) const;
  // The value a store writes at `idx` as f32, not yet rounded to its tensor's 16-bit dtype (a
  // cast to that dtype fused into it left out: the row's conversion rounds once).
  std::string unrounded_operand(const Op& store, const Idx& idx);
  std::string unary_expr(UnaryFn f, DType dt, const std::string& a);
  std::string binary_expr(BinaryFn f, DType result, DType ta, DType tb, std::string a, std::string b);
  std::string cast_expr(DType to, DType from, const std::string& a);

  // --- dots through the runtime GEMM (dots.cpp) ---
  // Where a dot reads an operand: a pointer to element (0, 0) of the block at batch index
  // `batch`, the element strides of its last two dims, and its dtype code.
  struct Operand2D {
    std::string ptr, rs, cs, dtype;
  };
  Operand2D operand_2d(int v, const Idx& batch);
  Operand2D tensor_block_2d(const Op& access, const std::vector<Dim>& shape, const Idx& idx, const char* dcode);
  void dot(const Op& op);
  void gemm_calls(const Op& op);
  void declare_kept_panels();
  std::string kept_panels(const lower::DotPlan& plan);
  // The dot that `acc = acc [* s] + dot(...)` adds into the Var in place, or null.
  const Op* in_place_dot(const Op& var_set) const;
  void rescaled_accumulation(const Op& var_set, const Op& dot);

  // --- inner loops and their staged blocks (staging.cpp) ---
  void loop(const Op& op);
  void jagged_range(int tile, std::string* begin, std::string* end);
  const lower::InnerLoop& inner_loop(int tile) const;
  void declare_resident_keys();
  std::string stg_name(int k) const;
  std::string staged_offset(int k, Idx idx) const;
  const Op& staged_load_op(int k);
  void copy_block(int k, const std::string& slot);
  void fill_resident(const lower::InnerLoop& il);
  void pipeline_trip(const lower::InnerLoop& il);
  void prefetch_block(int k);
  std::map<int, std::string> trip_stop_;  // an inner loop's tile -> where its trips stop

  // --- atomic updates and the partials function (atomics.cpp) ---
  void atomic_update(const Op& op);
  void declare_partials();
  static std::string partial_name(int tensor);

  // --- reductions (reductions.cpp) ---
  // `siblings`: reductions along the same rows computed in its loop (row_siblings).
  void reduce(const Op& op, const std::vector<const Op*>& siblings = {});
  // Whether `op` reduces along the innermost axis in a loop another reduction of the same rows
  // may share (no one-hot pick, no versions per block, a block result).
  bool reduces_rows(const Op& op);
  // The Var that sum `op` adds into in place (ValuePlan::adds_into), or -1.
  int var_of_sum(const Op& op) const;
  // The sum that `acc = acc + sum(...)` has added into the Var in place, or null.
  const Op* in_place_sum(const Op& var_set) const;
  struct RowGroup {
    std::vector<const Op*> siblings;       // the reductions that join the first one's loop
    std::vector<const Op*> scalars_first;  // scalars between them, computed before it
  };
  RowGroup row_siblings(const std::vector<Op>& ops, size_t first, const std::set<const Op*>& claimed);
  struct OneHotPick {  // sum(where(i == j, x, 0)) along the tile that i indexes (reductions.cpp)
    const Op* where = nullptr;
    const Op* eq = nullptr;
    int index_side = 0;  // which operand of `eq` is i
  };
  std::optional<OneHotPick> one_hot_pick(const Op& reduce) const;

  // --- scans (scans.cpp) ---
  void scan(const Op& op);

  // --- wheres decided per block (decided_wheres.cpp) ---
  // The least and greatest element of an i64 block built from tile indices by + and -, as C++
  // expressions of the step's offsets and counts; none for any other value.
  struct Bounds {
    std::string lo, hi;
  };
  std::optional<Bounds> index_bounds(int v);
  // When a condition block holds everywhere and when nowhere, as C++ expressions; none when its
  // bounds are not known.
  struct Decided {
    std::string all_true, all_false;
  };
  std::optional<Decided> decided_condition(int cond);
  // The wheres with decided conditions that statement `op` computes inline.
  std::vector<int> decided_wheres(const Op& op);
  // Emits `op` in versions chosen per block by its decided wheres (none: false, nothing emitted).
  bool versioned_statement(const Op& op);
  // A where being versioned -> the operand (1 or 2) its version takes, or 0 in its general code.
  std::map<int, int> where_choice_;
  // Whether a mask that is a versioned where's condition, or its negation, holds in this version.
  std::optional<bool> decided_mask(int mask) const;
  // Values whose expression is a name already computed in the current loop (a reduction's
  // per-element `e`, which the cast it stores reads): expr() returns the name.
  std::map<int, std::string> named_values_;

  // --- bounds checks of computed indices (index_checks.cpp) ---
  // A scalar that indexes a tensor dimension, and where: checked right where it is computed,
  // before any use, so that no out-of-range access happens.
  struct IndexUse {
    std::string where, what;
    int64_t size = 0;
  };
  void collect_index_uses();
  static std::string c_string(const std::string& s);
  void check_index(int v);
  std::map<int, std::vector<IndexUse>> index_uses_;  // scalar value -> the dimensions it indexes
};

}  // namespace parhelion::backend::cpu::emit

// What every part of the cpu emitter shares while it prints one launch: the Block IR it reads
// (program, launch plan, function), the output stream and its indentation, the value -> defining
// op table that `block()` fills as it walks, the hoisting state of the innermost loop being
// generated, and the small helpers that name things (tiles, scratch buffers) and spell C types
// and literals. Nothing here decides what to emit; that is LaunchEmitter's (launch_emitter.h).
#pragma once

#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ir/printer.h"
#include "lower/block_ir.h"

namespace parhelion::backend::cpu::emit {

using ir::BinaryFn;
using ir::Dim;
using ir::Op;
using ir::OpKind;
using ir::ReduceFn;
using ir::UnaryFn;

// The index expressions of one element, one per dim ("0" for a size-1 dim).
using Idx = std::vector<std::string>;

// The C type a value of compute dtype `compute` (f32, i64, bool) is computed in.
std::string c_type(DType compute);
// The C type an element of dtype `d` is stored as in a tensor or staging buffer.
std::string storage_type(DType d);
// bf16 and f16: stored as uint16_t, computed in f32.
bool is16(DType d);
// Partial accumulators of a reduction along the innermost axis (kLanes in the generated code):
// two AVX-512 vectors of f32, so that two chains of adds hide the add latency.
constexpr int kReductionLanes = 32;
// `v` as a C literal of compute dtype `compute`.
std::string literal(double v, DType compute);

class EmitContext {
 protected:
  EmitContext(const lower::BlockProgram& p, const lower::LaunchPlan& L) : p_(p), L_(L), fn_(*p.fn) {}

  // --- output ---
  void line(const std::string& s) { os_ << std::string(depth_ * 2, ' ') << s << "\n"; }

  // --- names and plan lookups ---
  std::string tname(int tile) const { return ir::tile_name(fn_, tile); }
  const ir::Type& type(int v) const { return fn_.type_of(v); }
  int64_t block_of(int tile) const { return p_.block_of_tile(tile); }
  const lower::ValuePlan* value_plan(int v) const;
  std::string scratch_name(const lower::Scratch& s) const;
  // Element `idx` of scratch buffer `s`.
  std::string scratch_ref(const lower::Scratch& s, const Idx& idx) const;

  // --- index arithmetic ---
  Idx broadcast(const std::vector<Dim>& shape, const Idx& idx) const;
  std::string linear(const std::vector<int64_t>& capacity, const Idx& idx) const;

  const lower::BlockProgram& p_;
  const lower::LaunchPlan& L_;
  const ir::Function& fn_;
  std::map<int, const Op*> def_;         // value id -> its defining op, filled by block()
  std::map<int, const Op*> launch_def_;  // value id -> its op anywhere in the launch, filled by run()
  // DotPlan::writes_output -> the store its dot writes the block of (left out), filled by run()
  std::map<int, const Op*> output_stores_;
  std::ostringstream os_;
  int depth_ = 0;

  // --- hoisting state (loop_nest.cpp) ---
  std::string hoist_var_;  // the innermost loop's index while its body is generated
  struct Hoisted {
    std::string name, type, access;
  };
  std::vector<Hoisted> hoisted_;  // reads to emit before that loop, as constants
  int hoist_counter_ = 0;
  int nest_depth_ = 0;  // how many nest() calls are open
  int no_hoist_ = 0;    // > 0 while emitting the guarded side of a masked access

  // --- per-element index checks of a simd loop, checked ahead (hoisted_loop in loop_nest.cpp;
  // the sites are recorded by checked_position, expressions.cpp) ---
  // An index computed per element of a simd loop (a gather along the loop, a masked load's
  // index) is checked in a loop of its own before it, and the loop then runs without the checks;
  // a check inside it (a call that records the error) would keep it scalar.
  struct CheckSite {
    std::string mask;   // where the index is used ("" always), a C++ bool
    std::string value;  // the index
    int64_t size = 0;   // valid: 0 <= value < size
    // An index linear in the loop's (a tile's index plus a scalar, ...): its values at the first
    // and the last trip, between which all of its values lie; "" for any other index.
    std::string first, last;
  };
  bool checks_ahead_ = false;           // while a simd loop's body is generated: sites are collected
  std::vector<CheckSite> check_sites_;  // and listed here
  std::string loop_first_, loop_last_;  // that loop's first and last index ("" unknown)
  // Random rows (random_rows.cpp) the simd loop being generated draws: each a seed and an offset
  // expression, and whether its second word is used (randn). Recorded while random_rows_on_.
  struct RandomRow {
    std::string seed, offset;
    bool second_word = false;
  };
  bool random_rows_on_ = false;
  std::vector<RandomRow> random_rows_;
  std::vector<std::string> mask_scope_;  // the masks of the accesses being generated
  int checked_loops_ = 0;                // names each loop's flag apart
  // How a tile's offset is named in an address: "off_" (this grid step's), "pf_off_" (the next
  // step's, while a prefetch of its block is printed).
  std::string offset_prefix_ = "off_";
};

}  // namespace parhelion::backend::cpu::emit

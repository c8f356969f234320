#include "lower/block_ir.h"

#include <algorithm>
#include <sstream>

#include "backend/backend.h"
#include "ir/printer.h"
#include "parhelion/error.h"
#include "runtime/format_bytes.h"

namespace parhelion::lower {
namespace {

std::string index_str(const ir::Function& fn, const IndexExpr& e) {
  switch (e.kind) {
    case IndexExpr::Zero:
      return "0";
    case IndexExpr::TileOffset:
      return ir::tile_name(fn, e.tile) + (fn.tiles[e.tile].is_grid ? "" : "*" + std::to_string(e.scale));
    case IndexExpr::Value:
      return "%" + std::to_string(e.value);
    case IndexExpr::Gather:
      return "gather(%" + std::to_string(e.value) + ")";
  }
  return "?";
}

// A resident block's refill key names tile offsets as the emitters' variables do.
std::string key_str(const ir::Function& fn, const IndexExpr& e) {
  return e.kind == IndexExpr::TileOffset ? "off_" + ir::tile_name(fn, e.tile) : index_str(fn, e);
}

}  // namespace

const DotPlan* LaunchPlan::dot(int result) const {
  for (const DotPlan& d : dots)
    if (d.result == result) return &d;
  return nullptr;
}

const DotPlan* LaunchPlan::dot_writing_output(int value) const {
  for (const DotPlan& d : dots)
    if (d.writes_output >= 0 && d.writes_output == value) return &d;
  return nullptr;
}

int LaunchPlan::materialized(int value) const {
  auto it = values.find(value);
  return it == values.end() ? -1 : it->second.materialized;
}

DType LaunchPlan::gemm_operand_dtype(const ir::Function& fn, int value) const {
  const ir::Op* def = nullptr;
  ir::walk(op->body, [&](const ir::Op& o) {
    if (o.result == value) def = &o;
  });
  PH_CHECK(def, "dot operand %" + std::to_string(value) + " has no definition in its launch");
  const int m = materialized(value);
  if (m < 0 && def->kind == ir::OpKind::Transpose) return gemm_operand_dtype(fn, def->operands[0]);
  if (m >= 0) return scratch[m].dtype;
  if (def->kind == ir::OpKind::VarGet) return scratch[var_scratch.at(def->var)].dtype;
  PH_CHECK(def->kind == ir::OpKind::Load, "dot operand neither loaded nor materialized");
  return fn.tensors[def->tensor].dtype;
}

int LaunchPlan::staged_load(int value) const {
  auto it = values.find(value);
  return it == values.end() ? -1 : it->second.staged;
}

void LaunchPlan::compute_in_reduction(int reduction, int producer, int stored) {
  PH_CHECK(values[stored].in_reduction < 0, "value %" + std::to_string(stored) + " stored by two loops");
  values[stored].in_reduction = reduction;
  values[reduction].computes = producer;
  values[reduction].stores = stored;
}

bool LaunchPlan::streamed(const ir::Op& store) const {
  return std::find(streamed_stores.begin(), streamed_stores.end(), &store) != streamed_stores.end();
}

const InnerLoop* LaunchPlan::inner_loop(int tile) const {
  for (const InnerLoop& il : inner_loops)
    if (il.tile == tile) return &il;
  return nullptr;
}

const AtomicTarget* LaunchPlan::atomic_target(int root_tensor) const {
  for (const AtomicTarget& a : atomics)
    if (a.tensor == root_tensor) return &a;
  return nullptr;
}

std::string scratch_name(const BlockProgram& p, const LaunchPlan& L, const Scratch& s) {
  switch (s.kind) {
    case Scratch::VarBuffer:
      return "v" + std::to_string(s.var);
    case Scratch::Materialized:
      return "%" + std::to_string(s.value);
    case Scratch::DotWorkspace:
      return "pack%" + std::to_string(s.value);
    case Scratch::StagingBuffer:
      return "stage" + std::to_string(s.staged) + "(" + p.fn->tensors[L.staged[s.staged].tensor].name + ")";
  }
  return "?";
}

std::string fit_hint(const BlockProgram& p, const LaunchPlan& L) {
  for (const InnerLoop& il : L.inner_loops)
    if (il.strategy == Strategy::Resident)
      return "Stream loop " + ir::tile_name(*p.fn, il.tile) + " (extent " + std::to_string(il.extent) +
             ") with the pipeline strategy, or use smaller block sizes.";
  return "Use smaller block sizes.";
}

std::string print(const BlockProgram& p) {
  const ir::Function& fn = *p.fn;
  std::ostringstream os;
  const backend::Machine& m = p.backend->machine();
  os << "block_program " << fn.name << " target=" << p.backend->name() << " (fast memory "
     << format_bytes(m.fast_memory_bytes) << ", " << m.threads << " threads)\n";
  os << "  config " << p.config.to_json() << "\n";
  for (size_t i = 0; i < fn.block_sizes.size(); ++i)
    os << "  $b" << i << " = " << p.block_size[i] << (fn.block_sizes[i].fixed ? " (fixed)" : "") << "\n";
  for (const LaunchPlan& L : p.launches) {
    os << "  launch " << L.index << ": grid (";
    for (size_t i = 0; i < L.grid.size(); ++i) {
      const GridDim& g = L.grid[i];
      os << (i ? ", " : "") << ir::tile_name(fn, g.tile) << ": " << g.extent << "/" << g.block << " = " << g.steps;
    }
    os << ") = " << L.total_steps << " steps on " << L.num_threads << " thread" << (L.num_threads > 1 ? "s" : "")
       << "\n";
    for (const BlockSpec& b : L.operands) {
      const ir::TensorInfo& t = fn.tensors[b.tensor];
      os << "    " << (b.written ? "out " : "in  ") << t.name << " " << dtype_name(t.dtype) << " block [";
      for (size_t d = 0; d < b.block.size(); ++d) os << (d ? ", " : "") << b.block[d].size;
      os << "] at (";
      for (size_t d = 0; d < b.index.size(); ++d) os << (d ? ", " : "") << index_str(fn, b.index[d]);
      os << ") " << (b.mode == BlockSpec::Direct ? "direct" : "staged") << " " << format_bytes(b.block_bytes) << "\n";
    }
    for (const Scratch& s : L.scratch) {
      os << "    scratch " << scratch_name(p, L, s) << " " << dtype_name(s.dtype) << " [";
      for (size_t d = 0; d < s.capacity.size(); ++d) os << (d ? ", " : "") << s.capacity[d];
      os << "] " << format_bytes(s.bytes) << " @" << s.offset << "\n";
    }
    for (const DotPlan& d : L.dots) {
      os << "    dot %" << d.result << ": micro-kernel " << d.micro_kernel;
      if (d.workspace >= 0) os << ", packs into " << scratch_name(p, L, L.scratch[d.workspace]);
      if (d.accumulate_into >= 0) os << ", accumulates into v" << d.accumulate_into << " in place";
      if (d.rescaled >= 0) os << " after its rescale %" << d.rescaled;
      if (d.kept_b_slots > 0) {
        os << ", keeps B's panels: " << d.kept_b_slots << " x " << format_bytes(d.kept_b_slot_bytes);
        if (d.kept_b_tile >= 0) os << " (one per trip of " << ir::tile_name(fn, d.kept_b_tile) << ")";
        os << " @" << d.kept_b_offset;
      }
      if (d.first_trip_writes >= 0)
        os << "; " << ir::tile_name(fn, d.first_trip_writes) << "'s first trip writes v" << d.accumulate_into
           << " (its zeros not stored)";
      if (d.writes_output >= 0)
        os << "; v" << d.accumulate_into << " is the output block that %" << d.writes_output
           << " is stored to (no buffer, no store)";
      os << "\n";
    }
    for (const InnerLoop& il : L.inner_loops) {
      os << "    inner loop " << ir::tile_name(fn, il.tile) << ": " << il.extent << "/" << il.block << " = " << il.trips
         << " trips, " << strategy_name(il.strategy);
      if (il.strategy == Strategy::Pipeline) os << " x" << il.buffers << " buffers";
      os << "\n";
      for (int k : il.staged) {
        const StagedBlock& b = L.staged[k];
        os << "      stage " << fn.tensors[b.tensor].name << " [";
        for (size_t d = 0; d < b.capacity.size(); ++d) os << (d ? ", " : "") << b.capacity[d];
        os << "]" << (b.slots > 1 ? " x" + std::to_string(b.slots) : "") << " "
           << format_bytes(L.scratch[b.scratch].bytes);
        if (il.strategy == Strategy::Resident) {
          os << ", refilled when (";
          for (size_t i = 0; i < b.refill_key.size(); ++i) os << (i ? ", " : "") << key_str(fn, b.refill_key[i]);
          os << ") changes";
        }
        os << "\n";
      }
    }
    for (const AtomicTarget& a : L.atomics) {
      static const char* const kStrategy[] = {"atomic instructions", "per-thread partials", "in place (one thread)"};
      os << "    " << ir::atomic_name(a.fn) << " " << fn.tensors[a.tensor].name << ": " << kStrategy[a.strategy];
      if (a.strategy == AtomicTarget::Partials)
        os << " @" << a.offset << ", " << format_bytes(L.partials_bytes) << " per thread, combined after the launch";
      os << "\n";
    }
    for (const ir::Op* s : L.streamed_stores)
      os << "    store " << fn.tensors[s->tensor].name << " at " << s->loc.str() << ": streamed past the caches\n";
    for (const Prefetch& f : L.prefetches)
      os << "    prefetch " << fn.tensors[f.load->tensor].name
         << (f.trip_tile < 0 ? "'s next-step block" : "'s next-trip block of t" + std::to_string(f.trip_tile))
         << ", by the " << ir::op_name(*f.host) << " at " << f.host->loc.str() << "\n";
    os << "    footprint " << format_bytes(L.footprint_bytes) << " of " << format_bytes(m.fast_memory_bytes)
       << ", working set " << format_bytes(L.working_set_bytes) << " per step\n";
  }
  return os.str();
}

}  // namespace parhelion::lower

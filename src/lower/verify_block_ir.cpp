#include "lower/verify_block_ir.h"

#include <algorithm>
#include <set>

#include "backend/backend.h"
#include "parhelion/error.h"

namespace parhelion::lower {
namespace {

class Verifier {
 public:
  Verifier(const BlockProgram& p, const LaunchPlan& L) : p_(p), L_(L) {}

  void run() {
    grid();
    scratch();
    values();
    dots();
    inner_loops();
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw InternalError("Block IR of " + p_.fn->name + ", launch " + std::to_string(L_.index) + ": " + what);
  }
  void expect(bool ok, const std::string& what) const {
    if (!ok) fail(what);
  }
  bool scratch_is(int index, Scratch::Kind kind) const {
    return index >= 0 && index < static_cast<int>(L_.scratch.size()) && L_.scratch[index].kind == kind;
  }

  void grid() {
    const std::vector<int>& tiles = L_.op->loop_tiles;
    expect(L_.grid.size() == tiles.size(), "the grid has " + std::to_string(L_.grid.size()) + " dims for " +
                                               std::to_string(tiles.size()) + " launch tiles");
    std::set<int> seen;
    int64_t steps = 1;
    for (const GridDim& g : L_.grid) {
      expect(std::find(tiles.begin(), tiles.end(), g.tile) != tiles.end() && seen.insert(g.tile).second,
             "grid dim of tile " + std::to_string(g.tile) + " is not a distinct launch tile");
      expect(g.block >= 1 && g.steps == (g.extent + g.block - 1) / g.block, "grid dim steps != ceil(extent / block)");
      steps *= g.steps;
    }
    expect(steps == L_.total_steps, "total_steps is not the product of the grid's steps");
    expect(L_.num_threads >= 1 && (L_.num_threads <= std::max<int64_t>(1, L_.total_steps)),
           "num_threads out of 1..total_steps");
  }

  void scratch() {
    int64_t end = 0;
    for (const Scratch& s : L_.scratch) {
      expect(s.offset % 64 == 0, "a scratch buffer is not 64-byte aligned");
      expect(s.offset >= end, "scratch buffers overlap or are out of order");
      expect(s.bytes > 0, "an empty scratch buffer");
      end = s.offset + s.bytes;
    }
    expect(end <= L_.scratch_bytes, "scratch buffers run past scratch_bytes");
    expect(L_.footprint_bytes == L_.scratch_bytes + L_.output_accumulator_bytes,
           "the footprint is not the scratch and the output blocks dots accumulate in");
    for (auto [var, index] : L_.var_scratch)
      expect(scratch_is(index, Scratch::VarBuffer) && L_.scratch[index].var == var, "a Var's buffer is not its own");
  }

  void values() {
    for (const auto& [value, plan] : L_.values) {
      if (plan.materialized >= 0)
        expect(scratch_is(plan.materialized, Scratch::Materialized) && L_.scratch[plan.materialized].value == value,
               "value %" + std::to_string(value) + " is materialized into another value's buffer");
      if (plan.staged >= 0) {
        expect(plan.staged < static_cast<int>(L_.staged.size()), "a staged load names no staged block");
        const StagedBlock& b = L_.staged[plan.staged];
        expect(std::count(b.loads.begin(), b.loads.end(), value) == 1, "a staged load is not among its block's loads");
      }
      if (plan.in_reduction >= 0) {
        auto r = L_.values.find(plan.in_reduction);
        expect(plan.materialized >= 0 && r != L_.values.end() && r->second.stores == value && r->second.computes >= 0,
               "value %" + std::to_string(value) + " is computed by a reduction that does not know it");
      }
    }
    for (size_t k = 0; k < L_.staged.size(); ++k) {
      const StagedBlock& b = L_.staged[k];
      expect(scratch_is(b.scratch, Scratch::StagingBuffer) && L_.scratch[b.scratch].staged == static_cast<int>(k),
             "staged block " + std::to_string(k) + " has no staging buffer of its own");
      expect(!b.loads.empty() && b.slots >= 1, "staged block " + std::to_string(k) + " has no load or no slot");
      expect(b.inner_dim >= 0 && b.inner_dim < static_cast<int>(b.capacity.size()),
             "staged block " + std::to_string(k) + "'s loop dim is not one of its dims");
    }
  }

  void dots() {
    for (const DotPlan& d : L_.dots) {
      expect(!d.micro_kernel.empty() && d.knob >= 0, "dot %" + std::to_string(d.result) + " has no micro-kernel");
      if (d.workspace >= 0)
        expect(scratch_is(d.workspace, Scratch::DotWorkspace) && L_.scratch[d.workspace].value == d.result,
               "dot %" + std::to_string(d.result) + "'s workspace is not its own");
      if (d.writes_output >= 0)
        expect(d.first_trip_writes >= 0 && L_.var_scratch.count(d.accumulate_into) == 0 &&
                   L_.materialized(d.writes_output) < 0,
               "dot %" + std::to_string(d.result) +
                   " writes an output block directly, but not on its loop's first trip, or its Var or the Var's "
                   "read has a buffer too");
      else if (d.accumulate_into >= 0)
        expect(L_.var_scratch.count(d.accumulate_into) > 0,
               "dot %" + std::to_string(d.result) + " accumulates into a Var with no buffer");
      else
        expect(L_.materialized(d.result) >= 0, "dot %" + std::to_string(d.result) + " has no result buffer");
      expect(d.rescaled < 0 || d.accumulate_into >= 0,
             "dot %" + std::to_string(d.result) + " is rescaled but accumulates into no Var");
      expect(
          d.first_trip_writes < 0 || (d.accumulate_into >= 0 && d.rescaled < 0 && L_.inner_loop(d.first_trip_writes)),
          "dot %" + std::to_string(d.result) +
              " writes its Var on a first trip but is no plain in-place "
              "accumulation in a loop of the launch");
    }
  }

  void inner_loops() {
    for (const InnerLoop& il : L_.inner_loops) {
      if (il.knob < 0) {
        expect(il.strategy == Strategy::Stream && il.staged.empty(), "a loop without a knob moves blocks");
        continue;
      }
      const InnerLoopSite& site = p_.knobs.inner_loops.at(il.knob);
      const std::vector<Strategy>& offered =
          p_.backend->capabilities().loop_strategies(site.nested, site.sole, site.collective);
      expect(std::find(offered.begin(), offered.end(), il.strategy) != offered.end(),
             std::string("loop strategy ") + strategy_name(il.strategy) + " is not offered by the backend");
      expect(il.strategy == Strategy::Pipeline || il.buffers == 1, "only a pipelined loop has several buffers");
      for (int k : il.staged)
        expect(k >= 0 && k < static_cast<int>(L_.staged.size()) && L_.staged[k].loop_tile == il.tile,
               "an inner loop stages a block of another loop");
    }
  }

  const BlockProgram& p_;
  const LaunchPlan& L_;
};

}  // namespace

void verify(const BlockProgram& p) {
  PH_CHECK(p.fn && p.backend, "a Block IR without its function or backend");
  for (const LaunchPlan& L : p.launches) Verifier(p, L).run();
}

}  // namespace parhelion::lower

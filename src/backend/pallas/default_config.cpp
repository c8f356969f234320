#include "backend/pallas/default_config.h"

#include "backend/pallas/plan.h"
#include "ir/ir.h"
#include "lower/config_space.h"
#include "lower/lower.h"
#include "parhelion/error.h"

namespace parhelion::backend::pallas {

// Pallas: every block as large as a legal choice up to 512 allows, halved (largest first) until
// the launch takes at most half of VMEM; inner loops pipelined (the target's first strategy).
Config default_config(const ir::Function& fn, const ConfigSpec& spec, const backend::Backend& backend) {
  Config c = lower::base_config(spec);
  c.block_sizes.clear();
  std::vector<size_t> pick(spec.block_sizes.size());
  for (size_t i = 0; i < spec.block_sizes.size(); ++i) {
    const auto& ch = spec.block_sizes[i].choices;
    // (A tile over a range shorter than the dims it indexes, e.g. ph::range(2, 5) of 5 rows,
    // can have no block that is a multiple of (8, 128) or the whole dim.)
    if (ch.empty())
      throw UserError(spec.block_sizes[i].defined_at +
                      ": the pallas backend has no legal TPU block for this loop: its blocks must be multiples of "
                      "(8, 128) or span whole dims of the tensors it indexes, and its range (extent " +
                      std::to_string(spec.block_sizes[i].extent) + ") allows neither");
    // A tile over ph::range(b, e) moves whole blocks at grid level and in pipelines: prefer a
    // block that divides b, when there is one.
    auto fits_ranges = [&](int64_t block) {
      for (const ir::TileInfo& t : fn.tiles)
        if (t.block == spec.block_sizes[i].block_id && t.parent < 0 && t.begin % block != 0) return false;
      return true;
    };
    bool any = false;
    for (int64_t b : ch) any |= fits_ranges(b);
    pick[i] = 0;
    for (size_t j = 0; j < ch.size(); ++j)
      if ((ch[j] <= 512 || j == 0) && (!any || fits_ranges(ch[j]) || !fits_ranges(ch[pick[i]]))) pick[i] = j;
    c.block_sizes.push_back(ch[pick[i]]);
  }
  // A launch with atomic updates runs the grid dims their blocks depend on first, so that the
  // steps updating one block are consecutive (plan.h, atomic_legal_order; any other order is
  // refused).
  {
    const lower::BlockProgram bp = lower::plan(fn, c, backend);
    for (const lower::LaunchPlan& L : bp.launches)
      if (L.loop_order_knob >= 0)
        c.loop_orders[L.loop_order_knob] = atomic_legal_order(fn, *L.op, c.loop_orders[L.loop_order_knob]);
  }
  // Pipelined inner loops first; if the plan refuses one (an integer index or an atomic update
  // in a pipelined loop), every inner loop falls back to resident, so that the default is legal.
  try {
    plan_pallas(lower::plan(fn, c, backend));
  } catch (const UserError&) {
    for (auto& il : c.inner_loops) il.strategy = lower::strategy_name(lower::Strategy::Resident);
  }
  auto vmem = [&] {
    int64_t most = 0;
    for (const PallasLaunch& pl : plan_pallas(lower::plan(fn, c, backend))) most = std::max(most, pl.vmem_bytes);
    return most;
  };
  // (a kernel without tunable blocks has nothing to shrink: check() says whether it fits)
  for (int round = 0; round < 64 && !pick.empty() && vmem() > backend.machine().fast_memory_bytes / 2; ++round) {
    size_t big = 0;
    for (size_t i = 0; i < pick.size(); ++i)
      if (pick[i] > 0 && (pick[big] == 0 || c.block_sizes[i] > c.block_sizes[big])) big = i;
    if (pick[big] == 0) break;
    c.block_sizes[big] = spec.block_sizes[big].choices[--pick[big]];
  }
  return c;
}

}  // namespace parhelion::backend::pallas

// The knob table: every config knob of a traced kernel, derived once from its Tile IR, with
// the op it belongs to.
//
// A Config is positional data (one pasteable line of JSON): block_sizes[i], loop_orders[i],
// micro_kernels[i], inner_loops[i], gathers[i]. This table is the single place that says which block-size
// symbol, launch, dot or loop each position means; the config space, lowering and every
// backend read it instead of recounting the IR. A knob's identity is its op's source line
// (and block-size symbol), so a diagnostic can name the user's code.
#pragma once

#include <string>
#include <vector>

#include "ir/ir.h"

namespace parhelion::backend {
struct Capabilities;
}

namespace parhelion::lower {

// An inner tile loop whose trips touch tensor blocks indexed by its tile: a loop with an
// inner_loops knob. `blocks` are the loads (and, where the backend moves every block through
// fast memory, the stores) its strategy moves.
struct InnerLoopSite {
  const ir::Op* loop = nullptr;
  const ir::Op* launch = nullptr;
  std::vector<const ir::Op*> blocks;
  // Inside another inner loop of its launch (a K loop in a jagged loop's trip): its strategies
  // are the backend's nested ones (Capabilities::nested_inner_loop_strategies).
  bool nested = false;
  // The only loop of its launch, a direct child of the launch's body (not in a ph::when): its
  // strategies are the backend's sole-loop ones (Capabilities::sole_inner_loop_strategies).
  bool sole = false;
  // In a launch with collectives: its strategies are the backend's collective ones
  // (Capabilities::collective_inner_loop_strategies).
  bool collective = false;
};

// A tensor (a root: not a view) that a launch updates atomically: one atomics knob each.
struct AtomicSite {
  const ir::Op* launch = nullptr;
  const ir::Op* first = nullptr;  // its first atomic update (the knob's source line)
  int tensor = -1;                // the root tensor
  bool through_view = false;      // some update goes through a view of it
};

struct KnobTable {
  std::vector<int> block_sizes;              // block_sizes[i]: its block-size symbol ($bN)
  std::vector<const ir::Op*> loop_orders;    // loop_orders[i]: its launch (grid rank >= 2)
  std::vector<const ir::Op*> micro_kernels;  // micro_kernels[i]: its dot
  std::vector<InnerLoopSite> inner_loops;    // inner_loops[i]: its loop
  // gathers[i]: a load through a block of indices, on a backend with gather strategies (none
  // on a backend without: the cpu reads each gathered element in place).
  std::vector<const ir::Op*> gathers;
  // atomics[i]: a tensor a launch updates atomically, on a backend with atomic strategies.
  std::vector<AtomicSite> atomics;
  // launch_groups[i]: a launch with a dot and a grid of two dims or more, on a backend with
  // grouped launch orders.
  std::vector<const ir::Op*> launch_groups;
  // cache_hints[i]: a launch with streamable stores or prefetchable loads (cache_hints.h), on a
  // backend with cache hints.
  std::vector<const ir::Op*> cache_hints;

  // The knob of an op or symbol, or -1 when it has none (a fixed block size, a launch with a
  // one-dimensional grid, a loop that moves no blocks).
  int block_size_knob(int block_id) const;
  int loop_order_knob(const ir::Op& launch) const;
  int micro_kernel_knob(const ir::Op& dot) const;
  int inner_loop_knob(const ir::Op& loop) const;
  int gather_knob(const ir::Op& load) const;
  int atomic_knob(const ir::Op& launch, int root_tensor) const;
  int launch_group_knob(const ir::Op& launch) const;
  int cache_hint_knob(const ir::Op& launch) const;
};

// The tensors `launch` updates atomically (AtomicSite per root tensor, in order of first update).
std::vector<AtomicSite> atomic_sites(const ir::Function& fn, const ir::Op& launch);

KnobTable derive_knobs(const ir::Function& fn, const backend::Capabilities& caps);

}  // namespace parhelion::lower

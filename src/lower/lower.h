// Lowering: Tile IR + Config -> Block IR. Also the config space and its heuristic default,
// which are defined by what lowering can do.
#pragma once

#include "ir/ir.h"
#include "lower/block_ir.h"
#include "lower/target.h"
#include "parhelion/config.h"

namespace parhelion::lower {

// An inner tile loop whose trips touch tensor blocks indexed by its tile: the loops that get an
// inner_loops knob, in program order (the config's order). `loads` are the loads its strategy
// stages (cpu: of tensors the launch does not write); with `stores` (pallas) every load and
// store of a block indexed by the loop's tile.
struct InnerLoopSite {
  const ir::Op* loop = nullptr;
  const ir::Op* launch = nullptr;
  std::vector<const ir::Op*> loads;
};
std::vector<InnerLoopSite> inner_loop_sites(const ir::Function& fn, bool stores);

// The configuration space of a traced kernel on a target.
ConfigSpec derive_config_spec(const ir::Function& fn, const Target& target);

// Binds `config` (validated against the spec) and plans every launch. Throws UserError when
// the config is invalid or does not fit the target's fast memory (with the numbers).
BlockProgram lower(const ir::Function& fn, const Config& config, const Target& target);

// Same, without the fast-memory check (the heuristic and the tuner use it to measure).
BlockProgram plan(const ir::Function& fn, const Config& config, const Target& target);

// The heuristic default: grows block sizes (contiguous dimensions first) while one grid step's
// working set stays within a slice of fast memory and the grid keeps every thread busy.
Config default_config(const ir::Function& fn, const ConfigSpec& spec, const Target& target);

}  // namespace parhelion::lower

// Lowering: Tile IR + Config -> Block IR, for one backend.
#pragma once

#include "backend/backend.h"
#include "ir/ir.h"
#include "lower/block_ir.h"
#include "parhelion/config.h"

namespace parhelion::lower {

// Completes `config` with the defaults of knobs it leaves out, validates it against the
// config space, plans every launch and has the backend check the plan. Throws UserError when
// the config is invalid, illegal on the backend's hardware, or does not fit its fast memory
// (with the numbers).
BlockProgram lower(const ir::Function& fn, const Config& config, const backend::Backend& backend);

// Plans a valid, complete config without the backend's check: the heuristics and the
// tuners use it to measure a candidate.
BlockProgram plan(const ir::Function& fn, const Config& config, const backend::Backend& backend);

}  // namespace parhelion::lower

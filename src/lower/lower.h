// Lowering: Tile IR + Config -> Block IR, for one backend.
#pragma once

#include "backend/backend.h"
#include "ir/ir.h"
#include "lower/block_ir.h"
#include "lower/knobs.h"
#include "parhelion/config.h"

namespace parhelion::lower {

// Completes `config` with the defaults of knobs it leaves out, validates it against the
// config space, plans every launch and has the backend check the plan. Throws UserError when
// the config is invalid, illegal on the backend's hardware, or does not fit its fast memory
// (with the numbers).
// `fn` must have its block counts (ph::num_blocks) bound to the config (bind_config); `traced`,
// where given, is the function before binding, whose config space the config belongs to.
BlockProgram lower(const ir::Function& fn, const Config& config, const backend::Backend& backend,
                   const ir::Function* traced = nullptr);

// The block size of every block-size symbol under a complete config: fixed ones, the config's
// knobs, and tiles within an enclosing tile's block clamped to that block.
std::vector<int64_t> bind_block_sizes(const ir::Function& fn, const KnobTable& knobs, const Config& config);

// `fn` with its sizes that are numbers of blocks (ph::num_blocks) bound to `config` (completed
// with the backend's defaults): what lower() and running need. A copy of fn when it has none.
ir::Function bind_config(const ir::Function& fn, const Config& config, const backend::Backend& backend);

// Plans a valid, complete config without the backend's check: the heuristics and the
// tuners use it to measure a candidate.
BlockProgram plan(const ir::Function& fn, const Config& config, const backend::Backend& backend);

}  // namespace parhelion::lower

// The config space of a traced kernel on a backend: one entry per knob of the knob table,
// with the domain the backend accepts.
#pragma once

#include "backend/backend.h"
#include "ir/ir.h"
#include "lower/knobs.h"
#include "parhelion/config.h"

namespace parhelion::lower {

ConfigSpec derive_config_spec(const ir::Function& fn, const KnobTable& knobs, const backend::Backend& backend);
ConfigSpec derive_config_spec(const ir::Function& fn, const backend::Backend& backend);

// The point every heuristic default starts from: every thread, loop orders as written, the
// first micro-kernel, blocks of 1, each inner loop's default strategy.
Config base_config(const ConfigSpec& spec);

}  // namespace parhelion::lower

// The backends a target name selects: "cpu" (this host), "pallas" (TPU v7x) or
// "pallas:<generation>" (v5e, v6e, v5p, v7x). Backends are created once and live for the
// process, so a Block IR may point at its backend.
#pragma once

#include <string>
#include <vector>

#include "backend/backend.h"

namespace parhelion::backend {

// Throws UserError naming the known targets.
const Backend& for_target(const std::string& target);
// The host's cpu backend (for_target("cpu")).
const Backend& host_cpu();
// The target's full name: "pallas" is "pallas:v7x" (its default variant), "cpu" stays "cpu";
// throws UserError for an unknown target or variant, as for_target does.
std::string canonical_target(const std::string& target);
// The target names users can write, for help texts and errors.
std::vector<std::string> known_targets();

}  // namespace parhelion::backend

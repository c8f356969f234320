// The pallas backend's heuristic default: every block as large as a legal choice up to 512
// allows, halved (largest first) until a launch takes at most half of VMEM.
#pragma once

#include "backend/backend.h"

namespace parhelion::backend::pallas {

Config default_config(const ir::Function& fn, const ConfigSpec& spec, const Backend& backend);

}  // namespace parhelion::backend::pallas

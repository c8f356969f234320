// The cpu backend's heuristic default: grows block sizes (contiguous dimensions first) while
// one grid step's working set stays within a slice of fast memory and the grid keeps every
// thread busy; kernels with dots start from GEMM-like blocks.
#pragma once

#include "backend/backend.h"

namespace parhelion::backend::cpu {

Config default_config(const ir::Function& fn, const ConfigSpec& spec, const Backend& backend);

}  // namespace parhelion::backend::cpu

// The Python helpers of ph::rand / ph::randn in an emitted Pallas module: Philox-4x32-10 in
// 32-bit integer arithmetic (a TPU kernel has no 64-bit integers, so each 32x32->64 product is
// built from 16-bit halves), the same words as the cpu backend and the interpreter.
#pragma once

#include <string>

#include "ir/ir.h"

namespace parhelion::backend::pallas {

// The helper functions `_philox_uniform(seed, offsets)` and `_philox_normal(seed, offsets)`.
std::string random_helpers();

}  // namespace parhelion::backend::pallas

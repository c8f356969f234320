// The Python helper of scans (cumsum, cumprod, associative_scan) in an emitted Pallas module:
// a log-step (Hillis-Steele) inclusive scan of a tuple of blocks, made of what Mosaic TPU
// lowers (pltpu.roll along the axis, an iota mask and jnp.where; the combine function is
// elementwise on whole blocks). ceil(log2(size)) steps; the codegen emits the combine as a local
// Python function of the scan's op.
#pragma once

#include <string>

#include "ir/ir.h"

namespace parhelion::backend::pallas {

// Whether `fn` has a scan (and its module needs scan_helpers()).
bool uses_scan(const ir::Function& fn);

// The helper `_scan(xs, axis, start, n_valid, reverse, combine)`.
std::string scan_helpers();

}  // namespace parhelion::backend::pallas

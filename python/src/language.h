// The kernel language from Python (python/parhelion/language.py is its face): tensors, tiles,
// loops, Vars and every operation, traced into the Tile IR at the user's Python lines.
#pragma once

#include <nanobind/nanobind.h>

namespace parhelion::python {

void bind_language(nanobind::module_& m);

}  // namespace parhelion::python

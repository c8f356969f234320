// Kernels from Python: any KernelBase (the library's, or one traced from a Python function) as
// an object that runs, interprets, emits, tunes and pins configs; and the kernel library.
#pragma once

#include <nanobind/nanobind.h>

namespace parhelion::python {

void bind_kernels(nanobind::module_& m);

}  // namespace parhelion::python

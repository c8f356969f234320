// parhelion._core: the C++ library as a Python module. The package python/parhelion is its
// face; this module is not meant to be used directly.
#include <nanobind/nanobind.h>

#include <parhelion/error.h>

#include "arrays.h"
#include "kernels.h"
#include "language.h"

namespace nb = nanobind;

NB_MODULE(_core, m) {
  // torch.library keeps the operators registered from this module (parhelion.ops) alive past
  // the interpreter's last collection, so nanobind would report their kernels as leaked at
  // every exit. They are not leaks of ours.
  nb::set_leak_warnings(false);
  // A user's mistake (a bad kernel, shape or config) is parhelion.UserError, a ValueError; a
  // failing system compiler is parhelion.CompileError; a bug in Parhelion stays a RuntimeError
  // that says so.
  static nb::exception<parhelion::UserError> user_error(m, "UserError", PyExc_ValueError);
  static nb::exception<parhelion::CompileError> compile_error(m, "CompileError", PyExc_RuntimeError);
  parhelion::python::bind_arrays(m);
  parhelion::python::bind_kernels(m);  // first: the language's PythonKernel derives from KernelBase
  parhelion::python::bind_language(m);
}

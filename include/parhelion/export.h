// Kernels written in C++ for Python: compile them into a shared library of your own, export
// them with one line, and load the library from Python.
//
//   // mykernels.cpp
//   #include <parhelion/parhelion.h>
//   #include <parhelion/export.h>
//   namespace ph = parhelion;
//   ph::Tensor scale_body(ph::Tensor x, ph::Scalar s) { ... }
//   ph::Kernel scale("scale", scale_body);
//   PARHELION_EXPORT_KERNELS(scale)            // any number of kernels, comma-separated
//
//   inc=$(python -c 'import parhelion; print(parhelion.include_dir())')
//   lib=$(python -c 'import parhelion; print(parhelion.library_dir())')
//   g++ -std=c++23 -O2 -shared -fPIC mykernels.cpp -o libmykernels.so -I$inc -L$lib -lparhelion
//
//   lib = parhelion.load_library("libmykernels.so"); out = lib.scale(x, 2.0)
//
// The library links the Python package's libparhelion.so, so that its kernels and the package
// share one runtime; it must be built against the same Parhelion version (checked on load).
#pragma once

#include <vector>

#include "parhelion/kernel.h"

// Bumped whenever the layout of KernelBase or the export protocol changes.
#define PARHELION_EXPORT_ABI 1

namespace parhelion::detail {
template <class... K>
std::vector<KernelBase*> exported_kernels(K&... k) {
  return {static_cast<KernelBase*>(&k)...};
}
}  // namespace parhelion::detail

#define PARHELION_EXPORT_KERNELS(...)                                                                                \
  extern "C" __attribute__((visibility("default"))) int parhelion_export_abi() { return PARHELION_EXPORT_ABI; }      \
  extern "C" __attribute__((visibility("default"))) int parhelion_exported_kernels(                                  \
      ::parhelion::KernelBase* const** out) {                                                                        \
    static const std::vector<::parhelion::KernelBase*> kernels = ::parhelion::detail::exported_kernels(__VA_ARGS__); \
    *out = kernels.data();                                                                                           \
    return static_cast<int>(kernels.size());                                                                         \
  }

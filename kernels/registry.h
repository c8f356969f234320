// The registry of library kernels: how to make inputs for a shape, run the kernel and its
// reference, and how much work a call is. The CLI, the tests and the benchmarks share it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <parhelion/parhelion.h>

#include "tune/accuracy.h"

namespace parhelion::kernels {

struct Inputs {
  std::vector<Array> tensors;
  std::vector<double> scalars;
  std::vector<Arg> args() const;  // in the kernel's argument order
};

struct KernelEntry {
  std::string name;
  std::string summary;
  std::string shape_help;  // e.g. "M,N"
  int min_rank = 1, max_rank = 8;
  std::vector<DType> dtypes;  // supported input dtypes
  Shape default_shape;        // a benchmark-sized shape
  KernelBase* kernel = nullptr;
  // Seeded inputs for a shape and dtype (throws UserError on a shape it cannot take).
  std::function<Inputs(const Shape&, DType, uint64_t seed)> make_inputs;
  // Inputs of the right shapes and dtypes whose contents are not set: for tracing, emitting
  // and modelling, which never read them.
  Inputs make_specs(const Shape& shape, DType dtype) const;
  std::function<std::vector<Array>(const Inputs&)> reference;
  // Minimum bytes a fused kernel must move, and its floating-point operations.
  std::function<double(const Shape&, DType)> bytes;
  std::function<double(const Shape&)> flops;
  // Widens the comparison tolerance for a shape (dots: sqrt(K) / 8); null means 1.
  std::function<double(const Shape&)> tolerance_scale;
  double tolerance(const Shape& s) const { return tolerance_scale ? tolerance_scale(s) : 1.0; }
  // The torch baselines draw their own random stream (dropout): the benchmark checks the kernel
  // against `reference` and times them without comparing outputs.
  bool baseline_has_own_stream = false;

  // Runs the kernel (through `compiled` if given, else the kernel's own config).
  std::vector<Array> run(const Inputs& in) const { return kernel->run(in.args()); }
};

const std::vector<KernelEntry>& registry();
// Finds a kernel by name; throws UserError listing the known names.
const KernelEntry& find_kernel(const std::string& name);

// Elementwise closeness with a dtype-aware tolerance: |out - ref| <= atol + rtol * |ref|.
using Closeness = tune::Closeness;
Closeness compare(const Array& out, const Array& ref, DType dtype, double scale = 1.0);

}  // namespace parhelion::kernels

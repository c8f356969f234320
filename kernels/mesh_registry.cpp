#include "kernels/mesh_registry.h"

#include "kernels/kernels.h"
#include "parhelion/error.h"

namespace parhelion::kernels {
namespace {

Array random(const Shape& s, DType dt, uint64_t seed) { return Array::random(s, dt, seed); }

// An entry whose --shape has `rank` dims (named by `help`), the first a multiple of the devices
// when `rows_per_device` (each device's chunk of rows); `make` builds the inputs of a checked shape.
MeshKernelEntry entry(const std::string& name, const std::string& summary, const std::string& help, size_t rank,
                      bool rows_per_device, KernelBase* kernel, std::function<Inputs(const Shape&, DType)> make) {
  MeshKernelEntry e;
  e.name = name;
  e.summary = summary;
  e.shape_help = help + (rows_per_device ? " (M a multiple of the devices)" : "");
  e.default_shape = Shape(rank, 1024);
  e.kernel = kernel;
  e.make_inputs = [=](const Shape& s, DType dt, int64_t devices) {
    if (s.size() != rank) throw UserError(name + " takes --shape " + help + ", got " + shape_to_string(s));
    if (rows_per_device && s[0] % devices != 0)
      throw UserError(name + ": M = " + std::to_string(s[0]) + " must be a multiple of the " + std::to_string(devices) +
                      " devices");
    return make(s, dt);
  };
  return e;
}

std::vector<MeshKernelEntry> build() {
  auto one = [](const Shape& s, DType dt) { return Inputs{{random(s, dt, 1)}, {}}; };
  auto two = [](const Shape& s, DType dt) {
    return Inputs{{random({s[0], s[1]}, dt, 1), random({s[1], s[2]}, dt, 2)}, {}};
  };
  return {
      entry("all_gather", "x [M, K] per device -> [n M, K], every device's x", "M,K", 2, false, &all_gather, one),
      entry("all_reduce", "x [M, K] per device -> their sum, one shot", "M,K", 2, false, &all_reduce, one),
      entry("all_reduce_ring", "x [M, K] per device -> their sum, a reduce-scatter and an all-gather ring", "M,K", 2,
            true, &all_reduce_ring, one),
      entry("all_gather_matmul", "a [M, K] per device, b [K, N] -> all_gather(a) . b, overlapped", "M,K,N", 3, false,
            &all_gather_matmul, two),
      entry("matmul_reduce_scatter", "a [M, K], b [K, N] per device (K sharded) -> rows chunk d of the sum", "M,K,N", 3,
            true, &matmul_reduce_scatter, two),
      entry("all_reduce_bias_rms_norm", "x [M, H] per device, bias, weight [H] -> rms_norm(sum of x + bias)", "M,H", 2,
            false, &all_reduce_bias_rms_norm,
            [](const Shape& s, DType dt) {
              return Inputs{{random(s, dt, 1), random({s[1]}, dt, 2), random({s[1]}, dt, 3)}, {1e-6}};
            }),
  };
}

}  // namespace

const std::vector<MeshKernelEntry>& mesh_registry() {
  static const std::vector<MeshKernelEntry> r = build();
  return r;
}

const MeshKernelEntry* find_mesh_kernel(const std::string& name) {
  for (const MeshKernelEntry& e : mesh_registry())
    if (e.name == name) return &e;
  return nullptr;
}

}  // namespace parhelion::kernels

#include "kernels/mesh_registry.h"

#include "kernels/kernels.h"
#include "parhelion/error.h"

namespace parhelion::kernels {
namespace {

Shape need(const std::string& kernel, const Shape& s, size_t rank, const std::string& help) {
  if (s.size() != rank) throw UserError(kernel + " takes --shape " + help + ", got " + shape_to_string(s));
  return s;
}

Array random(const Shape& s, DType dt, uint64_t seed) { return Array::random(s, dt, seed); }

std::vector<MeshKernelEntry> build() {
  std::vector<MeshKernelEntry> r;
  r.push_back({"all_gather",
               "x [M, K] per device -> [n M, K], every device's x",
               "M,K",
               {1024, 1024},
               &all_gather,
               [](const Shape& s, DType dt, int64_t) {
                 need("all_gather", s, 2, "M,K");
                 return Inputs{{random(s, dt, 1)}, {}};
               }});
  r.push_back({"all_reduce",
               "x [M, K] per device -> their sum, one shot",
               "M,K",
               {1024, 1024},
               &all_reduce,
               [](const Shape& s, DType dt, int64_t) {
                 need("all_reduce", s, 2, "M,K");
                 return Inputs{{random(s, dt, 1)}, {}};
               }});
  r.push_back({"all_reduce_ring",
               "x [M, K] per device -> their sum, a reduce-scatter and an all-gather ring",
               "M,K (M a multiple of the devices)",
               {1024, 1024},
               &all_reduce_ring,
               [](const Shape& s, DType dt, int64_t n) {
                 need("all_reduce_ring", s, 2, "M,K");
                 if (s[0] % n != 0)
                   throw UserError("all_reduce_ring: M = " + std::to_string(s[0]) + " must be a multiple of the " +
                                   std::to_string(n) + " devices");
                 return Inputs{{random(s, dt, 1)}, {}};
               }});
  r.push_back({"all_gather_matmul",
               "a [M, K] per device, b [K, N] -> all_gather(a) . b, overlapped",
               "M,K,N",
               {1024, 1024, 1024},
               &all_gather_matmul,
               [](const Shape& s, DType dt, int64_t) {
                 need("all_gather_matmul", s, 3, "M,K,N");
                 return Inputs{{random({s[0], s[1]}, dt, 1), random({s[1], s[2]}, dt, 2)}, {}};
               }});
  r.push_back({"matmul_reduce_scatter",
               "a [M, K], b [K, N] per device (K sharded) -> rows chunk d of the sum",
               "M,K,N (M a multiple of the devices)",
               {1024, 1024, 1024},
               &matmul_reduce_scatter,
               [](const Shape& s, DType dt, int64_t n) {
                 need("matmul_reduce_scatter", s, 3, "M,K,N");
                 if (s[0] % n != 0)
                   throw UserError("matmul_reduce_scatter: M = " + std::to_string(s[0]) +
                                   " must be a multiple of the " + std::to_string(n) + " devices");
                 return Inputs{{random({s[0], s[1]}, dt, 1), random({s[1], s[2]}, dt, 2)}, {}};
               }});
  r.push_back({"all_reduce_bias_rms_norm",
               "x [M, H] per device, bias, weight [H] -> rms_norm(sum of x + bias)",
               "M,H",
               {1024, 1024},
               &all_reduce_bias_rms_norm,
               [](const Shape& s, DType dt, int64_t) {
                 need("all_reduce_bias_rms_norm", s, 2, "M,H");
                 return Inputs{{random(s, dt, 1), random({s[1]}, dt, 2), random({s[1]}, dt, 3)}, {1e-6}};
               }});
  return r;
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

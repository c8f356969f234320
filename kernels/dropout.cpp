// Dropout forward and backward with the mask recomputed from the seed (docs/language.md, "Random
// numbers"): element i of x [M, N] (row-major) is kept where rand(seed, i) >= p and scaled by
// 1 / (1 - p). The backward kernel draws the same stream, so no mask is stored between them.
#include "kernels/kernels.h"

namespace parhelion::kernels {
namespace {
namespace ph = parhelion;

// `in` scaled where the element is kept, 0 elsewhere: the forward's x, the backward's gradient.
ph::Tensor dropout_apply(ph::Tensor in, ph::Scalar p, ph::Int seed, const char* name) {
  ph::expect(in.rank() == 2, std::string(name) + ": the input must be [M, N]");
  auto [m, n] = in.sizes<2>();
  auto out = ph::empty_like(in);
  for (auto [tm, tn] : ph::tile(m, n)) {
    auto element = tm.index().unsqueeze(1) * n + tn.index().unsqueeze(0);
    auto keep = ph::rand(seed, element) >= p;
    out[tm, tn] = ph::where(keep, in[tm, tn] / (1.0f - p), 0.0f);
  }
  return out;
}

ph::Tensor dropout_body(ph::Tensor x, ph::Scalar p, ph::Int seed) { return dropout_apply(x, p, seed, "dropout"); }
ph::Tensor dropout_backward_body(ph::Tensor grad_out, ph::Scalar p, ph::Int seed) {
  return dropout_apply(grad_out, p, seed, "dropout_backward");
}

}  // namespace

Kernel<Tensor(Tensor, Scalar, Int)> dropout("dropout", dropout_body);
Kernel<Tensor(Tensor, Scalar, Int)> dropout_backward("dropout_backward", dropout_backward_body);

}  // namespace parhelion::kernels

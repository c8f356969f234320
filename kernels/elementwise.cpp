// Elementwise kernels: one launch whose grid tiles every dimension of the output.
#include "kernels/kernels.h"

namespace parhelion::kernels {
namespace {
namespace ph = parhelion;
constexpr std::initializer_list<DType> kFloat = {DType::f32, DType::bf16, DType::f16};

ph::Tensor add_body(ph::Tensor x, ph::Tensor y) {
  ph::expect_dtype(x, kFloat);
  ph::expect(y.dtype() == x.dtype(), "add: x and y must have the same dtype");
  ph::expect(x.sizes() == y.sizes(), "add: x and y must have the same shape, got " + shape_to_string(x.sizes()) +
                                         " and " + shape_to_string(y.sizes()));
  auto out = ph::empty_like(x);
  for (auto tile : ph::tile(out.sizes())) out[tile] = x[tile] + y[tile];
  return out;
}

ph::Tensor exp_body(ph::Tensor x) {
  ph::expect_dtype(x, kFloat);
  auto out = ph::empty_like(x);
  for (auto tile : ph::tile(out.sizes())) out[tile] = ph::exp(x[tile]);
  return out;
}

ph::Tensor swiglu_body(ph::Tensor a, ph::Tensor b) {
  ph::expect_dtype(a, kFloat);
  ph::expect(a.sizes() == b.sizes(), "swiglu: a and b must have the same shape");
  auto out = ph::empty_like(a);
  for (auto tile : ph::tile(out.sizes())) out[tile] = ph::silu(a[tile]) * b[tile];
  return out;
}

ph::Tensor geglu_body(ph::Tensor a, ph::Tensor b) {
  ph::expect_dtype(a, kFloat);
  ph::expect(a.sizes() == b.sizes(), "geglu: a and b must have the same shape");
  auto out = ph::empty_like(a);
  for (auto tile : ph::tile(out.sizes())) out[tile] = ph::gelu(a[tile]) * b[tile];
  return out;
}

}  // namespace

Kernel<Tensor(Tensor, Tensor)> add("add", add_body);
Kernel<Tensor(Tensor)> exp("exp", exp_body);
Kernel<Tensor(Tensor, Tensor)> swiglu("swiglu", swiglu_body);
Kernel<Tensor(Tensor, Tensor)> geglu("geglu", geglu_body);

}  // namespace parhelion::kernels

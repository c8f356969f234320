// Softmax over the last dimension, in three shapes of the same idea.
#include <cmath>

#include "kernels/kernels.h"

namespace parhelion::kernels {
namespace {
namespace ph = parhelion;
constexpr std::initializer_list<DType> kFloat = {DType::f32, DType::bf16, DType::f16};

// Whole rows in one block: max, exp, sum and normalize without leaving fast memory.
ph::Tensor softmax_body(ph::Tensor x) {
  ph::expect_dtype(x, kFloat);
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty_like(x);
  for (auto rows : ph::tile(m)) {
    auto v = x[rows, ph::all];
    auto e = ph::exp(v - ph::amax(v, -1, true));
    out[rows, ph::all] = e / ph::sum(e, -1, true);
  }
  return out;
}

// Long rows: pass 1 streams column blocks keeping a running max and a rescaled sum (online
// softmax); pass 2 streams them again to normalize. Fast memory holds one block, any n.
ph::Tensor softmax_two_pass_body(ph::Tensor x) {
  ph::expect_dtype(x, kFloat);
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty_like(x);
  for (auto rows : ph::tile(m)) {
    ph::Var mx = ph::full({rows}, -INFINITY);
    ph::Var den = ph::zeros({rows});
    for (auto cols : ph::tile(n)) {
      auto v = x[rows, cols];
      auto new_mx = ph::maximum(mx, ph::amax(v, -1));
      den = den * ph::exp(mx - new_mx) + ph::sum(ph::exp(v - new_mx.unsqueeze(-1)), -1);
      mx = new_mx;
    }
    for (auto cols : ph::tile(n)) out[rows, cols] = ph::exp(x[rows, cols] - mx.unsqueeze(-1)) / den.unsqueeze(-1);
  }
  return out;
}

// [B,M,N]: the grid tiles batch and rows; each block holds whole rows.
ph::Tensor batch_softmax_body(ph::Tensor x) {
  ph::expect_dtype(x, kFloat);
  auto [b, m, n] = x.sizes<3>();
  auto out = ph::empty_like(x);
  for (auto [tb, tm] : ph::tile(b, m)) {
    auto v = x[tb, tm, ph::all];
    auto e = ph::exp(v - ph::amax(v, -1, true));
    out[tb, tm, ph::all] = e / ph::sum(e, -1, true);
  }
  return out;
}

}  // namespace

Kernel<Tensor(Tensor)> softmax("softmax", softmax_body);
Kernel<Tensor(Tensor)> softmax_two_pass("softmax_two_pass", softmax_two_pass_body);
Kernel<Tensor(Tensor)> batch_softmax("batch_softmax", batch_softmax_body);

}  // namespace parhelion::kernels

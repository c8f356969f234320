// The gradients of layer_norm (dx, dw, db) in one kernel, with per-block partials for dw and db:
// a transcription of Helion's examples/layer_norm.py backward. Each block of rows (a tunable
// block size) walks its rows in smaller blocks (a tile over the enclosing block, tunable too),
// writes dx and accumulates the block's column sums of dy * x_hat and dy; the block stores them
// at its block number into partials with one row per block (ph::num_blocks), and a second launch
// sums the partials. Why partials: the column sums reduce over all rows, which run in parallel
// grid steps; the partials keep each step's sum apart, and the second launch is small
// (num_blocks x N).
#include "kernels/kernels.h"

namespace parhelion::kernels {
namespace {
namespace ph = parhelion;
constexpr std::initializer_list<DType> kFloat = {DType::f32, DType::bf16, DType::f16};

// (grad_out [M,N], x [M,N], mean [M] f32, rstd [M] f32, weight [N]) -> (dx [M,N] in x's dtype,
// dw [N] f32, db [N] f32), with x_hat = (x - mean) * rstd and wdy = weight * grad_out:
//   dx = (wdy - (x_hat * mean_j(x_hat * wdy) + mean_j(wdy))) * rstd
//   dw = sum_i grad_out * x_hat,  db = sum_i grad_out
std::tuple<ph::Tensor, ph::Tensor, ph::Tensor> layer_norm_backward_body(ph::Tensor grad_out, ph::Tensor x,
                                                                        ph::Tensor mean, ph::Tensor rstd,
                                                                        ph::Tensor weight) {
  ph::expect_dtype(x, kFloat);
  auto [m, n] = x.sizes<2>();
  ph::expect(grad_out.sizes() == x.sizes(),
             "layer_norm_backward: grad_out must have x's shape " + shape_to_string(x.sizes()));
  ph::expect(mean.sizes() == Shape{m} && rstd.sizes() == Shape{m},
             "layer_norm_backward: mean and rstd must have shape [" + std::to_string(m) + "]");
  ph::expect(weight.sizes() == Shape{n}, "layer_norm_backward: weight must have shape [" + std::to_string(n) + "]");
  auto bm = ph::register_block_size(m);
  auto dx = ph::empty_like(x);
  // One row per block of rows; the block number leads a unit dim, which TPU layouts need.
  auto dw_part = ph::empty({ph::num_blocks(bm), 1, n});
  auto db_part = ph::empty({ph::num_blocks(bm), 1, n});
  for (auto block : ph::tile(ph::Extent(m).block(bm))) {
    ph::Var dw_acc = ph::zeros({n});
    ph::Var db_acc = ph::zeros({n});
    for (auto rows : ph::tile(block)) {
      auto dy = grad_out[rows, ph::all];
      auto r = rstd[rows].unsqueeze(-1);
      auto x_hat = (x[rows, ph::all] - mean[rows].unsqueeze(-1)) * r;
      dw_acc = dw_acc + ph::sum(dy * x_hat, 0);
      db_acc = db_acc + ph::sum(dy, 0);
      auto wdy = weight[ph::all] * dy;
      auto c1 = ph::mean(x_hat * wdy, -1, true);
      auto c2 = ph::mean(wdy, -1, true);
      dx[rows, ph::all] = (wdy - (x_hat * c1 + c2)) * r;
    }
    dw_part[block.id(), 0, ph::all] = dw_acc;
    db_part[block.id(), 0, ph::all] = db_acc;
  }
  auto dw = ph::empty({n});
  auto db = ph::empty({n});
  for (auto cols : ph::tile(n)) {
    ph::Var dw_sum = ph::zeros({cols});
    ph::Var db_sum = ph::zeros({cols});
    for (auto blocks : ph::tile(ph::num_blocks(bm))) {
      dw_sum = dw_sum + ph::sum(dw_part[blocks, 0, cols], 0);
      db_sum = db_sum + ph::sum(db_part[blocks, 0, cols], 0);
    }
    dw[cols] = dw_sum;
    db[cols] = db_sum;
  }
  return {dx, dw, db};
}

}  // namespace

Kernel<std::tuple<Tensor, Tensor, Tensor>(Tensor, Tensor, Tensor, Tensor, Tensor)> layer_norm_backward(
    "layer_norm_backward", layer_norm_backward_body);

}  // namespace parhelion::kernels

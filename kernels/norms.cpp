// Row normalizations and statistics over the last dimension of x [M,N].
#include "kernels/kernels.h"

namespace parhelion::kernels {
namespace {
namespace ph = parhelion;
constexpr std::initializer_list<DType> kFloat = {DType::f32, DType::bf16, DType::f16};

ph::Tensor layer_norm_body(ph::Tensor x, ph::Tensor w, ph::Tensor b, ph::Scalar eps) {
  ph::expect_dtype(x, kFloat);
  auto [m, n] = x.sizes<2>();
  ph::expect(w.sizes() == Shape{n} && b.sizes() == Shape{n},
             "layer_norm: weight and bias must have shape [" + std::to_string(n) + "]");
  auto out = ph::empty_like(x);
  for (auto rows : ph::tile(m)) {
    auto v = x[rows, ph::all];
    auto centered = v - ph::mean(v, -1, true);
    auto var = ph::mean(centered * centered, -1, true);
    out[rows, ph::all] = centered * ph::rsqrt(var + eps) * w[ph::all] + b[ph::all];
  }
  return out;
}

ph::Tensor rms_norm_body(ph::Tensor x, ph::Tensor w, ph::Scalar eps) {
  ph::expect_dtype(x, kFloat);
  auto [m, n] = x.sizes<2>();
  ph::expect(w.sizes() == Shape{n}, "rms_norm: weight must have shape [" + std::to_string(n) + "]");
  auto out = ph::empty_like(x);
  for (auto rows : ph::tile(m)) {
    auto v = x[rows, ph::all];
    auto rstd = ph::rsqrt(ph::mean(v * v, -1, true) + eps);
    out[rows, ph::all] = v * rstd * w[ph::all];
  }
  return out;
}

// Running row statistics over column blocks: each block's mean and sum of squared deviations
// are merged into the running ones (Chan et al.), which stays accurate where the one-pass
// sum-of-squares formula cancels. Declared in a row-tile loop, merged in a column-tile loop.
struct RowStats {
  ph::Var count, mean, m2;
  explicit RowStats(const ph::Tile& rows) : count(ph::zeros({})), mean(ph::zeros({rows})), m2(ph::zeros({rows})) {}
  void merge(ph::Tensor v, const ph::Tile& cols) {
    auto block_count = ph::cast(cols.end() - cols.begin(), DType::f32);
    auto block_mean = ph::mean(v, -1);
    auto dev = v - block_mean.unsqueeze(-1);
    auto block_m2 = ph::sum(dev * dev, -1);
    auto total = count + block_count;
    auto delta = block_mean - mean;
    mean = mean + delta * (block_count / total);
    m2 = m2 + block_m2 + delta * delta * (count * block_count / total);
    count = total;
  }
};

// Row mean and (population) variance, streaming column blocks.
std::tuple<ph::Tensor, ph::Tensor> welford_body(ph::Tensor x) {
  ph::expect_dtype(x, kFloat);
  auto [m, n] = x.sizes<2>();
  auto mean_out = ph::empty({m}, DType::f32);
  auto var_out = ph::empty({m}, DType::f32);
  for (auto rows : ph::tile(m)) {
    RowStats stats(rows);
    for (auto cols : ph::tile(n)) stats.merge(x[rows, cols], cols);
    mean_out[rows] = stats.mean;
    var_out[rows] = stats.m2 / static_cast<double>(n);
  }
  return {mean_out, var_out};
}

// layer_norm over rows too long for one block: pass 1 streams column blocks merging their
// statistics (as welford), pass 2 streams them again to normalize.
ph::Tensor layer_norm_looped_body(ph::Tensor x, ph::Tensor w, ph::Tensor b, ph::Scalar eps) {
  ph::expect_dtype(x, kFloat);
  auto [m, n] = x.sizes<2>();
  ph::expect(w.sizes() == Shape{n} && b.sizes() == Shape{n},
             "layer_norm_looped: weight and bias must have shape [" + std::to_string(n) + "]");
  auto out = ph::empty_like(x);
  for (auto rows : ph::tile(m)) {
    RowStats stats(rows);
    for (auto cols : ph::tile(n)) stats.merge(x[rows, cols], cols);
    auto rstd = ph::rsqrt(stats.m2 / static_cast<double>(n) + eps);
    for (auto cols : ph::tile(n))
      out[rows, cols] = (x[rows, cols] - stats.mean.unsqueeze(-1)) * rstd.unsqueeze(-1) * w[cols] + b[cols];
  }
  return out;
}

// Gradients of rms_norm: dx row by row, and dw = sum_i grad_out * x * rstd over all rows. Each
// block of rows (a tunable block size) walks its rows in smaller tiles (tunable too), writes dx
// and adds the tile's column sums into a Var; the block stores them at its block number into
// partials, one row per block, and a second launch sums the partials (num_blocks x N, small).
// Each element of grad_out and x is read from memory once: a kernel that summed dw over all
// rows in a launch of its own would read both again.
std::tuple<ph::Tensor, ph::Tensor> rms_norm_backward_body(ph::Tensor grad_out, ph::Tensor x, ph::Tensor w,
                                                          ph::Scalar eps) {
  ph::expect_dtype(x, kFloat);
  auto [m, n] = x.sizes<2>();
  ph::expect(grad_out.sizes() == x.sizes(),
             "rms_norm_backward: grad_out must have x's shape " + shape_to_string(x.sizes()));
  ph::expect(w.sizes() == Shape{n}, "rms_norm_backward: weight must have shape [" + std::to_string(n) + "]");
  auto bm = ph::register_block_size(m);
  auto dx = ph::empty_like(x);
  // One row per block of rows; the block number leads a unit dim, which TPU layouts need.
  auto dw_part = ph::empty({ph::num_blocks(bm), 1, n});
  for (auto block : ph::tile(ph::Extent(m).block(bm))) {
    ph::Var dw_acc = ph::zeros({n});
    for (auto rows : ph::tile(block)) {
      auto v = x[rows, ph::all];
      auto g = grad_out[rows, ph::all];
      auto gw = g * w[ph::all];
      auto rstd = ph::rsqrt(ph::mean(v * v, -1) + eps);
      auto c = ph::mean(gw * v, -1) * rstd * rstd * rstd;
      dx[rows, ph::all] = gw * rstd.unsqueeze(-1) - v * c.unsqueeze(-1);
      dw_acc = dw_acc + ph::sum(g * v * rstd.unsqueeze(-1), 0);
    }
    dw_part[block.id(), 0, ph::all] = dw_acc;
  }
  auto dw = ph::empty({n}, w.dtype());
  for (auto cols : ph::tile(n)) {
    ph::Var acc = ph::zeros({cols});
    for (auto blocks : ph::tile(ph::num_blocks(bm))) acc = acc + ph::sum(dw_part[blocks, 0, cols], 0);
    dw[cols] = acc;
  }
  return {dx, dw};
}

}  // namespace

Kernel<Tensor(Tensor, Tensor, Tensor, Scalar)> layer_norm_looped("layer_norm_looped", layer_norm_looped_body);
Kernel<std::tuple<Tensor, Tensor>(Tensor, Tensor, Tensor, Scalar)> rms_norm_backward("rms_norm_backward",
                                                                                     rms_norm_backward_body);
Kernel<Tensor(Tensor, Tensor, Tensor, Scalar)> layer_norm("layer_norm", layer_norm_body);
Kernel<Tensor(Tensor, Tensor, Scalar)> rms_norm("rms_norm", rms_norm_body);
Kernel<std::tuple<Tensor, Tensor>(Tensor)> welford("welford", welford_body);

}  // namespace parhelion::kernels

// Kernels over jagged tensors: rows grouped by sorted row offsets, each group walked by a jagged
// loop over its own rows (docs/language.md, "Jagged loops").
#include "kernels/kernels.h"

namespace parhelion::kernels {
namespace {
namespace ph = parhelion;

// Jagged mean (Helion's jagged_mean, with one feature count for every row): values [T, M] hold
// the rows of B groups back to back, group g owning rows offsets[g]..offsets[g+1]; out[g, :] is
// the mean of its rows, 0 for a group without rows. A launch over (group, column block) runs a
// jagged loop over that group's rows only: the work is T x M whatever the groups' lengths.
ph::Tensor jagged_mean_body(ph::Tensor values, ph::Tensor offsets) {
  ph::expect(values.rank() == 2, "jagged_mean: values must be [T, M]");
  ph::expect(offsets.rank() == 1 && offsets.size(0) >= 1, "jagged_mean: offsets must be [B + 1]");
  ph::expect_dtype(offsets, {DType::i32, DType::i64});
  const int64_t groups = offsets.size(0) - 1, m = values.size(1);
  // One row per group, written at a leading index: [B, 1, M], returned as [B, M] (a TPU block's
  // last two dims cannot squeeze a group's row out of B).
  auto out = ph::empty({groups, 1, m}, values.dtype());
  for (auto [g, tm] : ph::tile(ph::range(groups).block(1), m)) {
    auto start = offsets[g.begin()], end = offsets[g.begin() + 1];
    ph::Var sum = ph::zeros({tm});
    for (auto tr : ph::tile(ph::range(start, end))) sum = sum + ph::sum(values[tr, tm], 0);
    auto rows = ph::maximum(end - start, 1).to(DType::f32);
    out[g, 0, tm] = sum / rows;
  }
  return out.view({groups, m});
}

// Grouped GEMM: out[r, :] = x[r, :] . w[g] for the rows r in offsets[g] .. offsets[g+1] of each
// group g (rows in no group are 0). A launch over (group, column block) runs a jagged loop over
// the group's own rows, each trip a block product accumulated over K: the work is M x K x N
// whatever the groups' sizes, and an empty group runs no trip.
ph::Tensor grouped_gemm_body(ph::Tensor x, ph::Tensor w, ph::Tensor offsets) {
  ph::expect(x.rank() == 2 && w.rank() == 3 && w.size(1) == x.size(1),
             "grouped_gemm: x [M, K] and w [G, K, N] with the same K");
  ph::expect(offsets.sizes() == Shape{w.size(0) + 1}, "grouped_gemm: offsets must be [G + 1]");
  ph::expect_dtype(offsets, {DType::i32, DType::i64});
  const int64_t m = x.size(0), k = x.size(1), groups = w.size(0), n = w.size(2);
  auto out = ph::zeros({m, n}, x.dtype());
  for (auto [g, tn] : ph::tile(ph::range(groups).block(1), n)) {
    for (auto tr : ph::tile(ph::jagged(offsets, g.begin()))) {
      ph::Var acc = ph::zeros({tr, tn});
      for (auto tk : ph::tile(k)) acc = acc + ph::dot(x[tr, tk], w[g.begin(), tk, tn]);
      out[tr, tn] = acc;
    }
  }
  return out;
}

}  // namespace

Kernel<Tensor(Tensor, Tensor)> jagged_mean("jagged_mean", jagged_mean_body);
Kernel<Tensor(Tensor, Tensor, Tensor)> grouped_gemm("grouped_gemm", grouped_gemm_body);

}  // namespace parhelion::kernels

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

}  // namespace

Kernel<Tensor(Tensor, Tensor)> jagged_mean("jagged_mean", jagged_mean_body);

}  // namespace parhelion::kernels

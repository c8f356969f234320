// Mixture-of-experts matmul (Helion's moe_matmul_ogs, with top-k routing and gate weights):
// token t is routed to k experts. The routed slots are sorted by expert: expert e owns slots
// offsets[e]..offsets[e+1], slot s holding token ids[s] and its gate weight gates[s]. Then
//   out[t, :] = sum over t's slots s of gates[s] * (x[t, :] . w[e(s)]).
// A launch over (expert, column block) runs a jagged loop over that expert's slots only: each
// trip gathers its tokens' rows of x, multiplies them by the expert's weights and scatters the
// weighted rows back with an atomic add (a token's k experts meet on its row). The work is
// T x k rows whatever the experts' loads; an expert without tokens runs no trip.
#include "kernels/kernels.h"

namespace parhelion::kernels {
namespace {
namespace ph = parhelion;

ph::Tensor moe_matmul_body(ph::Tensor x, ph::Tensor w, ph::Tensor ids, ph::Tensor gates, ph::Tensor offsets) {
  ph::expect(x.rank() == 2 && w.rank() == 3 && w.size(1) == x.size(1),
             "moe_matmul: x [T, K] and w [E, K, N] with the same K");
  ph::expect(ids.rank() == 1 && gates.sizes() == ids.sizes(), "moe_matmul: ids and gates are [S], one per routed slot");
  ph::expect(offsets.sizes() == Shape{w.size(0) + 1}, "moe_matmul: offsets must be [E + 1]");
  ph::expect_dtype(ids, {DType::i32, DType::i64});
  ph::expect_dtype(offsets, {DType::i32, DType::i64});
  ph::expect_dtype(x, {DType::f32, DType::bf16, DType::f16});
  const int64_t t = x.size(0), experts = w.size(0), n = w.size(2);
  const int64_t slots = ids.size(0);
  // The routing tensors as columns [S, 1]: a slot block then runs down rows, not along a TPU
  // block's lane dim (a jagged block starts at any row; a lane offset must be 128-aligned).
  auto ids_col = ids.view({slots, 1}), gates_col = gates.view({slots, 1});
  auto out = ph::zeros({t, n});  // f32: the experts' rows are added into it
  for (auto [e, tn] : ph::tile(ph::range(experts).block(1), n)) {
    auto start = offsets[e.begin()], end = offsets[e.begin() + 1];
    for (auto ts : ph::tile(ph::range(start, end))) {
      auto tokens = ids_col[ts, 0].to(DType::i64);
      // K whole in one dot (no K loop nested in the jagged loop, which a TPU kernel would need
      // as a second loop inside the trip); e.id() is the expert block's index, which a TPU
      // block index map takes.
      auto rows = ph::dot(x[tokens, ph::all], w[e.id(), ph::all, tn]);
      ph::atomic_add(out, {tokens, tn}, rows * gates_col[ts, 0].to(DType::f32).unsqueeze(1));
    }
  }
  return out;
}

}  // namespace

Kernel<Tensor(Tensor, Tensor, Tensor, Tensor, Tensor)> moe_matmul("moe_matmul", moe_matmul_body);

}  // namespace parhelion::kernels

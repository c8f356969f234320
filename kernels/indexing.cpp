// Kernels built on gathers, scatters and masked access (docs/language.md, section 4).
#include <string>

#include "kernels/kernels.h"

namespace parhelion::kernels {
namespace {
namespace ph = parhelion;

// Embedding forward: out[n, :] = weight[ids[n], :], the ids of rank 1 to 3 flattened row-major
// into n. A direct transcription of Helion's: ids of any rank up to 3 are flattened on the host
// (a view: no copy), and a launch over (tokens, embedding columns) gathers rows through the
// index block ids[tt]. Flattening keeps the output's rows those of the ids' tiles, so the store
// is a plain block store on every backend (a store at a computed row b * S + s would be a
// scatter).
ph::Tensor embedding_body(ph::Tensor ids, ph::Tensor weight) {
  ph::expect_dtype(ids, {DType::i32, DType::i64});
  ph::expect(weight.rank() == 2, "embedding: weight must be [V, E]");
  ph::expect(ids.rank() >= 1 && ids.rank() <= 3, "embedding: ids must have rank 1 to 3 (flatten more on the host)");
  const int64_t n = shape_numel(ids.sizes()), e = weight.size(1);
  auto flat = ids.rank() == 1 ? ids : ids.view({n});
  auto out = ph::empty({n, e}, weight.dtype());
  for (auto [tt, te] : ph::tile(n, e)) out[tt, te] = weight[flat[tt], te];
  return out;
}

// Concatenation along the last dim, out = [x | y] for x [M, N1], y [M, N2], in one launch: each
// block of output columns j reads x[:, j] where j < N1 and y[:, j - N1] elsewhere, each a
// masked load (the other side is not read). A direct transcription.
ph::Tensor concat_body(ph::Tensor x, ph::Tensor y) {
  ph::expect(x.rank() == 2 && y.rank() == 2 && x.size(0) == y.size(0), "concat: x [M, N1] and y [M, N2]");
  ph::expect(x.dtype() == y.dtype(), "concat: x and y must have one dtype");
  auto m = x.size(0), n1 = x.size(1), n2 = y.size(1);
  auto out = ph::empty({m, n1 + n2}, x.dtype());
  for (auto [tm, tn] : ph::tile(m, n1 + n2)) {
    auto j = tn.index();
    auto left = j < n1;
    auto a = ph::load(x, {tm, j}, left, 0.0f);
    auto b = ph::load(y, {tm, j - n1}, !left, 0.0f);
    out[tm, tn] = ph::where(left, a, b);
  }
  return out;
}

}  // namespace

Kernel<Tensor(Tensor, Tensor)> embedding("embedding", embedding_body);
Kernel<Tensor(Tensor, Tensor)> concat("concat", concat_body);

}  // namespace parhelion::kernels

// Losses.
#include <cmath>

#include "kernels/kernels.h"

namespace parhelion::kernels {
namespace {
namespace ph = parhelion;

// Per-row cross entropy, loss[n] = logsumexp(logits[n]) - logits[n, labels[n]], streaming the
// vocabulary in blocks with an online logsumexp; the target logit is picked by comparing each
// block's column indices with the label.
ph::Tensor cross_entropy_body(ph::Tensor logits, ph::Tensor labels) {
  auto [n, v] = logits.sizes<2>();
  ph::expect(labels.sizes() == Shape{n}, "cross_entropy: labels must have shape [" + std::to_string(n) + "]");
  ph::expect_dtype(labels, {DType::i32, DType::i64});
  ph::expect_dtype(logits, {DType::f32, DType::bf16, DType::f16});
  auto loss = ph::empty({n}, DType::f32);
  for (auto rows : ph::tile(n)) {
    auto label = labels[rows];
    ph::Var mx = ph::full({rows}, -INFINITY);
    ph::Var den = ph::zeros({rows});
    ph::Var target = ph::zeros({rows});
    for (auto cols : ph::tile(v)) {
      auto x = logits[rows, cols];
      auto new_mx = ph::maximum(mx, ph::amax(x, -1));
      den = den * ph::exp(mx - new_mx) + ph::sum(ph::exp(x - new_mx.unsqueeze(-1)), -1);
      mx = new_mx;
      auto hit = cols.index() == label.unsqueeze(-1);
      target = target + ph::sum(ph::where(hit, x, 0.0f), -1);
    }
    loss[rows] = ph::log(den) + mx - target;
  }
  return loss;
}

// Cross entropy with an ignored label: rows whose label is ignore_index (a runtime integer,
// torch's -100 by convention) lose 0, the others as cross_entropy. The ignored label matches no
// column, so its row's target term is 0 and the row's loss is replaced at the end.
ph::Tensor cross_entropy_ignore_index_body(ph::Tensor logits, ph::Tensor labels, ph::Int ignore_index) {
  auto [n, v] = logits.sizes<2>();
  ph::expect(labels.sizes() == Shape{n},
             "cross_entropy_ignore_index: labels must have shape [" + std::to_string(n) + "]");
  ph::expect_dtype(labels, {DType::i32, DType::i64});
  ph::expect_dtype(logits, {DType::f32, DType::bf16, DType::f16});
  auto loss = ph::empty({n}, DType::f32);
  for (auto rows : ph::tile(n)) {
    auto label = labels[rows];
    ph::Var mx = ph::full({rows}, -INFINITY);
    ph::Var den = ph::zeros({rows});
    ph::Var target = ph::zeros({rows});
    for (auto cols : ph::tile(v)) {
      auto x = logits[rows, cols];
      auto new_mx = ph::maximum(mx, ph::amax(x, -1));
      den = den * ph::exp(mx - new_mx) + ph::sum(ph::exp(x - new_mx.unsqueeze(-1)), -1);
      mx = new_mx;
      auto hit = cols.index() == label.unsqueeze(-1);
      target = target + ph::sum(ph::where(hit, x, 0.0f), -1);
    }
    loss[rows] = ph::where(label == ignore_index, 0.0f, ph::log(den) + mx - target);
  }
  return loss;
}

}  // namespace

Kernel<Tensor(Tensor, Tensor)> cross_entropy("cross_entropy", cross_entropy_body);
Kernel<Tensor(Tensor, Tensor, Int)> cross_entropy_ignore_index("cross_entropy_ignore_index",
                                                               cross_entropy_ignore_index_body);

}  // namespace parhelion::kernels

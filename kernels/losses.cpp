// Losses.
#include <cmath>

#include "kernels/kernels.h"

namespace parhelion::kernels {
namespace {
namespace ph = parhelion;

// The loss of each row of a block of rows: logsumexp(logits[row]) - logits[row, label[row]],
// streaming the vocabulary in blocks with an online logsumexp; the target logit is picked by
// comparing each block's column indices with the label (a label that matches no column, such
// as an ignored one, picks 0).
ph::Tensor row_losses(ph::Tensor logits, const ph::Tile& rows, const ph::Tensor& label) {
  const int64_t v = logits.size(1);
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
  return ph::log(den) + mx - target;
}

void expect_logits_and_labels(const char* name, ph::Tensor logits, ph::Tensor labels) {
  auto [n, v] = logits.sizes<2>();
  (void)v;
  ph::expect(labels.sizes() == Shape{n}, std::string(name) + ": labels must have shape [" + std::to_string(n) + "]");
  ph::expect_dtype(labels, {DType::i32, DType::i64});
  ph::expect_dtype(logits, {DType::f32, DType::bf16, DType::f16});
}

// Per-row cross entropy, loss[n] = logsumexp(logits[n]) - logits[n, labels[n]].
ph::Tensor cross_entropy_body(ph::Tensor logits, ph::Tensor labels) {
  expect_logits_and_labels("cross_entropy", logits, labels);
  auto loss = ph::empty({logits.size(0)}, DType::f32);
  for (auto rows : ph::tile(logits.size(0))) loss[rows] = row_losses(logits, rows, labels[rows]);
  return loss;
}

// Cross entropy with an ignored label: rows whose label is ignore_index (a runtime integer,
// torch's -100 by convention) lose 0, the others as cross_entropy.
ph::Tensor cross_entropy_ignore_index_body(ph::Tensor logits, ph::Tensor labels, ph::Int ignore_index) {
  expect_logits_and_labels("cross_entropy_ignore_index", logits, labels);
  auto loss = ph::empty({logits.size(0)}, DType::f32);
  for (auto rows : ph::tile(logits.size(0))) {
    auto label = labels[rows];
    loss[rows] = ph::where(label == ignore_index, 0.0f, row_losses(logits, rows, label));
  }
  return loss;
}

}  // namespace

Kernel<Tensor(Tensor, Tensor)> cross_entropy("cross_entropy", cross_entropy_body);
Kernel<Tensor(Tensor, Tensor, Int)> cross_entropy_ignore_index("cross_entropy_ignore_index",
                                                               cross_entropy_ignore_index_body);

}  // namespace parhelion::kernels

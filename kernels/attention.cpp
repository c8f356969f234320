// Attention forward, flash style: one block of query rows per grid step, keys and values
// streamed in blocks by an inner loop, softmax computed online (running max and denominator,
// the accumulator rescaled when the max grows). The inner loop's strategy (stream, pipeline
// or resident K/V) is a config knob the tuner explores.
#include <cmath>

#include "kernels/kernels.h"

namespace parhelion::kernels {
namespace {
namespace ph = parhelion;
constexpr std::initializer_list<DType> kFloat = {DType::f32, DType::bf16, DType::f16};

// The online-softmax loop for one block of query rows `tq`. `at(t, rows)` indexes tensor t at
// the current heads and a tile of rows; `stat(fill)` makes a [heads..., tq] block and
// `block(d)` a [heads..., tq, d] one of zeros.
template <class At, class Stat, class Block>
ph::Tensor flash_rows(At at, Stat stat, Block block, ph::Tensor q, ph::Tensor k, ph::Tensor v, ph::Scalar scale,
                      const ph::Tile& tq, int64_t kv_len, int64_t d, bool causal) {
  ph::Var mx = stat(-INFINITY);
  ph::Var den = stat(0.0);
  ph::Var acc = block(d);
  // The softmax scale times log2(e) folded into q once per block of rows, not into every score:
  // the scores are then in base-2 units, and exp2 takes exp's place (2^(x log2 e) = e^x; the
  // max, p and alpha are all in those units, so acc / den is unchanged). 16-bit q is scaled in
  // its dtype, as flash kernels do, so that the dot keeps its 16-bit micro-kernel.
  constexpr double kLog2e = 1.4426950408889634;
  auto qs = at(q, tq) * (scale * kLog2e);
  auto qb = q.dtype() == DType::f32 ? qs : ph::cast(qs, q.dtype());
  for (auto tk : ph::tile(kv_len)) {
    auto trip = [&] {
      auto s = ph::dot(qb, ph::transpose(at(k, tk)));
      if (causal) s = ph::where(tq.index().unsqueeze(-1) >= tk.index(), s, -INFINITY);
      auto new_mx = ph::maximum(mx, ph::amax(s, -1));
      auto p = ph::exp2(s - new_mx.unsqueeze(-1));
      auto p_sum = ph::sum(p, -1);  // right after p: the exp2 is computed inside the sum's loop
      auto alpha = ph::exp2(mx - new_mx);
      den = den * alpha + p_sum;
      // 16-bit inputs: p is rounded to their dtype for the second dot, which then runs on the
      // 16-bit micro-kernels (as flash kernels do; the error stays within the dtype's tolerance).
      auto pv = v.dtype() == DType::f32 ? ph::dot(p, at(v, tk)) : ph::dot(ph::cast(p, v.dtype()), at(v, tk));
      acc = acc * alpha.unsqueeze(-1) + pv;
      mx = new_mx;
    };
    // Causal: a key block wholly above the diagonal (its first key after the block's last query)
    // would add nothing (p = 0, alpha = 1): it is skipped, about half the work.
    if (causal)
      ph::when(tk.begin() < tq.end(), trip);
    else
      trip();
  }
  return acc / den.unsqueeze(-1);
}

// q [B,H,S,D] or [B*H,S,D]; k and v [B,H,Skv,D] or [B*H,Skv,D]; out like q.
template <bool kCausal>
ph::Tensor attention_body(ph::Tensor q, ph::Tensor k, ph::Tensor v, ph::Scalar scale) {
  const char* name = kCausal ? "causal_attention" : "attention";
  ph::expect_dtype(q, kFloat);
  ph::expect(q.rank() == 3 || q.rank() == 4,
             std::string(name) + ": q must be [B,H,S,D] or [B*H,S,D], got rank " + std::to_string(q.rank()));
  ph::expect(k.rank() == q.rank() && v.sizes() == k.sizes(),
             std::string(name) + ": k and v must have q's rank and one shape, got " + shape_to_string(k.sizes()) +
                 " and " + shape_to_string(v.sizes()));
  ph::expect(k.dtype() == q.dtype() && v.dtype() == q.dtype(), std::string(name) + ": q, k and v must share a dtype");
  Shape qs = q.sizes(), ks = k.sizes();
  int r = q.rank();
  for (int i = 0; i < r - 2; ++i)
    ph::expect(qs[i] == ks[i], std::string(name) + ": q is " + shape_to_string(qs) + " but k is " +
                                   shape_to_string(ks) + " (batch and heads must match)");
  ph::expect(qs[r - 1] == ks[r - 1], std::string(name) + ": q and k must have the same head dim D");
  ph::expect(!kCausal || qs[r - 2] == ks[r - 2], std::string(name) + ": q and k must have the same length S");
  const int64_t s = qs[r - 2], kv_len = ks[r - 2], d = qs[r - 1];
  auto out = ph::empty_like(q);
  if (r == 4) {
    for (auto [tb, th, tq] : ph::tile(ph::range(qs[0]).block(1), ph::range(qs[1]).block(1), s)) {
      auto at = [&](ph::Tensor t, const ph::Tile& rows) { return t(tb, th, rows, ph::all); };
      auto stat = [&](double fill) { return ph::full({tb, th, tq}, fill); };
      auto block = [&](int64_t n) { return ph::zeros({tb, th, tq, n}); };
      out(tb, th, tq, ph::all) = flash_rows(at, stat, block, q, k, v, scale, tq, kv_len, d, kCausal);
    }
  } else {
    for (auto [tb, tq] : ph::tile(ph::range(qs[0]).block(1), s)) {
      auto at = [&](ph::Tensor t, const ph::Tile& rows) { return t(tb, rows, ph::all); };
      auto stat = [&](double fill) { return ph::full({tb, tq}, fill); };
      auto block = [&](int64_t n) { return ph::zeros({tb, tq, n}); };
      out(tb, tq, ph::all) = flash_rows(at, stat, block, q, k, v, scale, tq, kv_len, d, kCausal);
    }
  }
  return out;
}

}  // namespace

Kernel<Tensor(Tensor, Tensor, Tensor, Scalar)> attention("attention", attention_body<false>);
Kernel<Tensor(Tensor, Tensor, Tensor, Scalar)> causal_attention("causal_attention", attention_body<true>);

}  // namespace parhelion::kernels

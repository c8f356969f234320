// The matmul family: a block dot product accumulated over K in a loop-carried Var, with
// whatever comes after it fused into the same kernel.
#include "kernels/kernels.h"

namespace parhelion::kernels {
namespace {
namespace ph = parhelion;
constexpr std::initializer_list<DType> kFloat = {DType::f32, DType::bf16, DType::f16};

// x [M,K] . y [K,N] -> [M,N] in x's dtype.
ph::Tensor matmul_body(ph::Tensor x, ph::Tensor y) {
  auto [m, k] = x.sizes<2>();
  auto [k2, n] = y.sizes<2>();
  ph::expect_dtype(x, kFloat);
  ph::expect(k == k2, "matmul: x is [" + std::to_string(m) + "," + std::to_string(k) + "] but y has " +
                          std::to_string(k2) + " rows");
  auto out = ph::empty({m, n}, x.dtype());
  for (auto [tm, tn] : ph::tile(m, n)) {
    ph::Var acc = ph::zeros({tm, tn});
    for (auto tk : ph::tile(k)) acc = acc + ph::dot(x[tm, tk], y[tk, tn]);
    out[tm, tn] = acc;
  }
  return out;
}

// Split-K matmul (Helion's matmul_split_k): x [M,K] . y [K,N] -> f32 [M,N], the reduction split
// over the grid as well as M and N, so that a small output still gives every thread work. Each
// grid step sums its split's blocks of K in an inner loop and adds the partial product into
// its output block atomically; the config chooses the split (its block size) and the cpu how
// the adds meet (atomic instructions or per-thread partial copies, the atomics knob).
ph::Tensor split_k_matmul_body(ph::Tensor x, ph::Tensor y) {
  auto [m, k] = x.sizes<2>();
  auto [k2, n] = y.sizes<2>();
  ph::expect_dtype(x, kFloat);
  ph::expect(k == k2, "split_k_matmul: x is [" + std::to_string(m) + "," + std::to_string(k) + "] but y has " +
                          std::to_string(k2) + " rows");
  auto out = ph::zeros({m, n});
  for (auto [tm, tn, ts] : ph::tile(m, n, k)) {
    ph::Var acc = ph::zeros({tm, tn});
    for (auto tk : ph::tile(ts)) acc = acc + ph::dot(x[tm, tk], y[tk, tn]);
    ph::atomic_add(out, {tm, tn}, acc);
  }
  return out;
}

// x [B,M,K] . y [B,K,N] -> [B,M,N].
ph::Tensor bmm_body(ph::Tensor x, ph::Tensor y) {
  auto [b, m, k] = x.sizes<3>();
  auto [b2, k2, n] = y.sizes<3>();
  ph::expect_dtype(x, kFloat);
  ph::expect(b == b2 && k == k2, "bmm: x is [B,M,K] and y must be [B,K,N]");
  auto out = ph::empty({b, m, n}, x.dtype());
  for (auto [tb, tm, tn] : ph::tile(b, m, n)) {
    ph::Var acc = ph::zeros({tb, tm, tn});
    for (auto tk : ph::tile(k)) acc = acc + ph::bmm(x[tb, tm, tk], y[tb, tk, tn]);
    out[tb, tm, tn] = acc;
  }
  return out;
}

// x [B,M,K] . y [K,N] -> [B,M,N]: y is shared by every batch.
ph::Tensor broadcast_matmul_body(ph::Tensor x, ph::Tensor y) {
  auto [b, m, k] = x.sizes<3>();
  auto [k2, n] = y.sizes<2>();
  ph::expect_dtype(x, kFloat);
  ph::expect(k == k2, "broadcast_matmul: x is [B,M,K] and y must be [K,N]");
  auto out = ph::empty({b, m, n}, x.dtype());
  for (auto [tb, tm, tn] : ph::tile(b, m, n)) {
    ph::Var acc = ph::zeros({tb, tm, tn});
    for (auto tk : ph::tile(k)) acc = acc + ph::dot(x[tb, tm, tk], y[tk, tn]);
    out[tb, tm, tn] = acc;
  }
  return out;
}

// relu(x . w + bias) + residual, the epilogue applied to the accumulator block before it is
// stored. (On the cpu backend the epilogue is one vectorized loop nest over the block; the
// "subtile" is its innermost vector loop.)
ph::Tensor epilogue_subtiling_body(ph::Tensor x, ph::Tensor w, ph::Tensor bias, ph::Tensor residual) {
  auto [m, k] = x.sizes<2>();
  auto [k2, n] = w.sizes<2>();
  ph::expect_dtype(x, kFloat);
  ph::expect(k == k2, "epilogue_subtiling: x is [M,K] and w must be [K,N]");
  ph::expect(bias.sizes() == Shape{n} && residual.sizes() == Shape{m, n},
             "epilogue_subtiling: bias must be [N] and residual [M,N]");
  auto out = ph::empty({m, n}, x.dtype());
  for (auto [tm, tn] : ph::tile(m, n)) {
    ph::Var acc = ph::zeros({tm, tn});
    for (auto tk : ph::tile(k)) acc = acc + ph::dot(x[tm, tk], w[tk, tn]);
    out[tm, tn] = ph::maximum(acc + bias[tn], 0.0f) + residual[tm, tn];
  }
  return out;
}

// layer_norm(x . w) over N, with gamma and beta: whole rows of the product stay in fast memory
// between the matmul and the normalization.
ph::Tensor matmul_layernorm_body(ph::Tensor x, ph::Tensor w, ph::Tensor gamma, ph::Tensor beta) {
  auto [m, k] = x.sizes<2>();
  auto [k2, n] = w.sizes<2>();
  ph::expect_dtype(x, kFloat);
  ph::expect(k == k2, "matmul_layernorm: x is [M,K] and w must be [K,N]");
  ph::expect(gamma.sizes() == Shape{n} && beta.sizes() == Shape{n}, "matmul_layernorm: gamma and beta must be [N]");
  auto out = ph::empty({m, n}, x.dtype());
  for (auto tm : ph::tile(m)) {
    ph::Var acc = ph::zeros({tm, n});
    for (auto tk : ph::tile(k)) acc = acc + ph::dot(x[tm, tk], w[tk, ph::all]);
    auto centered = acc - ph::mean(acc, -1, true);
    auto var = ph::mean(centered * centered, -1, true);
    out[tm, ph::all] = centered * ph::rsqrt(var + 1e-5f) * gamma[ph::all] + beta[ph::all];
  }
  return out;
}

}  // namespace

Kernel<Tensor(Tensor, Tensor)> matmul("matmul", matmul_body);
Kernel<Tensor(Tensor, Tensor)> split_k_matmul("split_k_matmul", split_k_matmul_body);
Kernel<Tensor(Tensor, Tensor)> bmm("bmm", bmm_body);
Kernel<Tensor(Tensor, Tensor)> broadcast_matmul("broadcast_matmul", broadcast_matmul_body);
Kernel<Tensor(Tensor, Tensor, Tensor, Tensor)> epilogue_subtiling("epilogue_subtiling", epilogue_subtiling_body);
Kernel<Tensor(Tensor, Tensor, Tensor, Tensor)> matmul_layernorm("matmul_layernorm", matmul_layernorm_body);

}  // namespace parhelion::kernels

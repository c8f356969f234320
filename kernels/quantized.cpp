// Quantized matmuls: fp8 operands with per-tensor scales, accumulated in f32.
#include "kernels/kernels.h"

namespace parhelion::kernels {
namespace {
namespace ph = parhelion;

// out = round_bf16(scale_a * scale_b * (a . b)) with a [M,K], b [K,N] in f8e4m3 or f8e5m2: a
// direct transcription of the per-tensor-scaled fp8 GEMM (torch._scaled_mm's definition). The
// fp8 blocks widen exactly (to bf16 for the cpu GEMM, to bf16 for the MXU), the dot accumulates
// in f32, and the scales apply once to the accumulator, before the store rounds to bf16.
ph::Tensor fp8_matmul_body(ph::Tensor a, ph::Tensor b, ph::Scalar scale_a, ph::Scalar scale_b) {
  auto [m, k] = a.sizes<2>();
  auto [k2, n] = b.sizes<2>();
  ph::expect_dtype(a, {DType::f8e4m3, DType::f8e5m2});
  ph::expect_dtype(b, {DType::f8e4m3, DType::f8e5m2});
  ph::expect(k == k2, "fp8_matmul: a is [" + std::to_string(m) + "," + std::to_string(k) + "] but b has " +
                          std::to_string(k2) + " rows");
  auto out = ph::empty({m, n}, DType::bf16);
  for (auto [tm, tn] : ph::tile(m, n)) {
    ph::Var acc = ph::zeros({tm, tn});
    for (auto tk : ph::tile(k)) acc = acc + ph::dot(a[tm, tk], b[tk, tn]);
    out[tm, tn] = acc * (scale_a * scale_b);
  }
  return out;
}

}  // namespace

Kernel<Tensor(Tensor, Tensor, Scalar, Scalar)> fp8_matmul("fp8_matmul", fp8_matmul_body);

}  // namespace parhelion::kernels

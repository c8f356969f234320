// Weight-only int4 matmul: activations in bf16 (or f32) times int4 weights packed two per byte
// along K, with one scale per group of K rows and output column (the layout of GPTQ/AWQ-style
// weight-only quantization, symmetric, without zero points).
//
//   a      [M, K]       bf16 or f32
//   w      [K/2, N]     i8: byte (r, n) holds weight (2r, n) in its low nibble and (2r + 1, n)
//                       in its high nibble, each a two's-complement int4 in [-8, 7]
//   scales [K/G, N]     bf16 or f32: weight (k, n) is nibble(k, n) * scales[k / G, n]
//   out    [M, N]       a's dtype: sum over k of a[m, k] * nibble(k, n) * scales[k / G, n],
//                       accumulated in f32
//
// Written as the algorithm reads: for each group of K, unpack its bytes into two nibble blocks,
// multiply them with the group's columns of `a` (the nibbles interleaved back into K order, or
// each against a's even or odd columns), and scale the group's partial product. Each nibble is exact in bf16, so the
// dots lose nothing to the unpacking; the per-group scale is applied in f32 after the group's dots.
#include "kernels/kernels.h"

namespace parhelion::kernels {
namespace {
namespace ph = parhelion;

ph::Tensor int4_matmul_body(ph::Tensor a, ph::Tensor w, ph::Tensor scales) {
  auto [m, k] = a.sizes<2>();
  auto [kp, n] = w.sizes<2>();
  auto [groups, n2] = scales.sizes<2>();
  ph::expect_dtype(a, {DType::f32, DType::bf16});
  ph::expect_dtype(w, {DType::i8});
  ph::expect_dtype(scales, {DType::f32, DType::bf16});
  ph::expect(k % 2 == 0 && kp == k / 2,
             "int4_matmul: w must be [K/2, N] (two int4 weights per byte along K); a has K = " + std::to_string(k) +
                 " and w has " + std::to_string(kp) + " rows");
  ph::expect(n2 == n, "int4_matmul: scales must have w's N = " + std::to_string(n) + " columns");
  ph::expect(groups > 0 && k % groups == 0 && (k / groups) % 2 == 0,
             "int4_matmul: scales must have K/G rows for an even group size G dividing K = " + std::to_string(k) +
                 ", got " + std::to_string(groups));
  const int64_t group = k / groups, pairs_per_group = group / 2;
  // A power-of-two group takes one dot of depth G against a's contiguous group, its weights put
  // back in K order by block views (nothing moves); another group size takes two dots of depth
  // G/2 against a's even and odd columns (triton pads a block dim to a power of two, so it cannot
  // merge [G/2, 2] into G there). The one dot reads a's group in place; the two read strided
  // columns, which the cpu copies into buffers first (in f32 before 1eb531c, which made both
  // GEMMs widen: bf16 [512,4096,4096,128] 43-47 ms against the one dot's 29-30.5).
  const bool one_dot = (group & (group - 1)) == 0;
  auto a_groups = a.view({m, groups, group});              // a[m, g*G + i] at [m, g, i]
  auto a_pairs = a.view({m, groups, pairs_per_group, 2});  // a[m, g*G + 2p + j] at [m, g, p, j]
  auto w_groups = w.view({groups, pairs_per_group, n});    // w[g*G/2 + p, n] at [g, p, n]
  auto out = ph::empty({m, n}, a.dtype());
  for (auto [tm, tn] : ph::tile(m, n)) {
    ph::Var acc = ph::zeros({tm, tn});
    for (auto g : ph::grid(groups)) {
      auto packed = w_groups[g, ph::all, tn];  // i64 [G/2, tn], sign-extended bytes
      auto low = ((packed & 15) ^ 8) - 8;      // weight 2p: the low nibble, sign-extended
      auto high = packed >> 4;                 // weight 2p + 1: the arithmetic shift sign-extends
      ph::Tensor part;
      if (one_dot) {
        // [G/2, tn, 2] -> [G/2, 2, tn] -> [G, tn]: rows 2p and 2p + 1 are byte row p's nibbles.
        auto weights = ph::reshape(ph::permute(ph::join(low, high), {0, 2, 1}), {group, tn});
        part = ph::dot(a_groups[tm, g, ph::all], ph::cast(weights, DType::bf16));
      } else {
        auto [a_even, a_odd] = ph::split(a_pairs[tm, g, ph::all, ph::all]);  // [tm, G/2] each
        part = ph::dot(a_even, ph::cast(low, DType::bf16)) + ph::dot(a_odd, ph::cast(high, DType::bf16));
      }
      acc = acc + part * scales[g, tn];
    }
    out[tm, tn] = acc;
  }
  return out;
}

}  // namespace

Kernel<Tensor(Tensor, Tensor, Tensor)> int4_matmul("int4_matmul", int4_matmul_body);

}  // namespace parhelion::kernels

// The kernel library: kernels written in the Parhelion language, as ready-to-call Kernels.
// Each has an independent reference in references.h and an entry in the registry
// (registry.h) that the CLI, the tests and the benchmarks share.
#pragma once

#include <parhelion/parhelion.h>

namespace parhelion::kernels {

// Elementwise (elementwise.cpp): any rank, operands of one shape.
extern Kernel<Tensor(Tensor, Tensor)> add;
extern Kernel<Tensor(Tensor)> exp;
extern Kernel<Tensor(Tensor, Tensor)> swiglu;  // silu(a) * b
extern Kernel<Tensor(Tensor, Tensor)> geglu;   // gelu(a) * b, tanh approximation

// Softmax over the last dimension (softmax.cpp).
extern Kernel<Tensor(Tensor)> softmax;           // [M,N], whole rows in one block
extern Kernel<Tensor(Tensor)> softmax_two_pass;  // [M,N], rows streamed in column blocks
extern Kernel<Tensor(Tensor)> batch_softmax;     // [B,M,N]

// Normalizations and statistics over the last dimension of [M,N] (norms.cpp).
extern Kernel<Tensor(Tensor, Tensor, Tensor, Scalar)> layer_norm;  // (x, weight, bias, eps)
extern Kernel<Tensor(Tensor, Tensor, Scalar)> rms_norm;            // (x, weight, eps)
extern Kernel<std::tuple<Tensor, Tensor>(Tensor)> welford;         // x -> (mean, var)
// layer_norm over long rows: statistics merged over streamed column blocks, then normalized.
extern Kernel<Tensor(Tensor, Tensor, Tensor, Scalar)> layer_norm_looped;  // (x, weight, bias, eps)
// (grad_out, x, weight, eps) -> (dx, dw) of rms_norm
extern Kernel<std::tuple<Tensor, Tensor>(Tensor, Tensor, Tensor, Scalar)> rms_norm_backward;
// dx, dw, db of layer_norm in one kernel, dw and db through per-block partials:
// (grad_out [M,N], x [M,N], mean [M] f32, rstd [M] f32, weight [N]) -> (dx, dw [N] f32, db [N] f32)
extern Kernel<std::tuple<Tensor, Tensor, Tensor>(Tensor, Tensor, Tensor, Tensor, Tensor)> layer_norm_backward;

// Rotary position embedding, interleaved pairs (rotary.cpp): (x [B,S,H,D], cos [S,D/2],
// sin [S,D/2]) -> x with pair j at position s rotated by (cos, sin)[s, j]; the backward applies
// the inverse rotation to the gradient (grad [B,S,H,D], cos, sin) -> dx.
extern Kernel<Tensor(Tensor, Tensor, Tensor)> rotary;
extern Kernel<Tensor(Tensor, Tensor, Tensor)> rotary_backward_kernel;

// Attention forward (attention.cpp): (q, k, v, scale) with q [B,H,S,D] or [B*H,S,D], k and v
// [..., Skv, D]; softmax(q k^T scale) v, flash style (online softmax over K/V blocks).
extern Kernel<Tensor(Tensor, Tensor, Tensor, Scalar)> attention;
extern Kernel<Tensor(Tensor, Tensor, Tensor, Scalar)> causal_attention;  // key j > query i masked

// The matmul family (matmul.cpp): f32 accumulation, outputs in the first input's dtype.
extern Kernel<Tensor(Tensor, Tensor)> matmul;            // [M,K] . [K,N]
extern Kernel<Tensor(Tensor, Tensor)> bmm;               // [B,M,K] . [B,K,N]
extern Kernel<Tensor(Tensor, Tensor)> broadcast_matmul;  // [B,M,K] . [K,N]
// relu(x . w + bias) + residual: (x [M,K], w [K,N], bias [N], residual [M,N])
extern Kernel<Tensor(Tensor, Tensor, Tensor, Tensor)> epilogue_subtiling;
// layer_norm(x . w) * gamma + beta over N, eps 1e-5: (x [M,K], w [K,N], gamma [N], beta [N])
extern Kernel<Tensor(Tensor, Tensor, Tensor, Tensor)> matmul_layernorm;
// [M,K] . [K,N] -> f32 [M,N], K split over the grid too, the splits' products added atomically
extern Kernel<Tensor(Tensor, Tensor)> split_k_matmul;

// Quantized matmuls (quantized.cpp): (a [M,K], b [K,N] in f8e4m3 or f8e5m2, scale_a, scale_b)
// -> bf16 [M,N] = scale_a * scale_b * (a . b), accumulated in f32.
extern Kernel<Tensor(Tensor, Tensor, Scalar, Scalar)> fp8_matmul;
// Weight-only int4 (int4_matmul.cpp): (a [M,K] bf16/f32, w [K/2,N] i8 holding two int4 weights
// per byte along K, low nibble first, scales [K/G,N]) -> a's dtype [M,N].
extern Kernel<Tensor(Tensor, Tensor, Tensor)> int4_matmul;

// Losses (losses.cpp).
extern Kernel<Tensor(Tensor, Tensor)> cross_entropy;  // (logits [N,V], labels [N]) -> loss [N]
// (logits [N,V], labels [N], ignore_index) -> loss [N], 0 where labels[n] == ignore_index (torch's
// F.cross_entropy(reduction="none", ignore_index=...)); every other label in [0, V).
extern Kernel<Tensor(Tensor, Tensor, Int)> cross_entropy_ignore_index;

// Gathers, scatters and masked access (indexing.cpp).
extern Kernel<Tensor(Tensor, Tensor)> embedding;  // (ids [N] (or rank 2, 3) i32/i64, weight [V,E]) -> [N,E]
extern Kernel<Tensor(Tensor, Tensor)> concat;     // (x [M,N1], y [M,N2]) -> [M,N1+N2]

// Segment reductions over sorted ids (segment.cpp). segment_sum: (x [N,D], ids [N] i32/i64
// sorted in [0, S), segments [S] (only its length is read)) -> out [S,D], out[s] = the sum of the
// rows with id s. segment_cumsum: (x [N,D], ids [N] sorted) -> out [N,D], out[i] = the sum of
// the rows j <= i with ids[j] == ids[i] (a running sum that restarts with each segment; ids not
// sorted give unspecified sums).
extern Kernel<Tensor(Tensor, Tensor, Tensor)> segment_sum;
extern Kernel<Tensor(Tensor, Tensor)> segment_cumsum;

// Dropout (dropout.cpp): (x [M,N], p, seed) -> x / (1 - p) where rand(seed, i) >= p for element i
// (row-major), else 0; the backward applies the same mask, recomputed from the seed, to grad_out.
extern Kernel<Tensor(Tensor, Scalar, Int)> dropout;
extern Kernel<Tensor(Tensor, Scalar, Int)> dropout_backward;

// Collectives (collectives.cpp): kernels on a one-axis mesh "x" of n devices, each argument one
// device's (call them with KernelBase::interpret_on; docs/distributed.md).
extern Kernel<Tensor(Tensor)> all_gather;       // x [m, k] -> [n m, k], device d's x at rows d m..
extern Kernel<Tensor(Tensor)> all_reduce;       // x [m, k] -> the sum over devices, one shot
extern Kernel<Tensor(Tensor)> all_reduce_ring;  // x [n c, k] -> the sum, reduce-scatter + all-gather
// Fused with compute: (a [m, k], b [k, n]) -> all_gather(a) . b [n m, n], each step's product
// overlapping the next shard's copy; (a [M, k], b [k, n], k sharded) -> rows chunk d of the sum of
// a . b over devices [M / n, n]; (x [m, h], bias [h], weight [h], eps) -> rms_norm(sum of x + bias).
extern Kernel<Tensor(Tensor, Tensor)> all_gather_matmul;
extern Kernel<Tensor(Tensor, Tensor)> matmul_reduce_scatter;
extern Kernel<Tensor(Tensor, Tensor, Tensor, Scalar)> all_reduce_bias_rms_norm;

// Jagged tensors (jagged.cpp).
// (values [T,M], offsets [B+1] i32/i64, non-decreasing in [0, T]) -> out [B,M]: the mean of the
// rows offsets[g]..offsets[g+1] of values (0 for a group without rows).
extern Kernel<Tensor(Tensor, Tensor)> jagged_mean;
// (x [M,K], w [G,K,N], offsets [G+1] i32/i64, non-decreasing in [0, M]) -> out [M,N]: rows
// offsets[g]..offsets[g+1] use w[g] (rows in no group: 0).
extern Kernel<Tensor(Tensor, Tensor, Tensor)> grouped_gemm;

// Mixture of experts (moe.cpp): (x [T,K], w [E,K,N], ids [S] i32/i64, gates [S], offsets [E+1]
// i32/i64) -> f32 [T,N]: the routed slots sorted by expert (expert e owns slots
// offsets[e]..offsets[e+1]; slot s routes token ids[s] with weight gates[s]);
// out[t] = the sum over t's slots of gates[s] * x[t] . w[e].
extern Kernel<Tensor(Tensor, Tensor, Tensor, Tensor, Tensor)> moe_matmul;

}  // namespace parhelion::kernels

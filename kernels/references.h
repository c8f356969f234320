// Naive reference implementations of the kernel library, used to check compiled kernels.
//
// Plain loops, computed in double. Inputs may be any floating dtype (f32/bf16/f16) and must be
// contiguous row-major; they are read through Array::get, which widens to double. Results are new
// contiguous f32 Arrays. Shape or dtype mismatches throw std::invalid_argument.
#pragma once

#include <utility>
#include <vector>

#include "parhelion/array.h"

namespace parhelion::ref {

// y = x + y, elementwise; same shape.
Array add(const Array& x, const Array& y);
// y = e^x, elementwise.
Array exp(const Array& x);
// y[..., j] = e^(x[..., j] - max) / sum_k e^(x[..., k] - max), over the last dim; rank >= 1.
Array softmax(const Array& x);
// y[i, j] = (x[i, j] - mean_i) / sqrt(var_i + eps) * w[j] + b[j]; x [M,N], w,b [N], biased var.
Array layer_norm(const Array& x, const Array& w, const Array& b, double eps);
// y[i, j] = x[i, j] * rstd_i * w[j], rstd_i = 1 / sqrt(mean_j x[i, j]^2 + eps); x [M,N], w [N].
Array rms_norm(const Array& x, const Array& w, double eps);
// Rotary embedding of x [B,S,H,D] by cos, sin [S,D/2] on interleaved pairs (2j, 2j+1); inverse:
// the opposite rotation (the backward of the forward, applied to a gradient).
Array rotary(const Array& x, const Array& cos, const Array& sin, bool inverse);
// Gradients of rms_norm given grad_out = dL/dy [M,N]; returns (dx [M,N], dw [N]).
std::pair<Array, Array> rms_norm_backward(const Array& grad_out, const Array& x, const Array& w, double eps);
// The gradients of layer_norm given the forward's row statistics (x_hat = (x - mean) * rstd):
// dx, dw = sum_i grad_out x_hat, db = sum_i grad_out (all f32).
std::vector<Array> layer_norm_backward(const Array& grad_out, const Array& x, const Array& mean, const Array& rstd,
                                       const Array& w);
// The forward's row statistics of x [M,N] (biased variance): mean [M] and rstd = 1/sqrt(var + eps), f32.
std::pair<Array, Array> layer_norm_stats(const Array& x, double eps);
// y = silu(a) * b, silu(a) = a / (1 + e^-a); same shape.
Array swiglu(const Array& a, const Array& b);
// y = gelu(a) * b, gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); same shape.
Array geglu(const Array& a, const Array& b);
// loss[n] = logsumexp(logits[n, :]) - logits[n, labels[n]]; logits [N,V] float, labels [N] int.
Array cross_entropy(const Array& logits, const Array& labels);
// out = x . y for x [..., M, K] and y [..., K, N] (y may be 2-D: shared across x's batch).
Array matmul(const Array& x, const Array& y);
// relu(x . w + bias) + residual.
Array epilogue_subtiling(const Array& x, const Array& w, const Array& bias, const Array& residual);
// layer_norm over the rows of x . w (eps 1e-5, biased variance), * gamma + beta.
Array matmul_layernorm(const Array& x, const Array& w, const Array& gamma, const Array& beta);
// scale_a * scale_b * (a . b) in double from the fp8 values, rounded once to bf16.
Array fp8_matmul(const Array& a, const Array& b, double scale_a, double scale_b);
// a [M,K] . W where W[k, n] = int4(k, n) * scales[k / G, n], G = K / scales.dim(0); the int4s are
// packed two per byte of w [K/2, N] (i8), weight 2r in the low nibble of row r, two's complement.
Array int4_matmul(const Array& a, const Array& w, const Array& scales);
// softmax(q . k^T * scale [+ causal mask: key j > query i gets -inf]) . v over the last two
// dims; q [..., S, D], k and v [..., Skv, D] with the same leading dims.
Array attention(const Array& q, const Array& k, const Array& v, double scale, bool causal);
// Per-row (mean [M], population variance [M]) of x [M,N], two-pass in double.
std::pair<Array, Array> welford(const Array& x);
// out[n, :] = weight[ids[n], :] with ids (any rank, integer) flattened row-major; weight [V, E].
// Cross entropy per row, 0 where labels[n] == ignore_index.
Array cross_entropy_ignore_index(const Array& logits, const Array& labels, int64_t ignore_index);
// Dropout of x [M, N]: x / (1 - p) where the Philox-4x32-10 uniform of (seed, element index) is
// >= p, else 0 (its own Philox, written from the Random123 definition).
Array dropout(const Array& x, double p, int64_t seed);
// The mean of the rows offsets[g]..offsets[g+1] of values [T, M], per group (0 for no rows).
Array jagged_mean(const Array& values, const Array& offsets);
// out[t] = sum over the slots s routing token t (ids[s] == t, s in expert e's offsets range) of
// gates[s] * x[t] . w[e], f32 [T,N].
Array moe_matmul(const Array& x, const Array& w, const Array& ids, const Array& gates, const Array& offsets);
Array embedding(const Array& ids, const Array& weight);
// out = [x | y] along the last dim: x [M, N1], y [M, N2] -> [M, N1 + N2].
Array concat(const Array& x, const Array& y);
// out[r, :] = x[r, :] . w[g] for offsets[g] <= r < offsets[g+1]; rows in no group are 0.
// x [M, K], w [G, K, N], offsets [G + 1] integer, non-decreasing, within [0, M].
Array grouped_gemm(const Array& x, const Array& w, const Array& offsets);
// out[s, :] = sum of x[i, :] over the rows i with ids[i] == s, for s in [0, num_segments): x [N, D],
// ids [N] integer in [0, num_segments) (any order here); out f32 [num_segments, D].
Array segment_sum(const Array& x, const Array& ids, int64_t num_segments);
// out[i, :] = sum of x[j, :] over the rows j <= i of i's run of equal ids (the sum restarts where
// ids[i] != ids[i - 1]): x [N, D], ids [N] integer; out f32 [N, D].
Array segment_cumsum(const Array& x, const Array& ids);

// Collectives, over the shards of every device (element d: device d's): the rows of every shard
// in device order (all-gather), and their elementwise sum (all-reduce); shards [m, k].
Array all_gather(const std::vector<Array>& shards);
Array all_reduce(const std::vector<Array>& shards);

}  // namespace parhelion::ref

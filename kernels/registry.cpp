#include "kernels/registry.h"

#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"
#include "kernels/references.h"
#include "tune/accuracy.h"

namespace parhelion::kernels {
namespace {

// While set (make_specs), inputs are placeholders (address space, no memory): tracing and
// emitting need only shapes, dtypes and strides, and a TPU-sized input may not fit in host memory.
thread_local bool g_shapes_only = false;

Array input_array(Shape shape, DType dt, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  if (g_shapes_only) return Array::placeholder(std::move(shape), dt);
  return Array::random(std::move(shape), dt, seed, lo, hi);
}

const std::vector<DType> kFloat = {DType::f32, DType::bf16, DType::f16};

void need_rank(const std::string& name, const Shape& s, int lo, int hi, const std::string& help) {
  if (static_cast<int>(s.size()) < lo || static_cast<int>(s.size()) > hi)
    throw UserError(name + " takes a shape " + help + ", got " + shape_to_string(s));
  for (int64_t d : s)
    if (d <= 0) throw UserError(name + ": every dimension must be positive, got " + shape_to_string(s));
}

double numel(const Shape& s) { return static_cast<double>(shape_numel(s)); }

Inputs unary_inputs(const Shape& s, DType dt, uint64_t seed, double lo = -1, double hi = 1) {
  return Inputs{{input_array(s, dt, seed, lo, hi)}, {}};
}
Inputs binary_inputs(const Shape& s, DType dt, uint64_t seed) {
  return Inputs{{input_array(s, dt, seed, -2, 2), input_array(s, dt, seed + 1, -2, 2)}, {}};
}

// Group offsets for grouped_gemm: G uneven groups over M rows (seeded; a group may be empty).
Array group_offsets(int64_t m, int64_t g, uint64_t seed) {
  Array w = Array::random({g}, DType::f32, seed, 0.25, 1.0);
  double total = 0;
  for (int64_t i = 0; i < g; ++i) total += w.get(i);
  Array off = Array::empty({g + 1}, DType::i64);
  double acc = 0;
  off.set(0, 0);
  for (int64_t i = 0; i < g; ++i) {
    acc += w.get(i);
    int64_t next = i + 1 == g ? m : std::min<int64_t>(m, static_cast<int64_t>(acc / total * static_cast<double>(m)));
    off.set(i + 1, static_cast<double>(next));
  }
  return off;
}

// Sorted segment ids for segment_sum and segment_cumsum: N rows over S segments in runs of random
// lengths (mean about 2 N / S rows, so some segments are empty and some long; for half the
// seeds the first one too), seeded.
Array sorted_segment_ids(int64_t n, int64_t s, uint64_t seed) {
  Array steps = Array::random({n}, DType::f32, seed, 0.0, 1.0);
  Array ids = Array::empty({n}, DType::i64);
  const double p = std::min(1.0, static_cast<double>(s) / static_cast<double>(2 * n));
  int64_t id = steps.get(0) < 0.5 ? 1 : 0;
  for (int64_t i = 0; i < n; ++i) {
    // A new segment starts with probability p; it may skip an id (an empty segment).
    if (i > 0 && steps.get(i) < p) id += steps.get(i) < p / 4 ? 2 : 1;
    ids.set(i, static_cast<double>(std::min(id, s - 1)));
  }
  return ids;
}

// x [N, D] and sorted ids [N] over S segments, for shape N,D,S; then `segments` [S] where the
// kernel takes one (only its length is read).
Inputs segment_inputs(const std::string& name, const Shape& s, DType dt, uint64_t seed, bool with_segments) {
  need_rank(name, s, 3, 3, "N,D,S");
  Array ids = g_shapes_only ? Array::placeholder({s[0]}, DType::i64) : sorted_segment_ids(s[0], s[2], seed + 1);
  Inputs in{{input_array({s[0], s[1]}, dt, seed), ids}, {}};
  if (with_segments) in.tensors.push_back(Array::zeros({s[2]}, DType::i32));
  return in;
}

// Segment reductions over sorted ids (segment.cpp).
void segment_entries(std::vector<KernelEntry>& r) {
  KernelEntry e;
  e.name = "segment_sum";
  e.summary = "out [S,D]: sums of the rows of x [N,D] by sorted segment ids [N], one jagged loop a segment";
  e.shape_help = "N,D,S";
  e.min_rank = e.max_rank = 3;
  e.dtypes = kFloat;
  e.default_shape = {131072, 256, 2048};
  e.kernel = &segment_sum;
  e.make_inputs = [](const Shape& s, DType dt, uint64_t seed) {
    return segment_inputs("segment_sum", s, dt, seed, true);
  };
  e.reference = [](const Inputs& in) {
    return std::vector<Array>{ref::segment_sum(in.tensors[0], in.tensors[1], in.tensors[2].dim(0))};
  };
  e.bytes = [](const Shape& s, DType dt) {
    return (1.0 * s[0] * s[1] + 1.0 * s[2] * s[1]) * dtype_size(dt) + 8.0 * s[0];
  };
  e.flops = [](const Shape& s) { return 1.0 * s[0] * s[1]; };
  // A segment's sum adds up to N rows (the longest run): the error grows with its length.
  e.tolerance_scale = [](const Shape& s) { return std::max(1.0, std::sqrt(static_cast<double>(s[0])) / 8); };
  r.push_back(e);

  // The same shapes, ids and tolerance (a running sum adds up to a segment's length of rows).
  KernelEntry c = e;
  c.name = "segment_cumsum";
  c.summary = "out [N,D]: running sums of the rows of x [N,D] within each segment of sorted ids [N], by a pair scan";
  c.kernel = &segment_cumsum;
  c.make_inputs = [](const Shape& s, DType dt, uint64_t seed) {
    return segment_inputs("segment_cumsum", s, dt, seed, false);  // (S: how many segments the ids have)
  };
  c.reference = [](const Inputs& in) { return std::vector<Array>{ref::segment_cumsum(in.tensors[0], in.tensors[1])}; };
  c.bytes = [](const Shape& s, DType dt) { return 2.0 * s[0] * s[1] * dtype_size(dt) + 8.0 * s[0]; };
  r.push_back(c);
}

// Row offsets of `groups` jagged groups of `mean_rows` rows on average: lengths drawn uniformly
// from 0..2 x mean_rows, and the middle group empty (from three groups on), so that every shape
// has groups without rows.
Array jagged_offsets(int64_t groups, int64_t mean_rows, uint64_t seed) {
  Array u = Array::random({std::max<int64_t>(1, groups)}, DType::f32, seed, 0.0, 1.0);
  Array off = Array::empty({groups + 1}, DType::i64);
  int64_t at = 0;
  off.set(0, 0);
  for (int64_t g = 0; g < groups; ++g) {
    int64_t len = static_cast<int64_t>(u.get(g) * static_cast<double>(2 * mean_rows + 1));
    if (groups >= 3 && g == groups / 2) len = 0;
    at += len;
    off.set(g + 1, static_cast<double>(at));
  }
  return off;
}

// Top-k routing of T tokens over E experts, as a router's output sorted by expert: each token's
// k distinct experts drawn with a skew toward low-numbered ones (uneven loads; from four
// experts on, expert E / 2 gets no token), gate weights in (0, 1) summing to 1 per token.
// Returns {ids [T k] i64, gates [T k] in `dt`, offsets [E + 1] i64}.
std::vector<Array> moe_routing(int64_t t, int64_t e, int64_t k, DType dt, uint64_t seed) {
  if (g_shapes_only)
    return {Array::placeholder({t * k}, DType::i64), Array::placeholder({t * k}, dt),
            Array::placeholder({e + 1}, DType::i64)};
  const bool skip_middle = e >= 4;
  if (k > e - (skip_middle ? 1 : 0)) throw UserError("moe_matmul: top-k " + std::to_string(k) + " exceeds the experts");
  Array u = Array::random({t * k * 4 + 1}, DType::f32, seed, 0.0, 1.0);
  std::vector<std::vector<std::pair<int64_t, double>>> by_expert(static_cast<size_t>(e));
  int64_t draw = 0;
  for (int64_t tok = 0; tok < t; ++tok) {
    std::vector<int64_t> chosen;
    std::vector<double> w;
    while (static_cast<int64_t>(chosen.size()) < k) {
      const double r = u.get(draw++ % u.numel());
      auto ex = std::min<int64_t>(e - 1, static_cast<int64_t>(r * r * static_cast<double>(e)));
      // (taken or skipped: the next free expert; k fits, so one is free)
      while ((skip_middle && ex == e / 2) || std::find(chosen.begin(), chosen.end(), ex) != chosen.end())
        ex = (ex + 1) % e;
      chosen.push_back(ex);
      w.push_back(0.25 + u.get(draw++ % u.numel()));
    }
    double sum = 0;
    for (double x : w) sum += x;
    for (size_t i = 0; i < chosen.size(); ++i) by_expert[static_cast<size_t>(chosen[i])].push_back({tok, w[i] / sum});
  }
  Array ids = Array::empty({t * k}, DType::i64), gates = Array::empty({t * k}, dt),
        off = Array::empty({e + 1}, DType::i64);
  int64_t s = 0;
  off.set(0, 0);
  for (int64_t ex = 0; ex < e; ++ex) {
    for (const auto& [tok, g] : by_expert[static_cast<size_t>(ex)]) {
      ids.set(s, static_cast<double>(tok));
      gates.set(s++, g);
    }
    off.set(ex + 1, static_cast<double>(s));
  }
  return {ids, gates, off};
}

// The gather/scatter/masked-access kernels (indexing.cpp).
void indexing_entries(std::vector<KernelEntry>& r) {
  {
    KernelEntry e;
    e.name = "embedding";
    e.summary = "out [N,E] = weight [V,E] rows gathered by ids [N]";
    e.shape_help = "N,V,E";
    e.min_rank = e.max_rank = 3;
    e.dtypes = kFloat;
    e.default_shape = {16384, 32000, 1024};
    e.kernel = &embedding;
    e.make_inputs = [](const Shape& s, DType dt, uint64_t seed) {
      need_rank("embedding", s, 3, 3, "N,V,E");
      Array ids = input_array({s[0]}, DType::i64, seed + 1, 0, static_cast<double>(s[1]));
      return Inputs{{ids, input_array({s[1], s[2]}, dt, seed)}, {}};
    };
    e.reference = [](const Inputs& in) { return std::vector<Array>{ref::embedding(in.tensors[0], in.tensors[1])}; };
    e.bytes = [](const Shape& s, DType dt) { return 2.0 * s[0] * s[2] * dtype_size(dt) + 8.0 * s[0]; };
    e.flops = [](const Shape&) { return 0.0; };
    r.push_back(e);
  }
  {
    KernelEntry e;
    e.name = "concat";
    e.summary = "[x | y] along the last dim: x [M,N1], y [M,N2], one launch of masked loads";
    e.shape_help = "M,N1,N2";
    e.min_rank = e.max_rank = 3;
    e.dtypes = kFloat;
    e.default_shape = {4096, 2048, 2048};
    e.kernel = &concat;
    e.make_inputs = [](const Shape& s, DType dt, uint64_t seed) {
      need_rank("concat", s, 3, 3, "M,N1,N2");
      return Inputs{{input_array({s[0], s[1]}, dt, seed), input_array({s[0], s[2]}, dt, seed + 1)}, {}};
    };
    e.reference = [](const Inputs& in) { return std::vector<Array>{ref::concat(in.tensors[0], in.tensors[1])}; };
    e.bytes = [](const Shape& s, DType dt) { return 2.0 * s[0] * (s[1] + s[2]) * dtype_size(dt); };
    e.flops = [](const Shape&) { return 0.0; };
    r.push_back(e);
  }
  {
    KernelEntry e;
    e.name = "grouped_gemm";
    e.summary = "out [M,N]: rows offsets[g]..offsets[g+1] of x [M,K] times w[g] [K,N], G groups";
    e.shape_help = "M,K,N,G";
    e.min_rank = e.max_rank = 4;
    e.dtypes = kFloat;
    e.default_shape = {4096, 1024, 1024, 8};
    e.kernel = &grouped_gemm;
    e.make_inputs = [](const Shape& s, DType dt, uint64_t seed) {
      need_rank("grouped_gemm", s, 4, 4, "M,K,N,G");
      Array off = group_offsets(s[0], s[3], seed + 2);
      return Inputs{{input_array({s[0], s[1]}, dt, seed), input_array({s[3], s[1], s[2]}, dt, seed + 1), off}, {}};
    };
    e.reference = [](const Inputs& in) {
      return std::vector<Array>{ref::grouped_gemm(in.tensors[0], in.tensors[1], in.tensors[2])};
    };
    e.bytes = [](const Shape& s, DType dt) {
      return (1.0 * s[0] * s[1] + 1.0 * s[3] * s[1] * s[2] + 1.0 * s[0] * s[2]) * dtype_size(dt);
    };
    e.flops = [](const Shape& s) { return 2.0 * s[0] * s[1] * s[2]; };
    e.tolerance_scale = [](const Shape& s) { return std::max(1.0, std::sqrt(static_cast<double>(s[1])) / 8); };
    r.push_back(e);
  }
  {
    KernelEntry e;
    e.name = "jagged_mean";
    e.summary = "out [B,M]: the mean of the rows offsets[g]..offsets[g+1] of values [T,M], L rows a group on average";
    e.shape_help = "B,M,L";
    e.min_rank = e.max_rank = 3;
    e.dtypes = kFloat;
    e.default_shape = {512, 512, 64};
    e.kernel = &jagged_mean;
    e.make_inputs = [](const Shape& s, DType dt, uint64_t seed) {
      need_rank("jagged_mean", s, 3, 3, "B,M,L");
      Array off = jagged_offsets(s[0], s[2], seed + 1);
      const int64_t rows = std::max<int64_t>(1, static_cast<int64_t>(off.get(s[0])));
      return Inputs{{input_array({rows, s[1]}, dt, seed), off}, {}};
    };
    e.reference = [](const Inputs& in) { return std::vector<Array>{ref::jagged_mean(in.tensors[0], in.tensors[1])}; };
    // (the rows: B x L on average)
    e.bytes = [](const Shape& s, DType dt) { return (1.0 * s[0] * s[2] * s[1] + 1.0 * s[0] * s[1]) * dtype_size(dt); };
    e.flops = [](const Shape& s) { return 1.0 * s[0] * s[2] * s[1]; };
    r.push_back(e);
  }
  {
    KernelEntry e;
    e.name = "moe_matmul";
    e.summary = "out [T,N] f32: each token's top-k experts' x [T,K] . w[e] [K,N], weighted by its gates, summed";
    e.shape_help = "T,K,N,E,TOPK";
    e.min_rank = e.max_rank = 5;
    e.dtypes = kFloat;
    e.default_shape = {2048, 1024, 1024, 8, 2};
    e.kernel = &moe_matmul;
    e.make_inputs = [](const Shape& s, DType dt, uint64_t seed) {
      need_rank("moe_matmul", s, 5, 5, "T,K,N,E,TOPK");
      std::vector<Array> routing = moe_routing(s[0], s[3], s[4], dt, seed + 2);
      return Inputs{{input_array({s[0], s[1]}, dt, seed), input_array({s[3], s[1], s[2]}, dt, seed + 1), routing[0],
                     routing[1], routing[2]},
                    {}};
    };
    e.reference = [](const Inputs& in) {
      return std::vector<Array>{
          ref::moe_matmul(in.tensors[0], in.tensors[1], in.tensors[2], in.tensors[3], in.tensors[4])};
    };
    e.bytes = [](const Shape& s, DType dt) {
      return (1.0 * s[0] * s[4] * s[1] + 1.0 * s[3] * s[1] * s[2]) * dtype_size(dt) + 4.0 * s[0] * s[2];
    };
    e.flops = [](const Shape& s) { return 2.0 * s[0] * s[4] * s[1] * s[2]; };
    e.tolerance_scale = [](const Shape& s) { return std::max(1.0, std::sqrt(static_cast<double>(s[1])) / 8); };
    r.push_back(e);
  }
}

std::vector<KernelEntry> build() {
  std::vector<KernelEntry> r;
  auto elementwise = [&](const std::string& name, const std::string& summary, KernelBase& k, int inputs,
                         std::function<Array(const Inputs&)> ref, double flops_per_elem) {
    KernelEntry e;
    e.name = name;
    e.summary = summary;
    e.shape_help = "any rank, e.g. 4096,4096";
    e.dtypes = kFloat;
    e.default_shape = {4096, 4096};
    e.kernel = &k;
    e.make_inputs = [name, inputs](const Shape& s, DType dt, uint64_t seed) {
      need_rank(name, s, 1, 8, "of any rank");
      return inputs == 1 ? unary_inputs(s, dt, seed) : binary_inputs(s, dt, seed);
    };
    e.reference = [ref](const Inputs& in) { return std::vector<Array>{ref(in)}; };
    e.bytes = [inputs](const Shape& s, DType dt) { return numel(s) * dtype_size(dt) * (inputs + 1); };
    e.flops = [flops_per_elem](const Shape& s) { return numel(s) * flops_per_elem; };
    r.push_back(e);
  };
  elementwise(
      "add", "out = x + y", add, 2, [](const Inputs& in) { return ref::add(in.tensors[0], in.tensors[1]); }, 1);
  elementwise(
      "exp", "out = exp(x)", exp, 1, [](const Inputs& in) { return ref::exp(in.tensors[0]); }, 1);
  elementwise(
      "swiglu", "out = silu(a) * b", swiglu, 2,
      [](const Inputs& in) { return ref::swiglu(in.tensors[0], in.tensors[1]); }, 4);
  elementwise(
      "geglu", "out = gelu(a) * b (tanh approximation)", geglu, 2,
      [](const Inputs& in) { return ref::geglu(in.tensors[0], in.tensors[1]); }, 8);

  auto rowwise = [&](const std::string& name, const std::string& summary, KernelBase& k, int rank,
                     const std::string& help, Shape def) {
    KernelEntry e;
    e.name = name;
    e.summary = summary;
    e.shape_help = help;
    e.min_rank = e.max_rank = rank;
    e.dtypes = kFloat;
    e.default_shape = def;
    e.kernel = &k;
    e.bytes = [](const Shape& s, DType dt) { return numel(s) * dtype_size(dt) * 2; };
    e.flops = [](const Shape& s) { return numel(s) * 5; };
    return e;
  };
  for (auto [name, kern, rank] :
       {std::tuple{"softmax", &softmax, 2}, std::tuple{"softmax_two_pass", &softmax_two_pass, 2},
        std::tuple{"batch_softmax", &batch_softmax, 3}}) {
    std::string help = rank == 2 ? "M,N" : "B,M,N";
    KernelEntry e = rowwise(name, "softmax over the last dimension", *kern, rank, help,
                            rank == 2 ? Shape{8192, 2048} : Shape{16, 512, 2048});
    std::string n = name;
    e.make_inputs = [n, rank, help](const Shape& s, DType dt, uint64_t seed) {
      need_rank(n, s, rank, rank, help);
      return unary_inputs(s, dt, seed, -4, 4);
    };
    e.reference = [](const Inputs& in) { return std::vector<Array>{ref::softmax(in.tensors[0])}; };
    r.push_back(e);
  }
  r.back().summary = "softmax over the last dimension of [B,M,N]";
  r[r.size() - 2].summary = "softmax over long rows: two passes over column blocks (online max/sum)";

  for (bool backward : {false, true}) {
    KernelEntry e;
    e.name = backward ? "rotary_backward" : "rotary";
    e.summary = backward ? "dx of rotary from grad [B,S,H,D], cos, sin [S,D/2] (the inverse rotation)"
                         : "rotary embedding of x [B,S,H,D] by cos, sin [S,D/2] on interleaved pairs";
    e.shape_help = "B,S,H,D (D even)";
    e.min_rank = e.max_rank = 4;
    e.dtypes = {DType::f32, DType::bf16};
    e.default_shape = {4, 2048, 16, 128};
    e.kernel = backward ? &rotary_backward_kernel : &rotary;
    const std::string name = e.name;
    e.make_inputs = [name](const Shape& s, DType dt, uint64_t seed) {
      need_rank(name, s, 4, 4, "B,S,H,D");
      if (s[3] % 2 != 0) throw UserError(name + ": D must be even, got " + shape_to_string(s));
      return Inputs{{input_array(s, dt, seed, -2, 2), input_array({s[1], s[3] / 2}, dt, seed + 1, -1, 1),
                     input_array({s[1], s[3] / 2}, dt, seed + 2, -1, 1)},
                    {}};
    };
    e.reference = [backward](const Inputs& in) {
      return std::vector<Array>{ref::rotary(in.tensors[0], in.tensors[1], in.tensors[2], backward)};
    };
    e.bytes = [](const Shape& s, DType dt) { return (2 * numel(s) + numel(s) / s[0] / s[2]) * dtype_size(dt); };
    e.flops = [](const Shape& s) { return numel(s) * 3; };
    r.push_back(e);
  }
  {
    KernelEntry e = rowwise("layer_norm", "(x - mean) / sqrt(var + eps) * w + b over rows of [M,N]", layer_norm, 2,
                            "M,N", {8192, 2048});
    e.make_inputs = [](const Shape& s, DType dt, uint64_t seed) {
      need_rank("layer_norm", s, 2, 2, "M,N");
      return Inputs{{input_array(s, dt, seed, -2, 2), input_array({s[1]}, dt, seed + 1, 0.5, 1.5),
                     input_array({s[1]}, dt, seed + 2, -0.5, 0.5)},
                    {1e-5}};
    };
    e.reference = [](const Inputs& in) {
      return std::vector<Array>{ref::layer_norm(in.tensors[0], in.tensors[1], in.tensors[2], in.scalars[0])};
    };
    r.push_back(e);
  }
  {
    KernelEntry e =
        rowwise("rms_norm", "x * rsqrt(mean(x^2) + eps) * w over rows of [M,N]", rms_norm, 2, "M,N", {8192, 2048});
    e.make_inputs = [](const Shape& s, DType dt, uint64_t seed) {
      need_rank("rms_norm", s, 2, 2, "M,N");
      return Inputs{{input_array(s, dt, seed, -2, 2), input_array({s[1]}, dt, seed + 1, 0.5, 1.5)}, {1e-5}};
    };
    e.reference = [](const Inputs& in) {
      return std::vector<Array>{ref::rms_norm(in.tensors[0], in.tensors[1], in.scalars[0])};
    };
    r.push_back(e);
  }
  {
    KernelEntry e = rowwise("welford", "row mean and variance of [M,N], streamed (Chan/Welford merge)", welford, 2,
                            "M,N", {8192, 2048});
    e.make_inputs = [](const Shape& s, DType dt, uint64_t seed) {
      need_rank("welford", s, 2, 2, "M,N");
      return unary_inputs(s, dt, seed, 3, 5);  // an offset mean: where naive formulas cancel
    };
    e.reference = [](const Inputs& in) {
      auto [m, v] = ref::welford(in.tensors[0]);
      return std::vector<Array>{m, v};
    };
    e.bytes = [](const Shape& s, DType dt) { return numel(s) * dtype_size(dt) + s[0] * 8.0; };
    r.push_back(e);
  }
  {
    KernelEntry e = rowwise("cross_entropy", "per-row loss of logits [N,V] with integer labels [N]", cross_entropy, 2,
                            "N,V", {4096, 32000});
    e.make_inputs = [](const Shape& s, DType dt, uint64_t seed) {
      need_rank("cross_entropy", s, 2, 2, "N,V");
      Array labels = input_array({s[0]}, DType::i64, seed + 1, 0, static_cast<double>(s[1]));
      return Inputs{{input_array(s, dt, seed, -4, 4), labels}, {}};
    };
    e.reference = [](const Inputs& in) { return std::vector<Array>{ref::cross_entropy(in.tensors[0], in.tensors[1])}; };
    e.bytes = [](const Shape& s, DType dt) { return numel(s) * dtype_size(dt) + s[0] * 12.0; };
    r.push_back(e);
  }
  {
    KernelEntry e = rowwise("cross_entropy_ignore_index",
                            "per-row loss of logits [N,V], 0 for rows labelled ignore_index (-100; a quarter of them)",
                            cross_entropy_ignore_index, 2, "N,V", {4096, 32000});
    e.make_inputs = [](const Shape& s, DType dt, uint64_t seed) {
      need_rank("cross_entropy_ignore_index", s, 2, 2, "N,V");
      // (real labels even for shapes-only inputs: which rows are ignored is set per element)
      Array labels = Array::random({s[0]}, DType::i64, seed + 1, 0, static_cast<double>(s[1]));
      Array pick = Array::random({s[0]}, DType::f32, seed + 2, 0, 1);
      for (int64_t i = 0; i < s[0]; ++i)
        if (pick.get(i) < 0.25 || (s[0] >= 2 && i == 1)) labels.set(i, -100);  // (row 1 always)
      return Inputs{{input_array(s, dt, seed, -4, 4), labels}, {-100}};
    };
    e.reference = [](const Inputs& in) {
      return std::vector<Array>{
          ref::cross_entropy_ignore_index(in.tensors[0], in.tensors[1], static_cast<int64_t>(in.scalars[0]))};
    };
    e.bytes = [](const Shape& s, DType dt) { return numel(s) * dtype_size(dt) + s[0] * 12.0; };
    r.push_back(e);
  }
  for (bool backward : {false, true}) {
    KernelEntry e;
    e.name = backward ? "dropout_backward" : "dropout";
    e.summary = backward ? "grad [M,N] through dropout's mask, recomputed from the seed (p = 0.25)"
                         : "x [M,N] / (1 - p) where rand(seed, i) >= p, else 0 (p = 0.25, Philox)";
    e.shape_help = "M,N";
    e.min_rank = e.max_rank = 2;
    e.dtypes = kFloat;
    e.default_shape = {8192, 4096};
    e.kernel = backward ? &dropout_backward : &dropout;
    const std::string name = e.name;
    e.make_inputs = [name](const Shape& s, DType dt, uint64_t seed) {
      need_rank(name, s, 2, 2, "M,N");
      return Inputs{{input_array(s, dt, seed)}, {0.25, static_cast<double>(1234 + seed)}};
    };
    e.reference = [](const Inputs& in) {
      return std::vector<Array>{ref::dropout(in.tensors[0], in.scalars[0], static_cast<int64_t>(in.scalars[1]))};
    };
    e.bytes = [](const Shape& s, DType dt) { return numel(s) * dtype_size(dt) * 2; };
    e.flops = [](const Shape& s) { return numel(s) * 40.0; };  // ten Philox rounds
    e.baseline_has_own_stream = true;
    r.push_back(e);
  }
  {
    KernelEntry e = rowwise("layer_norm_looped", "layer_norm over long rows: column blocks streamed twice (Welford)",
                            layer_norm_looped, 2, "M,N", {1024, 16384});
    e.make_inputs = [](const Shape& s, DType dt, uint64_t seed) {
      need_rank("layer_norm_looped", s, 2, 2, "M,N");
      return Inputs{{input_array(s, dt, seed, 2, 4), input_array({s[1]}, dt, seed + 1, 0.5, 1.5),
                     input_array({s[1]}, dt, seed + 2, -0.5, 0.5)},
                    {1e-5}};
    };
    e.reference = [](const Inputs& in) {
      return std::vector<Array>{ref::layer_norm(in.tensors[0], in.tensors[1], in.tensors[2], in.scalars[0])};
    };
    e.bytes = [](const Shape& s, DType dt) { return numel(s) * dtype_size(dt) * 3; };  // x read twice
    // The running mean takes one f32 rounding per merged block: up to N of them.
    e.tolerance_scale = [](const Shape& s) { return std::max(1.0, std::sqrt(static_cast<double>(s[1])) / 8); };
    r.push_back(e);
  }
  {
    KernelEntry e = rowwise("rms_norm_backward", "dx and dw of rms_norm from grad_out [M,N], x [M,N], w [N]",
                            rms_norm_backward, 2, "M,N", {8192, 2048});
    e.make_inputs = [](const Shape& s, DType dt, uint64_t seed) {
      need_rank("rms_norm_backward", s, 2, 2, "M,N");
      return Inputs{{input_array(s, dt, seed, -1, 1), input_array(s, dt, seed + 1, -2, 2),
                     input_array({s[1]}, dt, seed + 2, 0.5, 1.5)},
                    {1e-5}};
    };
    e.reference = [](const Inputs& in) {
      auto [dx, dw] = ref::rms_norm_backward(in.tensors[0], in.tensors[1], in.tensors[2], in.scalars[0]);
      return std::vector<Array>{dx, dw};
    };
    e.bytes = [](const Shape& s, DType dt) { return numel(s) * dtype_size(dt) * 3; };  // g, x; dx
    e.flops = [](const Shape& s) { return numel(s) * 10; };
    // dw sums M products per column.
    e.tolerance_scale = [](const Shape& s) { return std::max(1.0, std::sqrt(static_cast<double>(s[0])) / 8); };
    r.push_back(e);
  }
  {
    KernelEntry e =
        rowwise("layer_norm_backward",
                "dx, dw, db of layer_norm from grad_out, x [M,N], mean, rstd [M], w [N]; per-block partials",
                layer_norm_backward, 2, "M,N", {8192, 2048});
    e.make_inputs = [](const Shape& s, DType dt, uint64_t seed) {
      need_rank("layer_norm_backward", s, 2, 2, "M,N");
      Array x = input_array(s, dt, seed + 1, -2, 2);
      // The forward's statistics of x as stored (f32), so that the inputs are consistent.
      auto [mean, rstd] =
          g_shapes_only ? std::pair{Array::placeholder({s[0]}, DType::f32), Array::placeholder({s[0]}, DType::f32)}
                        : ref::layer_norm_stats(x, 1e-5);
      return Inputs{{input_array(s, dt, seed, -1, 1), x, mean, rstd, input_array({s[1]}, dt, seed + 2, 0.5, 1.5)}, {}};
    };
    e.reference = [](const Inputs& in) {
      return ref::layer_norm_backward(in.tensors[0], in.tensors[1], in.tensors[2], in.tensors[3], in.tensors[4]);
    };
    e.bytes = [](const Shape& s, DType dt) { return numel(s) * dtype_size(dt) * 3 + s[0] * 8.0; };  // dy, x; dx
    e.flops = [](const Shape& s) { return numel(s) * 14; };
    // dw and db sum M products per column.
    e.tolerance_scale = [](const Shape& s) { return std::max(1.0, std::sqrt(static_cast<double>(s[0])) / 8); };
    r.push_back(e);
  }
  // Attention: shapes B,H,S,D or BH,S,D (keys as long as queries); scale 1/sqrt(D).
  for (bool causal : {false, true}) {
    KernelEntry e;
    e.name = causal ? "causal_attention" : "attention";
    e.summary =
        causal ? "softmax(q k^T / sqrt(D), causal mask) v, flash style" : "softmax(q k^T / sqrt(D)) v, flash style";
    e.shape_help = "B,H,S,D or BH,S,D";
    e.min_rank = 3;
    e.max_rank = 4;
    e.dtypes = kFloat;
    e.default_shape = {4, 8, 4096, 128};
    e.kernel = causal ? &causal_attention : &attention;
    std::string name = e.name;
    e.make_inputs = [name](const Shape& s, DType dt, uint64_t seed) {
      need_rank(name, s, 3, 4, "B,H,S,D or BH,S,D");
      return Inputs{
          {input_array(s, dt, seed, -1, 1), input_array(s, dt, seed + 1, -1, 1), input_array(s, dt, seed + 2, -1, 1)},
          {1.0 / std::sqrt(static_cast<double>(s.back()))}};
    };
    e.reference = [causal](const Inputs& in) {
      return std::vector<Array>{ref::attention(in.tensors[0], in.tensors[1], in.tensors[2], in.scalars[0], causal)};
    };
    e.bytes = [](const Shape& s, DType dt) { return numel(s) * dtype_size(dt) * 4; };
    // Two dots of S x S x D per head (the causal half counts as done work only).
    e.flops = [causal](const Shape& s) {
      double sq = static_cast<double>(s[s.size() - 2]);
      return 4.0 * numel(s) * sq * (causal ? 0.5 : 1.0);
    };
    e.tolerance_scale = [](const Shape& s) { return std::max(1.0, std::sqrt(static_cast<double>(s.back())) / 8); };
    r.push_back(e);
  }
  // The matmul family: shapes name the problem, e.g. M,K,N; inputs in [-1, 1).
  auto matmul_like = [&](const std::string& name, const std::string& summary, KernelBase& k, const std::string& help,
                         Shape def, std::function<Inputs(const Shape&, DType, uint64_t)> make,
                         std::function<Array(const Inputs&)> ref, std::function<double(const Shape&)> flops,
                         std::function<double(const Shape&, DType)> bytes) {
    KernelEntry e;
    e.name = name;
    e.summary = summary;
    e.shape_help = help;
    e.min_rank = e.max_rank = static_cast<int>(def.size());
    e.dtypes = kFloat;
    e.default_shape = def;
    e.kernel = &k;
    e.make_inputs = [name, help, make, n = def.size()](const Shape& s, DType dt, uint64_t seed) {
      need_rank(name, s, static_cast<int>(n), static_cast<int>(n), help);
      return make(s, dt, seed);
    };
    e.reference = [ref](const Inputs& in) { return std::vector<Array>{ref(in)}; };
    e.flops = flops;
    e.bytes = bytes;
    // K is the second-to-last number of every matmul-family shape (M,K,N or B,M,K,N).
    e.tolerance_scale = [](const Shape& s) {
      return std::max(1.0, std::sqrt(static_cast<double>(s[s.size() - 2])) / 8);
    };
    r.push_back(e);
  };
  auto mnk_flops = [](const Shape& s) { return 2.0 * s[0] * s[1] * s[2]; };
  auto mnk_bytes = [](const Shape& s, DType dt) {
    return (1.0 * s[0] * s[1] + 1.0 * s[1] * s[2] + 1.0 * s[0] * s[2]) * dtype_size(dt);
  };
  auto rnd = [](Shape s, DType dt, uint64_t seed) { return input_array(std::move(s), dt, seed); };
  matmul_like(
      "matmul", "x [M,K] . y [K,N]", matmul, "M,K,N", {2048, 2048, 2048},
      [rnd](const Shape& s, DType dt, uint64_t seed) {
        return Inputs{{rnd({s[0], s[1]}, dt, seed), rnd({s[1], s[2]}, dt, seed + 1)}, {}};
      },
      [](const Inputs& in) { return ref::matmul(in.tensors[0], in.tensors[1]); }, mnk_flops, mnk_bytes);
  auto bmnk_flops = [](const Shape& s) { return 2.0 * s[0] * s[1] * s[2] * s[3]; };
  matmul_like(
      "bmm", "x [B,M,K] . y [B,K,N]", bmm, "B,M,K,N", {16, 512, 512, 512},
      [rnd](const Shape& s, DType dt, uint64_t seed) {
        return Inputs{{rnd({s[0], s[1], s[2]}, dt, seed), rnd({s[0], s[2], s[3]}, dt, seed + 1)}, {}};
      },
      [](const Inputs& in) { return ref::matmul(in.tensors[0], in.tensors[1]); }, bmnk_flops,
      [](const Shape& s, DType dt) { return 1.0 * s[0] * (s[1] * s[2] + s[2] * s[3] + s[1] * s[3]) * dtype_size(dt); });
  matmul_like(
      "broadcast_matmul", "x [B,M,K] . y [K,N], y shared by the batch", broadcast_matmul, "B,M,K,N",
      {16, 512, 512, 512},
      [rnd](const Shape& s, DType dt, uint64_t seed) {
        return Inputs{{rnd({s[0], s[1], s[2]}, dt, seed), rnd({s[2], s[3]}, dt, seed + 1)}, {}};
      },
      [](const Inputs& in) { return ref::matmul(in.tensors[0], in.tensors[1]); }, bmnk_flops,
      [](const Shape& s, DType dt) {
        return (1.0 * s[0] * (s[1] * s[2] + s[1] * s[3]) + 1.0 * s[2] * s[3]) * dtype_size(dt);
      });
  matmul_like(
      "split_k_matmul", "x [M,K] . y [K,N] -> f32, K split over the grid, the splits added atomically", split_k_matmul,
      "M,K,N", {256, 16384, 256},
      [rnd](const Shape& s, DType dt, uint64_t seed) {
        return Inputs{{rnd({s[0], s[1]}, dt, seed), rnd({s[1], s[2]}, dt, seed + 1)}, {}};
      },
      [](const Inputs& in) { return ref::matmul(in.tensors[0], in.tensors[1]); }, mnk_flops,
      [](const Shape& s, DType dt) {
        return (1.0 * s[0] * s[1] + 1.0 * s[1] * s[2]) * dtype_size(dt) + 4.0 * s[0] * s[2];
      });
  matmul_like(
      "epilogue_subtiling", "relu(x [M,K] . w [K,N] + bias [N]) + residual [M,N], fused", epilogue_subtiling, "M,K,N",
      {2048, 2048, 2048},
      [rnd](const Shape& s, DType dt, uint64_t seed) {
        return Inputs{{rnd({s[0], s[1]}, dt, seed), rnd({s[1], s[2]}, dt, seed + 1), rnd({s[2]}, dt, seed + 2),
                       rnd({s[0], s[2]}, dt, seed + 3)},
                      {}};
      },
      [](const Inputs& in) {
        return ref::epilogue_subtiling(in.tensors[0], in.tensors[1], in.tensors[2], in.tensors[3]);
      },
      mnk_flops, mnk_bytes);
  matmul_like(
      "matmul_layernorm", "layer_norm(x [M,K] . w [K,N]) * gamma + beta over N, fused", matmul_layernorm, "M,K,N",
      {2048, 2048, 1024},
      [rnd](const Shape& s, DType dt, uint64_t seed) {
        return Inputs{{rnd({s[0], s[1]}, dt, seed), rnd({s[1], s[2]}, dt, seed + 1),
                       input_array({s[2]}, dt, seed + 2, 0.5, 1.5), rnd({s[2]}, dt, seed + 3)},
                      {}};
      },
      [](const Inputs& in) {
        return ref::matmul_layernorm(in.tensors[0], in.tensors[1], in.tensors[2], in.tensors[3]);
      },
      mnk_flops, mnk_bytes);
  // fp8 operands with per-tensor scales (the scales are scalar arguments).
  matmul_like(
      "fp8_matmul", "bf16(scale_a * scale_b * (a [M,K] . b [K,N])), fp8 a and b, f32 accumulation", fp8_matmul, "M,K,N",
      {2048, 2048, 2048},
      [rnd](const Shape& s, DType dt, uint64_t seed) {
        return Inputs{{rnd({s[0], s[1]}, dt, seed), rnd({s[1], s[2]}, dt, seed + 1)}, {0.5, 1.25}};
      },
      [](const Inputs& in) { return ref::fp8_matmul(in.tensors[0], in.tensors[1], in.scalars[0], in.scalars[1]); },
      mnk_flops, [](const Shape& s, DType) { return 1.0 * s[0] * s[1] + 1.0 * s[1] * s[2] + 2.0 * s[0] * s[2]; });
  r.back().dtypes = {DType::f8e4m3, DType::f8e5m2};
  {
    // Weight-only int4: shapes M,K,N or M,K,N,G (G the quantization group along K, default 128).
    KernelEntry e;
    e.name = "int4_matmul";
    e.summary = "a [M,K] . int4 weights packed two per byte [K/2,N] (i8) with per-group scales [K/G,N]";
    e.shape_help = "M,K,N[,G] (K a multiple of an even G, default G = 128)";
    e.min_rank = 3;
    e.max_rank = 4;
    e.dtypes = {DType::bf16, DType::f32};
    e.default_shape = {512, 4096, 4096, 128};
    e.kernel = &int4_matmul;
    e.make_inputs = [help = e.shape_help](const Shape& s, DType dt, uint64_t seed) {
      need_rank("int4_matmul", s, 3, 4, help);
      const int64_t g = s.size() == 4 ? s[3] : std::min<int64_t>(128, s[1]);
      if (g % 2 != 0 || s[1] % g != 0)
        throw UserError("int4_matmul: K = " + std::to_string(s[1]) +
                        " must be a multiple of an even group size G, got G = " + std::to_string(g));
      return Inputs{{input_array({s[0], s[1]}, dt, seed), input_array({s[1] / 2, s[2]}, DType::i8, seed + 1, -128, 128),
                     input_array({s[1] / g, s[2]}, dt, seed + 2, 0.01, 0.1)},
                    {}};
    };
    e.reference = [](const Inputs& in) {
      return std::vector<Array>{ref::int4_matmul(in.tensors[0], in.tensors[1], in.tensors[2])};
    };
    e.flops = [](const Shape& s) { return 2.0 * s[0] * s[1] * s[2]; };
    e.bytes = [](const Shape& s, DType dt) {
      const double g = s.size() == 4 ? s[3] : std::min<int64_t>(128, s[1]);
      return (1.0 * s[0] * s[1] + 1.0 * s[0] * s[2] + s[1] / g * s[2]) * dtype_size(dt) + 0.5 * s[1] * s[2];
    };
    e.tolerance_scale = [](const Shape& s) { return std::max(1.0, std::sqrt(static_cast<double>(s[1])) / 8); };
    r.push_back(e);
  }
  indexing_entries(r);
  segment_entries(r);
  return r;
}

}  // namespace

Inputs KernelEntry::make_specs(const Shape& shape, DType dtype) const {
  g_shapes_only = true;
  try {
    Inputs in = make_inputs(shape, dtype, 0);
    g_shapes_only = false;
    return in;
  } catch (...) {
    g_shapes_only = false;
    throw;
  }
}

std::vector<Arg> Inputs::args() const {
  std::vector<Arg> a;
  for (const Array& t : tensors) a.emplace_back(t);
  for (double s : scalars) a.emplace_back(s);
  return a;
}

const std::vector<KernelEntry>& registry() {
  static const std::vector<KernelEntry> r = build();
  return r;
}

const KernelEntry& find_kernel(const std::string& name) {
  std::string names;
  for (const KernelEntry& e : registry()) {
    if (e.name == name) return e;
    names += (names.empty() ? "" : ", ") + e.name;
  }
  throw UserError("unknown kernel '" + name + "'; known kernels: " + names);
}

Closeness compare(const Array& out, const Array& ref, DType dtype, double scale) {
  // The library's fp8 kernels take fp8 inputs (exact values) and return bf16.
  if (is_fp8(dtype)) dtype = DType::bf16;
  return tune::compare(out, ref, dtype, scale);
}

}  // namespace parhelion::kernels

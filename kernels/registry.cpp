#include "kernels/registry.h"

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
    e.bytes = [](const Shape& s, DType dt) { return numel(s) * dtype_size(dt) * 5; };  // g, x twice; dx
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
  return tune::compare(out, ref, dtype, scale);
}

}  // namespace parhelion::kernels

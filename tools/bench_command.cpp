#include "tools/bench_command.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "backend/cpu/host.h"
#include "bench/baselines.h"
#include "bench/torch_baseline.h"
#include "kernels/kernels.h"
#include "kernels/registry.h"
#include "runtime/timing.h"

namespace parhelion::tools {
namespace {

using nlohmann::json;

struct Impl {
  std::string name;
  std::function<void()> run;      // timed here, or
  std::function<double()> timed;  // timed by the implementation itself (the torch server)
  std::vector<double> ms = {};    // per-round medians
};

struct Case {
  std::string kernel;
  Shape shape;
  DType dtype;
  int threads;
  double flops;
  std::vector<Impl> impls;
  std::string note;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Parhelion's kernel for an entry's inputs, at `threads` threads, default or tuned config.
CompiledKernel compile_for(const kernels::KernelEntry& e, const kernels::Inputs& in, int threads, bool tune) {
  auto args = in.args();
  Config c = e.kernel->compile(args).config();
  if (tune) {
    TuneOptions o;
    o.effort = Effort::quick;
    o.progress = false;
    o.reference = nullptr;
    c = e.kernel->tune(args, o).best_config;
  }
  c.num_threads = threads;
  return e.kernel->compile(args, &c);
}

// The torch implementations of a case, each checked against eager's output (and ours too)
// before it is timed; one that disagrees is reported and left out.
void add_torch_impls(bench::TorchBaseline& torch, const kernels::KernelEntry& e, const kernels::Inputs& in,
                     const CompiledKernel& ours, int threads, Case& c) {
  bench::TorchBaseline::Loaded loaded;
  try {
    loaded = torch.load(e.name, in.tensors, in.scalars, /*compile=*/false, /*sdpa=*/true);
  } catch (const UserError& err) {
    std::fprintf(stderr, "bench: %s: %s\n", e.name.c_str(), err.what());
    return;
  }
  std::vector<Array> eager = torch.run(loaded.id, "eager", threads);
  double tol = 2 * e.tolerance(c.shape);
  auto agrees = [&](const std::vector<Array>& out, const std::string& who) {
    for (size_t i = 0; i < out.size() && i < eager.size(); ++i) {
      auto cmp = kernels::compare(out[i], eager[i], c.dtype, tol);
      if (!cmp.ok) {
        std::fprintf(stderr, "bench: %s %s %s: %s differs from torch eager (max abs error %.3g); not timed\n",
                     e.name.c_str(), shape_to_string(c.shape).c_str(), std::string(dtype_name(c.dtype)).c_str(),
                     who.c_str(), cmp.max_abs_err);
        return false;
      }
    }
    return true;
  };
  if (!agrees(ours.run(in.args()), "parhelion")) {
    c.impls.clear();  // the case is dropped from the report
    return;
  }
  for (const std::string& impl : loaded.impls) {
    if (impl != "eager" && !agrees(torch.run(loaded.id, impl, threads), impl)) continue;
    int id = loaded.id;
    bench::TorchBaseline* t = &torch;
    c.impls.push_back({impl, {}, [t, id, impl, threads] { return t->time_ms(id, impl, threads, 0.2); }, {}});
  }
}

}  // namespace

int run_bench(const BenchOptions& o) {
  std::vector<std::string> names = o.kernels;
  if (names.empty()) names = {"matmul", "bmm", "epilogue_subtiling", "matmul_layernorm"};
  const int max_threads = backend::cpu::Host::detect().threads;
  // On stderr, so that --json's stdout stays one JSON object a line.
  for (const bench::MissingBaseline& m : bench::missing_baselines())
    std::fprintf(stderr, "# baseline missing: %s: %s\n", m.name.c_str(), m.why.c_str());

  // bf16 rows are measured against the faster of the bf16 dot instruction and the AMX tiles.
  std::map<int, double> peak_f32, peak_bf16, peak_dot_bf16, peak_tiles;
  for (int t : o.threads) {
    if (t > max_threads) continue;
    peak_f32[t] = bench::fma_peak_f32(t);
    peak_dot_bf16[t] = bench::fma_peak_bf16(t);
    peak_tiles[t] = bench::tile_peak_bf16(t);
    peak_bf16[t] = std::max(peak_dot_bf16[t], peak_tiles[t]);
  }
  std::vector<Case> cases;
  std::vector<std::unique_ptr<kernels::Inputs>> keep;
  std::vector<std::unique_ptr<CompiledKernel>> kernels_kept;
  std::vector<std::unique_ptr<bench::OneDnnMatmul>> dnnl_kept;
  std::vector<std::unique_ptr<Array>> arrays;
  std::string dnnl_impls;
  std::string torch_why;
  std::unique_ptr<bench::TorchBaseline> torch;
  // torch eager on every row (its GEMM is oneDNN's or MKL's, AMX included where the host has it);
  // SDPA where the kernel is attention.
  auto wants_attention = [&](const std::string& name) { return name == "attention" || name == "causal_attention"; };
  torch = bench::TorchBaseline::start(&torch_why);

  for (const std::string& name : names) {
    const kernels::KernelEntry& e = kernels::find_kernel(name);
    std::vector<Shape> shapes = {e.default_shape};
    if (name == "matmul")
      shapes = o.quick ? std::vector<Shape>{{1024, 1024, 1024}, {2048, 2048, 2048}}
                       : std::vector<Shape>{{1024, 1024, 1024}, {2048, 2048, 2048}, {4096, 4096, 4096}};
    std::vector<DType> dtypes = {DType::f32};
    if (name == "matmul" || name == "bmm") dtypes.push_back(DType::bf16);
    if (wants_attention(name)) {
      // Equal work per shape within a few x: [1, H, S, D] with H * S = 16384.
      shapes.clear();
      for (int64_t d : {64, 128})
        for (int64_t sl : o.quick ? std::vector<int64_t>{1024, 4096} : std::vector<int64_t>{1024, 4096, 16384})
          shapes.push_back({1, 16384 / sl, sl, d});
      dtypes = {DType::f32, DType::bf16};
    }
    if (o.shape) shapes = {*o.shape};
    if (o.dtype) dtypes = {*o.dtype};
    for (const Shape& s : shapes)
      for (DType dt : dtypes) {
        keep.push_back(std::make_unique<kernels::Inputs>(e.make_inputs(s, dt, 1)));
        kernels::Inputs& in = *keep.back();
        for (int t : o.threads) {
          if (t > max_threads) continue;
          Case c{name, s, dt, t, e.flops(s), {}, ""};
          kernels_kept.push_back(std::make_unique<CompiledKernel>(compile_for(e, in, t, o.tune)));
          CompiledKernel* k = kernels_kept.back().get();
          auto args = std::make_shared<std::vector<Arg>>(in.args());
          c.impls.push_back({"parhelion", [k, args] { k->run(*args); }, {}, {}});
          c.note = k->config().to_json();
          if (torch) add_torch_impls(*torch, e, in, *k, t, c);
          // Baselines on the same inputs.
          bool mm = name == "matmul" || name == "epilogue_subtiling" || name == "matmul_layernorm";
          if (mm) {
            const int64_t m = s[0], kk = s[1], n = s[2];
            arrays.push_back(std::make_unique<Array>(Array::empty({m, n}, DType::f32)));
            Array* out = arrays.back().get();
            if (dt == DType::f32 && bench::have_openblas()) {
              const float* a = in.tensors[0].data_as<float>();
              const float* b = in.tensors[1].data_as<float>();
              if (name == "matmul") {
                c.impls.push_back(
                    {"openblas", [=] { bench::openblas_sgemm(m, n, kk, a, b, out->data_as<float>(), t); }, {}});
              } else {
                // The same work unfused: the library's matmul, then the epilogue as its own kernel.
                kernels::Inputs* inp = &in;
                if (name == "epilogue_subtiling") {
                  static Kernel<Tensor(Tensor, Tensor, Tensor)> epilogue(
                      "epilogue", +[](Tensor y, Tensor bias, Tensor residual) {
                        auto r = empty_like(y);
                        for (auto [tm, tn] : tile(y.size(0), y.size(1)))
                          r[tm, tn] = maximum(y[tm, tn] + bias[tn], 0.0f) + residual[tm, tn];
                        return r;
                      });
                  c.impls.push_back({"openblas+epilogue",
                                     [=] {
                                       bench::openblas_sgemm(m, n, kk, a, b, out->data_as<float>(), t);
                                       epilogue(*out, inp->tensors[2], inp->tensors[3]);
                                     },
                                     {}});
                } else {
                  c.impls.push_back({"openblas+layer_norm",
                                     [=] {
                                       bench::openblas_sgemm(m, n, kk, a, b, out->data_as<float>(), t);
                                       kernels::layer_norm(*out, inp->tensors[2], inp->tensors[3], 1e-5);
                                     },
                                     {}});
                }
              }
            }
            if (name == "matmul" && bench::have_onednn()) {
              std::string impl = std::string(dtype_name(dt)) + ": ";
              if (bench::OneDnnMatmul::available(dt == DType::bf16)) {
                dnnl_kept.push_back(std::make_unique<bench::OneDnnMatmul>(
                    m, n, kk, dt == DType::bf16, in.tensors[0].data(), in.tensors[1].data(), out->data_as<float>()));
                bench::OneDnnMatmul* d = dnnl_kept.back().get();
                impl += d->impl();
                c.impls.push_back({"onednn", [d, t] { d->run(t); }, {}});
              } else {
                impl += "none on this host";
              }
              if (dnnl_impls.find(impl) == std::string::npos)  // once per dtype, not per case
                dnnl_impls += (dnnl_impls.empty() ? "" : ", ") + impl;
            }
          }
          if (name == "bmm" && dt == DType::f32 && bench::have_openblas()) {
            int64_t b = s[0], mm2 = s[1], k2 = s[2], n2 = s[3];
            arrays.push_back(std::make_unique<Array>(Array::empty({b, mm2, n2}, DType::f32)));
            Array* out = arrays.back().get();
            const float* a = in.tensors[0].data_as<float>();
            const float* bb = in.tensors[1].data_as<float>();
            c.impls.push_back({"openblas",
                               [=] {
                                 for (int64_t i = 0; i < b; ++i)
                                   bench::openblas_sgemm(mm2, n2, k2, a + i * mm2 * k2, bb + i * k2 * n2,
                                                         out->data_as<float>() + i * mm2 * n2, t);
                               },
                               {}});
          }
          cases.push_back(std::move(c));
        }
      }
  }
  // Interleaved rounds: every implementation of a case once per round.
  int rounds = o.quick ? 2 : o.rounds;
  // Parhelion first in each case; a baseline far slower than it is timed in the first round only
  // (torch's scalar bf16 GEMM on a host without a bf16 dot instruction: minutes a call at 4096^3).
  for (int r = 0; r < rounds; ++r)
    for (Case& c : cases) {
      std::fprintf(stderr, "bench: round %d of %d, %s %s %s, %d threads\n", r + 1, rounds, c.kernel.c_str(),
                   shape_to_string(c.shape).c_str(), std::string(dtype_name(c.dtype)).c_str(), c.threads);
      const double ours = c.impls.front().ms.empty() ? 0 : c.impls.front().ms.front();
      for (Impl& i : c.impls)
        if (i.ms.empty() || &i == &c.impls.front() || !bench::settled_in_one_round(i.ms.front(), ours))
          i.ms.push_back(i.timed ? i.timed() : time_it(i.run, 1, 3, 0.2).median_ms);
    }

  if (!o.json) {
    const std::string note = bench::openblas_core_note();
    std::printf("# parhelion bench: %s; OpenBLAS: %s (core %s%s); oneDNN: %s\n",
                backend::cpu::Host::detect().cpu_model.c_str(), bench::openblas_config().c_str(),
                bench::openblas_core().c_str(), note.empty() ? "" : ("; " + note).c_str(),
                !dnnl_impls.empty()    ? dnnl_impls.c_str()
                : bench::have_onednn() ? "linked, no case here (matmul only)"
                                       : "absent");
    if (torch)
      std::printf("# torch baselines: %s; threads set per case, not pinned\n", torch->settings().c_str());
    else if (!torch_why.empty())
      std::printf("# torch baselines: absent (%s)\n", torch_why.c_str());
    for (auto& [t, p] : peak_f32) {
      std::printf("# FMA peak, %d thread%s: f32 %.0f GFLOP/s, bf16 %.0f GFLOP/s (vdpbf16ps)", t, t > 1 ? "s" : "", p,
                  peak_dot_bf16[t]);
      if (peak_tiles[t] > 0) std::printf(", bf16 %.0f GFLOP/s (AMX tiles)", peak_tiles[t]);
      std::printf("\n");
    }
    std::printf("| kernel | shape | dtype | threads | impl | median ms | GFLOP/s | %% of peak | vs parhelion |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|\n");
  } else {
    for (auto& [t, p] : peak_f32) {
      std::printf("%s\n",
                  json{{"kernel", "fma_peak"}, {"dtype", "f32"}, {"impl", "peak"}, {"threads", t}, {"gflops", p}}
                      .dump()
                      .c_str());
      std::printf(
          "%s\n",
          json{{"kernel", "fma_peak"}, {"dtype", "bf16"}, {"impl", "peak"}, {"threads", t}, {"gflops", peak_bf16[t]}}
              .dump()
              .c_str());
    }
  }
  for (const Case& c : cases) {
    if (c.impls.empty()) continue;
    double ours = median(c.impls[0].ms);
    for (const Impl& i : c.impls) {
      double ms = median(i.ms), gf = c.flops / (ms * 1e6);
      double peak = c.dtype == DType::bf16 && peak_bf16[c.threads] > 0 ? peak_bf16[c.threads] : peak_f32[c.threads];
      if (o.json) {
        std::printf("%s\n", json{{"kernel", c.kernel},
                                 {"shape", c.shape},
                                 {"dtype", dtype_name(c.dtype)},
                                 {"impl", i.name},
                                 {"threads", c.threads},
                                 {"median_ms", ms},
                                 {"rounds", i.ms.size()},
                                 {"gflops", gf},
                                 {"pct_peak", 100 * gf / peak},
                                 {"config", i.name == "parhelion" ? c.note : ""}}
                                .dump()
                                .c_str());
      } else {
        const bool once = i.ms.size() == 1 && c.impls[0].ms.size() > 1;  // settled in the first round
        std::printf("| %s | %s | %s | %d | %s%s | %.3f | %.1f | %.0f%% | %.2f |\n", c.kernel.c_str(),
                    shape_to_string(c.shape).c_str(), std::string(dtype_name(c.dtype)).c_str(), c.threads,
                    i.name.c_str(), once ? " (one round)" : "", ms, gf, 100 * gf / peak, ms / ours);
      }
    }
  }
  return 0;
}

}  // namespace parhelion::tools

// Memory-bound kernels against the machine's own bandwidth, measured in the same run.
//
// For each thread count (1, 2): a STREAM-style triad (a = b + s*c, three arrays counted, as
// STREAM does) and copy, then add, softmax, layer_norm and rms_norm in f32 and bf16, each as
// the median of repeats, interleaved round by round so that drift hits all of them alike.
// Reported: GB/s of the minimum traffic a fused kernel needs (inputs read once, output
// written once) and its ratio to the triad of the same thread count.
//
//   parhelion_bench_bandwidth [--rounds N] [--json] [--quick]
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/cpu/host.h"
#include "kernels/registry.h"
#include "runtime/thread_pool.h"
#include "runtime/timing.h"

namespace ph = parhelion;
using nlohmann::json;

namespace {

struct Row {
  std::string name, shape, dtype;
  int threads = 1;
  double bytes = 0;
  std::vector<double> ms;  // one median per round
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// STREAM triad/copy on the runtime's own thread pool and allocator.
struct Stream {
  int64_t n;
  ph::Array a, b, c;
  explicit Stream(int64_t elems)
      : n(elems),
        a(ph::Array::full({elems}, 1.0, ph::DType::f32)),
        b(ph::Array::full({elems}, 2.0, ph::DType::f32)),
        c(ph::Array::full({elems}, 0.5, ph::DType::f32)) {}
  void triad(int threads) {
    float *A = a.data_as<float>(), *B = b.data_as<float>(), *C = c.data_as<float>();
    int64_t N = n;
    ph::runtime::parallel_run(threads, [&](int t) {
      int64_t lo = N * t / threads, hi = N * (t + 1) / threads;
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) A[i] = B[i] + 3.0f * C[i];
    });
  }
  void copy(int threads) {
    float *A = a.data_as<float>(), *B = b.data_as<float>();
    int64_t N = n;
    ph::runtime::parallel_run(threads, [&](int t) {
      int64_t lo = N * t / threads, hi = N * (t + 1) / threads;
      std::memcpy(A + lo, B + lo, (hi - lo) * sizeof(float));
    });
  }
};

}  // namespace

int main(int argc, char** argv) {
  int rounds = 3;
  bool as_json = false, quick = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json"))
      as_json = true;
    else if (!std::strcmp(argv[i], "--quick"))
      quick = true;
    else if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc)
      rounds = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--rounds N] [--json] [--quick]\n", argv[0]);
      return 2;
    }
  }
  const int64_t scale = quick ? 4 : 1;
  struct Case {
    std::string kernel;
    ph::Shape shape;
  };
  std::vector<Case> cases = {{"add", {4096 / scale, 4096}},
                             {"softmax", {8192 / scale, 2048}},
                             {"layer_norm", {8192 / scale, 2048}},
                             {"rms_norm", {8192 / scale, 2048}}};
  int max_threads = ph::backend::cpu::Host::detect().threads;
  std::vector<int> thread_counts = {1};
  if (max_threads >= 2) thread_counts.push_back(2);

  Stream stream(4096 * 4096 / scale);
  struct Prepared {
    Row row;
    const ph::kernels::KernelEntry* entry;
    ph::kernels::Inputs inputs;
    std::unique_ptr<ph::CompiledKernel> compiled;
  };
  std::vector<Prepared> runs;
  std::vector<Row> triad_rows, copy_rows;
  for (int t : thread_counts) {
    triad_rows.push_back(Row{"stream_triad", std::to_string(stream.n), "f32", t, 3.0 * stream.n * 4, {}});
    copy_rows.push_back(Row{"stream_copy", std::to_string(stream.n), "f32", t, 2.0 * stream.n * 4, {}});
    for (const Case& c : cases)
      for (ph::DType dt : {ph::DType::f32, ph::DType::bf16}) {
        Prepared p;
        p.entry = &ph::kernels::find_kernel(c.kernel);
        p.inputs = p.entry->make_inputs(c.shape, dt, 1);
        auto args = p.inputs.args();
        ph::Config cfg = p.entry->kernel->compile(args).config();
        cfg.num_threads = t;
        p.compiled = std::make_unique<ph::CompiledKernel>(p.entry->kernel->compile(args, &cfg));
        auto out = p.compiled->run(args);
        auto want = p.entry->reference(p.inputs);
        for (size_t i = 0; i < out.size(); ++i)
          if (!ph::kernels::compare(out[i], want[i], dt, p.entry->tolerance(c.shape)).ok) {
            std::fprintf(stderr, "%s %s: result differs from the reference; not timing it\n", c.kernel.c_str(),
                         std::string(ph::dtype_name(dt)).c_str());
            return 1;
          }
        p.row = Row{c.kernel, ph::shape_to_string(c.shape), std::string(ph::dtype_name(dt)),
                    t,        p.entry->bytes(c.shape, dt),  {}};
        runs.push_back(std::move(p));
      }
  }
  for (int r = 0; r < rounds; ++r) {
    for (size_t ti = 0; ti < thread_counts.size(); ++ti) {
      int t = thread_counts[ti];
      triad_rows[ti].ms.push_back(ph::time_it([&] { stream.triad(t); }, 2, 10).median_ms);
      copy_rows[ti].ms.push_back(ph::time_it([&] { stream.copy(t); }, 2, 10).median_ms);
    }
    for (Prepared& p : runs) {
      auto args = p.inputs.args();
      p.row.ms.push_back(ph::time_it([&] { p.compiled->run(args); }, 2, 10).median_ms);
    }
  }
  std::map<int, double> triad_gbps;
  for (const Row& r : triad_rows) triad_gbps[r.threads] = r.bytes / (median(r.ms) * 1e6);
  std::vector<Row> all = triad_rows;
  all.insert(all.end(), copy_rows.begin(), copy_rows.end());
  for (const Prepared& p : runs) all.push_back(p.row);
  const auto& target = ph::backend::cpu::Host::detect();
  if (!as_json) {
    std::printf("# memory-bound kernels vs STREAM triad, same run (%d rounds; CPU: %s; %s)\n", rounds,
                target.cpu_model.c_str(), target.features.c_str());
    std::printf("| kernel | shape | dtype | threads | median ms | GB/s | vs triad |\n|---|---|---|---|---|---|---|\n");
  }
  for (const Row& r : all) {
    double ms = median(r.ms), gbps = r.bytes / (ms * 1e6), ratio = gbps / triad_gbps[r.threads];
    if (as_json)
      std::printf("%s\n", json{{"kernel", r.name},
                               {"shape", r.shape},
                               {"dtype", r.dtype},
                               {"impl", r.name.rfind("stream", 0) == 0 ? "stream" : "parhelion"},
                               {"threads", r.threads},
                               {"median_ms", ms},
                               {"gbps", gbps},
                               {"ratio_to_triad", ratio}}
                              .dump()
                              .c_str());
    else
      std::printf("| %s | %s | %s | %d | %.3f | %.1f | %.2f |\n", r.name.c_str(), r.shape.c_str(), r.dtype.c_str(),
                  r.threads, ms, gbps, ratio);
  }
  return 0;
}

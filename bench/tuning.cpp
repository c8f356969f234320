// The autotuner, measured: for each library kernel at its benchmark shape, the tuned config's
// speed-up over the heuristic default; and for softmax [8192,2048], how long `quick` takes and
// how close it lands to what `full` finds (both winners re-timed interleaved in this run).
//
//   parhelion_bench_tune [--kernels a,b,...] [--full-budget SECONDS]
// Uses a fresh cache directory of its own (never the user's).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>

#include "kernels/registry.h"
#include "runtime/timing.h"

namespace ph = parhelion;

namespace {

ph::TuneReport tune(const ph::kernels::KernelEntry& e, const ph::kernels::Inputs& in, ph::Effort effort,
                    double budget) {
  ph::TuneOptions o;
  o.effort = effort;
  o.budget_seconds = budget;
  o.progress = false;
  o.use_cache = false;
  o.reference = [&] { return e.reference(in); };
  return e.kernel->tune(in.args(), o);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> names;
  double full_budget = 300;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--kernels") && i + 1 < argc) {
      std::stringstream ss(argv[++i]);
      std::string n;
      while (std::getline(ss, n, ',')) names.push_back(n);
    } else if (!std::strcmp(argv[i], "--full-budget") && i + 1 < argc) {
      full_budget = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--kernels a,b] [--full-budget SECONDS]\n", argv[0]);
      return 2;
    }
  }
  std::string dir = (std::filesystem::temp_directory_path() / ("ph-bench-tune-" + std::to_string(getpid()))).string();
  setenv("PARHELION_CACHE_DIR", dir.c_str(), 1);
  if (names.empty())
    for (const auto& e : ph::kernels::registry()) names.push_back(e.name);

  // "run ms": the winner timed afterwards as `parhelion run` times it (runtime/timing.h), in
  // this process; "tuned / run" is how far the tuner's reported time is from it.
  std::printf(
      "| kernel | shape | default ms | tuned ms | run ms | tuned / run | speed-up | candidates | failed | rejected | "
      "tune s | conditions | best config |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& n : names) {
    const auto& e = ph::kernels::find_kernel(n);
    auto in = e.make_inputs(e.default_shape, ph::DType::f32, 1);
    ph::TuneReport r = tune(e, in, ph::Effort::quick, 60);
    auto args = in.args();
    ph::CompiledKernel k = e.kernel->compile(args, &r.best_config);
    const double run_ms = ph::time_it([&] { k.run(args); }).median_ms;
    std::printf("| %s | %s | %.3f | %.3f | %.3f | %.3f | %.2fx | %d | %d | %d | %.1f | %s | `%s` |\n", n.c_str(),
                ph::shape_to_string(e.default_shape).c_str(), r.default_ms, r.best_ms, run_ms, r.best_ms / run_ms,
                r.speedup(), r.candidates, r.failed, r.rejected, r.seconds, r.conditions.c_str(),
                r.best_config.to_json().c_str());
    std::fflush(stdout);
  }

  // quick vs full on softmax [8192,2048].
  const auto& sm = ph::kernels::find_kernel("softmax");
  auto in = sm.make_inputs({8192, 2048}, ph::DType::f32, 1);
  ph::TuneReport quick = tune(sm, in, ph::Effort::quick, 60);
  ph::TuneReport full = tune(sm, in, ph::Effort::full, full_budget);
  auto args = in.args();
  ph::CompiledKernel kq = sm.kernel->compile(args, &quick.best_config);
  ph::CompiledKernel kf = sm.kernel->compile(args, &full.best_config);
  std::vector<double> tq, tf;
  for (int round = 0; round < 5; ++round) {
    tq.push_back(ph::time_it([&] { kq.run(args); }, 2, 10).median_ms);
    tf.push_back(ph::time_it([&] { kf.run(args); }, 2, 10).median_ms);
  }
  std::sort(tq.begin(), tq.end());
  std::sort(tf.begin(), tf.end());
  std::printf(
      "\nsoftmax [8192,2048] f32: quick took %.1f s (%d candidates) -> %s; full took %.1f s (%d candidates) -> %s\n",
      quick.seconds, quick.candidates, quick.best_config.to_json().c_str(), full.seconds, full.candidates,
      full.best_config.to_json().c_str());
  std::printf("re-timed interleaved, 5 rounds: quick's winner %.3f ms, full's winner %.3f ms: quick/full = %.3f\n",
              tq[2], tf[2], tq[2] / tf[2]);
  std::filesystem::remove_all(dir);
  return 0;
}

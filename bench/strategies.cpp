// The strategy table: attention forward at D in {64, 128} and S from 512 to 16384, the best
// `stream`, `pipeline` and `resident` configs at each S (time, GFLOP/s, or "does not fit"), and
// the strategy the tuner picked. The cpu analog of the TPU measurement that chose between
// emit_pipeline and a fully resident K/V: here fast memory is the per-core L2.
//
//   parhelion_bench_strategies [--dtype f32|bf16] [--max-s N] [--tune-budget SECONDS] [--json]
// Uses a cache directory of its own for tuning (never the user's).
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "backend/cpu/host.h"
#include "kernels/registry.h"
#include "runtime/format_bytes.h"
#include "runtime/timing.h"

namespace ph = parhelion;

namespace {

struct Best {
  double ms = 0;
  std::string config;
  int tried = 0, rejected = 0;
};

}  // namespace

int main(int argc, char** argv) {
  ph::DType dtype = ph::DType::f32;
  int64_t max_s = 16384;
  double tune_budget = 60;
  bool as_json = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--dtype") && i + 1 < argc) {
      dtype = std::string(argv[++i]) == "bf16" ? ph::DType::bf16 : ph::DType::f32;
    } else if (!std::strcmp(argv[i], "--max-s") && i + 1 < argc) {
      max_s = std::atoll(argv[++i]);
    } else if (!std::strcmp(argv[i], "--tune-budget") && i + 1 < argc) {
      tune_budget = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--json")) {
      as_json = true;
    } else {
      std::fprintf(stderr, "usage: %s [--dtype f32|bf16] [--max-s N] [--tune-budget SECONDS] [--json]\n", argv[0]);
      return 2;
    }
  }
  std::string cache = (std::filesystem::temp_directory_path() / ("ph-strategies-" + std::to_string(getpid()))).string();
  setenv("PARHELION_CACHE_DIR", cache.c_str(), 1);
  const ph::backend::cpu::Host& host = ph::backend::cpu::Host::detect();
  const auto& e = ph::kernels::find_kernel("attention");
  if (!as_json) {
    std::printf("# attention strategies on %s: fast memory (L2 per core) %s, %d threads, %s\n", host.cpu_model.c_str(),
                ph::format_bytes(host.fast_memory_bytes).c_str(), host.threads,
                std::string(ph::dtype_name(dtype)).c_str());
    std::printf("| D | S | heads | K+V bytes | best stream | best pipeline | best resident | tuner picked |\n");
    std::printf("|---|---|---|---|---|---|---|---|\n");
  }
  for (int64_t d : {64, 128}) {
    for (int64_t s = 512; s <= max_s; s *= 2) {
      int64_t heads = std::max<int64_t>(1, 8192 / s);  // work grows with S, but stays bounded
      ph::Shape shape{1, heads, s, d};
      auto in = e.make_inputs(shape, dtype, 1);
      auto args = in.args();
      ph::CompiledKernel def = e.kernel->compile(args);
      double flops = e.flops(shape);
      std::map<std::string, Best> best;
      for (std::string strategy : {"stream", "pipeline", "resident"}) {
        Best& b = best[strategy];
        for (int64_t bq : {64, 128})
          for (int64_t bk : {128, 256, 512})
            for (int buffers : strategy == "pipeline" ? std::vector<int>{1, 2, 3} : std::vector<int>{2}) {
              ph::Config c = def.config();
              c.block_sizes = {bq, bk};
              c.inner_loops = {{strategy, buffers}};
              std::unique_ptr<ph::CompiledKernel> k;
              try {
                k = std::make_unique<ph::CompiledKernel>(e.kernel->compile(args, &c));
              } catch (const ph::UserError&) {
                ++b.rejected;  // does not fit fast memory
                continue;
              }
              ++b.tried;
              double ms = ph::time_it([&] { k->run(args); }, 1, 3, 0.1).median_ms;
              if (b.ms == 0 || ms < b.ms) {
                b.ms = ms;
                b.config = c.to_json();
              }
            }
      }
      ph::TuneOptions o;
      o.effort = ph::Effort::quick;
      o.budget_seconds = tune_budget;
      o.progress = false;
      ph::TuneReport r = e.kernel->tune(args, o);
      std::string picked = r.best_config.inner_loops.at(0).strategy;
      int64_t kv_bytes = 2 * heads * s * d * static_cast<int64_t>(ph::dtype_size(dtype));
      kv_bytes /= heads;  // one head's K and V: what a resident block holds
      auto cell = [&](const Best& b) -> std::string {
        if (b.tried == 0) return "does not fit";
        char buf[96];
        std::snprintf(buf, sizeof buf, "%.2f ms, %.0f GFLOP/s", b.ms, flops / (b.ms * 1e6));
        return buf;
      };
      if (as_json) {
        nlohmann::json j{{"kernel", "attention"},
                         {"dtype", ph::dtype_name(dtype)},
                         {"shape", shape},
                         {"kv_bytes_per_head", kv_bytes},
                         {"fast_memory", host.fast_memory_bytes},
                         {"tuner_picked", picked},
                         {"tuner_config", r.best_config.to_json()},
                         {"tuner_ms", r.best_ms}};
        for (auto& [name, b] : best)
          j[name] = b.tried ? nlohmann::json{{"ms", b.ms}, {"gflops", flops / (b.ms * 1e6)}, {"config", b.config}}
                            : nlohmann::json{{"fits", false}};
        std::printf("%s\n", j.dump().c_str());
      } else {
        std::printf("| %lld | %lld | %lld | %s | %s | %s | %s | %s (%.2f ms) |\n", static_cast<long long>(d),
                    static_cast<long long>(s), static_cast<long long>(heads), ph::format_bytes(kv_bytes).c_str(),
                    cell(best["stream"]).c_str(), cell(best["pipeline"]).c_str(), cell(best["resident"]).c_str(),
                    picked.c_str(), r.best_ms);
      }
      std::fflush(stdout);
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(cache, ec);
  return 0;
}

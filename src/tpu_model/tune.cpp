// predict_tpu and tune_tpu: the pallas lowering of a traced kernel, timed by the model.
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/registry.h"
#include "driver/driver.h"
#include "parhelion/error.h"
#include "parhelion/tpu.h"
#include "runtime/format_bytes.h"
#include "tpu_model/model.h"
#include "tune/search.h"

namespace parhelion {

namespace {

// The kernel configured for the pallas backend of one TPU generation, and its timing model.
struct Context {
  std::shared_ptr<CompiledKernel::Impl> configured;
  const tpu_model::TpuHardware* hw;
  const ConfigSpec& spec() const { return configured->spec; }
};

Context context(KernelBase& kernel, const std::vector<Arg>& args, const std::string& tpu) {
  Context c;
  c.hw = &tpu_model::tpu_hardware(tpu);
  c.configured = kernel.trace(args, "pallas:" + tpu);
  return c;
}

// Validated and planned without the VMEM check: the model reports "does not fit" itself.
TpuPrediction model(const Context& c, const Config& config) {
  return tpu_model::predict(driver::plan(*c.configured, config), *c.hw);
}

// A config's strategies without buffer counts: "pipeline", "resident,pipeline",
// "gathers:dma" (the per-strategy rows of the report).
std::string strategy_key(const Config& cfg) {
  std::string key;
  for (const InnerLoopChoice& l : cfg.inner_loops) key += (key.empty() ? "" : ",") + l.strategy;
  std::string gathers;
  for (const std::string& g : cfg.gathers) gathers += (gathers.empty() ? "" : "/") + g;
  if (!gathers.empty()) key += (key.empty() ? "" : ",") + std::string("gathers:") + gathers;
  return key;
}

// Configs predicted within this much of the fastest are ties: the model's error on the
// published figures is up to 10% (docs/tpu-model.md), far more than what separates them. Among
// ties the tuner keeps the one with the least VMEM: headroom for what the model does not see
// (Mosaic's internal scratch, spills beyond the intermediates it charges), the blocks real TPU
// autotuners settle on (1024 x 1024 query x key blocks for flash attention on v7x in tokamax's
// published autotuning data), and shorter compiles.
constexpr double kTieFraction = 0.05;

std::string ms(double s) {
  std::ostringstream os;
  os.precision(4);
  os << s * 1e3 << " ms";
  return os.str();
}

}  // namespace

TpuPrediction predict_tpu(KernelBase& kernel, const std::vector<Arg>& args, const std::string& tpu,
                          const Config* config) {
  Context c = context(kernel, args, tpu);
  return model(c, c.spec().complete(config ? *config : c.configured->config));
}

TpuPrediction predict_tpu_on(KernelBase& kernel, const Mesh& mesh, const std::vector<Arg>& args, const std::string& tpu,
                             const Config* config) {
  if (mesh.empty()) return predict_tpu(kernel, args, tpu, config);
  Context c;
  c.hw = &tpu_model::tpu_hardware(tpu);
  c.configured = driver::configure(*kernel.trace_on(mesh, args), backend::for_target("pallas:" + tpu));
  return model(c, c.spec().complete(config ? *config : c.configured->config));
}

TpuTuneReport tune_tpu(KernelBase& kernel, const std::vector<Arg>& args, const std::string& tpu, int max_points) {
  Context c = context(kernel, args, tpu);
  TpuTuneReport r;
  r.kernel = kernel.name();
  r.tpu = tpu;
  tune::ConfigCodec codec(c.spec());
  std::map<std::string, size_t> strategy_index;
  std::vector<std::pair<Config, TpuPrediction>> fitting;
  auto consider = [&](const Config& cfg) -> double {
    TpuPrediction p;
    try {
      p = model(c, cfg);
    } catch (const UserError&) {
      return INFINITY;  // e.g. a pipeline whose ragged copy would overrun: not a TPU config
    }
    ++r.evaluated;
    if (!p.fits) ++r.rejected;
    std::string key = strategy_key(cfg);
    if (key.empty()) key = "none";
    auto [it, fresh] = strategy_index.try_emplace(key, r.per_strategy.size());
    if (fresh) r.per_strategy.push_back({key, cfg, p});
    TpuTuneReport::PerStrategy& best = r.per_strategy[it->second];
    bool better = p.fits ? (!best.best.fits || p.seconds < best.best.seconds)
                         : (!best.best.fits && p.vmem_bytes < best.best.vmem_bytes);
    if (better) best = {key, cfg, p};
    if (p.fits) fitting.push_back({cfg, p});
    return p.fits ? p.seconds : INFINITY;
  };
  double points = 1;
  for (int d = 0; d < codec.dims(); ++d) points *= codec.size(d);
  if (points <= max_points) {
    tune::ConfigCodec::Point pt(codec.dims(), 0);
    for (bool more = true; more;) {
      consider(codec.decode(pt));
      more = false;
      for (int d = codec.dims() - 1; d >= 0; --d) {
        if (++pt[d] < codec.size(d)) {
          more = true;
          break;
        }
        pt[d] = 0;
      }
    }
  } else {
    auto search = tune::make_differential_evolution(c.spec(), 1, {c.configured->config});
    for (int done = 0; done < max_points;) {
      std::vector<Config> batch = search->propose(16);
      if (batch.empty()) break;
      for (const Config& cfg : batch) {
        double s = consider(cfg);
        search->observe({cfg, s * 1e3, std::isfinite(s)});
        ++done;
      }
    }
  }
  // The fastest, then the tie with the least VMEM (kTieFraction).
  const TpuPrediction* fastest = nullptr;
  for (const auto& [cfg, p] : fitting)
    if (p.seconds > 0 && (!fastest || p.seconds < fastest->seconds)) fastest = &p;
  const std::pair<Config, TpuPrediction>* tie = nullptr;
  if (fastest)
    for (const auto& f : fitting) {
      const TpuPrediction& p = f.second;
      if (p.seconds <= 0 || p.seconds > fastest->seconds * (1 + kTieFraction)) continue;
      if (!tie || p.vmem_bytes < tie->second.vmem_bytes ||
          (p.vmem_bytes == tie->second.vmem_bytes && p.seconds < tie->second.seconds))
        tie = &f;
    }
  if (tie) {
    r.best_config = tie->first;
    r.best = tie->second;
  }
  if (!r.best.fits || r.best.seconds == 0)
    throw UserError("no pallas config of " + r.kernel + " fits TPU " + tpu + "'s VMEM (" +
                    format_bytes(c.hw->vmem_bytes) + ")");
  // Why: the chosen strategy's time against the others', or their VMEM when they do not fit.
  std::ostringstream why;
  why << "chose " << r.best.strategy << " (" << ms(r.best.seconds) << ", " << static_cast<int>(r.best.tflops)
      << " TFLOP/s, " << r.best.bound << "-bound, VMEM " << format_bytes(r.best.vmem_bytes) << " of "
      << format_bytes(c.hw->vmem_bytes) << ")";
  if (fastest->seconds < r.best.seconds)
    why << ", the least VMEM among the configs within " << static_cast<int>(kTieFraction * 100) << "% of the fastest ("
        << ms(fastest->seconds) << ", VMEM " << format_bytes(fastest->vmem_bytes)
        << "): the model cannot tell them apart, and the headroom is Mosaic's";
  for (const auto& s : r.per_strategy) {
    const std::string chosen = strategy_key(r.best_config);
    if (s.strategy == chosen || chosen.empty()) continue;
    if (s.best.fits)
      why << "; best " << s.strategy << " " << ms(s.best.seconds) << " (" << static_cast<int>(s.best.tflops)
          << " TFLOP/s)";
    else
      why << "; " << s.strategy << " does not fit: it needs at least " << format_bytes(s.best.vmem_bytes)
          << " of VMEM, TPU " << tpu << " has " << format_bytes(c.hw->vmem_bytes);
  }
  r.why = why.str();
  return r;
}

std::string TpuTuneReport::to_json() const {
  nlohmann::json j{{"kernel", kernel},
                   {"tpu", tpu},
                   {"best_config", nlohmann::json::parse(best_config.to_json())},
                   {"best", nlohmann::json::parse(best.to_json())},
                   {"evaluated", evaluated},
                   {"rejected", rejected},
                   {"why", why}};
  for (const PerStrategy& s : per_strategy)
    j["per_strategy"][s.strategy] = {{"config", nlohmann::json::parse(s.config.to_json())},
                                     {"prediction", nlohmann::json::parse(s.best.to_json())}};
  return j.dump();
}

}  // namespace parhelion

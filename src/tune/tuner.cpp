// The autotuner (KernelBase::tune is its public face).
//
// 1. Trace the kernel for the signature; build the cache key; return the cached winner if any.
// 2. Expected outputs: the caller's reference, else the reference interpreter's, else (too large
//    to interpret) the default config's, run isolated.
// 3. Search (effort quick: pattern search from the default and neighbouring shapes' winners;
//    full: differential evolution, then pattern search), in batches. Each candidate is lowered
//    (a config that does not fit fast memory is rejected before compiling), deduplicated by
//    generated source, compiled in parallel, then run isolated in a child process: checked
//    against the expected outputs, then timed (median of repeats).
// 4. Re-time the finalists interleaved; store the winner.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "driver/driver.h"
#include "interp/conversions.h"
#include "interp/interpreter.h"
#include "ir/printer.h"
#include "parhelion/error.h"
#include "parhelion/kernel.h"
#include "runtime/timing.h"
#include "tune/cache.h"
#include "tune/conditions.h"
#include "tune/isolate.h"
#include "tune/search.h"
#include "tune/tuner.h"

namespace parhelion {

const char* effort_name(Effort e) {
  switch (e) {
    case Effort::none:
      return "none";
    case Effort::quick:
      return "quick";
    case Effort::full:
      return "full";
  }
  return "?";
}

bool parse_effort(const std::string& s, Effort* out) {
  if (s == "none")
    *out = Effort::none;
  else if (s == "quick")
    *out = Effort::quick;
  else if (s == "full")
    *out = Effort::full;
  else
    return false;
  return true;
}

std::string TuneReport::to_json() const {
  nlohmann::json j;
  j["kernel"] = kernel;
  j["signature"] = signature;
  j["target"] = target;
  j["best_config"] = nlohmann::json::parse(best_config.to_json());
  j["default_config"] = nlohmann::json::parse(default_config.to_json());
  j["best_ms"] = best_ms;
  j["default_ms"] = default_ms;
  j["speedup"] = speedup();
  j["candidates"] = candidates;
  j["failed"] = failed;
  j["rejected"] = rejected;
  j["duplicates"] = duplicates;
  j["too_slow"] = too_slow;
  j["cache_hit"] = cache_hit;
  j["cache_key"] = cache_key;
  j["seconds"] = seconds;
  j["failures"] = failures;
  j["conditions"] = conditions;
  j["noisy"] = noisy;
  return j.dump();
}

namespace {

using clock_type = std::chrono::steady_clock;

double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

std::string signature_of(const CompiledKernel::Impl& k) {
  std::string s;
  for (const auto& a : k.signature)
    s += a.is_tensor ? std::string(dtype_name(a.dtype)) + shape_to_string(a.shape) + ";" : "scalar;";
  return s;
}

// The fingerprint covers the kernel's Tile IR and the program the backend generates for its
// default config: a winner measured on code an older compiler generated is not reused (a
// change to lowering or an emitter changes the default's program, and would otherwise leave
// a stale "best" in the cache, timed on code that no longer exists).
tune::CacheKey cache_key(const CompiledKernel::Impl& k, const std::string& default_program) {
  tune::CacheKey key;
  key.kernel = k.name;
  key.fingerprint = tune::hash_hex(ir::print(k.fn) + "\n" + default_program);
  key.signature = signature_of(k);
  for (const auto& a : k.signature) key.dtypes += a.is_tensor ? std::string(dtype_name(a.dtype)) + "," : "s,";
  const backend::Machine& m = k.backend->machine();
  key.target = k.backend->name();
  key.hardware = m.identity();
  key.compiler = k.backend->identity();
  return key;
}

// The loosest dtype among inputs and outputs sets the tolerance.
DType tolerance_dtype(const CompiledKernel::Impl& k) {
  auto rank = [](DType d) {
    return d == DType::f8e5m2 ? 4 : d == DType::f8e4m3 ? 3 : d == DType::bf16 ? 2 : d == DType::f16 ? 1 : 0;
  };
  DType worst = DType::f32;
  for (const auto& t : k.fn.tensors) {
    // fp8 inputs hold exact values (computed on in f32): only an fp8 result needs fp8's tolerance.
    DType d = is_fp8(t.dtype) && t.origin == ir::TensorInfo::Param ? DType::bf16 : t.dtype;
    if (rank(d) > rank(worst)) worst = d;
  }
  return worst;
}

// One line on stderr, rewritten in place on a terminal; elsewhere (a log) a line every 2 s.
// Dots accumulate rounding over their K terms: widen the tolerance by sqrt(K) / 8 (at least 1).
double tolerance_scale(const CompiledKernel::Impl& k) {
  double kmax = 1;
  ir::walk(k.fn.body, [&](const ir::Op& op) {
    if (op.kind != ir::OpKind::Dot) return;
    const ir::Type& a = k.fn.type_of(op.operands[0]);
    const ir::Dim& d = a.shape.back();
    kmax = std::max(kmax, static_cast<double>(d.kind == ir::Dim::Tile ? k.fn.tiles[d.tile].extent() : d.size));
  });
  return std::max(1.0, std::sqrt(kmax) / 8);
}

class Progress {
 public:
  Progress(bool on, std::string name, double budget)
      : on_(on), tty_(isatty(2)), name_(std::move(name)), budget_(budget) {}
  void update(int done, int planned, double best_ms, double default_ms, double elapsed) {
    if (!on_ || (!tty_ && elapsed - last_ < 2.0)) return;
    last_ = elapsed;
    double estimate = done > 0 ? std::min(budget_, elapsed / done * planned) : budget_;
    // The search's times rank candidates (each one run, isolated); the final re-timing, in
    // this process, gives the reported ones.
    std::fprintf(stderr,
                 "%s[tune %s] %d/%d candidates, search best %.4f ms (%.2fx default), %.1f s elapsed, ~%.0f s left%s",
                 tty_ ? "\r" : "", name_.c_str(), done, planned, best_ms, default_ms / best_ms, elapsed,
                 std::max(0.0, estimate - elapsed), tty_ ? "   " : "\n");
    std::fflush(stderr);
  }
  void finish() {
    if (on_ && tty_) std::fprintf(stderr, "\n");
  }

 private:
  bool on_, tty_;
  std::string name_;
  double budget_, last_ = -1e9;
};

// What candidates are checked against: the caller's reference if given; else the reference
// interpreter's outputs; else (a shape too large to interpret in the time a tuning has) the
// default config's, run isolated. The interpreter comes before the default config because it
// shares nothing with what the candidates go through (lowering, code generation, the runtime
// GEMM): a bug there that the default config has too would make every candidate that repeats
// it "correct", and one that is right "wrong", if the default config were the oracle. A
// UserError from the interpreter (an out-of-bounds index read from a tensor, a float that does
// not convert to an integer) is the kernel's, for these inputs: it is reported, not tuned past.
// A value the interpreter cannot hold exactly (an i64 beyond 2^53) is not: the default config
// is the oracle then, as for shapes too large to interpret.

std::vector<Array> expected_outputs(const CompiledKernel::Impl& traced,
                                    const std::shared_ptr<CompiledKernel::Impl>& default_kernel,
                                    const std::vector<Arg>& args, const TuneOptions& opt) {
  if (opt.reference) return opt.reference();
  if (interp::work_estimate(traced.fn) <= interp::kAffordableWork) {
    try {
      return interp::interpret(traced.fn, args).outputs;
    } catch (const interp::Unrepresentable&) {
      // fall through to the default config's outputs
    } catch (const UserError& e) {
      throw UserError("kernel " + traced.name +
                      ": the reference interpreter, which checks the candidates, failed: " + e.what());
    }
  }
  return tune::outputs_isolated(CompiledKernel(default_kernel), args, opt.candidate_timeout_seconds);
}

struct Measured {
  Config config;
  std::shared_ptr<CompiledKernel::Impl> kernel;
  double ms = INFINITY;
};

}  // namespace

TuneReport tune::tune(KernelBase& kernel, const std::vector<Arg>& args, const TuneOptions& opt) {
  auto t0 = clock_type::now();
  std::shared_ptr<CompiledKernel::Impl> traced = kernel.trace(args);
  TuneReport R;
  R.kernel = kernel.name();
  R.signature = signature_of(*traced);
  R.target = traced->backend->name();
  R.default_config = traced->config;
  auto default_kernel = driver::specialize(*traced, traced->config);  // generated, not yet compiled
  tune::CacheKey key = cache_key(*traced, default_kernel->artifact.source);
  R.cache_key = key.describe();

  const char* force = std::getenv("PARHELION_FORCE_TUNE");
  bool forced = force && std::string(force) == "1";
  if (opt.use_cache && !forced && opt.effort != Effort::none) {
    bool corrupt = false;
    if (auto e = tune::cache_lookup(key, &corrupt)) {
      try {
        traced->spec.validate(e->best_config);
        R.best_config = e->best_config;
        R.best_ms = e->best_ms;
        R.default_ms = e->default_ms;
        R.cache_hit = true;
        R.conditions = e->conditions;
        R.noisy = e->noisy;
        R.seconds = since(t0);
        return R;
      } catch (const UserError&) {
        // A config that no longer fits the space (the kernel changed): tune again.
      }
    }
  }

  const double timeout = opt.candidate_timeout_seconds;
  const DType tol = tolerance_dtype(*traced);
  const double tol_scale = tolerance_scale(*traced);
  tune::TimingPlan plan;
  tune::MachineConditions conditions;
  conditions.reference_before_ms = tune::reference_loop_ms();
  tune::measure_contention(conditions, traced->backend->machine().threads);

  driver::load(*default_kernel);
  std::vector<Array> expected = expected_outputs(*traced, default_kernel, args, opt);

  if (opt.effort == Effort::none) {
    tune::RunResult r =
        tune::run_isolated(CompiledKernel(default_kernel), args, expected, tol, tol_scale, Fault::none, timeout, plan);
    if (!r.good()) throw UserError("kernel " + kernel.name() + ": the default config failed: " + r.describe());
    R.best_config = R.default_config;
    R.best_ms = R.default_ms = r.ms;
    R.candidates = 1;
    R.seconds = since(t0);
    return R;
  }

  double budget = opt.budget_seconds > 0 ? opt.budget_seconds : opt.effort == Effort::quick ? 30.0 : 300.0;
  int max_candidates = opt.effort == Effort::quick ? 40 : 400;
  std::vector<Config> seeds = {traced->config};
  if (opt.use_cache)
    for (const Config& c : tune::cache_neighbours(key)) seeds.push_back(c);
  std::unique_ptr<tune::SearchStrategy> search = opt.effort == Effort::quick
                                                     ? tune::make_pattern_search(traced->spec, opt.seed, seeds)
                                                     : tune::make_differential_evolution(traced->spec, opt.seed, seeds);

  // The search's points name every knob (an unset vector width is the widest there): its point of
  // the default is the default, measured, compared and reported as such.
  const tune::ConfigCodec codec(traced->spec);
  const Config default_point = codec.decode(codec.encode(traced->config));

  Progress progress(opt.progress, kernel.name(), budget);
  std::map<std::string, double> by_source;  // generated source -> measured ms
  std::vector<Measured> measured;
  double best_ms = INFINITY;
  const int batch_size = std::max(1, std::min(traced->backend->machine().threads, 4));

  // The budget bounds the search, but the first batch (the default and its seeds) always runs.
  while (R.candidates < max_candidates && (since(t0) < budget || measured.empty())) {
    std::vector<Config> batch = search->propose(batch_size);
    if (batch.empty()) break;
    // Lower and generate: reject what does not fit, skip duplicates of measured code.
    std::vector<Measured> to_compile;
    for (const Config& proposed : batch) {
      const Config& c = proposed == default_point ? traced->config : proposed;
      ++R.candidates;
      try {
        Measured m{c, driver::specialize(*traced, c)};
        auto dup = by_source.find(m.kernel->artifact.source);
        if (dup != by_source.end()) {
          ++R.duplicates;
          search->observe({c, dup->second, std::isfinite(dup->second)});
          continue;
        }
        by_source[m.kernel->artifact.source] = INFINITY;
        to_compile.push_back(std::move(m));
      } catch (const UserError& e) {
        ++R.rejected;
        search->observe({c, 0, false});
      }
    }
    // Compile in parallel (each compile is its own compiler process).
    std::vector<std::string> compile_errors(to_compile.size());
    std::vector<std::thread> workers;
    for (size_t i = 0; i < to_compile.size(); ++i)
      workers.emplace_back([&, i] {
        try {
          driver::load(*to_compile[i].kernel);
        } catch (const std::exception& e) {
          compile_errors[i] = e.what();
        }
      });
    for (auto& w : workers) w.join();
    // Run each one isolated, one at a time (timings must not overlap).
    for (size_t i = 0; i < to_compile.size(); ++i) {
      Measured& m = to_compile[i];
      tune::RunResult r;
      if (!compile_errors[i].empty()) {
        r.status = tune::RunResult::error;
        r.detail = "compile failed: " + compile_errors[i].substr(0, compile_errors[i].find('\n'));
      } else {
        Fault fault = opt.inject_fault ? opt.inject_fault(m.config) : Fault::none;
        // A candidate gets the time of ~10 runs at 10x the best so far (at least 2 s): a config
        // that slow cannot win, and waiting for it would spend the budget.
        double limit = std::isfinite(best_ms) ? std::min(timeout, std::max(2.0, 10 * 10 * best_ms / 1000)) : timeout;
        r = tune::run_isolated(CompiledKernel(m.kernel), args, expected, tol, tol_scale, fault, limit, plan);
        if (r.status == tune::RunResult::timeout && limit < timeout) {
          ++R.too_slow;  // not a failure: just not a contender
          R.failures.push_back(m.config.to_json() + ": stopped after " + std::to_string(limit) +
                               " s, over 10x slower than the best so far (not counted as failed)");
          search->observe({m.config, 0, false});
          continue;
        }
      }
      if (r.good()) {
        m.ms = r.ms;
        by_source[m.kernel->artifact.source] = r.ms;
        if (m.config == traced->config) R.default_ms = r.ms;
        best_ms = std::min(best_ms, r.ms);
        measured.push_back(m);
      } else {
        ++R.failed;
        R.failures.push_back(m.config.to_json() + ": " + r.describe());
      }
      search->observe({m.config, r.ms, r.good()});
    }
    progress.update(R.candidates, max_candidates, best_ms, R.default_ms > 0 ? R.default_ms : best_ms, since(t0));
  }
  progress.finish();
  if (measured.empty())
    throw UserError("kernel " + kernel.name() + ": no config ran correctly (" + std::to_string(R.failed) + " failed, " +
                    std::to_string(R.rejected) + " did not fit)" +
                    (R.failures.empty() ? "" : "; first failure: " + R.failures.front()));

  // Re-time the finalists (and the default) interleaved, three rounds, here in this process
  // with the routine and settings `parhelion run` times with (runtime/timing.h), so that the
  // winner's reported time is what a call of it takes; then the reference loops. On a noisy
  // machine (the winner's rounds, the reference loop or the every-core loop moved by over
  // 5%), more rounds. Keep the median. The candidates' search timings come from isolated
  // children (a fork: inputs copy-on-write, a fresh thread pool) and only rank them; each
  // finalist already ran correctly there, with these arguments.
  std::sort(measured.begin(), measured.end(), [](const Measured& a, const Measured& b) { return a.ms < b.ms; });
  std::vector<Measured> finalists(measured.begin(), measured.begin() + std::min<size_t>(3, measured.size()));
  bool default_in = false;
  for (const Measured& m : finalists) default_in |= m.config == traced->config;
  if (!default_in)
    for (const Measured& m : measured)
      if (m.config == traced->config) finalists.push_back(m);
  std::vector<std::vector<double>> times(finalists.size());
  // A kernel that stores to its arguments runs on copies of them: the caller's stay as given.
  std::vector<Array> copies;
  copies.reserve(args.size());
  std::vector<Arg> timing_args;
  int param = 0;  // the tensor parameter's index, as written_params counts them
  for (const Arg& a : args) {
    const std::vector<int>& w = traced->written_params;
    if (a.is_tensor() && std::find(w.begin(), w.end(), param++) != w.end()) {
      copies.push_back(a.array->clone());
      timing_args.emplace_back(copies.back());
    } else {
      timing_args.push_back(a);
    }
  }
  auto retime = [&](int rounds) {
    for (int round = 0; round < rounds; ++round)
      for (size_t i = 0; i < finalists.size(); ++i) {
        // `run`'s settings (10 repetitions over at least 0.2 s) for kernels of up to 30 ms;
        // fewer for slower ones (at least 3), so that a quick tune stays within its minute.
        const double ms = finalists[i].ms;
        const bool fast = ms <= 30;
        const int reps = fast ? 10 : std::max(3, static_cast<int>(300 / ms));
        const int warmup = (round == 0 ? 1 : 0) + (fast ? 1 : 0);
        CompiledKernel k(finalists[i].kernel);
        times[i].push_back(time_it([&] { k.run(timing_args); }, warmup, reps, fast ? 0.2 : 0).median_ms);
      }
    conditions.rounds += rounds;
  };
  size_t best = 0;
  std::vector<double> med(finalists.size());
  auto choose = [&] {
    best = 0;
    for (size_t i = 0; i < finalists.size(); ++i) {
      std::vector<double> t = times[i];
      std::sort(t.begin(), t.end());
      med[i] = t[t.size() / 2];
      if (finalists[i].config == traced->config) R.default_ms = med[i];
      if (med[i] < med[best]) best = i;
    }
    conditions.spread = tune::spread_of(times[best]);
    conditions.reference_after_ms = tune::reference_loop_ms();
    tune::measure_contention(conditions, traced->backend->machine().threads);
  };
  const double before_rounds = since(t0);
  retime(3);
  choose();
  // More rounds on a noisy machine, one at a time, up to 8, while the next one fits the time the
  // tune may take: a quick tune its minute (55 s, whatever budget its search had), a full one
  // 20% past its budget. A search that used its whole budget still gets them: they are what
  // makes its reported time one that `run` repeats.
  const double round_seconds = (since(t0) - before_rounds) / 3;
  const double deadline = opt.effort == Effort::quick ? std::max(55.0, budget) : 1.2 * budget;
  for (int extra = 0; extra < 8 && conditions.noisy() && since(t0) + round_seconds < deadline; ++extra) {
    retime(1);
    choose();
  }
  R.conditions = conditions.describe();
  R.noisy = conditions.noisy();
  R.best_config = finalists[best].config;
  R.best_ms = med[best];
  if (R.default_ms <= 0) R.default_ms = R.best_ms;  // the default failed: nothing to compare with
  R.seconds = since(t0);
  if (opt.use_cache)
    tune::cache_store(key, {R.best_config, R.best_ms, R.default_ms, R.signature, R.conditions, R.noisy});
  return R;
}

}  // namespace parhelion

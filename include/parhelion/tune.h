// Autotuning: search a kernel's config space for the fastest correct config on this machine
// and shape, and cache the winner on disk.
//
//   ph::TuneOptions opt;
//   opt.effort = ph::Effort::quick;
//   ph::TuneReport r = kernel.tune({x}, opt);   // or a cached winner
//   kernel.pin_config(r.best_config);
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "parhelion/array.h"
#include "parhelion/config.h"

namespace parhelion {

enum class Effort { none, quick, full };
const char* effort_name(Effort e);
bool parse_effort(const std::string& s, Effort* out);

// What a candidate's isolated run is made to do, for testing the tuner's failure handling.
enum class Fault { none, crash, hang, wrong_result };

struct TuneOptions {
  Effort effort = Effort::quick;
  double budget_seconds = 0;  // 0: the effort's default (quick 30 s, full 300 s)
  uint64_t seed = 0;
  bool progress = true;                   // a progress line on stderr
  bool use_cache = true;                  // read and write the on-disk cache (PARHELION_FORCE_TUNE=1 skips reading)
  double candidate_timeout_seconds = 20;  // compile and run limits per candidate
  // Expected outputs to check candidates against (e.g. a reference); default: the default
  // config's outputs.
  std::function<std::vector<Array>()> reference;
  // Test hook: run in each candidate's child process before it runs.
  std::function<Fault(const Config&)> inject_fault;
};

struct TuneReport {
  std::string kernel, signature, target, cache_key;
  Config best_config, default_config;
  double best_ms = 0, default_ms = 0;
  int candidates = 0;  // configs measured (including failed ones)
  int failed = 0;      // crashed, hung, wrong, or failed to compile
  int rejected = 0;    // did not fit fast memory: rejected before compiling
  int duplicates = 0;  // generated the same code as an earlier candidate
  int too_slow = 0;    // stopped at 10x the best time so far (not failures)
  bool cache_hit = false;
  double seconds = 0;
  // How quiet the machine was while measuring (tune/conditions.h), e.g. "quiet: reference loop
  // 2.01 -> 2.03 ms, winner's spread 3% over 3 rounds"; noisy: more rounds were timed, and the
  // winner may differ on a quiet machine. (A cache hit gives the conditions it was tuned under.)
  std::string conditions;
  bool noisy = false;
  std::vector<std::string> failures;  // one line per failed candidate: config and reason
  double speedup() const { return best_ms > 0 ? default_ms / best_ms : 1; }
  std::string to_json() const;
};

}  // namespace parhelion

// The differential tester: random programs (generate.h) run on every backend with random
// configs from their ConfigSpecs and compared with the Tile IR interpreter, the oracle that
// shares nothing with the compiler's lowering. In the spirit of Csmith and YARPGen.
//
// Each program runs in a child process (a crash or a hang is a finding, not the end of the
// run): the interpreter's outputs, then the cpu backend at the default config and at random
// ones, each compared with a tolerance that follows the program's dtypes and reduction
// lengths. A sample of programs is also emitted for a TPU and run in JAX's TPU interpret mode,
// and another for a GPU and run in Triton's interpreter.
// A failing program is minimized (subtrees replaced by their operands or by numbers, extents
// shrunk) while it keeps failing the same way, and reported as a self-contained C++ kernel
// with its shapes and config.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "fuzz/program.h"

namespace parhelion::fuzz {

struct Finding {
  std::string kind;     // mismatch, crash, timeout, internal error, compile error, rejected, pallas ...
  std::string backend;  // cpu, pallas or triton
  std::string config;   // the config (JSON) it failed at
  std::string detail;   // the error text or the largest difference
  uint64_t seed = 0;    // the program's seed (`parhelion fuzz --seed S --programs 1` replays it)
  Program program;      // minimized
  std::string cpp;      // the minimized program as a C++ kernel
  std::string module;   // pallas, triton: the emitted module that failed
};

struct FuzzOptions {
  uint64_t seed = 1;
  double seconds = 60;          // stop after this long...
  int64_t max_programs = -1;    // ...or after this many programs (-1: no limit)
  int configs_per_program = 3;  // the cpu default and random configs
  int pallas_every = 8;         // one program in this many also runs on pallas (0: never)
  int triton_every = 8;         // one program in this many also runs on triton (0: never)
  // Triton modules are also compiled ahead of time for these architectures (sm_90, sm_100): a
  // failed compile is a finding, as a failed run is (empty: interpreted only).
  std::vector<int> triton_archs = {90, 100};
  bool minimize = true;
  double minimize_seconds = 120;                // per finding
  std::string family;                           // "": every family
  std::function<void(const std::string&)> log;  // progress lines
};

// A backend whose modules run in Python (pallas, triton): what its sample of programs gave.
struct BackendCounts {
  int64_t runs = 0;         // modules run (pallas: TPU interpret mode; triton: Triton's interpreter)
  int64_t unsupported = 0;  // modules the backend refused with a clear error
  // Those refusals by reason (the message without its source line): what to build next.
  std::map<std::string, int64_t> refusals;
};

struct FuzzReport {
  int64_t programs = 0;
  int64_t cpu_runs = 0;                             // compiled configs compared with the interpreter
  int64_t cpu_runs_streamed = 0;                    // of those, runs with cache hints (lower/cache_hints.h)
  int64_t not_fitting = 0;                          // configs refused for fast memory (clean UserErrors, expected)
  std::map<std::string, BackendCounts> by_backend;  // "pallas", "triton"
  std::map<std::string, int64_t> by_family;
  std::vector<Finding> findings;
  double seconds = 0;
};

FuzzReport fuzz(const FuzzOptions& options);

// Runs one program against the interpreter on the cpu backend at `configs` configs (in a child
// process). Returns the findings (empty: it agrees everywhere).
std::vector<Finding> check_on_cpu(const Program& p, uint64_t seed, int configs, FuzzReport* counts = nullptr);

}  // namespace parhelion::fuzz

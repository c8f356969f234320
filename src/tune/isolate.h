// Running a candidate in a child process, so that a crash, a hang or a runaway allocation
// costs one candidate, not the tuning run. The child is forked from the tuner (it inherits the
// compiled kernel and the inputs); results come back through a pipe, outputs through shared
// memory.
#pragma once

#include <string>
#include <vector>

#include "parhelion/kernel.h"
#include "parhelion/tune.h"

namespace parhelion::tune {

struct RunResult {
  enum Status { ok, crashed, timeout, wrong, error } status = error;
  double ms = 0;       // median of the timed repeats
  double max_err = 0;  // against the expected outputs
  std::string detail;  // why it failed
  bool good() const { return status == ok; }
  std::string describe() const;
};

struct TimingPlan {
  int warmup = 2;
  int min_reps = 5;
  int max_reps = 50;
  double min_seconds = 0.05;
};

// Runs `k` on `args` in a child: applies `fault`, compares the outputs with `expected` (dtype-
// aware tolerance of `tolerance_dtype`), then times it. Kills the child after `timeout_s`.
RunResult run_isolated(const CompiledKernel& k, const std::vector<Arg>& args, const std::vector<Array>& expected,
                       DType tolerance_dtype, double tolerance_scale, Fault fault, double timeout_s,
                       const TimingPlan& plan);

// Runs `k` once in a child and returns its outputs. Throws UserError if the child fails.
std::vector<Array> outputs_isolated(const CompiledKernel& k, const std::vector<Arg>& args, double timeout_s);

}  // namespace parhelion::tune

// `parhelion bench --suite`: the seed's kernel table on this machine. Every kernel of
// bench/suite.json at f32 and bf16, Parhelion (tuned configs) against PyTorch eager and
// torch.compile (and OpenBLAS/oneDNN for the matmuls), interleaved in one run, each checked
// against eager's output before it is timed; a Markdown table with geomean speed-ups and the
// percent of roofline, or JSON rows, and a PNG chart.
#pragma once

#include <string>

namespace parhelion::tools {

struct SuiteOptions {
  std::string suite_file;  // default: bench/suite.json in the source tree
  std::string only;        // run only this kernel
  int threads = 2;
  int rounds = 3;
  double tune_budget = 10;  // seconds of `quick` tuning per case (cached winners are reused)
  bool json = false;
  std::string png;  // write the speed-up chart here
};

int run_suite(const SuiteOptions& o);

}  // namespace parhelion::tools

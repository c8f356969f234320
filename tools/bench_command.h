// `parhelion bench`: the matmul family against torch eager, OpenBLAS and oneDNN, and the machine's
// compute peaks (f32 FMA, bf16 dot, AMX tiles), measured in one run.
#pragma once

#include <string>
#include <vector>

namespace parhelion::tools {

struct BenchOptions {
  std::vector<std::string> kernels;  // empty: the matmul family
  std::vector<int> threads = {1, 2};
  bool json = false;
  bool quick = false;  // smaller shapes, fewer rounds
  bool tune = false;   // tune Parhelion's configs (quick) before timing
  int rounds = 3;
};

// The caller restarts the process without OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE first (OpenBLAS
// reads them when it loads).
int run_bench(const BenchOptions& o);

}  // namespace parhelion::tools

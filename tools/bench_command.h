// `parhelion bench`: the matmul family against torch eager, OpenBLAS and oneDNN, and the machine's
// compute peaks (f32 FMA, bf16 dot, AMX tiles), measured in one run.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "parhelion/array.h"
#include "parhelion/dtype.h"

namespace parhelion::tools {

struct BenchOptions {
  std::vector<std::string> kernels;  // empty: the matmul family
  std::vector<int> threads = {1, 2};
  bool json = false;
  bool quick = false;  // smaller shapes, fewer rounds
  bool tune = false;   // tune Parhelion's configs (quick) before timing
  int rounds = 3;
  // One case instead of the kernel's benchmark shapes and dtypes (`bench matmul --shape
  // 2048,2048,2048 --dtype bf16`): on a slow host the whole table takes many minutes.
  std::optional<Shape> shape;
  std::optional<DType> dtype;
};

// The caller restarts the process without OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE first (OpenBLAS
// reads them when it loads).
int run_bench(const BenchOptions& o);

}  // namespace parhelion::tools

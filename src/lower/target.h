// A compilation target: what the lowering and the backends need to know about the machine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace parhelion::lower {

struct Target {
  std::string name = "cpu";  // or "pallas" (see tpu.h)
  std::string tpu;           // pallas: the TPU generation, e.g. "v7x"
  int64_t fast_memory_bytes = 1 << 20;  // per core: what one grid step's blocks must fit in
  int threads = 1;                      // hardware threads available to a launch
  std::string cpu_model;
  std::string features;  // the host's ISA features that code generation uses, e.g. "avx512f avx2"
  // How inner tile loops may move their blocks (config knob inner_loops[i].strategy); the
  // first is the default. The cpu also reads blocks in place through its caches ("stream").
  std::vector<std::string> inner_strategies = {"stream", "pipeline", "resident"};

  // The machine this process runs on: L2 per core (sysfs, else cpuid), hardware threads, model.
  // PARHELION_FAST_MEMORY (bytes, or with K/M suffix) overrides the fast-memory budget and
  // PARHELION_NUM_THREADS the thread count.
  static const Target& host();
};

std::string format_bytes(int64_t bytes);

}  // namespace parhelion::lower

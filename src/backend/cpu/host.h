// The machine the cpu backend compiles for: this host, detected at run time (the project
// runs on hosts that change: never assume a cache size or an ISA).
#pragma once

#include <cstdint>
#include <string>

namespace parhelion::backend::cpu {

struct Host {
  int64_t fast_memory_bytes = 1 << 20;   // L2 per core
  int64_t first_cache_bytes = 32 << 10;  // L1 data cache per core
  int threads = 1;                       // hardware threads
  std::string cpu_model;
  std::string features;  // the ISA features code generation uses, e.g. "avx2 fma avx512f"

  // This process's host: L2 and L1d per core (sysfs, else cpuid), hardware threads, model, features.
  // PARHELION_FAST_MEMORY (bytes, or with K/M suffix) overrides the fast-memory budget (and caps
  // the first cache's, which lies inside it) and
  // PARHELION_NUM_THREADS the thread count.
  static const Host& detect();
};

}  // namespace parhelion::backend::cpu

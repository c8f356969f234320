#include "tune/conditions.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>

namespace parhelion::tune {

double MachineConditions::drift() const {
  return reference_before_ms > 0 ? std::abs(reference_after_ms / reference_before_ms - 1) : 0;
}

bool MachineConditions::noisy() const { return drift() > kNoisy || spread > kNoisy; }

std::string MachineConditions::describe() const {
  char s[256];
  std::snprintf(s, sizeof s, "%s: reference loop %.2f -> %.2f ms, winner's spread %.0f%% over %d rounds",
                noisy() ? "noisy" : "quiet", reference_before_ms, reference_after_ms, spread * 100, rounds);
  return s;
}

double reference_loop_ms() {
  std::vector<double> ms;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    // xorshift64: each step needs the last, so its time is the core's, whatever else runs.
    volatile uint64_t seed = 88172645463325252ull;
    uint64_t x = seed;
    for (int i = 0; i < 2000000; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
    }
    seed = x;
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double spread_of(std::vector<double> times) {
  if (times.size() < 2) return 0;
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  return median > 0 && std::isfinite(times.back()) ? (times.back() - times.front()) / median : 0;
}

}  // namespace parhelion::tune

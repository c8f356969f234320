#include "runtime/timing.h"

#include <algorithm>
#include <chrono>

#include "parhelion/error.h"

namespace parhelion {

Timing time_it(const std::function<void()>& fn, int warmup, int reps, double min_seconds) {
  using clock = std::chrono::steady_clock;
  PH_CHECK(reps >= 1, "time_it needs at least one repetition (callers validate --reps)");
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> ms;
  auto start = clock::now();
  while (static_cast<int>(ms.size()) < reps ||
         (std::chrono::duration<double>(clock::now() - start).count() < min_seconds &&
          static_cast<int>(ms.size()) < 10 * reps)) {
    auto t0 = clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  Timing t;
  t.reps = static_cast<int>(ms.size());
  t.median_ms = ms[ms.size() / 2];
  t.min_ms = ms.front();
  t.max_ms = ms.back();
  return t;
}

}  // namespace parhelion

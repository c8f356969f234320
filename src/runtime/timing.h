// Wall-clock timing: warm-up, then the median of repeats. One routine for `parhelion run`, the
// benchmarks and the autotuner's final re-timing, so that the time the tuner reports for its
// winner is the time `run` measures for it.
#pragma once

#include <functional>
#include <vector>

namespace parhelion {

struct Timing {
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int reps = 0;
};

// Runs fn `warmup` times, then repeats it until `reps` samples and at least `min_seconds`
// have passed (capped at 10 * reps samples); reports the median.
Timing time_it(const std::function<void()>& fn, int warmup = 2, int reps = 10, double min_seconds = 0.2);

}  // namespace parhelion

// How quiet the machine was while the tuner measured. The host is shared: another tenant's load
// slows some timings and not others, and a winner picked then may lose on a quiet machine. The
// tuner times a fixed reference loop (no memory traffic) before its search and after its final
// re-timing, on one core and on every core at once, and looks at the spread of the winner's
// re-timing rounds. Load on one core of two leaves the one-core loop as fast as ever but makes
// the every-core one slower, and would make a one-thread config win: that is why both are
// timed. When any of them moved by more than kNoisy, the tuner says so, re-times more rounds,
// and records the conditions with the cache entry (a cache hit reports them again;
// PARHELION_FORCE_TUNE=1 tunes afresh on a quiet machine).
#pragma once

#include <string>
#include <vector>

namespace parhelion::tune {

struct MachineConditions {
  // The agreement the tuner promises between its reported time and `run`'s: a machine on which
  // any of the measures moved by more than that cannot back it.
  static constexpr double kNoisy = 0.05;
  double reference_before_ms = 0, reference_after_ms = 0;
  double spread = 0;      // the winner's (slowest - fastest) / median over its re-timing rounds
  int threads = 1;        // the cores the every-core loop ran on
  double contention = 1;  // the every-core loop's time over the one-core loop's (1: each core free)
  int rounds = 0;         // re-timing rounds of the finalists
  double drift() const;   // |after / before - 1| of the reference loop
  bool noisy() const;
  // "quiet: reference loop 2.01 -> 2.03 ms, 1.02x on 2 cores at once, winner's spread 3% over 3 rounds"
  std::string describe() const;
};

// The median of 5 timings of the reference loop: a dependent chain of integer operations
// (about 2 ms on a 3 GHz core) that neither caches nor the compiler can shorten.
double reference_loop_ms();
// The same loop on `threads` threads at once: the median of 5 timings of the slowest.
double parallel_reference_loop_ms(int threads);
// Times both loops and records their ratio in `c` (the worse of this and what it held).
void measure_contention(MachineConditions& c, int threads);

// (slowest - fastest) / median of `times`; 0 for fewer than 2.
double spread_of(std::vector<double> times);

}  // namespace parhelion::tune

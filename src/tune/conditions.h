// How quiet the machine was while the tuner measured. The host is shared: another tenant's load
// slows some timings and not others, and a winner picked then may lose on a quiet machine. The
// tuner times a fixed reference loop (one core, no memory traffic) before its search and after
// its final re-timing, and looks at the spread of the winner's re-timing rounds; when either
// moved by more than kNoisy, it says so, re-times more rounds, and records the conditions with
// the cache entry.
#pragma once

#include <string>
#include <vector>

namespace parhelion::tune {

struct MachineConditions {
  static constexpr double kNoisy = 0.10;
  double reference_before_ms = 0, reference_after_ms = 0;
  double spread = 0;     // the winner's (slowest - fastest) / median over its re-timing rounds
  int rounds = 0;        // re-timing rounds of the finalists
  double drift() const;  // |after / before - 1| of the reference loop
  bool noisy() const;
  std::string describe() const;  // "quiet: reference loop 2.01 -> 2.03 ms, winner's spread 3% over 3 rounds"
};

// The median of 5 timings of the reference loop: a dependent chain of integer operations
// (about 2 ms on a 3 GHz core) that neither caches nor the compiler can shorten.
double reference_loop_ms();

// (slowest - fastest) / median of `times`; 0 for fewer than 2.
double spread_of(std::vector<double> times);

}  // namespace parhelion::tune

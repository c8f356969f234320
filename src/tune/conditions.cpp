#include "tune/conditions.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <thread>

namespace parhelion::tune {

double MachineConditions::drift() const {
  return reference_before_ms > 0 ? std::abs(reference_after_ms / reference_before_ms - 1) : 0;
}

bool MachineConditions::noisy() const { return drift() > kNoisy || spread > kNoisy || contention > 1 + kNoisy; }

std::string MachineConditions::describe() const {
  char s[320];
  std::snprintf(s, sizeof s,
                "%s: reference loop %.2f -> %.2f ms, %.2fx on %d cores at once, winner's spread %.0f%% over %d rounds",
                noisy() ? "noisy" : "quiet", reference_before_ms, reference_after_ms, contention, threads, spread * 100,
                rounds);
  return s;
}

namespace {

// xorshift64: each step needs the last, so its time is the core's, whatever else runs.
void reference_loop() {
  volatile uint64_t seed = 88172645463325252ull;
  uint64_t x = seed;
  for (int i = 0; i < 2000000; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
  }
  seed = x;
}

double median_of_5(const std::function<void()>& fn) {
  std::vector<double> ms;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

double reference_loop_ms() { return median_of_5(reference_loop); }

double parallel_reference_loop_ms(int threads) {
  return median_of_5([threads] {
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) workers.emplace_back(reference_loop);
    for (std::thread& w : workers) w.join();
  });
}

void measure_contention(MachineConditions& c, int threads) {
  c.threads = std::max(1, threads);
  if (c.threads < 2) return;
  // Both on threads of their own, so that starting threads costs the same in each.
  const double one = parallel_reference_loop_ms(1);
  const double all = parallel_reference_loop_ms(c.threads);
  if (one > 0) c.contention = std::max(c.contention, all / one);
}

double spread_of(std::vector<double> times) {
  if (times.size() < 2) return 0;
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  return median > 0 && std::isfinite(times.back()) ? (times.back() - times.front()) / median : 0;
}

}  // namespace parhelion::tune

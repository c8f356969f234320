// Guided self-scheduling of a launch's grid steps over the threads of a parallel_run.
//
// A thread claims a range of a share of the steps left (half of an even split, at least one),
// so that the early claims are long runs of consecutive steps, whose operand blocks the caches
// share, and the last ones short. A thread slowed by another process on its core then does
// fewer steps instead of leaving the others waiting at the end, as a fixed split of the grid did
// (on a shared 2-core machine, one busy core made a 2-thread matmul no faster than 1 thread).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <utility>

namespace parhelion::runtime {

class StepQueue {
 public:
  StepQueue(int64_t steps, int threads) : steps_(steps), threads_(std::max(1, threads)) {}

  // The next range [begin, end) of steps for the calling thread; empty (begin == end) when all
  // have been claimed. Every step is handed out exactly once.
  std::pair<int64_t, int64_t> claim() {
    int64_t begin = next_.load(std::memory_order_relaxed);
    while (begin < steps_) {
      const int64_t count = std::max<int64_t>(1, (steps_ - begin) / (2 * threads_));
      if (next_.compare_exchange_weak(begin, begin + count, std::memory_order_relaxed)) return {begin, begin + count};
    }
    return {steps_, steps_};
  }

 private:
  std::atomic<int64_t> next_{0};
  const int64_t steps_;
  const int threads_;
};

}  // namespace parhelion::runtime

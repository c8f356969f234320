// A persistent pool of worker threads for running a launch's grid steps in parallel.
//
// The calling thread takes part as worker 0, so a 1-thread launch runs inline with no
// handoff. Workers spin briefly before sleeping: back-to-back launches (a kernel with several
// launches, a benchmark loop) then cost a few microseconds of fork/join, not a futex wakeup.
#pragma once

#include <functional>

namespace parhelion::runtime {

// Runs fn(0) .. fn(n-1) concurrently on n threads (the caller is one of them) and waits.
// Exceptions from workers are rethrown on the caller.
void parallel_run(int n, const std::function<void(int)>& fn);

}  // namespace parhelion::runtime

// What a memory-bound kernel could reach if memory were free: the same kernel on a shape
// whose data stays in the caches, timed on one thread, with the instructions and cycles it
// retires where the host lets a process read its own counters (perf_event_open).
//
// A suite row below the memory roof is either leaving bandwidth unused or out of compute. The
// measurement tells which on the host at hand: its time, scaled to the row's bytes and thread
// count, is the fastest the row can run whatever the memory does, and its instruction count per
// element says why (docs/benchmarks.md).
#pragma once

#include <optional>
#include <string>

#include "kernels/registry.h"

namespace parhelion::bench {

struct ComputeBound {
  Shape shape;                          // the cache-resident shape it was measured at
  double ms = 0;                        // one call at that shape, one thread (a median)
  double ms_scaled = 0;                 // the same work as the row's shape over `threads` threads
  double instructions_per_element = 0;  // per element of the kernel's first input; 0: no counters
  double ipc = 0;                       // instructions per cycle; 0: no counters
};

// `entry` at `shape` (the row's) shrunk, from its first dim on, until its bytes fit half of one
// core's fast memory; its default config on one thread. `start`: the shape to shrink from
// instead, where halving the row's first dim would change what the kernel does (segment_sum's
// values per segment: bench/suite.json's "compute_bound_shape"). Its time is scaled by the
// bytes, so a fixed cost per call (a few microseconds) makes the bound a little low. nullopt
// where no shape fits, where the inputs are larger than what the kernel moves (a gather's
// table), or the kernel refuses the shape (`why` says which).
std::optional<ComputeBound> measure_compute_bound(const kernels::KernelEntry& entry, const Shape& shape, DType dtype,
                                                  int threads, const std::optional<Shape>& start, std::string* why);

}  // namespace parhelion::bench

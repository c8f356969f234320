// Cache hints, as lowering planned them (lower/cache_hints.h): the next grid step's blocks
// prefetched while this step computes. (Stores streamed past the caches: row_stores.cpp.)

#include <string>

#include "backend/cpu/emit/launch_emitter.h"
#include "lower/cache_hints.h"

namespace parhelion::backend::cpu::emit {

// One prefetch per cache line of elements [from, from + count) of the row's next-step
// counterpart, issued before they are computed: the lines arrive while they are.
void LaunchEmitter::prefetch_next_rows(const Op& host, Idx idx, size_t k, const std::string& from,
                                       const std::string& count) {
  for (const lower::Prefetch& f : L_.prefetches) {
    if (f.host != &host) continue;
    const int64_t per_line = lower::kCacheLineBytes / dtype_size(fn_.tensors[f.load->tensor].dtype);
    Idx at_idx = idx;
    at_idx[k] = "ph_pf";
    std::string at, guard;
    if (f.trip_tile < 0) {  // the same element of the next step's block
      offset_prefix_ = "pf_off_";
      at = tensor_address(*f.load, at_idx);
      offset_prefix_ = "off_";
      guard = "if (ph_pf_next)  // the next step's " + fn_.tensors[f.load->tensor].name;
    } else {  // of the loop's next trip: one block further along the loop's dim
      const std::string b = std::to_string(block_of(f.trip_tile)), t = tname(f.trip_tile);
      at_idx[static_cast<size_t>(f.trip_dim)] = "(" + b + " + " + at_idx[static_cast<size_t>(f.trip_dim)] + ")";
      at = tensor_address(*f.load, at_idx);
      guard = "if (off_" + t + " + " + b + " < " + trip_stop_.at(f.trip_tile) + ")  // the next trip's " +
              fn_.tensors[f.load->tensor].name;
    }
    line(guard);
    line("  for (int64_t ph_pf = " + from + "; ph_pf < " + from + " + " + count +
         "; ph_pf += " + std::to_string(per_line) + ") __builtin_prefetch(&" + at + ", 0, 2);");
  }
}

}  // namespace parhelion::backend::cpu::emit

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
    idx[k] = "ph_pf";
    offset_prefix_ = "pf_off_";
    const std::string at = tensor_address(*f.load, idx);
    offset_prefix_ = "off_";
    line("if (ph_pf_next)  // the next step's " + fn_.tensors[f.load->tensor].name);
    line("  for (int64_t ph_pf = " + from + "; ph_pf < " + from + " + " + count +
         "; ph_pf += " + std::to_string(per_line) + ") __builtin_prefetch(&" + at + ", 0, 2);");
  }
}

}  // namespace parhelion::backend::cpu::emit

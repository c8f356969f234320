// How much host memory a new allocation may take.
//
// Linux overcommits: malloc of more than the machine has usually succeeds, and the process is
// killed (or the machine swaps to a halt) when the pages are touched. An allocation that cannot
// fit must instead fail at once, as a UserError that says what it needs and what there is.
#pragma once

#include <cstddef>
#include <string>

namespace parhelion::runtime {

// Bytes a new allocation can take without swapping: MemAvailable from /proc/meminfo, else
// sysconf's free pages. PARHELION_MEMORY_LIMIT (a byte count, e.g. 512M) caps it, so that tests
// and shared machines can ask for a smaller budget than the machine has.
size_t available_host_memory();

// The UserError for `what` needing `needed` bytes when `available` are left.
[[noreturn]] void throw_out_of_memory(const std::string& what, size_t needed, size_t available);

}  // namespace parhelion::runtime

// Host memory for Arrays and kernel scratch.
//
// On these machines a first touch of a fresh 4 KiB page costs about 11 us (0.4 GB/s), so a
// kernel that writes into freshly mmapped memory measures page faults, not compute. The
// allocator therefore: aligns to 64 bytes (2 MiB for large blocks, so huge pages can back them),
// asks for transparent huge pages (madvise), and keeps freed blocks in size-class free lists
// for reuse instead of returning them to the OS.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace parhelion::runtime {

// Returns a block of at least `bytes` bytes, 64-byte aligned; freed (recycled) on release.
// A block larger than the memory available is a UserError naming `what` (see host_memory.h).
std::shared_ptr<void> allocate(size_t bytes, const std::string& what = "an allocation");

// Reserves `bytes` of address space with no memory behind it (Array::placeholder): distinct
// addresses for tracing, at no cost however large. Any access faults.
std::shared_ptr<void> reserve_address_space(size_t bytes, const std::string& what);

struct AllocatorStats {
  size_t blocks_allocated = 0;  // fresh blocks obtained from the OS
  size_t blocks_reused = 0;     // requests served from the free lists
  size_t bytes_cached = 0;      // bytes currently held in the free lists
};
AllocatorStats allocator_stats();

// Returns every cached block to the OS (tests, or a user low on memory).
void release_cached_memory();

}  // namespace parhelion::runtime

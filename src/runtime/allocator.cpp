#include "runtime/allocator.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "parhelion/error.h"
#include "runtime/host_memory.h"

namespace parhelion::runtime {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kLargeBlock = size_t{1} << 20;  // at or above this, align to huge pages

// Rounds a request up to a size class: powers of two below 1 MiB, 1/8 steps above, so that a
// recycled block is never more than ~12% larger than needed.
size_t size_class(size_t bytes) {
  if (bytes <= 64) return 64;
  size_t p = 64;
  while (p < bytes && p < kLargeBlock) p <<= 1;
  if (p >= bytes) return p;
  size_t top = size_t{1} << (63 - __builtin_clzll(bytes - 1) + 1);
  size_t step = top / 16;
  return (bytes + step - 1) / step * step;
}

struct Pool {
  std::mutex mu;
  std::map<size_t, std::vector<void*>> free_lists;
  AllocatorStats stats;
};

Pool& pool() {
  static Pool* p = new Pool();  // never destroyed: blocks may be released during static teardown
  return *p;
}

// `bytes` is the size class; `requested` what the caller asked for (the figure a user knows).
void* fresh_block(size_t bytes, size_t requested, const std::string& what) {
  // Small blocks are not worth a read of /proc/meminfo; a large one that cannot fit would be
  // granted by overcommit and then kill the process when its pages are touched.
  if (bytes >= kLargeBlock) {
    size_t available = available_host_memory();
    if (bytes > available) {
      release_cached_memory();  // blocks in our free lists count as used
      available = available_host_memory();
    }
    if (bytes > available) throw_out_of_memory(what, requested, available);
  }
  size_t align = bytes >= kLargeBlock ? kHugePage : 64;
  void* p = std::aligned_alloc(align, (bytes + align - 1) / align * align);
  if (!p) throw_out_of_memory(what, requested, available_host_memory());
  if (bytes >= kLargeBlock) madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

}  // namespace

std::shared_ptr<void> allocate(size_t bytes, const std::string& what) {
  size_t cls = size_class(bytes == 0 ? 1 : bytes);
  Pool& P = pool();
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(P.mu);
    auto it = P.free_lists.find(cls);
    if (it != P.free_lists.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      P.stats.blocks_reused++;
      P.stats.bytes_cached -= cls;
    } else {
      P.stats.blocks_allocated++;
    }
  }
  if (!p) p = fresh_block(cls, bytes, what);
  return std::shared_ptr<void>(p, [cls](void* q) {
    Pool& owner = pool();
    std::lock_guard<std::mutex> lock(owner.mu);
    owner.free_lists[cls].push_back(q);
    owner.stats.bytes_cached += cls;
  });
}

std::shared_ptr<void> reserve_address_space(size_t bytes, const std::string& what) {
  size_t length = std::max<size_t>(bytes, 1);
  void* p = mmap(nullptr, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    throw UserError(what + " needs " + std::to_string(bytes) +
                    " bytes of address space, more than this process can reserve");
  return std::shared_ptr<void>(p, [length](void* q) { munmap(q, length); });
}

AllocatorStats allocator_stats() {
  std::lock_guard<std::mutex> lock(pool().mu);
  return pool().stats;
}

void release_cached_memory() {
  Pool& P = pool();
  std::lock_guard<std::mutex> lock(P.mu);
  for (auto& [cls, list] : P.free_lists)
    for (void* p : list) std::free(p);
  P.free_lists.clear();
  P.stats.bytes_cached = 0;
}

}  // namespace parhelion::runtime

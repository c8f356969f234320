#include "runtime/host_memory.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>

#include "parhelion/error.h"
#include "runtime/format_bytes.h"
#include "runtime/parse_number.h"

namespace parhelion::runtime {
namespace {

size_t meminfo_available() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  size_t kib = 0;
  while (f >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : SIZE_MAX;
}

std::string bytes_text(size_t bytes) {
  return std::to_string(bytes) + " bytes (" + format_bytes(static_cast<int64_t>(bytes)) + ")";
}

}  // namespace

size_t available_host_memory() {
  size_t available = meminfo_available();
  if (const char* limit = std::getenv("PARHELION_MEMORY_LIMIT"); limit && *limit)
    available = std::min(available, static_cast<size_t>(parse_byte_size(limit, "PARHELION_MEMORY_LIMIT")));
  return available;
}

void throw_out_of_memory(const std::string& what, size_t needed, size_t available) {
  throw UserError(what + " needs " + bytes_text(needed) + " of memory, but only " + bytes_text(available) +
                  " are available");
}

}  // namespace parhelion::runtime

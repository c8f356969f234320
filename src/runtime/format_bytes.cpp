#include "runtime/format_bytes.h"

#include <cstdio>

namespace parhelion {

std::string format_bytes(int64_t b) {
  char buf[64];
  if (b >= (int64_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.1f GiB", b / 1073741824.0);
  else if (b >= (1 << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / 1048576.0);
  else if (b >= 1024)
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(b));
  return buf;
}

}  // namespace parhelion

#include "runtime/cache_dir.h"

#include <cstdlib>

namespace parhelion::runtime {

std::string cache_dir() {
  if (const char* d = std::getenv("PARHELION_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/parhelion";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/parhelion";
  return "/tmp/parhelion-cache";
}

}  // namespace parhelion::runtime

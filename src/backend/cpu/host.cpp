#include "backend/cpu/host.h"

#include <cpuid.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "parhelion/error.h"
#include "runtime/parse_number.h"

namespace parhelion::backend::cpu {
namespace {

// More threads than any host has: a larger PARHELION_NUM_THREADS is a typo.
constexpr int64_t kMaxThreads = 4096;

// The size of cpu0's cache of `level` and `type` ("Data", "Unified") in sysfs: the cache index
// whose level and type they are (L1d is index0 and L2 index2 on every Linux seen, but the
// numbering is not promised); 0 where there is none or its size has an unexpected format (the
// caller then asks the CPU).
int64_t sysfs_cache_bytes(const std::string& level, const std::string& type) {
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream level_file(dir + "level"), type_file(dir + "type"), size_file(dir + "size");
    std::string l, t, s;
    if (!(level_file >> l) || !(type_file >> t)) break;
    if (l != level || t != type) continue;
    if (!(size_file >> s)) return 0;
    try {
      return parse_byte_size(s, "a cache size in sysfs");  // e.g. "48K", "2048K"
    } catch (const UserError&) {
      return 0;
    }
  }
  return 0;
}

int64_t detect_l2_bytes() {
  if (const int64_t b = sysfs_cache_bytes("2", "Unified"); b > 0) return b;
  // cpuid 0x80000006: ECX[31:16] = L2 size in KiB (AMD and Intel).
  unsigned a, b, c, d;
  if (__get_cpuid(0x80000000, &a, &b, &c, &d) && a >= 0x80000006 && __get_cpuid(0x80000006, &a, &b, &c, &d) &&
      (c >> 16) > 0)
    return static_cast<int64_t>(c >> 16) * 1024;
  return 1 << 20;
}

// The level-1 data cache: sysfs, else cpuid leaf 4's level-1 data cache (Intel: ways x
// partitions x line x sets), else AMD's 0x80000005 (ECX[31:24] in KiB), else 32 KiB (every
// x86-64 core since 2006 has at least that).
int64_t detect_l1d_bytes() {
  if (const int64_t b = sysfs_cache_bytes("1", "Data"); b > 0) return b;
  unsigned a, b, c, d;
  if (__get_cpuid(0, &a, &b, &c, &d) && a >= 4)
    for (unsigned sub = 0; sub < 16 && __get_cpuid_count(4, sub, &a, &b, &c, &d) && (a & 0x1f) != 0; ++sub)
      if ((a & 0x1f) == 1 && ((a >> 5) & 7) == 1)  // a data cache, level 1
        return static_cast<int64_t>((b >> 22) + 1) * (((b >> 12) & 0x3ff) + 1) * ((b & 0xfff) + 1) * (int64_t{c} + 1);
  if (__get_cpuid(0x80000000, &a, &b, &c, &d) && a >= 0x80000005 && __get_cpuid(0x80000005, &a, &b, &c, &d) &&
      (c >> 24) > 0)
    return static_cast<int64_t>(c >> 24) * 1024;
  return 32 << 10;
}

std::string detect_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      return p == std::string::npos ? line : line.substr(p + 2);
    }
  return "unknown";
}

std::string detect_features() {
  std::string f;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) f += "avx2 ";
  if (__builtin_cpu_supports("fma")) f += "fma ";
  if (__builtin_cpu_supports("avx512f")) f += "avx512f ";
  if (__builtin_cpu_supports("avx512bw")) f += "avx512bw ";
  unsigned a, b, c, d;
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5))) f += "avx512bf16 ";
  if (!f.empty()) f.pop_back();
  return f;
}

}  // namespace

const Host& Host::detect() {
  static const Host detected = [] {
    Host h;
    h.fast_memory_bytes = detect_l2_bytes();
    h.first_cache_bytes = detect_l1d_bytes();
    // A set but unparsable override is refused: ignoring it would tune for the wrong machine.
    if (const char* e = std::getenv("PARHELION_FAST_MEMORY"); e && *e)
      h.fast_memory_bytes = parse_byte_size(e, "PARHELION_FAST_MEMORY");
    h.first_cache_bytes = std::min(h.first_cache_bytes, h.fast_memory_bytes);  // (inside it)
    h.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    if (const char* e = std::getenv("PARHELION_NUM_THREADS"); e && *e)
      h.threads = static_cast<int>(parse_integer(e, "PARHELION_NUM_THREADS", 1, kMaxThreads));
    h.cpu_model = detect_model();
    h.features = detect_features();
    return h;
  }();
  return detected;
}

}  // namespace parhelion::backend::cpu

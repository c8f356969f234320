#include "lower/target.h"

#include <cpuid.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

namespace parhelion::lower {
namespace {

int64_t parse_size(const std::string& s) {
  if (s.empty()) return 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string suf(end);
  if (suf == "K" || suf == "k" || suf == "KiB")
    v *= 1024;
  else if (suf == "M" || suf == "MiB")
    v *= 1024 * 1024;
  else if (suf == "G" || suf == "GiB")
    v *= 1024.0 * 1024 * 1024;
  return static_cast<int64_t>(v);
}

int64_t detect_l2_bytes() {
  std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index2/size");
  std::string s;
  if (f >> s) {
    int64_t b = parse_size(s);
    if (b > 0) return b;
  }
  // cpuid 0x80000006: ECX[31:16] = L2 size in KiB (AMD and Intel).
  unsigned a, b, c, d;
  if (__get_cpuid(0x80000000, &a, &b, &c, &d) && a >= 0x80000006 && __get_cpuid(0x80000006, &a, &b, &c, &d) &&
      (c >> 16) > 0)
    return static_cast<int64_t>(c >> 16) * 1024;
  return 1 << 20;
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

const Target& Target::host() {
  static const Target t = [] {
    Target t;
    t.fast_memory_bytes = detect_l2_bytes();
    if (const char* e = std::getenv("PARHELION_FAST_MEMORY"))
      if (int64_t v = parse_size(e); v > 0) t.fast_memory_bytes = v;
    t.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    if (const char* e = std::getenv("PARHELION_NUM_THREADS"))
      if (int v = std::atoi(e); v > 0) t.threads = v;
    t.cpu_model = detect_model();
    t.features = detect_features();
    return t;
  }();
  return t;
}

std::string format_bytes(int64_t b) {
  char buf[64];
  if (b >= (1 << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / 1048576.0);
  else if (b >= 1024)
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(b));
  return buf;
}

}  // namespace parhelion::lower

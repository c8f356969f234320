#include "backend/cpu/jit.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "backend/cpu/object_cache.h"
#include "parhelion/error.h"
#include "runtime/cache_dir.h"

namespace parhelion::backend::cpu {
namespace fs = std::filesystem;
namespace {

std::atomic<int> g_invocations{0};

std::string run_capture(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    *status = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *status = pclose(p);
  return out;
}

std::string shell_quote(const std::string& s) {
  std::string r = "'";
  for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return r + "'";
}

std::mutex g_mu;
std::map<std::string, std::weak_ptr<Module>> g_loaded;

}  // namespace

Module::~Module() {
  if (handle_) dlclose(handle_);
}

void* Module::symbol(const std::string& name) const {
  void* s = dlsym(handle_, name.c_str());
  if (!s) throw InternalError("symbol " + name + " missing from " + path_);
  return s;
}

std::string compiler_command() {
  const char* cxx = std::getenv("CXX");
  return cxx && *cxx ? cxx : "c++";
}

std::string compiler_identity() {
  static std::mutex mu;
  static std::map<std::string, std::string> ids;
  std::lock_guard<std::mutex> lock(mu);
  std::string cxx = compiler_command();
  auto it = ids.find(cxx);
  if (it != ids.end()) return it->second;
  int status = 0;
  std::string out = run_capture(cxx + " --version 2>&1", &status);
  std::string first = out.substr(0, out.find('\n'));
  if (status != 0 || first.empty()) first = "unknown compiler " + cxx;
  ids[cxx] = first;
  return first;
}

std::string compiler_flags() {
  // -march=native: the JIT compiles on the machine that runs the code, so the host's ISA
  // (AVX-512, AVX2, ...) is used without assuming it. No -ffast-math: NaN/inf semantics stay;
  // -fno-trapping-math and -fno-math-errno let selects and sqrt vectorize.
  // -mprefer-vector-width=512: GCC's tuning for AVX-512 Xeons keeps loops at 256 bits (a
  // frequency concern of Skylake's era), which halves the throughput of every exp, select and
  // reduction the kernels vectorize. On an AVX2 host whose tuning prefers 128 bits (AMD's Zen 1)
  // it means 256-bit vectors, which are faster for some kernels and slower for others there:
  // the config knob vector_bits narrows a kernel's (default_config.cpp).
  return "-std=c++17 -O3 -march=native -mprefer-vector-width=512 -fPIC -shared -fopenmp-simd -ffp-contract=fast "
         "-fno-math-errno -fno-trapping-math -fno-semantic-interposition";
}

int compiler_preferred_vector_bits() {
  static std::mutex mu;
  static std::map<std::string, int> bits;
  std::lock_guard<std::mutex> lock(mu);
  const std::string cxx = compiler_command();
  if (auto it = bits.find(cxx); it != bits.end()) return it->second;
  int status = 0, found = 0;
  // GCC lists its target options' values for this host, among them the line
  // "  -mprefer-vector-width=   \t\t128" ("none" where its tuning states no preference).
  std::istringstream out(run_capture(cxx + " -march=native -Q --help=target 2>/dev/null", &status));
  std::string name, value;
  for (std::string line; status == 0 && std::getline(out, line);) {
    std::istringstream words(line);
    if (words >> name >> value && name == "-mprefer-vector-width=" && !value.empty() &&
        value.find_first_not_of("0123456789") == std::string::npos && value.size() <= 4)
      found = std::stoi(value);
  }
  bits[cxx] = found;
  return found;
}

int compiler_invocations() { return g_invocations.load(); }

JitResult jit_compile(const std::string& source) {
  JitResult r;
  std::string flags = compiler_flags();
  r.key = content_hash(source + "\n//" + compiler_identity() + "\n//" + flags);
  std::string dir = runtime::cache_dir() + "/jit";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw UserError("cannot create the kernel cache directory " + dir + ": " + ec.message());
  std::string base = dir + "/" + r.key;
  r.source_path = base + ".cpp";
  std::string so = base + ".so";

  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (auto m = g_loaded[r.key].lock()) {
      r.module = m;
      r.cache_hit = true;
      return r;
    }
  }
  // A truncated or corrupted object (a crash or a full disk while it was written) would load
  // and then SIGBUS: check it against its manifest, and rebuild it if it does not match.
  // (Not deleted first: the rebuilt object replaces it atomically, and another process may be
  // committing the same entry right now.)
  if (!object_is_intact(so)) {
    write_file_atomically(r.source_path, source);
    static std::atomic<unsigned> builds{0};  // distinct temporary names across threads too
    std::string tag = std::to_string(getpid()) + "." + std::to_string(builds++);
    std::string tmp_so = base + ".so.tmp." + tag;
    std::string cmd =
        compiler_command() + " " + flags + " " + shell_quote(r.source_path) + " -o " + shell_quote(tmp_so) + " 2>&1";
    auto t0 = std::chrono::steady_clock::now();
    int status = 0;
    g_invocations++;
    std::string log = run_capture(cmd, &status);
    r.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (status != 0 || !fs::exists(tmp_so)) {
      fs::remove(tmp_so, ec);
      std::istringstream is(log);
      std::string ln, head;
      for (int i = 0; i < 30 && std::getline(is, ln); ++i) head += "  " + ln + "\n";
      throw CompileError(
          "the C++ compiler failed on generated code " + r.source_path + "\n  command: " + cmd + "\n" + head,
          r.source_path);
    }
    commit_object(tmp_so, so);
  } else {
    r.cache_hit = true;
  }
  void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    // A corrupt or truncated cache entry: drop it and compile again once.
    std::string err = dlerror();
    discard_object(so);
    if (r.cache_hit) return jit_compile(source);
    throw CompileError("cannot load compiled kernel " + so + ": " + err, r.source_path);
  }
  r.module = std::make_shared<Module>(h, so);
  std::lock_guard<std::mutex> lock(g_mu);
  g_loaded[r.key] = r.module;
  return r;
}

}  // namespace parhelion::backend::cpu

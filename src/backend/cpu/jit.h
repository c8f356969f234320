// The JIT: compiles a generated translation unit with the system compiler and loads it.
//
// Objects are cached on disk, keyed by a hash of the source, the compiler's identity
// (`$CXX --version`) and the flags, so a second process running the same kernel, shape and
// config compiles nothing. Cache directory: $PARHELION_CACHE_DIR, else
// $XDG_CACHE_HOME/parhelion, else ~/.cache/parhelion. Writes are atomic and durable (temp file,
// fsync, rename), and an object is loaded only if it matches its recorded size and hash, so
// neither a concurrent process nor an earlier crash leaves a half-written object to load
// (object_cache.h).
#pragma once

#include <memory>
#include <string>

namespace parhelion::backend::cpu {

class Module {
 public:
  Module(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}
  ~Module();
  Module(const Module&) = delete;
  void* symbol(const std::string& name) const;  // throws InternalError if absent
  const std::string& path() const { return path_; }

 private:
  void* handle_;
  std::string path_;
};

struct JitResult {
  std::shared_ptr<Module> module;
  std::string source_path;
  std::string key;
  bool cache_hit = false;  // the object was already on disk (or loaded in this process)
  double compile_seconds = 0;
};

// Compiles (or finds in the cache) and loads `source`. Throws CompileError with the path of
// the generated source and the compiler's message if compilation fails.
JitResult jit_compile(const std::string& source);

std::string compiler_command();   // $CXX or c++
std::string compiler_identity();  // first line of `$CXX --version`
std::string compiler_flags();
// The vector width, in bits, that the compiler's own tuning for this host prefers (GCC's
// `-Q --help=target` under -march=native: 128 on AMD's Zen 1, whose 256-bit vectors are two
// 128-bit halves); 0 where it states none, or is not GCC. Asked once per compiler.
int compiler_preferred_vector_bits();

// Counters for tests: how many times this process ran the compiler.
int compiler_invocations();

}  // namespace parhelion::backend::cpu

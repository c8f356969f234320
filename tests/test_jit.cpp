// The JIT's on-disk cache: a second process compiles nothing; a corrupt entry is rebuilt.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cpu/jit.h"
#include "kernels/kernels.h"

namespace ph = parhelion;
namespace fs = std::filesystem;

namespace {

std::string run(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *status = pclose(p);
  return out;
}

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("ph-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

TEST(JitCache, SecondProcessCompilesNothing) {
  fs::path dir = fresh_dir("cache");
  std::string cmd =
      "PARHELION_CACHE_DIR=" + dir.string() + " " PARHELION_CLI " run softmax --shape 33,517 --reps 1 --json";
  int status = 0;
  auto first = nlohmann::json::parse(run(cmd, &status));
  ASSERT_EQ(status, 0);
  EXPECT_FALSE(first["cache_hit"].get<bool>());
  EXPECT_TRUE(first["ok"].get<bool>());
  auto second = nlohmann::json::parse(run(cmd, &status));
  ASSERT_EQ(status, 0);
  EXPECT_TRUE(second["cache_hit"].get<bool>());
  EXPECT_EQ(second["source"], first["source"]);

  // Corrupt the compiled object: the next process notices, rebuilds it and still runs.
  std::string so = first["source"].get<std::string>();
  so.replace(so.size() - 4, 4, ".so");
  { std::ofstream(so, std::ios::trunc) << "not an ELF file"; }
  auto third = nlohmann::json::parse(run(cmd, &status));
  ASSERT_EQ(status, 0);
  EXPECT_TRUE(third["ok"].get<bool>());
  fs::remove_all(dir);
}

std::string object_of(const nlohmann::json& run_report) {
  std::string so = run_report["source"].get<std::string>();
  return so.replace(so.size() - 4, 4, ".so");
}

// An object cut short by a crash or a full disk while it was written: before the cache checked
// objects, every later run died of SIGBUS (dlopen maps the missing pages) until it was deleted.
TEST(JitCache, TruncatedObjectIsRebuiltNotLoaded) {
  fs::path dir = fresh_dir("truncated");
  std::string cmd =
      "PARHELION_CACHE_DIR=" + dir.string() + " " PARHELION_CLI " run softmax --shape 33,517 --reps 1 --json";
  int status = 0;
  auto first = nlohmann::json::parse(run(cmd, &status));
  ASSERT_EQ(status, 0);
  std::string so = object_of(first);
  auto size = fs::file_size(so);
  for (auto keep : {size / 2, size - 1}) {
    fs::resize_file(so, keep);
    std::string out = run(cmd, &status);
    ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status) << "\n" << out;
    ASSERT_EQ(WEXITSTATUS(status), 0) << out;
    auto again = nlohmann::json::parse(out);
    EXPECT_FALSE(again["cache_hit"].get<bool>()) << "a truncated object must be rebuilt";
    EXPECT_TRUE(again["ok"].get<bool>());
    EXPECT_EQ(fs::file_size(so), size);
  }
  auto rebuilt = nlohmann::json::parse(run(cmd, &status));  // and the rebuilt one is a cache hit
  ASSERT_EQ(status, 0);
  EXPECT_TRUE(rebuilt["cache_hit"].get<bool>());
  fs::remove_all(dir);
}

// Same size, wrong bytes (here the section headers at the end, which dlopen does not read, so
// only a content check can notice): the next load in this process rebuilds it.
TEST(JitCache, CorruptedObjectIsRebuiltInProcess) {
  fs::path dir = fresh_dir("corrupt");
  setenv("PARHELION_CACHE_DIR", dir.c_str(), 1);
  const std::string source = "extern \"C\" int seven() { return 7; }\n";
  std::string so;
  {
    auto built = ph::backend::cpu::jit_compile(source);
    so = built.module->path();
  }  // the last reference: the object is unloaded, and the in-process table forgets it
  auto size = fs::file_size(so);
  {
    std::fstream f(so, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 16));
    f.write("corrupted bytes!", 16);
  }
  ASSERT_EQ(fs::file_size(so), size);
  int before = ph::backend::cpu::compiler_invocations();
  auto again = ph::backend::cpu::jit_compile(source);
  EXPECT_EQ(ph::backend::cpu::compiler_invocations(), before + 1) << "a corrupted object must be rebuilt";
  EXPECT_FALSE(again.cache_hit);
  EXPECT_EQ(reinterpret_cast<int (*)()>(again.module->symbol("seven"))(), 7);
  // An object without its manifest (a crash between the two renames) is rebuilt too.
  again = {};
  fs::remove(so + ".sum");
  before = ph::backend::cpu::compiler_invocations();
  auto third = ph::backend::cpu::jit_compile(source);
  EXPECT_EQ(ph::backend::cpu::compiler_invocations(), before + 1);
  EXPECT_EQ(reinterpret_cast<int (*)()>(third.module->symbol("seven"))(), 7);
  unsetenv("PARHELION_CACHE_DIR");
  fs::remove_all(dir);
}

TEST(JitCache, KeyDependsOnSourceCompilerAndFlags) {
  fs::path dir = fresh_dir("key");
  setenv("PARHELION_CACHE_DIR", dir.c_str(), 1);
  auto a = ph::backend::cpu::jit_compile("extern \"C\" int f() { return 1; }\n");
  auto b = ph::backend::cpu::jit_compile("extern \"C\" int f() { return 2; }\n");
  EXPECT_NE(a.key, b.key);
  int before = ph::backend::cpu::compiler_invocations();
  auto a2 = ph::backend::cpu::jit_compile("extern \"C\" int f() { return 1; }\n");
  EXPECT_EQ(a2.key, a.key);
  EXPECT_TRUE(a2.cache_hit);
  EXPECT_EQ(ph::backend::cpu::compiler_invocations(), before);
  auto f = reinterpret_cast<int (*)()>(a2.module->symbol("f"));
  EXPECT_EQ(f(), 1);
  EXPECT_NE(ph::backend::cpu::compiler_identity().find_first_not_of(' '), std::string::npos);
  unsetenv("PARHELION_CACHE_DIR");
  fs::remove_all(dir);
}

TEST(JitCache, SameKernelAndShapeInOneProcessCompilesOnce) {
  ph::Array x = ph::Array::random({17, 29}, ph::DType::f32, 1);
  ph::kernels::exp(x);
  int before = ph::backend::cpu::compiler_invocations();
  for (int i = 0; i < 3; ++i) ph::kernels::exp(x);
  EXPECT_EQ(ph::backend::cpu::compiler_invocations(), before);
}

}  // namespace

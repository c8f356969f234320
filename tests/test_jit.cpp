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

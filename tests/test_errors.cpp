// User mistakes produce a clear UserError naming the user's source line and what was
// expected; compiler failures name the generated source. Each kernel below marks the line
// that must be blamed with kLine... = __LINE__ + 1.
#include <gtest/gtest.h>
#include <algorithm>
#include <cstdio>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/jit.h"
#include "driver/compiled_kernel_impl.h"
#include "kernels/kernels.h"
#include "kernels/registry.h"
#include "lower/lower.h"

#include "tests/user_error.h"

namespace ph = parhelion;

namespace {

std::string here(int line) { return std::string("test_errors.cpp:") + std::to_string(line) + ": "; }

// --- at the call ---------------------------------------------------------------------------------

TEST(Errors, WrongShapeAtCallNamesTheKernelCheck) {
  ph::Array x = ph::Array::zeros({3, 4}, ph::DType::f32), y = ph::Array::zeros({3, 5}, ph::DType::f32);
  std::string msg = user_error_of([&] { ph::kernels::add(x, y); });
  EXPECT_HAS(msg, "elementwise.cpp:");
  EXPECT_HAS(msg, "x and y must have the same shape, got [3,4] and [3,5]");
}

constexpr int kLineMismatch = __LINE__ + 3;
ph::Tensor unchecked_add(ph::Tensor x, ph::Tensor y) {
  auto out = ph::empty_like(x);
  for (auto tile : ph::tile(out.sizes())) out[tile] = x[tile] + y[tile];
  return out;
}

TEST(Errors, ShapeMismatchInsideTheKernelNamesTheLine) {
  ph::Kernel k("unchecked_add", unchecked_add);
  ph::Array x = ph::Array::zeros({3, 5}, ph::DType::f32), y = ph::Array::zeros({3, 4}, ph::DType::f32);
  std::string msg = user_error_of([&] { k(x, y); });
  EXPECT_HAS(msg, here(kLineMismatch));
  EXPECT_HAS(msg, "ranges over 0..5 but indexes dimension 1 of arg1, which has size 4");
}

TEST(Errors, WrongArgumentsAtRun) {
  ph::Array x = ph::Array::zeros({3, 4}, ph::DType::f32);
  EXPECT_HAS(user_error_of([&] { ph::kernels::add.run({x}); }), "takes 2 arguments, got 1");
  EXPECT_HAS(user_error_of([&] { ph::kernels::rms_norm.run({x, x, x}); }), "argument 2 must be a scalar");
  ph::Array neg = ph::Array::wrap(x.data_as<float>() + 3, {4}, {-1}, ph::DType::f32);
  EXPECT_HAS(user_error_of([&] { ph::kernels::exp.run({neg}); }), "needs positive strides");
}

ph::Tensor write_into(ph::Tensor x, ph::Tensor out) {
  for (auto tile : ph::tile(x.sizes())) out[tile] = x[tile] * 2.0f;
  return out;
}

TEST(Errors, WrittenArgumentOverlappingAnotherIsRejected) {
  ph::Kernel k("write_into", write_into);
  ph::Array x = ph::Array::zeros({8}, ph::DType::f32);
  ph::Array shifted = ph::Array::wrap(x.data_as<float>() + 2, {6}, {1}, ph::DType::f32);
  ph::Array head = ph::Array::wrap(x.data(), {6}, {1}, ph::DType::f32);
  EXPECT_HAS(user_error_of([&] { k(head, shifted); }), "overlaps argument 0 in memory");
}

// --- in the kernel ---------------------------------------------------------------------------------

constexpr int kLineWrongDim = __LINE__ + 3;
ph::Tensor transposed_tiles(ph::Tensor x) {
  auto out = ph::empty_like(x);
  for (auto [tm, tn] : ph::tile(x.size(0), x.size(1))) out[tm, tn] = x[tn, tm];
  return out;
}

TEST(Errors, TileUsedOnAnotherDimension) {
  ph::Kernel k("transposed_tiles", transposed_tiles);
  std::string msg = user_error_of([&] { k(ph::Array::zeros({10, 20}, ph::DType::f32)); });
  EXPECT_HAS(msg, here(kLineWrongDim));
  EXPECT_HAS(msg, "tile t1 ranges over 0..20 but indexes dimension 0 of arg0, which has size 10");
}

constexpr int kLineAxis = __LINE__ + 5;
ph::Tensor bad_reduction(ph::Tensor x) {
  auto out = ph::empty({x.size(0)});
  for (auto rows : ph::tile(x.size(0))) {
    auto v = x[rows, ph::all];
    out[rows] = ph::sum(v, 2);
  }
  return out;
}

TEST(Errors, ReductionOverMissingDimension) {
  ph::Kernel k("bad_reduction", bad_reduction);
  std::string msg = user_error_of([&] { k(ph::Array::zeros({4, 6}, ph::DType::f32)); });
  EXPECT_HAS(msg, here(kLineAxis));
  EXPECT_HAS(msg, "sum: reduction over axis 2 of a block with shape [t0, 6] (rank 2)");
}

constexpr int kLineBroadcast = __LINE__ + 5;
ph::Tensor bad_broadcast(ph::Tensor x, ph::Tensor y) {
  auto out = ph::empty_like(x);
  for (auto [tm, tn] : ph::tile(x.size(0), x.size(1))) {
    auto row = y[tm, ph::all];
    out[tm, tn] = x[tm, tn] * row;
  }
  return out;
}

TEST(Errors, BlocksThatDoNotBroadcast) {
  ph::Kernel k("bad_broadcast", bad_broadcast);
  std::string msg = user_error_of([&] {
    k(ph::Array::zeros({4, 6}, ph::DType::f32), ph::Array::zeros({4, 6}, ph::DType::f32));
  });
  EXPECT_HAS(msg, here(kLineBroadcast));
  EXPECT_HAS(msg, "shapes [t0, t1] and [t0, 6] do not broadcast");
}

constexpr int kLineHostValue = __LINE__ + 3;
ph::Tensor whole_tensor_as_value(ph::Tensor x) {
  auto out = ph::empty_like(x);
  for (auto t : ph::tile(x.sizes())) out[t] = x + 1.0f;
  return out;
}

TEST(Errors, WholeTensorUsedAsAValue) {
  ph::Kernel k("whole_tensor_as_value", whole_tensor_as_value);
  std::string msg = user_error_of([&] { k(ph::Array::zeros({4}, ph::DType::f32)); });
  EXPECT_HAS(msg, here(kLineHostValue));
  EXPECT_HAS(msg, "a whole tensor (arg0) used as a value; index it with tiles");
}

constexpr int kLineEscape = __LINE__ + 6;
ph::Tensor value_escapes_loop(ph::Tensor x) {
  auto out = ph::empty({x.size(0)});
  for (auto rows : ph::tile(x.size(0))) {
    ph::Tensor last;
    for (auto cols : ph::tile(x.size(1))) last = ph::amax(x[rows, cols], -1);
    out[rows] = last * 2.0f;
  }
  return out;
}

TEST(Errors, ValueUsedOutsideItsLoop) {
  ph::Kernel k("value_escapes_loop", value_escapes_loop);
  std::string msg = user_error_of([&] { k(ph::Array::zeros({4, 6}, ph::DType::f32)); });
  EXPECT_HAS(msg, here(kLineEscape));
  EXPECT_HAS(msg, "outside the tile loop or ph::when that computes it");
}

TEST(Errors, DslOutsideAKernel) {
  std::string msg = user_error_of([] { ph::register_block_size(4); });
  EXPECT_HAS(msg, "test_errors.cpp:");
  EXPECT_HAS(msg, "outside a kernel trace");
}

// --- configs -----------------------------------------------------------------------------------

TEST(Errors, InvalidConfigJson) {
  EXPECT_HAS(user_error_of([] { ph::Config::from_json("{\"block_sizes\": [4,"); }), "invalid config JSON");
  EXPECT_HAS(user_error_of([] { ph::Config::from_json("{\"block_size\": [4]}"); }), "unknown key 'block_size'");
  EXPECT_HAS(user_error_of([] { ph::Config::from_json("{\"num_threads\": \"two\"}"); }),
             "'num_threads' has the wrong type");
  EXPECT_HAS(user_error_of([] { ph::Config::from_json("[1,2]"); }), "expected a JSON object");
}

TEST(Errors, AVectorWidthTheHostLacksIsNamedWithItsWidths) {
  ph::Array x = ph::Array::zeros({8, 100}, ph::DType::f32);
  ph::Config c = ph::Config::from_json(R"({"vector_bits":96})");
  const std::vector<int> widths = ph::kernels::softmax.compile({x}).config_spec().vector_bits;
  std::string msg = user_error_of([&] { ph::kernels::softmax.compile({x}, &c); });
  if (widths.empty()) {
    EXPECT_HAS(msg, "vector_bits = 96 is not a knob here: this backend or host offers one vector width");
  } else {
    std::string known;
    for (int w : widths) known += (known.empty() ? "" : ", ") + std::to_string(w);
    EXPECT_HAS(msg, "vector_bits = 96 is not one of " + known + " (this host's vector widths)");
  }
  // Pallas has no such knob.
  ph::Config narrow = ph::Config::from_json(R"({"vector_bits":128})");
  EXPECT_HAS(user_error_of([&] { ph::kernels::softmax.emit({x}, "pallas", &narrow); }),
             "vector_bits = 128 is not a knob here");
  EXPECT_HAS(user_error_of([] { ph::Config::from_json(R"({"vector_bits":"wide"})"); }),
             "'vector_bits' has the wrong type");
}

TEST(Errors, BlockSizeOutOfDomainNamesTheLoop) {
  ph::Array x = ph::Array::zeros({8, 100}, ph::DType::f32);
  ph::Config c = ph::Config::from_json(R"({"block_sizes":[3],"loop_orders":[],"num_threads":1})");
  std::string msg = user_error_of([&] { ph::kernels::softmax.compile({x}, &c); });
  EXPECT_HAS(msg, "block_sizes[0] = 3 is out of its domain {1, 2, 4, 8}");
  EXPECT_HAS(msg, "softmax.cpp:");
  c = ph::Config::from_json(R"({"block_sizes":[4],"loop_orders":[],"num_threads":1})");
  c.num_threads = ph::backend::cpu::Host::detect().threads + 1;  // one more than this host has, whatever it has
  EXPECT_HAS(user_error_of([&] { ph::kernels::softmax.compile({x}, &c); }),
             "num_threads = " + std::to_string(c.num_threads) + " is out of its domain");
  c = ph::Config::from_json(R"({"block_sizes":[4,4],"loop_orders":[],"num_threads":1})");
  EXPECT_HAS(user_error_of([&] { ph::kernels::softmax.compile({x}, &c); }), "this kernel has 1 tunable block sizes");
  // A kernel whose shapes count blocks (ph::num_blocks) reads its block sizes to bind them: too few
  // is the same error, not an internal one.
  const auto& lnb = ph::kernels::find_kernel("layer_norm_backward");
  auto in = lnb.make_specs({64, 64}, ph::DType::f32);
  c = ph::Config::from_json(R"({"block_sizes":[16,4,16],"num_threads":1})");
  EXPECT_HAS(user_error_of([&] { lnb.kernel->compile(in.args(), &c); }), "this kernel has 4 tunable block sizes");
}

TEST(Errors, ConfigThatDoesNotFitFastMemoryIsRejectedWithNumbers) {
  ph::Array x = ph::Array::zeros({64, 4096}, ph::DType::f32);
  ph::CompiledKernel k = ph::kernels::softmax.compile({x});
  ph::backend::cpu::Host tiny_host = ph::backend::cpu::Host::detect();
  tiny_host.fast_memory_bytes = 64 << 10;
  const ph::backend::cpu::CpuBackend tiny(tiny_host);
  ph::Config c = k.config();
  c.block_sizes[0] = 64;
  std::string msg = user_error_of([&] { ph::lower::lower(k.impl().fn, c, tiny); });
  EXPECT_HAS(msg, "does not fit");
  EXPECT_HAS(msg, "needs 1.0 MiB of fast memory per grid step");
  EXPECT_HAS(msg, "the target has 64.0 KiB");
}

// --- the compiler --------------------------------------------------------------------------------

TEST(Errors, CompilerFailureReportsSourcePathAndMessage) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("ph-badcxx-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path cxx = dir / "broken-c++";
  {
    std::ofstream f(cxx);
    f << "#!/bin/sh\nif [ \"$1\" = --version ]; then echo broken-c++ 1.0; exit 0; fi\n"
         "echo 'broken-c++: error: the compiler fell over' >&2\nexit 1\n";
  }
  fs::permissions(cxx, fs::perms::owner_all);
  const char* old = std::getenv("CXX");
  std::string saved = old ? old : "";
  setenv("CXX", cxx.c_str(), 1);
  ph::Array x = ph::Array::zeros({5, 3}, ph::DType::f32);
  try {
    ph::kernels::exp.compile({ph::Array::zeros({5, 13}, ph::DType::f32)});
    ADD_FAILURE() << "expected a CompileError";
  } catch (const ph::CompileError& e) {
    std::string msg = e.what();
    EXPECT_HAS(msg, "the C++ compiler failed on generated code");
    EXPECT_HAS(msg, e.source_path());
    EXPECT_HAS(msg, "the compiler fell over");
    EXPECT_TRUE(fs::exists(e.source_path()));
  }
  if (old)
    setenv("CXX", saved.c_str(), 1);
  else
    unsetenv("CXX");
  fs::remove_all(dir);
}

}  // namespace

namespace {
TEST(Errors, UnsupportedDtypeNamesTheCheck) {
  ph::Array x = ph::Array::zeros({3, 4}, ph::DType::i32);
  std::string msg = user_error_of([&] { ph::kernels::softmax(x); });
  EXPECT_HAS(msg, "softmax.cpp:");
  EXPECT_HAS(msg, "unsupported dtype i32; expected one of f32, bf16, f16");
}
}  // namespace

namespace {

// Before C++23, x[a, b] is x[(a, b)]: the header turns that comma into a compile error with a
// message, instead of a kernel that silently indexes with b alone.
TEST(Errors, MultidimensionalSubscriptBeforeCpp23IsACompileError) {
  std::string dir = testing::TempDir();
  std::string src = dir + "/subscript_cxx20.cpp";
  {
    std::ofstream f(src);
    f << "#include <parhelion/parhelion.h>\n"
         "parhelion::Tensor copy(parhelion::Tensor x) {\n"
         "  auto out = parhelion::empty_like(x);\n"
         "  for (auto [tm, tn] : parhelion::tile(x.size(0), x.size(1))) out[tm, tn] = x[tm, tn];\n"
         "  return out;\n"
         "}\n";
  }
  auto compile = [&](const std::string& standard, int* status) {
    std::string cmd = ph::backend::cpu::compiler_command() + " -std=" + standard + " -fsyntax-only -I " +
                      PARHELION_SOURCE_DIR "/include " + src + " 2>&1";
    std::string out;
    FILE* p = popen(cmd.c_str(), "r");
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    *status = pclose(p);
    return out;
  };
  int status = 0;
  std::string cxx20 = compile("c++20", &status);
  EXPECT_NE(status, 0) << cxx20;
  EXPECT_NE(cxx20.find("x[a, b] needs C++23"), std::string::npos) << cxx20;
  std::string cxx23 = compile("c++23", &status);
  EXPECT_EQ(status, 0) << cxx23;
}

// Halide-style: each program in tests/must_not_compile/ must fail to compile (C++23) with the
// message its first line names (`// expect: ...`).
TEST(Errors, ProgramsThatMustNotCompile) {
  namespace fs = std::filesystem;
  int n = 0;
  for (const auto& entry : fs::directory_iterator(PARHELION_SOURCE_DIR "/tests/must_not_compile")) {
    if (entry.path().extension() != ".cpp") continue;
    ++n;
    SCOPED_TRACE(entry.path().filename().string());
    std::ifstream in(entry.path());
    std::string first;
    std::getline(in, first);
    const std::string tag = "// expect: ";
    ASSERT_EQ(first.rfind(tag, 0), 0u) << "the first line must be " << tag << "MESSAGE";
    std::string cmd = ph::backend::cpu::compiler_command() +
                      " -std=c++23 -fsyntax-only -I " PARHELION_SOURCE_DIR "/include " + entry.path().string() +
                      " 2>&1";
    std::string out;
    FILE* p = popen(cmd.c_str(), "r");
    char buf[4096];
    for (size_t k; (k = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, k);
    int status = pclose(p);
    EXPECT_NE(status, 0) << "compiled, but must not";
    EXPECT_NE(out.find(first.substr(tag.size())), std::string::npos) << out.substr(0, 3000);
  }
  EXPECT_GE(n, 3);
}

}  // namespace

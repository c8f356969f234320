// The pallas backend, end to end: every library kernel it supports is emitted as a Pallas
// module at two configs or more (both inner-loop strategies where the kernel has an inner
// loop), run by JAX in TPU interpret mode (race detection on, uninitialized memory poisoned
// with NaN) on the same inputs as the kernel's C++ reference, and compared with it. Each
// module is also lowered for a TPU with jax.export(platforms=["tpu"]), which checks block
// shapes and layouts that interpret mode accepts.
//
// Needs the project venv with the pinned jax (`make test` creates it; .venv/bin/python, or
// PARHELION_PYTHON).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/registry.h"

namespace ph = parhelion;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Case {
  std::string kernel;
  ph::Shape shape;
  ph::DType dtype;
  std::vector<std::string> configs;  // JSON; "" = the pallas default, "resident" = it, all loops resident
};

std::string python() {
  if (const char* p = std::getenv("PARHELION_PYTHON")) return p;
  return std::string(PARHELION_SOURCE_DIR) + "/.venv/bin/python";
}

// Shapes with ragged blocks where the TPU allows them, and both strategies per inner loop.
std::vector<Case> cases() {
  auto il = [](const std::string& s) { return R"("inner_loops":[{"strategy":")" + s + R"(","buffers":2}])"; };
  return {
      {"add", {40, 384}, ph::DType::f32, {"", R"({"block_sizes":[16,128],"loop_orders":[[1,0]],"num_threads":1})"}},
      {"exp", {40, 384}, ph::DType::bf16, {"", R"({"block_sizes":[16,256],"loop_orders":[[0,1]],"num_threads":1})"}},
      {"swiglu", {16, 256}, ph::DType::f32, {"", R"({"block_sizes":[8,128],"loop_orders":[[0,1]],"num_threads":1})"}},
      {"geglu", {16, 256}, ph::DType::f32, {"", R"({"block_sizes":[16,128],"loop_orders":[[1,0]],"num_threads":1})"}},
      {"softmax", {40, 384}, ph::DType::f32, {"", R"({"block_sizes":[16],"loop_orders":[],"num_threads":1})"}},
      {"softmax", {24, 256}, ph::DType::bf16, {"", R"({"block_sizes":[16],"loop_orders":[],"num_threads":1})"}},
      {"batch_softmax", {2, 24, 256}, ph::DType::f32, {"", R"({"block_sizes":[1,8],"loop_orders":[[0,1]],"num_threads":1})"}},
      {"layer_norm", {24, 256}, ph::DType::f32, {"", R"({"block_sizes":[8],"loop_orders":[],"num_threads":1})"}},
      {"rms_norm", {24, 256}, ph::DType::bf16, {"", R"({"block_sizes":[16],"loop_orders":[],"num_threads":1})"}},
      {"softmax_two_pass", {24, 384}, ph::DType::f32,
       {R"({"block_sizes":[8,128,256],"inner_loops":[{"strategy":"pipeline","buffers":3},{"strategy":"resident"}],"loop_orders":[],"num_threads":1})",
        R"({"block_sizes":[16,256,128],"inner_loops":[{"strategy":"resident"},{"strategy":"pipeline","buffers":1}],"loop_orders":[],"num_threads":1})"}},
      {"welford", {24, 384}, ph::DType::f32,
       {R"({"block_sizes":[32,256],)" + il("pipeline") + R"(,"loop_orders":[],"num_threads":1})",
        R"({"block_sizes":[32,128],)" + il("resident") + R"(,"loop_orders":[],"num_threads":1})"}},
      {"matmul", {64, 384, 256}, ph::DType::f32,
       {R"({"block_sizes":[32,128,128],)" + il("pipeline") + R"(,"loop_orders":[[0,1]],"micro_kernels":[0],"num_threads":1})",
        R"({"block_sizes":[64,256,128],)" + il("resident") + R"(,"loop_orders":[[1,0]],"micro_kernels":[0],"num_threads":1})"}},
      {"matmul", {64, 256, 256}, ph::DType::bf16, {""}},
      {"attention", {1, 2, 200, 64}, ph::DType::f32,
       {R"({"block_sizes":[64,128],)" + il("pipeline") + R"(,"loop_orders":[[0,1,2]],"micro_kernels":[0,0],"num_threads":1})",
        R"({"block_sizes":[128,128],)" + il("resident") + R"(,"loop_orders":[[0,1,2]],"micro_kernels":[0,0],"num_threads":1})"}},
      {"attention", {2, 128, 128}, ph::DType::bf16,
       {R"({"block_sizes":[64,64],)" + il("pipeline") + R"(,"loop_orders":[[0,1]],"micro_kernels":[0,0],"num_threads":1})",
        R"({"block_sizes":[32,128],)" + il("resident") + R"(,"loop_orders":[[1,0]],"micro_kernels":[0,0],"num_threads":1})"}},
      {"layer_norm_looped", {24, 384}, ph::DType::f32, {"", "resident"}},
      {"rms_norm_backward", {24, 256}, ph::DType::f32, {"", "resident"}},
      {"bmm", {2, 64, 128, 128}, ph::DType::f32, {"", "resident"}},
      {"broadcast_matmul", {2, 64, 128, 128}, ph::DType::bf16, {"", "resident"}},
      {"epilogue_subtiling", {64, 256, 128}, ph::DType::f32, {"", "resident"}},
      {"matmul_layernorm", {64, 256, 128}, ph::DType::f32, {"", "resident"}},
      {"cross_entropy", {16, 384}, ph::DType::f32, {"", "resident"}},
      {"causal_attention", {1, 2, 200, 64}, ph::DType::f32,
       {R"({"block_sizes":[64,128],)" + il("pipeline") + R"(,"loop_orders":[[0,1,2]],"micro_kernels":[0,0],"num_threads":1})",
        R"({"block_sizes":[64,64],)" + il("resident") + R"(,"loop_orders":[[0,1,2]],"micro_kernels":[0,0],"num_threads":1})"}},
  };
}

void write_raw(const ph::Array& a, const std::string& path) {
  ph::Array c = a.is_contiguous() ? a : a.to(a.dtype());
  std::ofstream(path, std::ios::binary)
      .write(static_cast<const char*>(c.data()), static_cast<std::streamsize>(c.numel() * ph::dtype_size(c.dtype())));
}

TEST(Pallas, EmittedKernelsMatchTheirReferencesInInterpretMode) {
  ASSERT_TRUE(fs::exists(python())) << "no Python with jax at " << python() << " (run `make test`)";
  fs::path dir = fs::temp_directory_path() / ("ph-pallas-" + std::to_string(getpid()));
  fs::create_directories(dir);
  json manifest = json::array();
  struct Expect {
    std::string name;
    std::vector<ph::Array> want;
    ph::DType dtype;
    double tol;
  };
  std::vector<Expect> expect;
  int n = 0;
  for (const Case& c : cases()) {
    const auto& e = ph::kernels::find_kernel(c.kernel);
    auto in = e.make_inputs(c.shape, c.dtype, 5);
    auto want = e.reference(in);
    json inputs = json::array();
    for (size_t i = 0; i < in.tensors.size(); ++i) {
      std::string path = (dir / ("case" + std::to_string(n) + "_in" + std::to_string(i))).string();
      write_raw(in.tensors[i], path);
      inputs.push_back({{"path", path}, {"shape", in.tensors[i].shape()}, {"dtype", ph::dtype_name(in.tensors[i].dtype())}});
    }
    for (const std::string& cfg : c.configs) {
      std::unique_ptr<ph::Config> config;
      if (cfg == "resident") {
        config = std::make_unique<ph::Config>(e.kernel->emit_pallas(in.args(), "v7x").config);
        for (auto& l : config->inner_loops) l.strategy = "resident";
      } else if (!cfg.empty()) {
        config = std::make_unique<ph::Config>(ph::Config::from_json(cfg));
      }
      std::string name = c.kernel + " " + ph::shape_to_string(c.shape) + " " + std::string(ph::dtype_name(c.dtype)) +
                         " " + (cfg.empty() ? "default" : cfg);
      ph::PallasModule m;
      try {
        m = e.kernel->emit_pallas(in.args(), "v7x", config.get());
      } catch (const ph::UserError& err) {
        ADD_FAILURE() << name << ": " << err.what();
        continue;
      }
      std::string module = (dir / ("case" + std::to_string(n) + ".py")).string();
      std::ofstream(module) << m.source;
      manifest.push_back({{"name", name},
                          {"module", module},
                          {"function", c.kernel},
                          {"inputs", inputs},
                          {"scalars", in.scalars},
                          {"outputs", (dir / ("case" + std::to_string(n) + "_out")).string()},
                          {"export", true}});
      expect.push_back({name, want, c.dtype, e.tolerance(c.shape)});
      ++n;
    }
  }
  std::string mf = (dir / "manifest.json").string();
  std::ofstream(mf) << manifest.dump();
  std::string cmd = python() + " " + PARHELION_SOURCE_DIR + "/tests/pallas_runner.py " + mf + " 2>" +
                    (dir / "stderr.txt").string();
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[1 << 16];
  size_t k = 0;
  while (std::fgets(buf, sizeof buf, p)) {
    json r = json::parse(buf);
    ASSERT_LT(k, expect.size());
    const Expect& x = expect[k];
    SCOPED_TRACE(x.name);
    EXPECT_EQ(r.value("name", ""), x.name);
    if (!r.value("ok", false)) {
      ADD_FAILURE() << r.value("error", "") << "\n" << r.value("trace", "");
    } else {
      EXPECT_FALSE(r.value("races", true)) << "interpret mode detected a race";
      EXPECT_EQ(r.value("export", ""), "ok");
      ASSERT_EQ(r.value("outputs", 0), static_cast<int>(x.want.size()));
      for (size_t i = 0; i < x.want.size(); ++i) {
        ph::Array got = ph::Array::empty(x.want[i].shape(), ph::DType::f32);
        std::ifstream(manifest[k]["outputs"].get<std::string>() + "." + std::to_string(i), std::ios::binary)
            .read(static_cast<char*>(got.data()), static_cast<std::streamsize>(got.numel() * 4));
        auto cmp = ph::kernels::compare(got, x.want[i], x.dtype, x.tol);
        EXPECT_TRUE(cmp.ok) << "output " << i << " max abs error " << cmp.max_abs_err;
      }
    }
    ++k;
  }
  EXPECT_EQ(pclose(p), 0) << "see " << (dir / "stderr.txt").string();
  EXPECT_EQ(k, expect.size()) << "the runner stopped early; see " << (dir / "stderr.txt").string();
  if (!HasFailure()) fs::remove_all(dir);
}

TEST(Pallas, TpuRulesAreEnforcedBeforeEmitting) {
  const auto& e = ph::kernels::find_kernel("attention");
  // [8,32,32768,256] bf16 resident: K and V, double-buffered, are 64 MiB: more than v7x's VMEM.
  // (A smaller head count keeps the test's inputs small; VMEM holds one head's K and V.)
  auto in = e.make_inputs({1, 1, 32768, 256}, ph::DType::bf16, 1);
  ph::Config c = ph::Config::from_json(
      R"({"block_sizes":[512,512],"inner_loops":[{"strategy":"resident"}],"loop_orders":[[0,1,2]],"micro_kernels":[0,0],"num_threads":1})");
  try {
    e.kernel->emit_pallas(in.args(), "v7x", &c);
    FAIL() << "expected a VMEM error";
  } catch (const ph::UserError& err) {
    std::string m = err.what();
    EXPECT_NE(m.find("of VMEM"), std::string::npos) << m;
    EXPECT_NE(m.find("TPU v7x has 64.0 MiB"), std::string::npos) << m;
  }
  // The same on a v6e (128 MiB) fits; pipelined it fits everywhere.
  EXPECT_NO_THROW(e.kernel->emit_pallas(in.args(), "v6e", &c));
  c.inner_loops[0].strategy = "pipeline";
  EXPECT_NO_THROW(e.kernel->emit_pallas(in.args(), "v7x", &c));
  // Block sizes that a TPU cannot tile are not in the pallas config space.
  ph::Config bad = c;
  bad.block_sizes = {24, 512};
  EXPECT_THROW(e.kernel->emit_pallas(in.args(), "v7x", &bad), ph::UserError);
  EXPECT_THROW(e.kernel->emit_pallas(in.args(), "v9", &c), ph::UserError);
}

TEST(Pallas, ModuleTextShowsTheStrategy) {
  const auto& e = ph::kernels::find_kernel("attention");
  auto in = e.make_inputs({1, 2, 256, 128}, ph::DType::bf16, 1);
  auto cfg = [](const std::string& s) {
    return ph::Config::from_json(R"({"block_sizes":[128,128],"inner_loops":[{"strategy":")" + s +
                                 R"(","buffers":3}],"loop_orders":[[0,1,2]],"micro_kernels":[0,0],"num_threads":1})");
  };
  ph::Config pc = cfg("pipeline"), rc = cfg("resident");
  std::string pipe = e.kernel->emit_pallas(in.args(), "v7x", &pc).source;
  EXPECT_NE(pipe.find("pltpu.emit_pipeline(_trip_t3, grid=(2,)"), std::string::npos) << pipe;
  EXPECT_NE(pipe.find("pipeline_mode=pl.Buffered(3)"), std::string::npos);
  EXPECT_NE(pipe.find("pl.BlockSpec(memory_space=pl.ANY)"), std::string::npos);
  EXPECT_NE(pipe.find("preferred_element_type=jnp.float32"), std::string::npos);
  EXPECT_NE(pipe.find("def attention(arg0, arg1, arg2, arg3, *, interpret=False):"), std::string::npos);
  std::string res = e.kernel->emit_pallas(in.args(), "v7x", &rc).source;
  EXPECT_EQ(res.find("emit_pipeline("), std::string::npos);
  EXPECT_NE(res.find("for off_t3 in range(0, 256, 128):"), std::string::npos) << res;
  EXPECT_NE(res.find("pl.BlockSpec((None, None, 256, 128), lambda g_t0, g_t1, g_t2: (g_t0, g_t1, 0, 0))"),
            std::string::npos)
      << res;
  // softmax and add: whole-row blocks and plain elementwise BlockSpecs.
  const auto& sm = ph::kernels::find_kernel("softmax");
  auto x = sm.make_inputs({64, 512}, ph::DType::f32, 1);
  std::string s = sm.kernel->emit_pallas(x.args(), "v5e").source;
  EXPECT_NE(s.find("jnp.max("), std::string::npos);
  EXPECT_NE(s.find("jnp.exp("), std::string::npos);
  EXPECT_NE(s.find("512), lambda g_t0: (g_t0, 0))"), std::string::npos) << s;
  const auto& add = ph::kernels::find_kernel("add");
  auto a = add.make_inputs({64, 512}, ph::DType::f32, 1);
  std::string t = add.kernel->emit_pallas(a.args(), "v5e").source;
  EXPECT_NE(t.find("o2_ref[...] = jnp.broadcast_to(v2, (64, 512)).astype(jnp.float32)"), std::string::npos) << t;
}

}  // namespace

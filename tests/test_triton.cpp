// The triton backend, end to end without a GPU: every library kernel it supports is emitted
// as a Triton module at its default config and at another, run in Triton's interpreter
// (TRITON_INTERPRET=1, on torch CPU tensors) on the same inputs as the kernel's C++ reference
// and compared with it, and compiled ahead of time to PTX and a cubin for sm_90 (Hopper) and
// sm_100 (Blackwell) with the toolchain the triton wheel ships. The kernels it does not
// support yet are refused at the user's line, naming the construct.
//
// Needs the project venv with torch and triton (`make test` creates it; .venv/bin/python, or
// PARHELION_PYTHON).
#include <gtest/gtest.h>

#include <tuple>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "backend/python_runner.h"
#include "backend/triton/run.h"
#include "kernels/registry.h"
#include "tests/user_error.h"

namespace ph = parhelion;
namespace triton = ph::backend::triton;

namespace {

struct Case {
  std::string kernel;
  ph::Shape shape;
  ph::DType dtype;
  std::string config;  // JSON; "" = the triton default
};

// Ragged shapes (blocks that run past the range, whole dims rounded up to a power of two),
// f32, f16 and bf16, a second config with other blocks, warps and stages where the kernel has
// knobs, and dots too small for tl.dot.
std::vector<Case> cases() {
  return {
      {"add", {1000}, ph::DType::f32, ""},
      {"add", {1000}, ph::DType::f16, R"({"block_sizes":[256],"loop_orders":[],"num_threads":1,"num_warps":2})"},
      {"exp", {777}, ph::DType::f32, ""},
      {"swiglu", {37, 300}, ph::DType::f32, ""},
      {"geglu", {37, 300}, ph::DType::f32, ""},
      {"softmax", {37, 300}, ph::DType::f32, ""},
      {"softmax", {37, 300}, ph::DType::f16, R"({"block_sizes":[8],"loop_orders":[],"num_threads":1,"num_warps":2})"},
      {"softmax_two_pass", {37, 777}, ph::DType::f32, ""},
      {"batch_softmax", {3, 37, 300}, ph::DType::f32, ""},
      {"layer_norm", {37, 300}, ph::DType::f32, ""},
      {"rms_norm", {37, 300}, ph::DType::f32, ""},
      {"rms_norm", {37, 300}, ph::DType::f16, ""},
      {"welford", {37, 300}, ph::DType::f32, ""},
      {"cross_entropy", {16, 384}, ph::DType::f32, ""},
      {"cross_entropy_ignore_index", {16, 384}, ph::DType::f32, ""},
      {"layer_norm_looped", {24, 384}, ph::DType::f32, ""},
      {"rms_norm_backward", {24, 256}, ph::DType::f32, ""},
      {"attention", {1, 2, 100, 64}, ph::DType::f32, ""},
      {"attention",
       {1, 2, 100, 64},
       ph::DType::f16,
       R"({"block_sizes":[32,16],"inner_loops":[{"strategy":"pipeline","buffers":2}],"loop_orders":[[2,1,0]],"micro_kernels":[0,0],"num_threads":1,"num_warps":2})"},
      {"causal_attention", {1, 2, 100, 64}, ph::DType::f32, ""},
      {"matmul", {100, 300, 70}, ph::DType::f32, ""},
      {"matmul",
       {100, 300, 70},
       ph::DType::f16,
       R"({"block_sizes":[32,16,128],"inner_loops":[{"strategy":"pipeline","buffers":4}],"loop_orders":[[1,0]],"micro_kernels":[0],"num_threads":1,"num_warps":8})"},
      {"bmm", {2, 64, 128, 128}, ph::DType::f32, ""},
      {"broadcast_matmul", {2, 64, 128, 128}, ph::DType::f32, ""},
      {"epilogue_subtiling", {64, 256, 128}, ph::DType::f32, ""},
      {"matmul_layernorm", {64, 256, 128}, ph::DType::f32, ""},
      {"fp8_matmul", {48, 256, 128}, ph::DType::f8e4m3, ""},
      // bf16: casts and stores round to nearest even (_round_bf16; the interpreter itself
      // truncates), and bf16 dots go in as f32 there (on a GPU as bf16).
      {"softmax", {37, 300}, ph::DType::bf16, ""},
      {"rms_norm", {37, 300}, ph::DType::bf16, ""},
      {"layer_norm", {37, 300}, ph::DType::bf16, ""},
      {"attention", {1, 2, 100, 64}, ph::DType::bf16, ""},
      {"causal_attention", {1, 2, 100, 64}, ph::DType::bf16, ""},
      {"matmul", {100, 300, 70}, ph::DType::bf16, ""},
      {"bmm", {2, 64, 128, 128}, ph::DType::bf16, ""},
      {"swiglu", {37, 300}, ph::DType::bf16, ""},
      {"rms_norm_backward", {24, 256}, ph::DType::bf16, ""},
      // Dots with a dim under 16 (7 rows, 5 columns; 7 queries and keys): products summed, not tl.dot.
      {"matmul", {7, 300, 5}, ph::DType::f32, ""},
      {"matmul", {7, 300, 5}, ph::DType::bf16, ""},
      {"attention", {1, 2, 7, 64}, ph::DType::f32, ""},
      // Computed indices, checked against their dims (embedding's ids, concat's shifted columns),
      // and block views (rotary's pairs: split and join; int4_matmul's nibbles).
      {"embedding", {40, 300, 256}, ph::DType::f32, ""},
      {"embedding", {24, 77, 128}, ph::DType::bf16, ""},
      {"concat", {16, 128, 128}, ph::DType::f32, ""},
      {"rotary", {2, 37, 3, 20}, ph::DType::f32, ""},
      {"rotary_backward", {2, 37, 3, 20}, ph::DType::f32, ""},
      {"rotary", {1, 16, 2, 256}, ph::DType::bf16, ""},
      {"int4_matmul", {40, 256, 128, 64}, ph::DType::bf16, ""},
      // Jagged loops: each entry's rows from offsets the kernel loads, checked against the bound.
      {"jagged_mean", {7, 256, 20}, ph::DType::f32, ""},
      {"grouped_gemm", {64, 128, 128, 2}, ph::DType::f32, ""},
      {"grouped_gemm", {72, 256, 256, 3}, ph::DType::bf16, ""},
      {"moe_matmul", {40, 256, 128, 4, 2}, ph::DType::f32, ""},
      // Loops over a launch tile's block (ph::tile(outer)): K split over the grid, each split's
      // trips within it (the last split ragged, 44 of 128, its last trip 12 of 32); the
      // partials' rows in blocks of 4 within blocks of 16 (the last outer block 5 rows).
      {"split_k_matmul", {100, 300, 70}, ph::DType::f32, ""},
      {"split_k_matmul",
       {100, 300, 70},
       ph::DType::bf16,
       R"({"block_sizes":[32,16,128,32],"loop_orders":[[2,0,1]],"micro_kernels":[0],"num_threads":1,"num_warps":4})"},
      // Grouped launch orders (launch_groups): groups of 4 row blocks of 10 (the last group 2),
      // a group wider than its dim (16 of 3), and below a batch dim (bmm, order t0 t2 t1).
      {"matmul",
       {300, 256, 200},
       ph::DType::f32,
       R"({"block_sizes":[32,16,64],"inner_loops":[{"strategy":"pipeline","buffers":2}],"launch_groups":[4],"loop_orders":[[0,1]],"micro_kernels":[0],"num_threads":1,"num_warps":4})"},
      {"matmul",
       {100, 300, 70},
       ph::DType::f32,
       R"({"block_sizes":[16,32,64],"inner_loops":[{"strategy":"pipeline","buffers":2}],"launch_groups":[16],"loop_orders":[[1,0]],"micro_kernels":[0],"num_threads":1,"num_warps":4})"},
      {"bmm",
       {3, 64, 128, 128},
       ph::DType::f32,
       R"({"block_sizes":[1,16,32,64],"inner_loops":[{"strategy":"pipeline","buffers":2}],"launch_groups":[4],"loop_orders":[[0,2,1]],"micro_kernels":[0],"num_threads":1,"num_warps":4})"},
      // A segmented pair scan down ragged row blocks (padding flagged invalid inside the scan).
      {"segment_cumsum", {100, 64, 10}, ph::DType::f32, ""},
      {"segment_cumsum",
       {300, 96, 37},
       ph::DType::f32,
       R"({"block_sizes":[32,32],"inner_loops":[{"strategy":"pipeline","buffers":3}],"loop_orders":[],"num_threads":1,"num_warps":2})"},
      // A running max carried across ragged blocks, then a jagged loop of several trips a segment.
      {"segment_sum", {100, 64, 10}, ph::DType::f32, ""},
      {"segment_sum",
       {300, 96, 37},
       ph::DType::f32,
       R"({"block_sizes":[32,64,16,32,8],"inner_loops":[{"strategy":"pipeline","buffers":3}],"loop_orders":[[1,0]],"num_threads":1,"num_warps":2})"},
      // Random numbers: the interpreter's Philox stream, bit for bit (the mask is exact).
      {"dropout", {37, 300}, ph::DType::f32, ""},
      {"dropout", {37, 300}, ph::DType::bf16, ""},
      {"dropout_backward", {37, 300}, ph::DType::f32, ""},
      {"layer_norm_backward", {37, 300}, ph::DType::f32, ""},
      {"layer_norm_backward",
       {37, 300},
       ph::DType::f32,
       R"({"block_sizes":[16,4,64,8],"loop_orders":[],"num_threads":1,"num_warps":2})"},
  };
}

// The library kernels the backend does not emit yet, and the construct each one's refusal names.
const std::map<std::string, std::string>& unsupported() {
  static const std::map<std::string, std::string> m = {};
  return m;
}

struct Emitted {
  std::vector<triton::TritonCase> runs;
  struct Expect {
    std::vector<ph::Array> want;
    ph::DType dtype;
    double tol;
  };
  std::vector<Expect> expect;
};

const Emitted& emitted() {
  static const Emitted e = [] {
    Emitted out;
    for (const Case& c : cases()) {
      const auto& k = ph::kernels::find_kernel(c.kernel);
      auto in = k.make_inputs(c.shape, c.dtype, 5);
      std::unique_ptr<ph::Config> config;
      if (!c.config.empty()) config = std::make_unique<ph::Config>(ph::Config::from_json(c.config));
      const std::string name = c.kernel + " " + ph::shape_to_string(c.shape) + " " +
                               std::string(ph::dtype_name(c.dtype)) + " " + (c.config.empty() ? "default" : c.config);
      try {
        ph::EmittedKernel m = k.kernel->emit(in.args(), "triton:h100", config.get());
        out.runs.push_back({name, m.source, c.kernel, in.tensors, in.scalars});
        out.expect.push_back({k.reference(in), c.dtype, k.tolerance(c.shape)});
      } catch (const ph::UserError& err) {
        ADD_FAILURE() << name << ": " << err.what();
      }
    }
    return out;
  }();
  return e;
}

}  // namespace

TEST(Triton, LibraryKernelsMatchTheirReferencesInTheInterpreter) {
  ASSERT_FALSE(ph::backend::project_python().empty()) << "no Python with torch and triton (run `make test`)";
  const Emitted& e = emitted();
  std::vector<triton::TritonRun> results = triton::run_in_triton_interpreter(e.runs);
  ASSERT_EQ(results.size(), e.runs.size());
  for (size_t k = 0; k < results.size(); ++k) {
    SCOPED_TRACE(e.runs[k].name);
    const triton::TritonRun& r = results[k];
    if (!r.ok) {
      ADD_FAILURE() << r.error;
      continue;
    }
    const Emitted::Expect& x = e.expect[k];
    ASSERT_EQ(r.outputs.size(), x.want.size());
    for (size_t i = 0; i < x.want.size(); ++i) {
      auto cmp = ph::kernels::compare(r.outputs[i], x.want[i], x.dtype, x.tol);
      EXPECT_TRUE(cmp.ok) << "output " << i << " max abs error " << cmp.max_abs_err;
    }
  }
}

TEST(Triton, LibraryKernelsCompileForHopperAndBlackwell) {
  ASSERT_FALSE(ph::backend::project_python().empty()) << "no Python with torch and triton (run `make test`)";
  const Emitted& e = emitted();
  std::vector<std::string> sources;
  for (const triton::TritonCase& c : e.runs) sources.push_back(c.source);
  std::vector<triton::TritonCompile> results = triton::compile_for_gpus(sources, {90, 100});
  ASSERT_EQ(results.size(), sources.size());
  for (size_t k = 0; k < results.size(); ++k) {
    SCOPED_TRACE(e.runs[k].name);
    EXPECT_TRUE(results[k].ok) << results[k].error;
    // (every launch's kernel, for both architectures, gave PTX and a cubin)
    size_t launches = 0;
    for (size_t at = 0; (at = sources[k].find("\ndef _kernel_", at)) != std::string::npos; ++at) ++launches;
    EXPECT_EQ(results[k].kernels, static_cast<int>(2 * launches));
  }
}

// Every library kernel is either emitted and verified above or refused at the user's line with
// the construct named; a new kernel must be one or the other.
TEST(Triton, EveryLibraryKernelIsVerifiedOrRefusedWithItsReason) {
  std::set<std::string> verified;
  for (const Case& c : cases()) verified.insert(c.kernel);
  for (const auto& k : ph::kernels::registry()) {
    SCOPED_TRACE(k.name);
    const bool refused = unsupported().count(k.name) > 0;
    EXPECT_NE(verified.count(k.name) > 0, refused) << "list the kernel in cases() or unsupported()";
    if (!refused) continue;
    auto in = k.make_specs(k.default_shape, k.dtypes.front());
    const std::string err = user_error_of([&] { k.kernel->emit(in.args(), "triton:h100"); });
    EXPECT_HAS(err, "the triton backend does not support " + unsupported().at(k.name));
    EXPECT_HAS(err, ".cpp:");
  }
}

// scripts/gpu-check.sh's two steps, at small shapes: `emit` writes the suite's modules and the
// tuning candidates; `run --interpret` runs each against torch eager in Triton's interpreter
// (on a GPU it times them with CUDA events beside torch.compile and the vendor library) and
// writes the Markdown table. What only a GPU shows (CUDA events, torch.compile) is not checked.
TEST(Triton, GpuCheckScriptRunsItsPathInTheInterpreter) {
  const std::string python = ph::backend::project_python();
  ASSERT_FALSE(python.empty()) << "no Python with torch and triton (run `make test`)";
  ph::backend::ScratchDir dir;
  const std::string src = PARHELION_SOURCE_DIR;
  const std::string d = (dir.path / "gpu-check").string();
  const std::string emit = "'" + python + "' " + src + "/scripts/gpu_check.py emit " + d + " --small --parhelion " +
                           PARHELION_CLI + " > " + d + ".emit.log 2>&1";
  ASSERT_EQ(std::system(emit.c_str()), 0) << emit;
  const std::string run =
      "'" + python + "' " + src + "/scripts/gpu_check.py run " + d + " --interpret --reps 1 > " + d + ".log 2>&1";
  const int status = std::system(run.c_str());
  std::ifstream log(d + ".log");
  std::stringstream text;
  text << log.rdbuf();
  ASSERT_EQ(status, 0) << text.str();
  std::ifstream table(d + "/gpu-check.md");
  std::stringstream md;
  md << table.rdbuf();
  EXPECT_HAS(md.str(), "| attention | [1, 2, 100, 64] | f32 |");
  EXPECT_HAS(md.str(), "| fp8_matmul | [48, 256, 128] | f8e4m3 |");
  EXPECT_HAS(md.str(), "- matmul [100, 300, 70] f32: ");
  EXPECT_EQ(md.str().find("| NO |"), std::string::npos) << md.str();
  EXPECT_EQ(md.str().find("no candidate ran correctly"), std::string::npos) << md.str();
  EXPECT_HAS(md.str(), "18 cases in");
}

// The fit check refuses before any compile, with the numbers and what to change; num_warps and
// launch_groups are GPU knobs, validated against their choices and refused on a backend
// without them.
TEST(Triton, FitCheckAndWarpsRefuseWithTheNumbers) {
  const auto& mm = ph::kernels::find_kernel("matmul");
  auto in = mm.make_specs({1024, 1024, 1024}, ph::DType::f32);
  ph::Config big = ph::Config::from_json(
      R"({"block_sizes":[256,256,256],"inner_loops":[{"strategy":"pipeline","buffers":4}],"loop_orders":[[0,1]],"micro_kernels":[0],"num_threads":1,"num_warps":16})");
  std::string err = user_error_of([&] { mm.kernel->emit(in.args(), "triton:h100", &big); });
  EXPECT_HAS(err, "does not fit the h100");
  EXPECT_HAS(err, "2.0 MiB of shared memory per program");
  EXPECT_HAS(err, "227.0 KiB");
  EXPECT_HAS(err, "fewer stages");
  EXPECT_HAS(err, "matmul.cpp:");

  const auto& sm = ph::kernels::find_kernel("softmax");
  auto rows = sm.make_specs({37, 3000}, ph::DType::f32);
  ph::Config one_warp = ph::Config::from_json(R"({"block_sizes":[64],"loop_orders":[],"num_threads":1,"num_warps":1})");
  err = user_error_of([&] { sm.kernel->emit(rows.args(), "triton:b200", &one_warp); });
  EXPECT_HAS(err, "does not fit the b200");
  EXPECT_HAS(err, "registers per thread");
  EXPECT_HAS(err, "over 32 threads");
  EXPECT_HAS(err, "a thread may hold 255; use smaller blocks or more warps (num_warps)");
  // The default config fits (more warps, smaller blocks).
  const ph::Config def = sm.kernel->emit(rows.args(), "triton:b200").config;
  EXPECT_GE(def.num_warps, 4);

  ph::Config three = ph::Config::from_json(R"({"block_sizes":[16],"loop_orders":[],"num_threads":1,"num_warps":3})");
  EXPECT_HAS(user_error_of([&] { sm.kernel->emit(rows.args(), "triton:h100", &three); }),
             "num_warps = 3 is not one of 4, 1, 2, 8, 16");
  ph::Config cpu_warps =
      ph::Config::from_json(R"({"block_sizes":[16],"loop_orders":[],"num_threads":1,"num_warps":4})");
  EXPECT_HAS(user_error_of([&] { sm.kernel->emit(rows.args(), "cpu", &cpu_warps); }),
             "num_warps = 4 is a GPU knob; this backend runs no warps");
  EXPECT_HAS(user_error_of([&] { sm.kernel->emit(rows.args(), "triton:z100"); }),
             "unknown GPU 'z100' (known: h100, h200, b200)");
  // The config space says what it offers.
  const std::string spec = sm.kernel->emit(rows.args(), "triton:h100").config_spec;
  EXPECT_HAS(spec, "num_warps: 4, 1, 2, 8, 16");
  // launch_groups: one per launch with a dot and a grid of two dims or more, on a GPU only.
  const std::string mm_spec = mm.kernel->emit(in.args(), "triton:h100").config_spec;
  EXPECT_HAS(mm_spec, "launch_groups[0]: 8, 1, 4, 16  (the order of launch 0's programs, at ");
  EXPECT_EQ(spec.find("launch_groups"), std::string::npos) << spec;  // (softmax: no dot)
  ph::Config groups = mm.kernel->emit(in.args(), "triton:h100").config;
  EXPECT_EQ(ph::Config::from_json(groups.to_json()), groups);
  groups.launch_groups = {3};
  EXPECT_HAS(user_error_of([&] { mm.kernel->emit(in.args(), "triton:h100", &groups); }),
             "launch_groups[0] = 3 is not one of 8, 1, 4, 16 (the launch at ");
  ph::Config cpu_groups = mm.kernel->emit(in.args(), "cpu").config;
  cpu_groups.launch_groups = {8};
  EXPECT_HAS(user_error_of([&] { mm.kernel->emit(in.args(), "cpu", &cpu_groups); }),
             "launch_groups has 1 entries; this kernel has 0 launches with a grouped order on this backend");
}

// Causal attention's key loop stops at the diagonal (ir::TripBound): the key blocks above it
// are neither loaded nor computed. Its numbers are checked in the interpreter above (causal
// cases, f32 and bf16).
TEST(Triton, CausalKeyLoopStopsAtTheDiagonal) {
  const auto& e = ph::kernels::find_kernel("causal_attention");
  auto in = e.make_specs({1, 2, 300, 64}, ph::DType::f32);
  const std::string m = e.kernel->emit(in.args(), "triton:h100").source;
  EXPECT_HAS(m, "for o_t3 in tl.range(0, tl.minimum(300, tl.minimum(o_t2 + 64, 300)), 64, num_stages=3):");
  EXPECT_HAS(m, "# the trips from tl.minimum(o_t2 + 64, 300) on do nothing");
  // (a trip's keys are valid below the range's end, not below the bound: the bound only says
  // which trips run; a mask at the bound zeroed keys of the diagonal's block past a row's end)
  EXPECT_HAS(m, "m_t3 = r_t3 < 300\n");
  const auto& full = ph::kernels::find_kernel("attention");
  EXPECT_HAS(full.kernel->emit(in.args(), "triton:h100").source, "for o_t3 in tl.range(0, 300, 64, num_stages=3):");
}

// A computed index out of its dim fails the call naming the user's line and the numbers, as on
// the cpu; "index_checks":false turns the check (and its synchronization) off.
TEST(Triton, AnIndexOutOfItsDimFailsTheCallAtTheUsersLine) {
  ASSERT_FALSE(ph::backend::project_python().empty()) << "no Python with torch and triton (run `make test`)";
  const auto& e = ph::kernels::find_kernel("embedding");
  auto in = e.make_inputs({40, 300, 256}, ph::DType::f32, 3);
  in.tensors[0].set(17, 300);  // one id past the table's 300 rows
  const ph::EmittedKernel m = e.kernel->emit(in.args(), "triton:h100");
  EXPECT_HAS(m.source, "SITES = {1: (");
  std::vector<triton::TritonRun> r =
      triton::run_in_triton_interpreter({{"oob", m.source, "embedding", in.tensors, {}}});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_FALSE(r[0].ok);
  EXPECT_HAS(r[0].error, "IndexError: ");
  EXPECT_HAS(r[0].error, "indexing.cpp:23: index 300 is out of bounds for dimension 0 of arg1 (size 300)");
  // A jagged loop's range past the dims it indexes: the same, naming the tile's range.
  const auto& j = ph::kernels::find_kernel("jagged_mean");
  auto rows = j.make_inputs({7, 256, 20}, ph::DType::f32, 3);
  rows.tensors[1].set(7, rows.tensors[0].shape()[0] + 5);  // the last entry ends 5 rows past the values
  const std::string js = j.kernel->emit(rows.args(), "triton:h100").source;
  std::vector<triton::TritonRun> jr =
      triton::run_in_triton_interpreter({{"jagged", js, "jagged_mean", rows.tensors, {}}});
  ASSERT_EQ(jr.size(), 1u);
  EXPECT_FALSE(jr[0].ok);
  EXPECT_HAS(jr[0].error, "is out of bounds for the range of jagged tile t2, which must lie within 0..");
  ph::Config unchecked = m.config;
  unchecked.index_checks = false;
  const std::string src = e.kernel->emit(in.args(), "triton:h100", &unchecked).source;
  EXPECT_HAS(src, "SITES = {}");
  EXPECT_EQ(src.find("_flag(perr, b1"), std::string::npos) << src;
}

// Unit blocks make 0-d values; a boolean one reshaped to 0-d meets a scalar boolean in `^`.
// Triton's interpreter refused that (TypeError in bitwise_xor; found by the fuzzer), so the
// emitter reshapes booleans to 0-d through int32.
ph::Tensor flags_xor(ph::Tensor x, ph::Tensor y) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m, n}, ph::DType::f32);
  for (auto [tm, tn] : ph::tile(m, n))
    out[tm, tn] = ph::cast((y[tm].unsqueeze(1) >= 0.25f) ^ (x[tm, tn] > 0.0f), ph::DType::f32);
  return out;
}

TEST(Triton, ZeroDimensionalBooleansCombineWithScalars) {
  ASSERT_FALSE(ph::backend::project_python().empty()) << "no Python with torch and triton (run `make test`)";
  ph::Kernel k("flags_xor", flags_xor);
  ph::Array x = ph::Array::random({6, 5}, ph::DType::f32, 1), y = ph::Array::random({6}, ph::DType::f32, 2);
  ph::Config c = ph::Config::from_json(R"({"block_sizes":[1,1],"loop_orders":[[0,1]],"num_threads":1})");
  const std::string src = k.emit({x, y}, "triton:h100", &c).source;
  EXPECT_HAS(src, ".to(tl.int32), []) != 0)");
  std::vector<triton::TritonRun> r = triton::run_in_triton_interpreter({{"xor", src, "flags_xor", {x, y}, {}}});
  ASSERT_EQ(r.size(), 1u);
  ASSERT_TRUE(r[0].ok) << r[0].error << "\n" << src;
  EXPECT_EQ(ph::max_abs_diff(r[0].outputs[0], k.interpret({x, y}).at(0)), 0.0);
}

// Masked loads of bf16 and fp8 blocks filled with 0.1 (no value of either type), read by a store
// and by a dot: tl.load would convert the fill to the element type (0.10009765625 in bf16,
// 0.09375 in e5m2), so the fill is taken in f32 after the load. (The dot's operands are both
// such loads: f32 blocks, multiplied in IEEE precision. A raw bf16 partner would round them to
// bf16, as the backend's dots do by design: docs/triton.md.)
std::tuple<ph::Tensor, ph::Tensor> masked_narrow_loads(ph::Tensor x, ph::Tensor f, ph::Tensor w) {
  auto [m, k] = x.sizes<2>();
  auto copied = ph::empty({m, k}), product = ph::empty({m, w.size(1)});
  for (auto tm : ph::tile(m)) {
    auto live = tm.index().unsqueeze(-1) % 3 > 0;
    copied[tm, ph::all] = ph::load(x, {tm, ph::all}, live, 0.1f) + ph::load(f, {tm, ph::all}, live, 0.1f);
    product[tm, ph::all] = ph::dot(ph::load(x, {tm, ph::all}, live, 0.1f),
                                   ph::load(w, {ph::all, ph::all}, ph::arange(k).unsqueeze(-1) % 2 > 0, 0.1f));
  }
  return {copied, product};
}

TEST(Triton, AMaskedNarrowLoadsFillIsNotRoundedToItsElementType) {
  ASSERT_FALSE(ph::backend::project_python().empty()) << "no Python with torch and triton (run `make test`)";
  ph::Kernel k("masked_narrow_loads", masked_narrow_loads);
  ph::Array x = ph::Array::random({24, 16}, ph::DType::bf16, 1), f = ph::Array::random({24, 16}, ph::DType::f8e5m2, 2),
            w = ph::Array::random({16, 16}, ph::DType::bf16, 3);
  const std::string src = k.emit({x, f, w}, "triton:h100").source;
  EXPECT_HAS(src, "tl.where(");
  std::vector<triton::TritonRun> r =
      triton::run_in_triton_interpreter({{"masked", src, "masked_narrow_loads", {x, f, w}, {}}});
  ASSERT_EQ(r.size(), 1u);
  ASSERT_TRUE(r[0].ok) << r[0].error << "\n" << src;
  const std::vector<ph::Array> want = k.interpret({x, f, w});
  EXPECT_LT(ph::max_abs_diff(r[0].outputs[0], want[0]), 1e-6) << src;  // exact: sums of representable values
  EXPECT_LT(ph::max_abs_diff(r[0].outputs[1], want[1]), 1e-5) << src;
}

// The Philox stream at 64-bit seeds and offsets (their high words are the counter's and key's
// second words; Triton's own tl.rand would run Philox-4x64 on them): uniform bit for bit,
// normal to a few ulps, against the reference interpreter.
ph::Tensor philox_draws(ph::Tensor x, ph::Int seed) {
  const int64_t n = x.size(0);
  auto out = ph::empty({2, n}, ph::DType::f32);
  for (auto t : ph::tile(n)) {
    auto offset = t.index() * int64_t{4294967311} + int64_t{1} * (int64_t{1} << 40);
    out[0, t] = ph::rand(seed, offset) + x[t] * 0.0f;
    out[1, t] = ph::randn(seed, offset);
  }
  return out;
}

TEST(Triton, RandomNumbersFollowTheInterpretersStream) {
  ASSERT_FALSE(ph::backend::project_python().empty()) << "no Python with torch and triton (run `make test`)";
  ph::Kernel k("philox_draws", philox_draws);
  ph::Array x = ph::Array::random({300}, ph::DType::f32, 1);
  const std::vector<ph::Arg> args = {x, ph::Arg(int64_t{(int64_t{1} << 41) + 12345})};
  const std::string src = k.emit(args, "triton:h100").source;
  EXPECT_HAS(src, "def _philox(seed, offset):");
  EXPECT_HAS(src, "s0 = int(arg1)");
  std::vector<triton::TritonRun> r = triton::run_in_triton_interpreter(
      {{"philox", src, "philox_draws", {x}, {static_cast<double>((int64_t{1} << 41) + 12345)}}});
  ASSERT_EQ(r.size(), 1u);
  ASSERT_TRUE(r[0].ok) << r[0].error;
  const ph::Array want = k.interpret(args).at(0);
  double uniform = 0, normal = 0;
  for (int64_t i = 0; i < 300; ++i) {
    uniform = std::max(uniform, std::abs(r[0].outputs[0].get(i) - want.get(i)));
    normal = std::max(normal, std::abs(r[0].outputs[0].get(300 + i) - want.get(300 + i)));
  }
  EXPECT_EQ(uniform, 0.0);
  EXPECT_LT(normal, 1e-5);
}

// Atomic adds into f16 tensors (tl.atomic_add takes them; max and min of them it does not, and
// bf16 ones its interpreter cannot run: both refused): column sums of small integers over row
// blocks, exact in f16.
ph::Tensor column_sums_atomic(ph::Tensor x, ph::Tensor out) {
  auto [m, n] = x.sizes<2>();
  for (auto [tm, tn] : ph::tile(m, n)) ph::atomic_add(out, {tn}, ph::sum(x[tm, tn], 0));
  return out;
}
constexpr int kLineHalfMax = __LINE__ + 3;
ph::Tensor column_max_atomic(ph::Tensor x, ph::Tensor out) {
  auto [m, n] = x.sizes<2>();
  for (auto [tm, tn] : ph::tile(m, n)) ph::atomic_max(out, {tn}, ph::amax(x[tm, tn], 0));
  return out;
}

TEST(Triton, SixteenBitAtomicAddsAndTheirLimits) {
  ASSERT_FALSE(ph::backend::project_python().empty()) << "no Python with torch and triton (run `make test`)";
  ph::Kernel k("column_sums_atomic", column_sums_atomic), mx("column_max_atomic", column_max_atomic);
  ph::Config c = ph::Config::from_json(R"({"block_sizes":[16,32],"loop_orders":[[0,1]],"num_threads":1})");
  auto inputs = [](ph::DType dt) {
    ph::Array x = ph::Array::empty({70, 100}, dt), out = ph::Array::zeros({100}, dt);
    for (int64_t i = 0; i < x.numel(); ++i) x.set(i, static_cast<double>(i % 7) - 3);
    return std::pair{x, out};
  };
  auto [x, out] = inputs(ph::DType::f16);
  const std::string src = k.emit({x, out}, "triton:h100", &c).source;
  EXPECT_HAS(src, "tl.atomic_add(");
  std::vector<triton::TritonRun> r =
      triton::run_in_triton_interpreter({{"f16", src, "column_sums_atomic", {x, out}, {}}});
  ASSERT_EQ(r.size(), 1u);
  ASSERT_TRUE(r[0].ok) << r[0].error;
  EXPECT_EQ(ph::max_abs_diff(r[0].outputs[0], k.interpret({x, out}).at(0)), 0.0);
  const std::vector<triton::TritonCompile> compiled = triton::compile_for_gpus({src}, {90, 100});
  ASSERT_EQ(compiled.size(), 1u);
  EXPECT_TRUE(compiled[0].ok) << compiled[0].error;
  std::string err = user_error_of([&] { mx.emit({x, out}, "triton:h100", &c); });
  EXPECT_HAS(err, "test_triton.cpp:" + std::to_string(kLineHalfMax));
  EXPECT_HAS(err, "does not support atomic_max of f16 tensors");
  auto [xb, outb] = inputs(ph::DType::bf16);
  EXPECT_HAS(user_error_of([&] {
               k.emit({xb, outb}, "triton:h100", &c);
             }),
             "does not support atomic updates of bf16 tensors");
}

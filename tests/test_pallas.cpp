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
#include <tuple>

#include "backend/pallas/interpret.h"
#include "backend/pallas/tpu.h"
#include "driver/compiled_kernel_impl.h"
#include "kernels/registry.h"
#include "parhelion/tpu.h"
#include "tests/interpret_check.h"
#include "tests/user_error.h"

namespace ph = parhelion;
namespace pallas = ph::backend::pallas;

namespace {

struct Case {
  std::string kernel;
  ph::Shape shape;
  ph::DType dtype;
  // JSON; "" = the pallas default; "resident" and "grid" = it with every loop of that strategy
  std::vector<std::string> configs;
};

// Shapes with ragged blocks where the TPU allows them, and both strategies per inner loop.
// An attention config: query and key blocks, the key loop's strategy, the grid in its order.
ph::Config attention_config(int64_t bq, int64_t bk, const std::string& strategy) {
  return ph::Config::from_json(R"({"block_sizes":[)" + std::to_string(bq) + "," + std::to_string(bk) +
                               R"(],"inner_loops":[{"strategy":")" + strategy +
                               R"("}],"loop_orders":[[0,1,2]],"micro_kernels":[0,0],"num_threads":1})");
}

std::vector<Case> cases() {
  auto il = [](const std::string& s) { return R"("inner_loops":[{"strategy":")" + s + R"(","buffers":2}])"; };
  return {
      {"add", {40, 384}, ph::DType::f32, {"", R"({"block_sizes":[16,128],"loop_orders":[[1,0]],"num_threads":1})"}},
      // Ragged blocks read and write the tile padding of the HBM buffers (interpret mode pads
      // them with NaN, as the target's layout does): default configs that were refused before
      // (a pipelined copy rounded up to the tiling past the logical end, along the loop's dim and
      // along a grid dim), and a resident attention whose last trip has one key row (its bf16
      // q.k^T would be a matrix-vector product, which Mosaic's lowering refuses).
      {"matmul", {1000, 1000, 1000}, ph::DType::f32, {""}},
      {"matmul",
       {130, 256, 128},
       ph::DType::f32,
       {R"({"block_sizes":[128,128,128],"inner_loops":[{"strategy":"pipeline","buffers":2}],"loop_orders":[[0,1]],"micro_kernels":[0],"num_threads":1})"}},
      {"softmax_two_pass", {37, 777}, ph::DType::f32, {""}},
      {"layer_norm_looped", {24, 1000}, ph::DType::f32, {""}},
      {"welford", {100, 1000}, ph::DType::f32, {""}},
      {"rms_norm_backward", {1000, 1000}, ph::DType::f32, {""}},
      {"rms_norm_backward", {24, 1000}, ph::DType::bf16, {""}},
      {"attention", {1, 2, 1025, 64}, ph::DType::bf16, {"", "resident"}},
      {"causal_attention", {1, 2, 1025, 64}, ph::DType::f32, {""}},
      {"exp", {40, 384}, ph::DType::bf16, {"", R"({"block_sizes":[16,256],"loop_orders":[[0,1]],"num_threads":1})"}},
      {"swiglu", {16, 256}, ph::DType::f32, {"", R"({"block_sizes":[8,128],"loop_orders":[[0,1]],"num_threads":1})"}},
      {"geglu", {16, 256}, ph::DType::f32, {"", R"({"block_sizes":[16,128],"loop_orders":[[1,0]],"num_threads":1})"}},
      {"softmax", {40, 384}, ph::DType::f32, {"", R"({"block_sizes":[16],"loop_orders":[],"num_threads":1})"}},
      {"softmax", {24, 256}, ph::DType::bf16, {"", R"({"block_sizes":[16],"loop_orders":[],"num_threads":1})"}},
      {"batch_softmax",
       {2, 24, 256},
       ph::DType::f32,
       {"", R"({"block_sizes":[1,8],"loop_orders":[[0,1]],"num_threads":1})"}},
      {"layer_norm", {24, 256}, ph::DType::f32, {"", R"({"block_sizes":[8],"loop_orders":[],"num_threads":1})"}},
      {"rms_norm", {24, 256}, ph::DType::bf16, {"", R"({"block_sizes":[16],"loop_orders":[],"num_threads":1})"}},
      {"softmax_two_pass",
       {24, 384},
       ph::DType::f32,
       {R"({"block_sizes":[8,128,256],"inner_loops":[{"strategy":"pipeline","buffers":3},{"strategy":"resident"}],"loop_orders":[],"num_threads":1})",
        R"({"block_sizes":[16,256,128],"inner_loops":[{"strategy":"resident"},{"strategy":"pipeline","buffers":1}],"loop_orders":[],"num_threads":1})"}},
      // Three buffers for a loop that writes: its outputs stay double-buffered (Mosaic refuses
      // more; found by the fuzzer).
      {"softmax_two_pass",
       {24, 256},
       ph::DType::f32,
       {R"({"block_sizes":[8,128,128],"inner_loops":[{"strategy":"pipeline","buffers":3},{"strategy":"pipeline","buffers":3}],"loop_orders":[],"num_threads":1})"}},
      {"welford",
       {24, 384},
       ph::DType::f32,
       {R"({"block_sizes":[32,256],)" + il("pipeline") + R"(,"loop_orders":[],"num_threads":1})",
        R"({"block_sizes":[32,128],)" + il("resident") + R"(,"loop_orders":[],"num_threads":1})"}},
      {"matmul",
       {64, 384, 256},
       ph::DType::f32,
       {R"({"block_sizes":[32,128,128],)" + il("pipeline") +
            R"(,"loop_orders":[[0,1]],"micro_kernels":[0],"num_threads":1})",
        R"({"block_sizes":[64,256,128],)" + il("resident") +
            R"(,"loop_orders":[[1,0]],"micro_kernels":[0],"num_threads":1})"}},
      {"matmul", {64, 256, 256}, ph::DType::bf16, {""}},
      {"attention",
       {1, 2, 200, 64},
       ph::DType::f32,
       {R"({"block_sizes":[64,128],)" + il("pipeline") +
            R"(,"loop_orders":[[0,1,2]],"micro_kernels":[0,0],"num_threads":1})",
        R"({"block_sizes":[128,128],)" + il("resident") +
            R"(,"loop_orders":[[0,1,2]],"micro_kernels":[0,0],"num_threads":1})"}},
      {"attention",
       {2, 128, 128},
       ph::DType::bf16,
       {R"({"block_sizes":[64,64],)" + il("pipeline") +
            R"(,"loop_orders":[[0,1]],"micro_kernels":[0,0],"num_threads":1})",
        R"({"block_sizes":[32,128],)" + il("resident") +
            R"(,"loop_orders":[[1,0]],"micro_kernels":[0,0],"num_threads":1})"}},
      {"layer_norm_looped", {24, 384}, ph::DType::f32, {"", "resident"}},
      {"fp8_matmul", {64, 384, 256}, ph::DType::f8e4m3, {"", "resident"}},
      {"int4_matmul", {64, 256, 256, 128}, ph::DType::bf16, {"", "resident"}},
      {"int4_matmul", {40, 256, 128, 64}, ph::DType::f32, {""}},
      {"fp8_matmul", {48, 256, 128}, ph::DType::f8e5m2, {""}},
      {"rotary", {2, 37, 3, 20}, ph::DType::f32, {""}},
      {"rotary", {1, 16, 2, 256}, ph::DType::bf16, {""}},
      {"rotary_backward", {2, 37, 3, 20}, ph::DType::f32, {""}},
      {"rms_norm_backward", {24, 256}, ph::DType::f32, {"", "resident"}},
      {"layer_norm_backward", {40, 256}, ph::DType::f32, {"", "resident"}},  // (1-D mean/rstd: whole row blocks)
      {"bmm", {2, 64, 128, 128}, ph::DType::f32, {"", "resident"}},
      {"broadcast_matmul", {2, 64, 128, 128}, ph::DType::bf16, {"", "resident"}},
      {"epilogue_subtiling", {64, 256, 128}, ph::DType::f32, {"", "resident"}},
      {"matmul_layernorm", {64, 256, 128}, ph::DType::f32, {"", "resident"}},
      {"cross_entropy", {16, 384}, ph::DType::f32, {"", "resident"}},
      // Part 2: an ignored label, dropout's mask from Philox, a jagged loop over row offsets.
      {"cross_entropy_ignore_index", {16, 384}, ph::DType::f32, {"", "resident"}},
      {"dropout", {40, 256}, ph::DType::f32, {""}},
      {"dropout_backward", {16, 384}, ph::DType::bf16, {""}},
      {"jagged_mean", {7, 256, 20}, ph::DType::f32, {""}},
      // Top-k routed experts: a jagged loop over each expert's slots, a one-hot gather of the
      // tokens' rows from a grid-level table, a scatter-add of the trip's window of rows into the
      // whole output in VMEM; jagged blocks of 8 and 16 run several trips with windows cut at the
      // slot range's ends, and column blocks of 128 update a column block of the output.
      {"moe_matmul",
       {24, 128, 128, 4, 2},
       ph::DType::f32,
       {"", R"({"block_sizes":[128,8],"loop_orders":[[1,0]],"micro_kernels":[0],"num_threads":1})"}},
      {"moe_matmul",
       {40, 128, 256, 4, 2},
       ph::DType::f32,
       {R"({"block_sizes":[128,16],"loop_orders":[[0,1]],"micro_kernels":[0],"num_threads":1})"}},
      {"moe_matmul", {40, 256, 128, 4, 2}, ph::DType::bf16, {""}},
      // (640 columns: the default takes column blocks of 128, which divide them)
      {"moe_matmul", {24, 128, 640, 4, 2}, ph::DType::f32, {""}},
      // A K loop nested in the jagged loop over each group's rows (resident: static slices of
      // K in each trip), the product stored through the jagged rows beside a column block of
      // the whole output in VMEM: jagged blocks of 16 and 32 (several trips a group, windows
      // cut at the groups' ends), K in 2 or 3 trips, column blocks of 128 at their offsets.
      {"grouped_gemm", {64, 128, 128, 2}, ph::DType::f32, {""}},
      {"grouped_gemm",
       {100, 384, 256, 5},
       ph::DType::f32,
       {R"({"block_sizes":[128,16,128],"inner_loops":[{"strategy":"resident"}],"loop_orders":[[1,0]],"micro_kernels":[0],"num_threads":1})",
        R"({"block_sizes":[256,32,128],"inner_loops":[{"strategy":"resident"}],"loop_orders":[[0,1]],"micro_kernels":[0],"num_threads":1})"}},
      {"grouped_gemm", {72, 256, 256, 3}, ph::DType::bf16, {""}},
      // 1027 columns: no column block below 1027 cuts them at multiples of 128, so the default
      // takes one that spans them (the plan refuses the others).
      {"grouped_gemm", {64, 128, 1027, 2}, ph::DType::f32, {""}},
      // Atomic adds of a split reduction: the split's grid dim runs in order ("arbitrary").
      {"split_k_matmul", {48, 1024, 256}, ph::DType::f32, {""}},
      {"split_k_matmul", {40, 512, 128}, ph::DType::bf16, {""}},
      // Gathers (one-hot matmuls against the resident table) and masked loads (concat).
      {"embedding", {40, 300, 256}, ph::DType::f32, {""}},
      {"embedding",
       {200, 300, 256},
       ph::DType::f32,
       {R"({"block_sizes":[128,128],"loop_orders":[[1,0]],"num_threads":1})"}},
      {"embedding", {24, 77, 128}, ph::DType::bf16, {""}},
      {"concat",
       {24, 200, 184},
       ph::DType::f32,
       {"", R"({"block_sizes":[16,128],"loop_orders":[[0,1]],"num_threads":1})"}},
      {"concat", {16, 128, 128}, ph::DType::bf16, {""}},
      // A segmented pair scan carried across row blocks (resident trips: the last one ragged;
      // pipelined trips of 128 rows).
      {"segment_cumsum",
       {300, 256, 17},
       ph::DType::f32,
       {"", "resident",
        R"({"block_sizes":[128,128],"inner_loops":[{"strategy":"resident","buffers":1}],"loop_orders":[],"num_threads":1})"}},
      {"segment_cumsum",
       {384, 256, 40},
       ph::DType::f32,
       {R"({"block_sizes":[128,128],"inner_loops":[{"strategy":"pipeline","buffers":2}],"loop_orders":[],"num_threads":1})"}},
      // A scatter of row ends by DMA rows, a running max of the segments' ends (one block: 32 is
      // the only block pallas offers its 18 entries), a jagged loop of several trips per segment
      // (the last one ragged).
      {"segment_sum",
       {300, 256, 17},
       ph::DType::f32,
       {"", "resident",
        R"({"block_sizes":[128,128,32,128,8],"inner_loops":[{"strategy":"resident","buffers":1}],"loop_orders":[[1,0]],"num_threads":1})"}},
      {"segment_sum", {96, 128, 200}, ph::DType::bf16, {""}},
      {"causal_attention",
       {1, 2, 200, 64},
       ph::DType::f32,
       {R"({"block_sizes":[64,128],)" + il("pipeline") +
            R"(,"loop_orders":[[0,1,2]],"micro_kernels":[0,0],"num_threads":1})",
        R"({"block_sizes":[64,64],)" + il("resident") +
            R"(,"loop_orders":[[0,1,2]],"micro_kernels":[0,0],"num_threads":1})"}},
      // Long resident loops as fori_loops (more than 8 whole trips): the trips slice the
      // resident blocks at run-time offsets, the ragged last trip follows at a static one
      // (12 keys of 64; 48 columns of 128); causal trips stop at the diagonal; two loops over
      // one shared copy of x.
      {"attention",
       {1, 2, 1100, 128},
       ph::DType::bf16,
       {R"({"block_sizes":[128,64],)" + il("resident") +
        R"(,"loop_orders":[[0,1,2]],"micro_kernels":[0,0],"num_threads":1})"}},
      {"causal_attention",
       {1, 2, 1100, 64},
       ph::DType::f32,
       {R"({"block_sizes":[64,64],)" + il("resident") +
        R"(,"loop_orders":[[0,1,2]],"micro_kernels":[0,0],"num_threads":1})"}},
      {"matmul",
       {64, 1200, 128},
       ph::DType::f32,
       {R"({"block_sizes":[64,128,128],)" + il("resident") +
        R"(,"loop_orders":[[0,1]],"micro_kernels":[0],"num_threads":1})"}},
      {"softmax_two_pass",
       {16, 1200},
       ph::DType::f32,
       {R"({"block_sizes":[16,128,128],"inner_loops":[{"strategy":"resident"},{"strategy":"resident"}],"loop_orders":[],"num_threads":1})"}},
      // A sole inner loop on the grid (its trips the last grid dim, "arbitrary"; the state in
      // VMEM scratch, set up at the first trip, read out at the last): ragged key blocks (1025
      // keys: a last block of one row), causal blocks above the diagonal clamped, K loops of
      // matmuls with ragged M and K, the reductions of a norm's backward and of a loss, a
      // batched and a fused-epilogue matmul, f32 and bf16.
      {"attention", {1, 2, 1025, 64}, ph::DType::bf16, {"grid"}},
      {"attention",
       {2, 200, 64},
       ph::DType::f32,
       {R"({"block_sizes":[64,128],"inner_loops":[{"strategy":"grid"}],"loop_orders":[[1,0]],"micro_kernels":[0,0],"num_threads":1})"}},
      {"causal_attention",
       {1, 2, 300, 64},
       ph::DType::f32,
       {"grid",
        R"({"block_sizes":[128,64],"inner_loops":[{"strategy":"grid"}],"loop_orders":[[2,0,1]],"micro_kernels":[0,0],"num_threads":1})"}},
      {"causal_attention", {1, 2, 256, 128}, ph::DType::bf16, {"grid"}},
      {"matmul",
       {130, 300, 256},
       ph::DType::f32,
       {R"({"block_sizes":[128,128,128],"inner_loops":[{"strategy":"grid"}],"loop_orders":[[1,0]],"micro_kernels":[0],"num_threads":1})"}},
      {"matmul", {64, 512, 256}, ph::DType::bf16, {"grid"}},
      {"welford", {24, 1000}, ph::DType::f32, {"grid"}},
      {"cross_entropy", {16, 384}, ph::DType::f32, {"grid"}},
      {"bmm", {2, 64, 256, 128}, ph::DType::f32, {"grid"}},
      {"epilogue_subtiling", {64, 384, 128}, ph::DType::f32, {"grid"}},
  };
}

TEST(Pallas, EmittedKernelsMatchTheirReferencesInInterpretMode) {
  ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
  struct Expect {
    std::vector<ph::Array> want;
    ph::DType dtype;
    double tol;
  };
  std::vector<pallas::InterpretCase> runs;
  std::vector<Expect> expect;
  for (const Case& c : cases()) {
    const auto& e = ph::kernels::find_kernel(c.kernel);
    auto in = e.make_inputs(c.shape, c.dtype, 5);
    auto want = e.reference(in);
    for (const std::string& cfg : c.configs) {
      std::unique_ptr<ph::Config> config;
      if (cfg == "resident" || cfg == "grid") {
        config = std::make_unique<ph::Config>(e.kernel->emit_pallas(in.args(), "v7x").config);
        for (auto& l : config->inner_loops) l.strategy = cfg;
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
      runs.push_back({name, m.source, c.kernel, in.tensors, in.scalars, /*export_for_tpu=*/true});
      expect.push_back({want, c.dtype, e.tolerance(c.shape)});
    }
  }
  std::vector<pallas::InterpretResult> results = pallas::run_in_interpret_mode(runs);
  for (size_t k = 0; k < results.size(); ++k) {
    const pallas::InterpretResult& r = results[k];
    const Expect& x = expect[k];
    SCOPED_TRACE(runs[k].name);
    if (!r.ok) {
      ADD_FAILURE() << r.error;
      continue;
    }
    EXPECT_FALSE(r.races) << "interpret mode detected a race";
    EXPECT_EQ(r.export_status, "ok");
    ASSERT_EQ(r.outputs.size(), x.want.size());
    for (size_t i = 0; i < x.want.size(); ++i) {
      auto cmp = ph::kernels::compare(r.outputs[i], x.want[i], x.dtype, x.tol);
      EXPECT_TRUE(cmp.ok) << "output " << i << " max abs error " << cmp.max_abs_err;
    }
  }
}

// out = a^T . b + c, with a [K, M]: the transposed left operand's free dim is M, so the product
// is already [M, N] (it was transposed a second time: a shape error on non-square blocks, a
// silently transposed result on square ones).
ph::Tensor transposed_left_dot(ph::Tensor a, ph::Tensor b, ph::Tensor c) {
  auto [k, m] = a.sizes<2>();
  auto n = b.size(1);
  auto out = ph::empty({m, n});
  for (auto [tm, tn] : ph::tile(m, n)) {
    ph::Var acc = c[tm, tn];
    for (auto tk : ph::tile(k)) acc = ph::dot(ph::transpose(a[tk, tm]), b[tk, tn], acc);
    out[tm, tn] = acc;
  }
  return out;
}

TEST(Pallas, TransposedLeftDotOperand) {
  ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
  ph::Kernel kernel("transposed_left_dot", transposed_left_dot);
  std::vector<pallas::InterpretCase> runs;
  std::vector<ph::Array> want;
  for (auto [m, n, cfg] :
       {std::tuple<int64_t, int64_t, const char*>{
            256, 128, R"({"block_sizes":[128,128,128],"loop_orders":[[0,1]],"micro_kernels":[0],"num_threads":1})"},
        {128, 128, R"({"block_sizes":[128,128,128],"loop_orders":[[0,1]],"micro_kernels":[0],"num_threads":1})"}}) {
    ph::Array a = ph::Array::random({256, m}, ph::DType::f32, 1), b = ph::Array::random({256, n}, ph::DType::f32, 2),
              c = ph::Array::random({m, n}, ph::DType::f32, 3);
    ph::Config config = ph::Config::from_json(cfg);
    want.push_back(kernel.compile({a, b, c}, &config).run({a, b, c}).at(0));
    std::string source = kernel.emit_pallas({a, b, c}, "v7x", &config).source;
    EXPECT_EQ(source.find("jnp.swapaxes(jax.lax.dot_general"), std::string::npos) << source;
    runs.push_back({"transposed_left_dot " + std::to_string(m) + "x" + std::to_string(n),
                    source,
                    "transposed_left_dot",
                    {a, b, c},
                    {},
                    false});
  }
  auto results = pallas::run_in_interpret_mode(runs);
  for (size_t i = 0; i < results.size(); ++i) {
    SCOPED_TRACE(runs[i].name);
    ASSERT_TRUE(results[i].ok) << results[i].error;
    ASSERT_EQ(results[i].outputs.size(), 1u);
    EXPECT_LT(ph::max_abs_diff(results[i].outputs[0], want[i]), 1e-3);
  }
}

// A loop nested in an inner loop: out = the sum over a of y[a] and over (a, b) of x[a, b], per
// block of out. The outer loop reads y per trip (its own blocks), the nested one x, whose block
// holds both loops' extents in VMEM, sliced by each trip.
constexpr int kLineNestedOuter = __LINE__ + 7;
constexpr int kLineNestedInner = __LINE__ + 8;
ph::Tensor nested_sums(ph::Tensor x, ph::Tensor y) {
  const int64_t a = x.size(0), b = x.size(1), m = x.size(2), n = x.size(3);
  auto out = ph::empty({m, n});
  for (auto [tm, tn] : ph::tile(m, n)) {
    ph::Var acc = ph::zeros({tm, tn});
    for (auto ta : ph::tile(a)) {
      acc = acc + ph::sum(y[ta, tm, tn], 0);
      for (auto tb : ph::tile(b)) acc = acc + ph::sum(ph::sum(x[ta, tb, tm, tn], 0), 0);
    }
    out[tm, tn] = acc;
  }
  return out;
}

TEST(Pallas, NestedInnerLoopsAreResidentInTheEnclosingTrip) {
  ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
  ph::Kernel kernel("nested_sums", nested_sums);
  // 5 x 7 trips' worth in blocks of 2 and 4: both loops end on a ragged trip.
  ph::Array x = ph::Array::random({5, 7, 16, 256}, ph::DType::f32, 1),
            y = ph::Array::random({5, 16, 256}, ph::DType::f32, 2);
  ph::Array want = ph::Array::zeros({16, 256}, ph::DType::f32);
  for (int64_t i = 0; i < 16 * 256; ++i) {
    double s = 0;
    for (int64_t a = 0; a < 5; ++a) {
      s += y.get(a * 16 * 256 + i);
      for (int64_t b = 0; b < 7; ++b) s += x.get((a * 7 + b) * 16 * 256 + i);
    }
    want.set(i, s);
  }
  // The config space offers the nested loop resident only; the enclosing one both strategies.
  std::string spec = kernel.trace({x, y}, "pallas:v7x")->spec.describe();
  EXPECT_NE(spec.find("inner_loops[1]: strategy resident  (loop t3 at "), std::string::npos) << spec;
  EXPECT_NE(spec.find("test_pallas.cpp:" + std::to_string(kLineNestedInner) + ")"), std::string::npos) << spec;
  EXPECT_NE(spec.find("strategy pipeline, resident;"), std::string::npos) << spec;
  // A pipelined enclosing loop holds one trip's block: refused, naming both lines and the knob.
  const std::string blocks = R"({"block_sizes":[16,256,2,4],"loop_orders":[[0,1]],"num_threads":1,)";
  ph::Config piped =
      ph::Config::from_json(blocks + R"("inner_loops":[{"strategy":"pipeline","buffers":2},{"strategy":"resident"}]})");
  try {
    kernel.emit_pallas({x, y}, "v7x", &piped);
    ADD_FAILURE() << "expected the refusal of a loop nested in a pipelined one";
  } catch (const ph::UserError& err) {
    const std::string m = err.what();
    EXPECT_NE(m.find("test_pallas.cpp:" + std::to_string(kLineNestedInner) + ": the pallas backend cannot nest"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("test_pallas.cpp:" + std::to_string(kLineNestedOuter) + " (config inner_loops[0] = pipeline)"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("\"resident\""), std::string::npos) << m;
  }
  // The default falls back to resident; both are right on the cpu and in interpret mode.
  ph::Config resident =
      ph::Config::from_json(blocks + R"("inner_loops":[{"strategy":"resident"},{"strategy":"resident"}]})");
  std::vector<pallas::InterpretCase> runs;
  for (const ph::Config* c : std::vector<const ph::Config*>{nullptr, &resident}) {
    ph::PallasModule m = kernel.emit_pallas({x, y}, "v7x", c);
    EXPECT_NE(m.source.find("for off_t3 in range(0, 7, "), std::string::npos) << m.source;
    runs.push_back({c ? "nested resident" : "nested default", m.source, "nested_sums", {x, y}, {}, true});
  }
  EXPECT_LT(ph::max_abs_diff(kernel.compile({x, y}).run({x, y}).at(0), want), 1e-4);
  check_interpreted(runs, 1, [&](size_t, const pallas::InterpretResult& r) {
    EXPECT_LT(ph::max_abs_diff(r.outputs[0], want), 1e-4);
  });
}

// A literal index in a pipelined loop (refused as "an integer index in a pipelined inner loop"
// before): the pipeline's BlockSpec maps it like a grid-level one.
ph::Tensor second_plane_sums(ph::Tensor x) {
  auto out = ph::empty({x.size(2)});
  for (auto tn : ph::tile(x.size(2))) {
    ph::Var acc = ph::zeros({tn});
    for (auto tb : ph::tile(x.size(1))) acc = acc + ph::sum(x[1, tb, tn], 0);
    out[tn] = acc;
  }
  return out;
}

TEST(Pallas, ALiteralIndexInAPipelinedLoop) {
  ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
  ph::Kernel k("second_plane_sums", second_plane_sums);
  ph::Array x = ph::Array::random({3, 40, 384}, ph::DType::f32, 1);
  ph::Config c = ph::Config::from_json(
      R"({"block_sizes":[128,16],"inner_loops":[{"strategy":"pipeline","buffers":2}],"loop_orders":[],"num_threads":1})");
  ph::PallasModule m = k.emit_pallas({x}, "v7x", &c);
  EXPECT_NE(m.source.find("pl.BlockSpec((None, 16, 128), lambda i: (1, i, g_t0)"), std::string::npos) << m.source;
  const ph::Array want = k.compile({x}).run({x}).at(0);
  check_interpreted(
      {{"second_plane_sums", m.source, "second_plane_sums", {x}, {}, true}}, 1,
      [&](size_t, const pallas::InterpretResult& r) { EXPECT_LT(ph::max_abs_diff(r.outputs[0], want), 1e-3); });
}

// Scalars stored at grid indices: a row's sum into out[g] from a 0-d Var (interpret mode took
// it, export failed: "Cannot store scalars to VMEM"), and per-block partial sums into
// partials[t.id()] of a rank-1 tensor (no legal rank-1 BlockSpec holds one element).
ph::Tensor row_sums(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m});
  for (auto g : ph::grid(m)) {
    ph::Var acc = ph::zeros({});
    for (auto tn : ph::tile(n)) acc = acc + ph::sum(x[g, tn], 0);
    out[g] = acc;
  }
  return out;
}
ph::Tensor block_sums(ph::Tensor x) {
  auto bm = ph::register_block_size(x.size(0));
  auto partials = ph::empty({ph::num_blocks(bm)});
  for (auto t : ph::tile(ph::Extent(x.size(0)).block(bm))) partials[t.id()] = ph::sum(ph::sum(x[t, ph::all], 1), 0);
  return partials;
}
constexpr int kLineBf16ScalarStore = __LINE__ + 4;
ph::Tensor row_sums_bf16(ph::Tensor x) {
  auto out = ph::empty({x.size(0)}, ph::DType::bf16);
  for (auto g : ph::grid(x.size(0))) {
    out[g] = ph::sum(x[g, ph::all], 0);
  }
  return out;
}

TEST(Pallas, ScalarsStoredAtGridIndicesGoToSmem) {
  ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
  ph::Array x = ph::Array::random({20, 384}, ph::DType::f32, 1);
  ph::Kernel rows("row_sums", row_sums), blocks("block_sums", block_sums);
  std::vector<pallas::InterpretCase> runs;
  ph::PallasModule r = rows.emit_pallas({x}, "v7x");
  EXPECT_NE(r.source.find("out_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)]"), std::string::npos) << r.source;
  EXPECT_NE(r.source.find("dimension_semantics=(\"arbitrary\",)"), std::string::npos) << r.source;
  runs.push_back({"row_sums", r.source, "row_sums", {x}, {}, true});
  ph::Config c = ph::Config::from_json(R"({"block_sizes":[8],"loop_orders":[],"num_threads":1})");
  ph::PallasModule b = blocks.emit_pallas({x}, "v7x", &c);
  runs.push_back({"block_sums", b.source, "block_sums", {x}, {}, true});
  std::vector<ph::Array> want = {rows.compile({x}).run({x}).at(0), blocks.compile({x}, &c).run({x}).at(0)};
  ASSERT_EQ(want[1].numel(), 3);  // (20 rows in blocks of 8)
  check_interpreted(runs, 1, [&](size_t i, const pallas::InterpretResult& got) {
    EXPECT_LT(ph::max_abs_diff(got.outputs[0], want[i]), 1e-3);
  });
  // SMEM holds 32-bit words: a bf16 scalar store is refused at its line.
  ph::Kernel bf("row_sums_bf16", row_sums_bf16);
  try {
    bf.emit_pallas({x}, "v7x");
    ADD_FAILURE() << "expected the refusal of a bf16 scalar store";
  } catch (const ph::UserError& err) {
    const std::string m = err.what();
    EXPECT_NE(m.find("test_pallas.cpp:" + std::to_string(kLineBf16ScalarStore) + ": "), std::string::npos) << m;
    EXPECT_NE(m.find("SMEM holds 32-bit words"), std::string::npos) << m;
  }
}

// An inner pipelined loop that only writes (a fill from a scalar argument): emit_pipeline gets
// no input refs (the call's operands were joined as "(, out)", a syntax error).
ph::Tensor fill_rows(ph::Tensor x, ph::Scalar s) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m, n});
  for (auto g : ph::grid(m))
    for (auto tn : ph::tile(n)) out[g, tn] = ph::full({tn}, 0.0f) + s;
  return out;
}

TEST(Pallas, PipelineThatOnlyWrites) {
  ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
  ph::Kernel kernel("fill_rows", fill_rows);
  ph::Array x = ph::Array::random({4, 256}, ph::DType::f32, 1);
  ph::PallasModule m = kernel.emit_pallas({x, 1.5}, "v7x");
  EXPECT_NE(m.source.find("in_specs=[]"), std::string::npos) << m.source;
  auto results = pallas::run_in_interpret_mode({{"fill_rows", m.source, "fill_rows", {x}, {1.5}, false}});
  ASSERT_TRUE(results.at(0).ok) << results[0].error << "\n" << m.source;
  ASSERT_EQ(results[0].outputs.size(), 1u);
  for (int64_t i = 0; i < results[0].outputs[0].numel(); ++i) EXPECT_EQ(results[0].outputs[0].get(i), 1.5);
}

// x[rows] = x[rows] * 2, in place: the output is the argument itself (aliased), and its ragged
// last block of rows reads and writes the buffer's tile padding (found refused by the fuzzer
// when the rule was that an aliased argument is not padded).
ph::Tensor double_in_place(ph::Tensor x) {
  for (auto [tm, tn] : ph::tile(x.size(0), x.size(1))) x[tm, tn] = x[tm, tn] * 2.0f;
  return x;
}

TEST(Pallas, InPlaceUpdatesWithRaggedBlocks) {
  ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
  ph::Kernel kernel("double_in_place", double_in_place);
  std::vector<pallas::InterpretCase> runs;
  std::vector<ph::Array> inputs;
  for (auto [rows, cfg] :
       {std::pair<int64_t, const char*>{31, R"({"block_sizes":[8,128],"loop_orders":[[0,1]],"num_threads":1})"},
        // (33 rows in blocks of 32: the last block runs past the rows' tile padding, 40, too;
        // every block is written back, so the output is not aliased and Pallas pads it to whole
        // blocks: found by the fuzzer while every updated tensor was aliased)
        {33, R"({"block_sizes":[32,128],"loop_orders":[[0,1]],"num_threads":1})"},
        {32, R"({"block_sizes":[16,128],"loop_orders":[[0,1]],"num_threads":1})"}}) {
    ph::Array y = ph::Array::random({rows, 256}, ph::DType::f32, 1);
    ph::Config c = ph::Config::from_json(cfg);
    ph::PallasModule m = kernel.emit_pallas({y}, "v7x", &c);
    EXPECT_EQ(m.source.find("input_output_aliases"), std::string::npos) << m.source;
    runs.push_back({"double_in_place " + std::to_string(rows), m.source, "double_in_place", {y}, {}, true});
    inputs.push_back(y);
  }
  check_interpreted(runs, 1, [&](size_t k, const pallas::InterpretResult& r) {
    for (int64_t i = 0; i < inputs[k].numel(); ++i) EXPECT_EQ(r.outputs[0].get(i), 2 * inputs[k].get(i));
  });
}

// A K loop of block 1 over K = 1 (a legal block: the whole dim): TPU blocks squeeze that dim out
// of both operands (found by the fuzzer:
// the module failed to trace). Refused at the dot's line.
ph::Tensor k_by_one(ph::Tensor a, ph::Tensor b) {
  auto out = ph::empty({a.size(0), b.size(1)});
  for (auto [tm, tn] : ph::tile(a.size(0), b.size(1))) {
    ph::Var acc = ph::zeros({tm, tn});
    for (auto tk : ph::tile(ph::range(a.size(1)).block(1))) acc = acc + ph::dot(a[tm, tk], b[tk, tn]);
    out[tm, tn] = acc;
  }
  return out;
}

// The batched form: the batch dim keeps the operands at rank 2 after K is squeezed.
ph::Tensor batched_k_by_one(ph::Tensor a, ph::Tensor b) {
  auto [nb, m, k] = a.sizes<3>();
  auto out = ph::empty({nb, m, b.size(2)});
  for (auto [tb, tm, tn] : ph::tile(nb, m, b.size(2))) {
    ph::Var acc = ph::zeros({tb, tm, tn});
    for (auto tk : ph::tile(ph::range(k).block(1))) acc = acc + ph::dot(a[tb, tm, tk], b[tb, tk, tn]);
    out[tb, tm, tn] = acc;
  }
  return out;
}

TEST(Pallas, DotOverSqueezedDimIsRefused) {
  {
    ph::Kernel batched("batched_k_by_one", batched_k_by_one);
    ph::Array a = ph::Array::random({1, 16, 1}, ph::DType::f32, 1), b = ph::Array::random({1, 1, 2}, ph::DType::f32, 2);
    ph::Config c = ph::Config::from_json(
        R"({"block_sizes":[1,16,2],"inner_loops":[{"buffers":2,"strategy":"pipeline"}],"loop_orders":[[0,1,2]],"micro_kernels":[0],"num_threads":1})");
    try {
      batched.emit_pallas({a, b}, "v7x", &c);
      ADD_FAILURE() << "expected a refusal";
    } catch (const ph::UserError& err) {
      EXPECT_NE(std::string(err.what()).find("cannot emit this dot"), std::string::npos) << err.what();
    }
  }
  ph::Kernel kernel("k_by_one", k_by_one);
  ph::Array a = ph::Array::random({8, 1}, ph::DType::f32, 1), b = ph::Array::random({1, 128}, ph::DType::f32, 2);
  try {
    kernel.emit_pallas({a, b}, "v7x");
    FAIL() << "expected a refusal";
  } catch (const ph::UserError& err) {
    EXPECT_NE(std::string(err.what()).find("test_pallas.cpp:"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("cannot emit this dot"), std::string::npos) << err.what();
  }
  // The refusal is the pallas plan's, so the TPU model and its tuner refuse the kernel too,
  // instead of timing a config whose module could not be emitted.
  try {
    ph::predict_tpu(kernel, {a, b}, "v7x");
    FAIL() << "expected the model to refuse it";
  } catch (const ph::UserError& err) {
    EXPECT_NE(std::string(err.what()).find("cannot emit this dot"), std::string::npos) << err.what();
  }
}

// Row sums over a loop of single columns: each trip's reduction is over a squeezed dim (it was
// emitted as jnp.sum(x, axis=1) of a 1-D value; found by the fuzzer).
ph::Tensor column_by_column_sum(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m});
  for (auto tm : ph::tile(m)) {
    ph::Var acc = ph::zeros({tm});
    for (auto tn : ph::tile(ph::range(n).block(1))) acc = acc + ph::sum(x[tm, tn], -1);
    out[tm] = acc;
  }
  return out;
}

TEST(Pallas, ReductionOverASqueezedDim) {
  ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
  ph::Kernel kernel("column_by_column_sum", column_by_column_sum);
  ph::Array x = ph::Array::random({128, 1}, ph::DType::f32, 3);
  ph::PallasModule m = kernel.emit_pallas({x}, "v7x");
  auto results =
      pallas::run_in_interpret_mode({{"column_by_column_sum", m.source, "column_by_column_sum", {x}, {}, false}});
  ASSERT_TRUE(results.at(0).ok) << results[0].error << "\n" << m.source;
  for (int64_t i = 0; i < 128; ++i) EXPECT_FLOAT_EQ(results[0].outputs.at(0).get(i), x.get(i));
}

ph::Tensor scale_1d(ph::Tensor x) {
  auto out = ph::empty_like(x);
  for (auto t : ph::tile(x.size(0))) out[t] = x[t] * 2.0f;
  return out;
}

TEST(Pallas, TpuRulesAreEnforcedBeforeEmitting) {
  const auto& e = ph::kernels::find_kernel("attention");
  // [8,32,32768,256] bf16 resident: K and V change per head only, so they keep one buffer each
  // (pl.Buffered(1)): 32 MiB, which fits v7x's 64 MiB (double-buffered they would not).
  // (A smaller head count keeps the test's inputs small; VMEM holds one head's K and V.)
  ph::Config c = attention_config(512, 512, "resident");
  {
    auto fits = e.make_specs({1, 1, 32768, 256}, ph::DType::bf16);
    ph::PallasModule m = e.kernel->emit_pallas(fits.args(), "v7x", &c);
    EXPECT_NE(m.source.find("(g_t0, g_t1, 0, 0), pipeline_mode=pl.Buffered(1))"), std::string::npos) << m.source;
    EXPECT_NE(m.source.find("arg1 resident 1 x 16.0 MiB"), std::string::npos) << m.source;
  }
  // At 65536 keys, K and V alone are 64 MiB: more than v7x's VMEM.
  auto in = e.make_specs({1, 1, 65536, 256}, ph::DType::bf16);
  try {
    e.kernel->emit_pallas(in.args(), "v7x", &c);
    FAIL() << "expected a VMEM error";
  } catch (const ph::UserError& err) {
    std::string m = err.what();
    EXPECT_NE(m.find("of VMEM"), std::string::npos) << m;
    EXPECT_NE(m.find("TPU v7x has 64.0 MiB"), std::string::npos) << m;
    // (the resident blocks shrink with the pipeline strategy: the hint says so)
    EXPECT_NE(m.find("Stream loop t3 (extent 65536) with the pipeline strategy"), std::string::npos) << m;
    EXPECT_EQ(m.find("span their whole tensors"), std::string::npos) << m;
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
  // So are inner DMA windows (an emit_pipeline's or a grid loop's blocks of K and V, rows on
  // the sublane dim): multiples of the VMEM tile's rows (16 for bf16, 8 for f32), or whole.
  bad.block_sizes = {512, 24};
  EXPECT_THROW(e.kernel->emit_pallas(in.args(), "v7x", &bad), ph::UserError);
  const std::string kv16 = e.kernel->trace(in.args(), "pallas:v7x")->spec.describe();
  EXPECT_NE(kv16.find("block_sizes[1]: {16, 32, "), std::string::npos) << kv16;
  auto f32 = e.make_specs({1, 1, 1000, 64}, ph::DType::f32);
  const std::string kv8 = e.kernel->trace(f32.args(), "pallas:v7x")->spec.describe();
  EXPECT_NE(kv8.find("block_sizes[1]: {8, 16, "), std::string::npos) << kv8;
  // (and a K loop over A's lane dim: multiples of 128, or the whole dim)
  const auto& mm = ph::kernels::find_kernel("matmul");
  auto mk = mm.make_specs({64, 1000, 128}, ph::DType::f32);
  const std::string k128 = mm.kernel->trace(mk.args(), "pallas:v7x")->spec.describe();
  EXPECT_NE(k128.find("block_sizes[2]: {128, 256, 512, 1024}"), std::string::npos) << k128;
  // (Ragged blocks are legal: the library cases run them in interpret mode with padded buffers.)
  // Rank-1 blocks (Mosaic's _check_block_mappings): the whole dim, a multiple of 1024, or a power
  // of two of at least 128 x the packing; rank 2 and more, multiples of 128 on the lane dim.
  EXPECT_TRUE(pallas::tpu_block_legal(128, 1000, 0, 1, 4));
  EXPECT_FALSE(pallas::tpu_block_legal(384, 1000, 0, 1, 4));
  EXPECT_FALSE(pallas::tpu_block_legal(128, 1000, 0, 1, 2));
  EXPECT_TRUE(pallas::tpu_block_legal(256, 1000, 0, 1, 2));
  EXPECT_TRUE(pallas::tpu_block_legal(3072, 5000, 0, 1, 2));
  EXPECT_FALSE(pallas::tpu_block_legal(256, 1000, 0, 1, 1));
  EXPECT_TRUE(pallas::tpu_block_legal(1000, 1000, 0, 1, 1));
  EXPECT_TRUE(pallas::tpu_block_legal(384, 1000, 0, 2, 4));
  ph::Kernel scale("scale_1d", scale_1d);
  for (auto [dt, first] : {std::pair{ph::DType::f32, 128}, {ph::DType::bf16, 256}}) {
    const std::string spec = scale.trace({ph::Array::zeros({5000}, dt)}, "pallas:v7x")->spec.describe();
    EXPECT_NE(spec.find("block_sizes[0]: {" + std::to_string(first) + ", "), std::string::npos) << spec;
  }
}

// Causal attention pipelined: the key blocks above the diagonal skip their compute (pl.when) and
// their DMAs: the K/V index maps stop at the last block a query block needs, and emit_pipeline
// copies a block only when its index changes.
TEST(Pallas, CausalKeyBlocksAboveTheDiagonalMoveNoData) {
  ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
  const auto& e = ph::kernels::find_kernel("causal_attention");
  auto in = e.make_inputs({1, 2, 300, 64}, ph::DType::f32, 3);
  ph::Config c = ph::Config::from_json(
      R"({"block_sizes":[128,128],"inner_loops":[{"strategy":"pipeline","buffers":2}],"loop_orders":[[0,1,2]],"micro_kernels":[0,0],"num_threads":1})");
  ph::PallasModule m = e.kernel->emit_pallas(in.args(), "v7x", &c);
  EXPECT_NE(m.source.find("last_t3 = jnp.maximum(((off_t2 + n_t2) - 0 + 127) // 128 - 1, 0)"), std::string::npos)
      << m.source;
  EXPECT_NE(m.source.find("lambda i: (g_t0, g_t1, jnp.minimum(i, last_t3), 0)"), std::string::npos) << m.source;
  const auto& full = ph::kernels::find_kernel("attention");
  EXPECT_EQ(full.kernel->emit_pallas(in.args(), "v7x", &c).source.find("last_t3"), std::string::npos);
  const ph::Array want = e.reference(in).at(0);
  check_interpreted({{"causal", m.source, "causal_attention", in.tensors, in.scalars, true}}, 1,
                    [&](size_t, const pallas::InterpretResult& r) {
                      auto cmp = ph::kernels::compare(r.outputs[0], want, ph::DType::f32);
                      EXPECT_TRUE(cmp.ok) << "max abs error " << cmp.max_abs_err;
                    });
}

// A row read by two resident loops (softmax_two_pass's and layer_norm_looped's two passes over
// x) is one BlockSpec, fetched and counted once; the second loop slices the first one's ref.
// Where the loops keep different blocks (one pipelined), each has its own operand.
TEST(Pallas, AnInputTwoResidentLoopsReadIsFetchedOnce) {
  ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
  auto cfg = [](const std::string& a, const std::string& b) {
    return ph::Config::from_json(R"({"block_sizes":[8,256,256],"inner_loops":[{"strategy":")" + a +
                                 R"("},{"strategy":")" + b + R"("}],"num_threads":1})");
  };
  std::vector<pallas::InterpretCase> runs;
  std::vector<ph::Array> wants;
  for (const char* name : {"softmax_two_pass", "layer_norm_looped"}) {
    const auto& e = ph::kernels::find_kernel(name);
    auto in = e.make_inputs({37, 777}, ph::DType::f32, 5);
    ph::Config both = cfg("resident", "resident"), mixed = cfg("resident", "pipeline");
    ph::PallasModule m = e.kernel->emit_pallas(in.args(), "v7x", &both);
    EXPECT_NE(m.source.find("_ref = s0_ref  # arg0 at "), std::string::npos) << m.source;
    EXPECT_NE(m.source.find(": the same resident block, fetched once"), std::string::npos);
    // (x's block in once, the output's out once)
    auto count = [](const std::string& text, const std::string& what) {
      int n = 0;
      for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
      return n;
    };
    EXPECT_EQ(count(m.source, "pl.BlockSpec((8, 777), lambda g_t0: (g_t0, 0))"), 2) << m.source;
    // (the VMEM count names x's resident block once)
    const size_t first = m.source.find("arg0 resident 2 x ");
    ASSERT_NE(first, std::string::npos) << m.source;
    EXPECT_EQ(m.source.find("arg0 resident 2 x ", first + 1), std::string::npos) << m.source;
    std::string other = e.kernel->emit_pallas(in.args(), "v7x", &mixed).source;
    EXPECT_EQ(other.find("fetched once"), std::string::npos) << other;
    // (loop 1's resident x only: loop 2's x and the output stay in HBM for its pipeline)
    EXPECT_EQ(count(other, "pl.BlockSpec((8, 777), lambda g_t0: (g_t0, 0))"), 1) << other;
    runs.push_back({name, m.source, name, in.tensors, in.scalars, true});
    wants.push_back(e.reference(in).at(0));
  }
  check_interpreted(runs, 1, [&](size_t i, const pallas::InterpretResult& r) {
    auto cmp = ph::kernels::compare(r.outputs[0], wants[i], ph::DType::f32);
    EXPECT_TRUE(cmp.ok) << runs[i].name << ": max abs error " << cmp.max_abs_err;
  });
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
  // K and V reach their dots as stored (bf16), K's transpose as dimension numbers: no f32 copy
  // of either and no swapaxes in the trip; only q, which is scaled, is converted.
  for (const std::string* m : {&pipe, &res}) {
    EXPECT_EQ(m->find("jnp.swapaxes("), std::string::npos) << *m;
    size_t converted = 0;
    for (size_t at = m->find("_raw.astype(jnp.float32)"); at != std::string::npos;
         at = m->find("_raw.astype(jnp.float32)", at + 1))
      ++converted;
    EXPECT_EQ(converted, 1u) << *m;
  }
  EXPECT_NE(res.find("for off_t3 in range(0, 256, 128):"), std::string::npos) << res;
  // (K and V change per head only: one buffer each)
  EXPECT_NE(res.find("pl.BlockSpec((None, None, 256, 128), lambda g_t0, g_t1, g_t2: (g_t0, g_t1, 0, 0), "
                     "pipeline_mode=pl.Buffered(1))"),
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

// A launch's sole loop on the grid: its trips are the last grid dim, which runs in order; the
// state's set-up runs at the first trip and the read-out at the last; the causal key blocks
// above the diagonal keep the last needed block's index (no DMA); no emit_pipeline.
TEST(Pallas, ASoleLoopRunsOnTheGrid) {
  const auto& e = ph::kernels::find_kernel("causal_attention");
  auto in = e.make_specs({1, 2, 300, 64}, ph::DType::f32);
  ph::Config c = attention_config(128, 128, "grid");
  const std::string m = e.kernel->emit_pallas(in.args(), "v7x", &c).source;
  EXPECT_HAS(m, "grid=(1, 2, 3, 3),");
  EXPECT_HAS(m, "dimension_semantics=(\"parallel\", \"parallel\", \"parallel\", \"arbitrary\")");
  EXPECT_HAS(m, "g_t3 = pl.program_id(3)");
  EXPECT_HAS(m, "@pl.when(g_t3 == 0)  # the state's set-up, at the first trip");
  EXPECT_HAS(m, "@pl.when(g_t3 == 2)  # after the loop, at the last trip");
  EXPECT_HAS(m, "return jnp.maximum(((off_t2 + n_t2) - 0 + 127) // 128 - 1, 0)");
  EXPECT_HAS(m, "lambda g_t0, g_t1, g_t2, g_t3: (g_t0, g_t1, jnp.minimum(g_t3, _last_t3(g_t0, g_t1, g_t2, g_t3)), 0)");
  // (the output's block is the query block's: kept in VMEM across the trips)
  EXPECT_HAS(m,
             "out_specs=[pl.BlockSpec((None, None, 128, 64), lambda g_t0, g_t1, g_t2, g_t3: (g_t0, g_t1, g_t2, 0))]");
  EXPECT_EQ(m.find("emit_pipeline("), std::string::npos) << m;
}

// Row sums of x's columns from kStart on.
template <int kStart>
ph::Tensor sums_from(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m});
  for (auto tm : ph::tile(m)) {
    ph::Var acc = ph::zeros({tm});
    for (auto tn : ph::tile(ph::range(kStart, n))) acc = acc + ph::sum(x[tm, tn], -1);
    out[tm] = acc;
  }
  return out;
}

// A resident loop of more than 8 whole trips runs as a fori_loop (plan.h, rolled_loops): its
// trips slice the resident K and V at pl.ds offsets aligned to the block, its ragged last trip
// follows at a static offset, and causal trips stop at the diagonal. A loop whose trips would
// slice a block's lane dim at an offset that is not a multiple of 128 stays unrolled (Mosaic
// takes dynamic offsets there at whole tiles only). The numbers: the rolled cases of
// EmittedKernelsMatchTheirReferencesInInterpretMode.
TEST(Pallas, LongResidentLoopsRunAsAForiLoop) {
  const auto& e = ph::kernels::find_kernel("causal_attention");
  auto in = e.make_specs({1, 2, 1100, 64}, ph::DType::bf16);
  ph::Config c = attention_config(128, 64, "resident");
  const std::string m = e.kernel->emit_pallas(in.args(), "v7x", &c).source;
  EXPECT_HAS(m, "18 trips of 64, resident, a fori_loop");
  EXPECT_HAS(m, "def _trip_t3(j_t3, carry):");
  EXPECT_HAS(m, "off_t3 = pl.multiple_of(j_t3 * 64, 64)");
  EXPECT_HAS(m, "s1_ref[pl.ds(off_t3, n_t3), :]");
  EXPECT_HAS(m, "last_t3 = jnp.clip(((off_t2 + n_t2) - 0 + 63) // 64, 0, 17)");
  EXPECT_HAS(m, "jax.lax.fori_loop(0, last_t3, _trip_t3, 0)");
  EXPECT_HAS(m, "# the last trip, 12 of 64");
  EXPECT_HAS(m, "off_t3 = 1088");
  EXPECT_EQ(m.find("for off_t3 in range("), std::string::npos) << m;
  // Eight whole trips (and a ragged ninth): unrolled.
  ph::Config eight = attention_config(128, 128, "resident");
  EXPECT_HAS(e.kernel->emit_pallas(in.args(), "v7x", &eight).source, "for off_t3 in range(0, 1100, 128):");
  // Trips over a range from column 256 in blocks of 128 (aligned: rolled, at 256 + 128 j) and
  // from column 3 (unaligned along the lane dim: unrolled, at static offsets); both right.
  ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
  ph::Array x = ph::Array::random({16, 1600}, ph::DType::f32, 3);
  ph::Config sc = ph::Config::from_json(
      R"({"block_sizes":[16,128],"inner_loops":[{"strategy":"resident"}],"loop_orders":[],"num_threads":1})");
  std::vector<pallas::InterpretCase> runs;
  std::vector<ph::Array> want;
  ph::Kernel from_256("sums_from_256", sums_from<256>), from_3("sums_from_3", sums_from<3>);
  for (auto* k : {&from_256, &from_3}) {
    const std::string src = k->emit_pallas({x}, "v7x", &sc).source;
    if (k == &from_256) {
      EXPECT_HAS(src, "off_t1 = pl.multiple_of(256 + j_t1 * 128, 128)");
      EXPECT_HAS(src, "# the last trip, 64 of 128");
    } else {
      EXPECT_EQ(src.find("fori_loop"), std::string::npos) << src;
      EXPECT_HAS(src, "for off_t1 in range(3, 1600, 128):");
    }
    runs.push_back({k->name(), src, k->name(), {x}, {}, true});
    want.push_back(k->compile({x}).run({x}).at(0));
  }
  check_interpreted(runs, 1, [&](size_t i, const pallas::InterpretResult& r) {
    EXPECT_LT(ph::max_abs_diff(r.outputs[0], want[i]), 1e-3) << runs[i].name;
  });
}

// Inner loops whose blocks the kernel fixes at sizes a TPU cannot copy (64 lanes, 4 rows of f32,
// 8 rows of bf16): a DMA window's last two dims are multiples of (8, 128) or whole, so the
// pipeline and grid strategies are refused naming the strategy that takes them, and the default
// keeps the whole dim in the outer block (resident), each trip a static slice of it in VMEM.
constexpr int kLineLaneWindow = __LINE__ + 6;
ph::Tensor row_sums_by_64(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m}, ph::DType::f32);
  for (auto tm : ph::tile(m)) {
    ph::Var acc = ph::zeros({tm});
    for (auto tn : ph::tile(ph::range(n).block(64))) acc = acc + ph::sum(ph::cast(x[tm, tn], ph::DType::f32), -1);
    out[tm] = acc;
  }
  return out;
}
ph::Tensor column_sums_by_few_rows(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({n}, ph::DType::f32);
  const int64_t rows = x.dtype() == ph::DType::f32 ? 4 : 8;  // half a sublane tile
  for (auto tn : ph::tile(n)) {
    ph::Var acc = ph::zeros({tn});
    for (auto tm : ph::tile(ph::range(m).block(rows))) acc = acc + ph::sum(ph::cast(x[tm, tn], ph::DType::f32), 0);
    out[tn] = acc;
  }
  return out;
}
ph::Tensor row_sums_by_1(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m}, ph::DType::f32);
  for (auto tm : ph::tile(m)) {
    ph::Var acc = ph::zeros({tm});
    for (auto tn : ph::tile(ph::range(n).block(1))) acc = acc + ph::sum(x[tm, tn], -1);
    out[tm] = acc;
  }
  return out;
}
constexpr int kLineGridWindow = __LINE__ + 4;
ph::Tensor scaled_by_row_blocks_of_4(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m, n}, x.dtype());
  for (auto tm : ph::tile(ph::range(m).block(4))) out[tm, ph::all] = x[tm, ph::all] * 2.0f;
  return out;
}

TEST(Pallas, UnalignedInnerBlocksKeepTheirWholeDimInTheOuterBlock) {
  ph::Kernel by_64("row_sums_by_64", row_sums_by_64), by_rows("column_sums_by_few_rows", column_sums_by_few_rows);
  std::vector<pallas::InterpretCase> runs;
  std::vector<ph::Array> want;
  for (ph::DType dt : {ph::DType::f32, ph::DType::bf16}) {
    ph::Array x = ph::Array::random({24, 1000}, dt, 5), y = ph::Array::random({37, 384}, dt, 6);
    for (auto [k, in] : {std::pair{&by_64, x}, std::pair{&by_rows, y}}) {
      const std::string src = k->emit_pallas({in}, "v7x").source;
      EXPECT_HAS(src, R"("strategy":"resident")");
      EXPECT_EQ(src.find("emit_pipeline("), std::string::npos) << src;
      runs.push_back({k->name() + " " + std::string(ph::dtype_name(dt)), src, k->name(), {in}, {}, true});
      want.push_back(k->compile({in}).run({in}).at(0));
      for (const char* strategy : {"pipeline", "grid"}) {
        ph::Config c = k->emit_pallas({in}, "v7x").config;
        c.inner_loops[0].strategy = strategy;
        const std::string err = user_error_of([&] { k->emit_pallas({in}, "v7x", &c); });
        EXPECT_HAS(err, "cannot copy the block of ");
        EXPECT_HAS(err, std::string("(config inner_loops[0] = ") + strategy + ")");
        EXPECT_HAS(err, "multiples of (8, 128)");
        EXPECT_HAS(err, "give that loop the strategy \"resident\"");
      }
    }
  }
  const std::string lane = user_error_of([&] {
    ph::Array x = ph::Array::random({24, 1000}, ph::DType::f32, 5);
    ph::Config c = by_64.emit_pallas({x}, "v7x").config;
    c.inner_loops[0].strategy = "pipeline";
    by_64.emit_pallas({x}, "v7x", &c);
  });
  EXPECT_HAS(lane, "test_pallas.cpp:" + std::to_string(kLineLaneWindow));
  EXPECT_HAS(lane, "the block of 64 along dim 1 of arg0 (1000)");
  // Trips of one lane each would squeeze the lane dim the Tile IR keeps: refused, as before.
  ph::Kernel by_1("row_sums_by_1", row_sums_by_1);
  EXPECT_HAS(user_error_of([&] {
               by_1.emit_pallas({ph::Array::random({24, 300}, ph::DType::f32, 5)}, "v7x");
             }),
             "a resident loop of block 1 along one of a block's last two dims (dim 1 of arg0;");
  // A launch tile's fixed block is a grid-level BlockSpec: no strategy holds its dim whole.
  ph::Kernel rows4("scaled_by_row_blocks_of_4", scaled_by_row_blocks_of_4);
  const std::string grid = user_error_of([&] {
    rows4.emit_pallas({ph::Array::random({24, 256}, ph::DType::f32, 1)}, "v7x");
  });
  EXPECT_HAS(grid, "test_pallas.cpp:" + std::to_string(kLineGridWindow));
  EXPECT_HAS(grid, "cannot use the block of 4 along dim 0 of arg0 (24), through t0 as a grid-level block");
  check_interpreted(runs, 1, [&](size_t i, const pallas::InterpretResult& r) {
    EXPECT_LT(ph::max_abs_diff(r.outputs[0], want[i]), 2e-2) << runs[i].name;
  });
}

// Row statistics stay 2-D (row_stats.h): attention's running max and sum live in VMEM as
// [rows, 128] with every lane equal, the per-trip maxima and sums are taken with keepdims, and
// the statistics broadcast over a row by whole registers (_lanes), so no value of the trip is
// 1-D; the output's division reads the sum's first lane. The numbers are checked with every
// library kernel in EmittedKernelsMatchTheirReferencesInInterpretMode.
TEST(Pallas, RowStatisticsStayLaneDense) {
  const auto& e = ph::kernels::find_kernel("attention");
  auto in = e.make_specs({1, 2, 512, 256}, ph::DType::bf16);
  ph::Config c = attention_config(128, 256, "grid");
  const std::string m = e.kernel->emit_pallas(in.args(), "v7x", &c).source;
  EXPECT_HAS(m,
             "scratch_shapes=[pltpu.VMEM((128, 128), jnp.float32), pltpu.VMEM((128, 128), jnp.float32), "
             "pltpu.VMEM((128, 256), jnp.float32)]");
  EXPECT_HAS(m, "axis=1, keepdims=True)");
  EXPECT_HAS(m, ", 256)");  // (a statistic over a row of 256 keys or 256 head dims)
  EXPECT_HAS(m, "def _lanes(x, w):");
  const size_t trip = m.find("# loop at "), last = m.find("def _last_trip():");
  ASSERT_NE(trip, std::string::npos);
  ASSERT_NE(last, std::string::npos);
  const std::string body = m.substr(trip, last - trip);
  EXPECT_EQ(body.find("jnp.expand_dims("), std::string::npos) << body;
  EXPECT_EQ(body.find("[..., 0]"), std::string::npos) << body;
  EXPECT_HAS(body, "_lanes(");
  // (the VMEM count holds the lane-dense scratch: 2 x 64 KiB + the accumulator's 128 KiB)
  EXPECT_HAS(m, "scratch 1 x 256.0 KiB");
}

// Where a loop cannot run on the grid, the config is refused: a kernel with two loops is not
// offered the strategy; a loop that reads a value computed from its state before it is refused
// at the line (that value exists at the first trip only), and so is an atomic update.
constexpr int kLineStateRead = __LINE__ + 6;
ph::Tensor sum_plus_initial(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m});
  for (auto tm : ph::tile(m)) {
    ph::Var acc = ph::zeros({tm});
    auto initial = acc * 2.0;
    for (auto tn : ph::tile(n)) acc = acc + ph::sum(x[tm, tn], -1) + initial;
    out[tm] = acc;
  }
  return out;
}

constexpr int kLineAtomicBesideGridLoop = __LINE__ + 7;
ph::Tensor row_sums_and_total(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m}), total = ph::zeros({1});
  for (auto tm : ph::tile(m)) {
    ph::Var acc = ph::zeros({tm});
    for (auto tn : ph::tile(n)) acc = acc + ph::sum(x[tm, tn], -1);
    ph::atomic_add(total, {0}, ph::sum(acc, 0));
    out[tm] = acc;
  }
  return out;
}

TEST(Pallas, LoopsThatCannotRunOnTheGridAreRefused) {
  const auto& two = ph::kernels::find_kernel("softmax_two_pass");
  auto in = two.make_specs({24, 256}, ph::DType::f32);
  ph::Config c = ph::Config::from_json(
      R"({"block_sizes":[8,128,128],"inner_loops":[{"strategy":"grid"},{"strategy":"resident"}],"loop_orders":[],"num_threads":1})");
  std::string m = user_error_of([&] { two.kernel->emit_pallas(in.args(), "v7x", &c); });
  EXPECT_HAS(m, "grid");
  EXPECT_HAS(m, "pipeline, resident");
  ph::Array x = ph::Array::random({16, 256}, ph::DType::f32, 1);
  ph::Config g = ph::Config::from_json(
      R"({"block_sizes":[16,128],"inner_loops":[{"strategy":"grid"}],"loop_orders":[],"num_threads":1})");
  ph::Kernel state("sum_plus_initial", sum_plus_initial);
  m = user_error_of([&] { state.emit_pallas({x}, "v7x", &g); });
  EXPECT_HAS(m, "test_pallas.cpp:" + std::to_string(kLineStateRead));
  EXPECT_HAS(m, "on the grid (config inner_loops[0] = grid)");
  EXPECT_HAS(m, "which runs at the first trip only");
  // (the same kernel runs with the loop pipelined)
  ph::Config p = ph::Config::from_json(
      R"({"block_sizes":[16,128],"inner_loops":[{"strategy":"pipeline","buffers":2}],"loop_orders":[],"num_threads":1})");
  EXPECT_NO_THROW(state.emit_pallas({x}, "v7x", &p));
  ph::Kernel atomic("row_sums_and_total", row_sums_and_total);
  m = user_error_of([&] { atomic.emit_pallas({x}, "v7x", &g); });
  EXPECT_HAS(m, "test_pallas.cpp:" + std::to_string(kLineAtomicBesideGridLoop));
  EXPECT_HAS(m, "updated in order across the launch");
}

// Rows of w gathered by ids [B, S] into out [B * S, E] at the computed row b * S + s.
constexpr int kLineComputedRow = __LINE__ + 6;
ph::Tensor rows_at_computed_rows(ph::Tensor ids, ph::Tensor w) {
  const int64_t b = ids.size(0), s = ids.size(1);
  auto out = ph::empty({b * s, w.size(1)}, w.dtype());
  for (auto [tb, tt, te] : ph::tile(ph::range(b).block(1), s, w.size(1))) {
    auto row = tb.begin() * s + tt.index();
    out[row, te] = w[ids[tb.begin(), tt], te];
  }
  return out;
}

// What the pallas backend cannot express yet is refused with the construct and the user's line.
TEST(Pallas, ScattersAndMaskedStoresAreRefusedAtTheLine) {
  // moe_matmul with
  // column blocks of 128 that do not divide its 200 columns: its scatter-add into the whole
  // output in VMEM takes a column block only at 128-aligned offsets that cut the dim evenly.
  const std::string moe_cfg = R"({"block_sizes":[128,16],"loop_orders":[[0,1]],"micro_kernels":[0],"num_threads":1})";
  for (const auto& [name, shape, file, cfg, why] :
       {std::tuple{"moe_matmul", ph::Shape{64, 128, 200, 4, 2}, "moe.cpp:", moe_cfg, "does not span dim 1"}}) {
    const auto& g = ph::kernels::find_kernel(name);
    auto in = g.make_inputs(shape, ph::DType::f32, 1);
    std::unique_ptr<ph::Config> config;
    if (!cfg.empty()) config = std::make_unique<ph::Config>(ph::Config::from_json(cfg));
    try {
      g.kernel->emit_pallas(in.args(), "v7x", config.get());
      FAIL() << "expected a refusal of " << name;
    } catch (const ph::UserError& err) {
      std::string m = err.what();
      EXPECT_NE(m.find(file), std::string::npos) << m;
      EXPECT_NE(m.find("the pallas backend does not support"), std::string::npos) << m;
      EXPECT_NE(m.find(why), std::string::npos) << m;
    }
  }
  // A store at a computed row (b * S + s, what embedding's rank-2 ids were before they were
  // flattened on the host): a scatter through a computed index block.
  ph::Kernel k("rows_at_computed_rows", rows_at_computed_rows);
  ph::Array ids = ph::Array::zeros({2, 8}, ph::DType::i64), w = ph::Array::random({16, 128}, ph::DType::f32, 1);
  try {
    k.emit_pallas({ids, w}, "v7x");
    FAIL() << "expected a refusal";
  } catch (const ph::UserError& err) {
    std::string m = err.what();
    EXPECT_NE(m.find("test_pallas.cpp:" + std::to_string(kLineComputedRow)), std::string::npos) << m;
    EXPECT_NE(m.find("the pallas backend does not support"), std::string::npos) << m;
  }
}

// A launch that does not fit VMEM because of blocks no block size shrinks says which they are:
// moe_matmul at a large shape holds x (its one-hot gather's table) and the output (updated at
// indices computed from data) whole, so "use smaller block sizes" would be a dead end.
// The refusal of library kernel `name` at `shape` (f32) on a v7x; a failure where it compiles.
std::string v7x_refusal(const std::string& name, const ph::Shape& shape) {
  const auto& e = ph::kernels::find_kernel(name);
  auto in = e.make_specs(shape, ph::DType::f32);
  try {
    e.kernel->emit_pallas(in.args(), "v7x");
  } catch (const ph::UserError& err) {
    return err.what();
  }
  ADD_FAILURE() << "expected the VMEM refusal of " << name;
  return "";
}

TEST(Pallas, AFitErrorNamesTheBlocksHeldWhole) {
  const std::string m = v7x_refusal("moe_matmul", {1024, 4096, 4096, 16, 2});
  EXPECT_NE(m.find("does not fit"), std::string::npos) << m;
  EXPECT_NE(m.find("Its blocks of arg0 (16.0 MiB), buf2 (16.0 MiB) span their whole tensors"), std::string::npos) << m;
  EXPECT_EQ(m.find("Use smaller block sizes"), std::string::npos) << m;
}

// Each group's sums of x's columns [c0, c0 + width) over its rows (offsets [G + 1]), into those
// columns of out [G, 1, x's width] (the rest zeros): x is read in a jagged loop through its own
// tile, beside a launch tile over the column range.
ph::Tensor column_range_group_sums(ph::Tensor x, ph::Tensor offsets, int64_t c0, int64_t width) {
  const int64_t groups = offsets.size(0) - 1;
  auto out = ph::zeros({groups, 1, x.size(1)});
  for (auto [g, tn] : ph::tile(ph::range(groups).block(1), ph::range(c0, c0 + width))) {
    ph::Var acc = ph::zeros({tn});
    for (auto tr : ph::tile(ph::jagged(offsets, g.begin()))) acc = acc + ph::sum(x[tr, tn], 0);
    out[g, 0, tn] = acc;
  }
  return out;
}
ph::Tensor group_sums_of_two_blocks(ph::Tensor x, ph::Tensor o) { return column_range_group_sums(x, o, 128, 256); }
ph::Tensor group_sums_short_of_a_block(ph::Tensor x, ph::Tensor o) { return column_range_group_sums(x, o, 256, 100); }

// x's rows stream (a DMA per trip) where each trip's block is a whole block of the launch tile's
// range, and stay resident where the range is shorter than its block (a DMA of the whole block
// would reach past the range, and the emitter's block is the range's): both match the sums, with
// empty groups and trips that end ragged.
TEST(Pallas, JaggedRowsStreamOnlyThroughWholeBlocks) {
  ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
  const std::vector<int64_t> offs = {0, 0, 5, 40, 40, 77};
  ph::Array x = ph::Array::random({77, 384}, ph::DType::f32, 3);
  ph::Array offsets = ph::Array::zeros({6}, ph::DType::i32);
  for (size_t i = 0; i < offs.size(); ++i) offsets.set(static_cast<int64_t>(i), static_cast<double>(offs[i]));
  std::vector<pallas::InterpretCase> runs;
  std::vector<ph::Array> wants;
  using Body = ph::Tensor (*)(ph::Tensor, ph::Tensor);
  for (auto [body, c0, width, streams] :
       {std::tuple<Body, int64_t, int64_t, bool>{group_sums_of_two_blocks, 128, 256, true},
        {group_sums_short_of_a_block, 256, 100, false}}) {
    ph::Kernel kernel("column_range_group_sums", body);
    ph::Array want = ph::Array::zeros({5, 1, 384}, ph::DType::f32);
    for (int64_t g = 0; g < 5; ++g)
      for (int64_t c = c0; c < c0 + width; ++c) {
        double sum = 0;
        for (int64_t r = offs[g]; r < offs[g + 1]; ++r) sum += x.get(r * 384 + c);
        want.set(g * 384 + c, sum);
      }
    const ph::Config cfg =
        ph::Config::from_json(R"({"block_sizes":[128,8],"inner_loops":[],"loop_orders":[[0,1]],"num_threads":1})");
    ph::PallasModule m = kernel.emit_pallas({x, offsets}, "v7x", &cfg);
    EXPECT_EQ(m.source.find("arg0 stream") != std::string::npos, streams) << m.source;
    runs.push_back(
        {"group sums from " + std::to_string(c0), m.source, "column_range_group_sums", {x, offsets}, {}, true});
    wants.push_back(want);
  }
  check_interpreted(runs, 1, [&](size_t i, const pallas::InterpretResult& r) {
    EXPECT_LT(ph::max_abs_diff(r.outputs[0], wants[i]), 1e-4) << runs[i].name;
  });
}

// A jagged loop's rows that are read only and through its own tile stream a trip at a time: at
// segment_sum's [131072, 256] f32, x's rows in column blocks of 128 (64 MiB whole) take two
// trip blocks of VMEM, and the launch fits a v7x core. Rows read in a loop nested in the jagged
// one (grouped_gemm's x in its K loop) and rows a jagged store writes stay whole in VMEM, and
// the refusal names them: no block size shrinks them.
TEST(Pallas, AJaggedLoopStreamsTheRowsItReadsAndTheFitErrorNamesThoseHeldWhole) {
  const auto& e = ph::kernels::find_kernel("segment_sum");
  auto in = e.make_specs({131072, 256, 2048}, ph::DType::f32);
  const std::string module = e.kernel->emit_pallas(in.args(), "v7x").source;
  EXPECT_NE(module.find("arg0 stream 2 x"), std::string::npos) << module;
  EXPECT_NE(module.find("pltpu.make_async_copy(s"), std::string::npos) << module;
  const std::string m = v7x_refusal("grouped_gemm", {65536, 4096, 4096, 8});
  EXPECT_NE(m.find("does not fit"), std::string::npos) << m;
  EXPECT_NE(m.find("Its blocks of arg0 (1.0 GiB), buf0 (1.0 GiB) span their whole tensors"), std::string::npos) << m;
  EXPECT_NE(m.find("the rows a jagged loop reads or writes"), std::string::npos) << m;
  EXPECT_EQ(m.find("Use smaller block sizes"), std::string::npos) << m;
}

}  // namespace

// The TPU timing model against published measurements (not timings of this machine), and the
// tuner that uses it. Tolerance: 10% on each published figure, as stated in docs/tpu-model.md.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "kernels/mesh_registry.h"
#include "kernels/registry.h"
#include "tools/tpu_table.h"
#include "tpu_model/hardware.h"

namespace ph = parhelion;

namespace {

constexpr double kTolerance = 0.10;

ph::Config attention_config(const std::string& strategy, int64_t block) {
  return ph::Config::from_json(R"({"block_sizes":[)" + std::to_string(block) + "," + std::to_string(block) +
                               R"(],"inner_loops":[{"strategy":")" + strategy +
                               R"(","buffers":2}],"loop_orders":[[0,1,2]],"micro_kernels":[0,0],"num_threads":1})");
}

ph::TpuPrediction seed_attention(int64_t s, const std::string& strategy) {
  const auto& e = ph::kernels::find_kernel("attention");
  auto in = e.make_specs({8, 32, s, 256}, ph::DType::bf16);
  ph::Config c = attention_config(strategy, 512);  // the seed's blocks are not published: 512 x 512
  return ph::predict_tpu(*e.kernel, in.args(), "v7x", &c);
}

void expect_near_published(double model, double published, const char* what) {
  double err = model / published - 1;
  EXPECT_LT(std::abs(err), kTolerance) << what << ": model " << model << ", published " << published << " ("
                                       << err * 100 << "%)";
}

// Helion on TPU v7x, flash attention B=8, H=32, D=256, bf16, non-causal (the seed article).
TEST(TpuModel, SeedAttentionOnV7x) {
  ph::TpuPrediction p8 = seed_attention(8192, "pipeline"), r8 = seed_attention(8192, "resident");
  ph::TpuPrediction p32 = seed_attention(32768, "pipeline"), r32 = seed_attention(32768, "resident");
  expect_near_published(p8.tflops, 653, "emit_pipeline, S=8192");
  expect_near_published(r8.tflops, 892, "resident (unroll), S=8192");
  expect_near_published(p32.tflops, 695, "emit_pipeline, S=32768");
  // Helion's resident kernel ran out of VMEM at S=32768, its K and V double-buffered (64 MiB).
  // Ours keeps them single-buffered (their block changes per head only): 32 MiB, which fits.
  EXPECT_TRUE(r32.fits) << r32.vmem_bytes;
  EXPECT_LT(r32.vmem_bytes, 64ll << 20);
  EXPECT_GT(r32.vmem_bytes, 32ll << 20);
  EXPECT_GT(r8.tflops, p8.tflops);  // where it fits, resident wins
  // Resident K/V are copied once per head; the pipeline copies them for every query block.
  EXPECT_LT(r8.dma_s * 4, p8.dma_s);
}

// The vector core runs at the clock the MXU peak implies with 4 MXUs per TensorCore: v5e's is
// its published 1.5 GHz; the VPU kept its (8, 128) vreg and 4 ALUs when the MXU grew to 256^2,
// so from v6e on its rate is a quarter of v5e's share of the MXU peak.
TEST(TpuModel, VectorCoreRatesFollowTheClock) {
  const auto& v5e = ph::tpu_model::tpu_hardware("v5e");
  const auto& v7x = ph::tpu_model::tpu_hardware("v7x");
  EXPECT_NEAR(v5e.clock_hz, 1.5e9, 0.01e9);
  EXPECT_NEAR(v7x.clock_hz, 2.2e9, 0.01e9);
  EXPECT_NEAR(v5e.vpu_ops_per_s, v5e.bf16_flops / 32, 1e9);
  EXPECT_NEAR(v7x.vpu_ops_per_s, v7x.bf16_flops / 128, 1e9);
  EXPECT_DOUBLE_EQ(v7x.vst_per_s, v7x.clock_hz);
  EXPECT_DOUBLE_EQ(v7x.vld_per_s, 3 * v7x.clock_hz);
  EXPECT_EQ(v7x.vreg_file_bytes, 64 * 4096);
}

// A value larger than the register file (64 vregs, 256 KiB) that is needed after a reduction
// over itself (softmax's x - max(x)) is written to VMEM and read back; one that fits stays in
// registers. Same work per element, so the same compute per row while the block fits.
TEST(TpuModel, IntermediatesLargerThanTheRegisterFileCostVmemTraffic) {
  const auto& e = ph::kernels::find_kernel("softmax");
  auto in = e.make_specs({4096, 1024}, ph::DType::f32);
  auto compute = [&](int rows) {
    ph::Config c =
        ph::Config::from_json(R"({"block_sizes":[)" + std::to_string(rows) + R"(],"loop_orders":[],"num_threads":1})");
    return ph::predict_tpu(*e.kernel, in.args(), "v7x", &c).compute_s;
  };
  EXPECT_NEAR(compute(8), compute(32), compute(8) * 1e-6);  // 8 and 32 vregs per row block
  EXPECT_GT(compute(512), compute(32) * 1.4);               // 512 vregs: stored, read twice
}

// jax docs/pallas/tpu/matmul.ipynb, TPU v5e, bf16 8192^3.
TEST(TpuModel, PallasMatmulOnV5e) {
  const auto& e = ph::kernels::find_kernel("matmul");
  auto in = e.make_specs({8192, 8192, 8192}, ph::DType::bf16);
  auto config = [](const std::string& blocks) {
    return ph::Config::from_json(R"({"block_sizes":[)" + blocks +
                                 R"(],"inner_loops":[{"strategy":"pipeline","buffers":2}],"loop_orders":[[0,1]],)"
                                 R"("micro_kernels":[0],"num_threads":1})");
  };
  ph::Config big = config("512,1024,1024"), small = config("128,128,128");
  ph::TpuPrediction b = ph::predict_tpu(*e.kernel, in.args(), "v5e", &big);
  expect_near_published(b.seconds * 1e3, 6.10, "512/1024/1024 blocks (ms)");
  EXPECT_EQ(b.bound, "compute");
  ph::TpuPrediction s = ph::predict_tpu(*e.kernel, in.args(), "v5e", &small);
  double pct = s.tflops / 197.0;
  // "about 6%" in the notebook (0.0918 s); jax issue #24633 reports ~4% for 128 blocks.
  EXPECT_GT(pct, 0.04);
  EXPECT_LT(pct, 0.08);
  EXPECT_NE(s.bound, "compute");
}

TEST(TpuModel, TunerChoosesResidentWhereItFitsAndSaysWhy) {
  const auto& e = ph::kernels::find_kernel("attention");
  auto in8 = e.make_specs({8, 32, 8192, 256}, ph::DType::bf16);
  ph::TpuTuneReport r8 = ph::tune_tpu(*e.kernel, in8.args(), "v7x");
  EXPECT_EQ(r8.best_config.inner_loops.at(0).strategy, "resident") << r8.why;
  EXPECT_NE(r8.why.find("chose resident"), std::string::npos) << r8.why;
  EXPECT_NE(r8.why.find("best pipeline"), std::string::npos) << r8.why;
  // Blocks an engineer would pick: within 15% of the seed's 892 TFLOP/s, and, among configs
  // the model cannot tell apart (within 5% of the fastest), the one that leaves VMEM headroom;
  // never a footprint filled to the byte.
  EXPECT_LT(std::abs(r8.best.tflops / 892 - 1), 0.15) << r8.why;
  EXPECT_LE(r8.best.vmem_bytes, r8.best.vmem_capacity / 2) << r8.why;
  for (const auto& s : r8.per_strategy) {
    if (s.best.fits) {
      EXPECT_LE(r8.best.seconds, s.best.seconds * 1.05) << s.strategy << ": " << r8.why;
    }
  }
  // At S=65536 one head's K and V are 64 MiB even single-buffered: resident does not fit v7x.
  auto in64 = e.make_specs({8, 32, 65536, 256}, ph::DType::bf16);
  ph::TpuTuneReport r64 = ph::tune_tpu(*e.kernel, in64.args(), "v7x");
  EXPECT_EQ(r64.best_config.inner_loops.at(0).strategy, "pipeline") << r64.why;
  EXPECT_NE(r64.why.find("resident does not fit"), std::string::npos) << r64.why;
  EXPECT_NE(r64.why.find("TPU v7x has 64.0 MiB"), std::string::npos) << r64.why;
  EXPECT_GT(r64.rejected, 0);
  auto j = nlohmann::json::parse(r64.to_json());
  EXPECT_FALSE(j["per_strategy"]["resident"]["prediction"]["fits"].get<bool>());
  // On a v6e (128 MiB of VMEM) the resident K/V of S=65536 fit, and the tuner weighs them.
  ph::TpuTuneReport r6 = ph::tune_tpu(*e.kernel, in64.args(), "v6e");
  EXPECT_TRUE(nlohmann::json::parse(r6.to_json())["per_strategy"]["resident"]["prediction"]["fits"].get<bool>())
      << r6.why;
  EXPECT_EQ(r6.why.find("resident does not fit"), std::string::npos) << r6.why;
}

// Causal attention's key blocks above the diagonal are neither computed nor copied, in every
// strategy (ir/trip_guard.h): at 16 key blocks a query block runs (16 + 1) / 2 of them on
// average, 53% of the non-causal work (dot FLOPs and the trips' compute).
TEST(TpuModel, CausalBlocksAboveTheDiagonalCostNothing) {
  const auto& full = ph::kernels::find_kernel("attention");
  const auto& causal = ph::kernels::find_kernel("causal_attention");
  auto in = full.make_specs({8, 32, 8192, 256}, ph::DType::bf16);
  for (const char* strategy : {"pipeline", "resident", "grid"}) {
    ph::Config c = attention_config(strategy, 512);
    ph::TpuPrediction f = ph::predict_tpu(*full.kernel, in.args(), "v7x", &c);
    ph::TpuPrediction k = ph::predict_tpu(*causal.kernel, in.args(), "v7x", &c);
    // (plus the step's own ops, q's scaling and the output's division, which every query block
    // runs; on the grid, at every step, the skipped ones too: q's scaled block is stored to
    // VMEM for the trips at every grid step, 256 of a trip's 656 MXU cycles at 512 x 512)
    EXPECT_GT(k.compute_s / f.compute_s, 17.0 / 32) << strategy;
    EXPECT_LT(k.compute_s / f.compute_s, std::string(strategy) == "grid" ? 0.68 : 0.57) << strategy;
    EXPECT_NEAR(k.flops / f.flops, 17.0 / 32, 0.01) << strategy;
    EXPECT_LT(k.seconds, f.seconds * 0.85) << strategy;
    if (std::string(strategy) != "resident") {  // (resident K/V move once per head either way)
      EXPECT_LT(k.dma_s, f.dma_s * 0.7) << strategy;
    }
  }
}

// A loop over an enclosing block (ph::tile(block): layer_norm_backward walks each block of rows
// in tiles) runs block(parent) / block trips per step, whatever the parent's block: the same work
// at 32 or 64 steps; and the parent's block moves at every step, its rows read once.
TEST(TpuModel, ALoopOverABlockWalksThatBlock) {
  const auto& e = ph::kernels::find_kernel("layer_norm_backward");
  auto in = e.make_specs({8192, 8192}, ph::DType::f32);
  auto predict = [&](int64_t rows) {
    ph::Config c = ph::Config::from_json(R"({"block_sizes":[)" + std::to_string(rows) +
                                         R"(,128,4096,1024],"inner_loops":[{"buffers":1,"strategy":"pipeline"}],)"
                                         R"("loop_orders":[],"num_threads":1})");
    return ph::predict_tpu(*e.kernel, in.args(), "v7x", &c);
  };
  const ph::TpuPrediction few = predict(256), many = predict(128);
  ASSERT_TRUE(few.fits && many.fits);
  EXPECT_NEAR(many.compute_s / few.compute_s, 1.0, 0.1);
  // grad_out and x read, dx written: 3 x 256 MiB at most at the HBM rate
  const double bytes = 3.0 * 8192 * 8192 * 4;
  for (const ph::TpuPrediction& p : {few, many}) {
    EXPECT_GT(p.dma_s, bytes / ph::tpu_model::tpu_hardware("v7x").hbm_bytes_per_s);
    EXPECT_LT(p.dma_s, 2 * bytes / ph::tpu_model::tpu_hardware("v7x").hbm_bytes_per_s);
  }
}

// The seed's published table (bench/tpu_published.json, Helion on v7x, ms per call timed from
// the host) beside the model's tuned predictions plus dispatch: the figures of docs/tpu-model.md
// ("The seed's kernel table"). The bounds are today's errors, not the aim (every row within 25%,
// the geomean within 15%: issue 17): a change that makes the model worse fails here.
TEST(TpuModel, SeedKernelTableStaysWithinTodaysErrors) {
  const std::vector<ph::tools::TpuTableRow> rows =
      ph::tools::model_published_table(std::string(PARHELION_SOURCE_DIR) + "/bench/tpu_published.json");
  ASSERT_EQ(rows.size(), 16u);
  int comparable = 0;
  for (const ph::tools::TpuTableRow& r : rows) {
    EXPECT_TRUE(r.tuned.best.fits) << r.kernel;
    if (!r.same_kernel) continue;
    ++comparable;
    EXPECT_LT(std::abs(r.error()), 0.60) << r.kernel << ": model " << r.call_ms() << " ms, Helion " << r.published_ms;
  }
  EXPECT_EQ(comparable, 14);
  EXPECT_LT(ph::tools::geomean_error(rows), 0.27) << ph::tools::table_markdown(rows);
  // The flagship row, within the attention calibration's 10%.
  EXPECT_LT(std::abs(rows[0].error()), kTolerance) << ph::tools::table_markdown(rows);
}

TEST(TpuModel, PredictionJsonAndErrors) {
  const auto& e = ph::kernels::find_kernel("softmax");
  auto in = e.make_specs({4096, 4096}, ph::DType::bf16);
  ph::TpuPrediction p = ph::predict_tpu(*e.kernel, in.args(), "v6e");
  auto j = nlohmann::json::parse(p.to_json());
  for (const char* k : {"predicted_ms", "tflops", "strategy", "fits", "bound"}) EXPECT_TRUE(j.contains(k)) << k;
  // What it rests on: device time, a host call's dispatch apart, and no measurement.
  EXPECT_DOUBLE_EQ(j["dispatch_ms"].get<double>(), 0.18);
  EXPECT_NEAR(j["call_ms"].get<double>(), j["predicted_ms"].get<double>() + 0.18, 1e-9);
  EXPECT_FALSE(j["measured"].get<bool>());
  EXPECT_NE(p.basis.find("no TPU has confirmed"), std::string::npos) << p.basis;
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(p.strategy, "none");
  // softmax moves 2 x 32 MiB: at 1.64 TB/s, at least 41 us; the model must not beat HBM.
  EXPECT_GT(p.seconds, 2.0 * 4096 * 4096 * 2 / 1640e9);
  EXPECT_THROW(ph::predict_tpu(*e.kernel, in.args(), "v9"), ph::UserError);
  ph::Config bad = ph::Config::from_json(R"({"block_sizes":[24],"loop_orders":[],"num_threads":1})");
  EXPECT_THROW(ph::predict_tpu(*e.kernel, in.args(), "v6e", &bad), ph::UserError);
}

// --- kernels on a mesh (docs/distributed.md) -----------------------------------------------------

ph::TpuPrediction on_ring(const std::string& kernel, const ph::Shape& shape, int64_t devices, const std::string& tpu) {
  const ph::kernels::MeshKernelEntry* e = ph::kernels::find_mesh_kernel(kernel);
  const ph::kernels::Inputs in = e->make_inputs(shape, ph::DType::bf16, devices);
  return ph::predict_tpu_on(*e->kernel, ph::Mesh{{"x", devices}}, in.args(), tpu);
}

// A ring all-gather's n - 1 copies cross one inter-chip link each, at one direction's published
// share of the chip's ICI bandwidth, and nothing hides them; fused with a matmul large enough,
// each step's product hides the next shard's copy.
TEST(TpuModel, CopiesOnAMeshCostTheirLinkTimeAndComputeHidesThem) {
  const auto& v5e = ph::tpu_model::tpu_hardware("v5e");
  EXPECT_EQ(v5e.ici_links, 4);
  EXPECT_NEAR(v5e.ici_link_bytes_per_s, 400e9 / 8, 1e6);  // 400 GB/s both ways over 4 links
  EXPECT_NEAR(ph::tpu_model::tpu_hardware("v5p").ici_link_bytes_per_s, 1200e9 / 12, 1e6);
  bool sourced = false;
  for (const std::string& s : v5e.sources) sourced |= s.find("ICI 400 GB/s per chip") != std::string::npos;
  EXPECT_TRUE(sourced);

  const double shard = 128.0 * 1024 * 2;  // one device's [128, 1024] bf16
  const ph::TpuPrediction gather = on_ring("all_gather", {128, 1024}, 4, "v5e");
  EXPECT_GE(gather.comm_s, 3 * shard / v5e.ici_link_bytes_per_s);
  EXPECT_GE(gather.exposed_comm_s, 0.9 * gather.comm_s);  // nothing to hide behind
  EXPECT_EQ(gather.bound, "ICI");
  EXPECT_GE(gather.seconds, gather.exposed_comm_s);
  // Twice the rows: the wire time of the 3 copies doubles (their latencies do not).
  const ph::TpuPrediction twice = on_ring("all_gather", {256, 1024}, 4, "v5e");
  EXPECT_NEAR(twice.comm_s - gather.comm_s, 3 * shard / v5e.ici_link_bytes_per_s, 1e-9);
  // v6e's links are twice as fast.
  EXPECT_LT(on_ring("all_gather", {256, 1024}, 4, "v6e").comm_s, twice.comm_s);

  const ph::TpuPrediction fused = on_ring("all_gather_matmul", {128, 1024, 8192}, 4, "v5e");
  EXPECT_NEAR(fused.comm_s, gather.comm_s, gather.comm_s * 0.01);  // the same copies
  EXPECT_LT(fused.exposed_comm_s, 0.2 * fused.comm_s) << "each step's product hides the next copy";
  EXPECT_GT(fused.flops, 0);
  const nlohmann::json j = nlohmann::json::parse(fused.to_json());
  EXPECT_NEAR(j.at("exposed_comm_ms").get<double>(), fused.exposed_comm_s * 1e3, 1e-9);
  EXPECT_NEAR(j.at("comm_ms").get<double>(), fused.comm_s * 1e3, 1e-9);
}

}  // namespace

// The Tile IR's text form, the verifier, configs and config spaces, and the Block IR.
#include <gtest/gtest.h>
#include <algorithm>

#include "backend/cpu/host.h"
#include "driver/compiled_kernel_impl.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "kernels/kernels.h"
#include "kernels/registry.h"
#include "lower/lower.h"

namespace ph = parhelion;

namespace {

TEST(TileIR, PrintsAStableTextForm) {
  ph::Array x = ph::Array::zeros({4, 6}, ph::DType::f32);
  std::string ir = ph::kernels::add.compile({x, x}).ir();
  // Operand order inside an expression follows C++ evaluation order (right to left on g++), so
  // match the lines that do not depend on it exactly.
  EXPECT_EQ(ir.substr(0, ir.find("  launch")),
            "kernel add(arg0: f32[4,6], arg1: f32[4,6]) -> (buf0)\n"
            "  $b0 = block_size(extent=4)\n"
            "  $b1 = block_size(extent=6)\n"
            "  buf0 = empty f32[4,6]\n");
  EXPECT_NE(ir.find("  launch t0 in 0..4 by $b0, t1 in 0..6 by $b1 {\n"), std::string::npos) << ir;
  EXPECT_NE(ir.find("load arg0[t0, t1] : f32[t0,t1]\n"), std::string::npos) << ir;
  EXPECT_NE(ir.find(" = add %"), std::string::npos) << ir;
  EXPECT_NE(ir.find("    store buf0[t0, t1], %2\n  }\n  return"), std::string::npos) << ir;
  // Tracing twice gives the same text.
  ph::Array y = ph::Array::zeros({4, 6}, ph::DType::f32);
  EXPECT_EQ(ph::kernels::add.compile({x, y}).ir(), ir);
}

TEST(TileIR, DeadLoadsOfStoreTargetsAreRemoved) {
  ph::Array x = ph::Array::zeros({4, 6}, ph::DType::f32);
  std::string ir = ph::kernels::add.compile({x, x}).ir();
  EXPECT_EQ(ir.find("load buf0"), std::string::npos) << ir;
}

TEST(TileIR, VarsAndNestedLoopsPrint) {
  ph::Array x = ph::Array::zeros({3, 300}, ph::DType::f32);
  std::string ir = ph::kernels::softmax_two_pass.compile({x}).ir();
  for (const char* want : {"var v0 = %", "loop t1 in 0..300 by $b1 {", "var_get v0 : f32[t0]", "var_set v1, %",
                           "amax %", "axis=1 : f32[t0]", "unsqueeze %", "axis=1 : f32[t0,1]"})
    EXPECT_NE(ir.find(want), std::string::npos) << want << "\n" << ir;
}

TEST(Verifier, AcceptsEveryLibraryKernel) {
  for (const auto& e : ph::kernels::registry()) {
    ph::Shape small(e.default_shape.size(), 3);           // every kernel's own rank, small sizes
    auto in = e.make_inputs(small, e.dtypes.front(), 1);  // f32, or fp8 for the fp8 kernels
    EXPECT_NO_THROW(ph::ir::verify(e.kernel->compile(in.args()).impl().fn)) << e.name;
  }
}

TEST(Verifier, RejectsUseBeforeDefinitionAndBadTypes) {
  ph::Array x = ph::Array::zeros({4, 6}, ph::DType::f32);
  ph::ir::Function fn = ph::kernels::add.compile({x, x}).impl().fn;
  ph::ir::Function swapped = fn;
  auto& body = swapped.body.back().body;  // the launch
  std::swap(body[0], body[2]);            // the add now precedes its operands
  EXPECT_THROW(ph::ir::verify(swapped), ph::UserError);

  ph::ir::Function retyped = fn;
  retyped.values[2].dtype = ph::DType::i64;  // add of two f32 blocks claims i64
  try {
    ph::ir::verify(retyped);
    ADD_FAILURE();
  } catch (const ph::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("has type i64[t0,t1], expected f32[t0,t1]"), std::string::npos) << e.what();
  }

  ph::ir::Function device_in_host = fn;
  device_in_host.body.push_back(fn.body.back().body[0]);  // a load at host level
  EXPECT_THROW(ph::ir::verify(device_in_host), ph::UserError);
}

TEST(Config, JsonRoundTrip) {
  ph::Config c;
  c.block_sizes = {8, 1024, 1};
  c.loop_orders = {{1, 0}};
  c.num_threads = 2;
  std::string j = c.to_json();
  EXPECT_EQ(j, R"({"block_sizes":[8,1024,1],"loop_orders":[[1,0]],"num_threads":2})");
  EXPECT_EQ(ph::Config::from_json(j), c);
  EXPECT_EQ(ph::Config::from_json(" { \"num_threads\" : 1 } ").num_threads, 1);
}

TEST(ConfigSpec, DerivedFromTheIr) {
  ph::Array x = ph::Array::zeros({1000, 1003}, ph::DType::f32);
  auto k = ph::kernels::add.compile({x, x});
  const ph::ConfigSpec& spec = k.config_spec();
  ASSERT_EQ(spec.block_sizes.size(), 2u);
  EXPECT_EQ(spec.block_sizes[0].extent, 1000);
  EXPECT_EQ(spec.block_sizes[1].choices.back(), 1024);
  EXPECT_EQ(spec.block_sizes[1].choices.front(), 1);
  ASSERT_EQ(spec.loop_orders.size(), 1u);
  EXPECT_EQ(spec.loop_orders[0].dims, 2);
  EXPECT_NO_THROW(spec.validate(k.config()));
  EXPECT_NE(spec.describe().find("block_sizes[1]: {1, 2, 4"), std::string::npos) << spec.describe();
}

TEST(ConfigSpec, DefaultConfigIsValidAndFitsForEveryKernel) {
  for (const auto& e : ph::kernels::registry()) {
    auto in = e.make_inputs(e.default_shape, e.dtypes.front(), 1);
    auto k = e.kernel->compile(in.args());
    EXPECT_NO_THROW(k.config_spec().validate(k.config())) << e.name;
    EXPECT_LE(k.footprint_bytes(), ph::backend::cpu::Host::detect().fast_memory_bytes) << e.name;
  }
}

TEST(BlockIR, PrintsGridOperandsScratchAndFootprint) {
  ph::Array x = ph::Array::zeros({1000, 3000}, ph::DType::f32);
  ph::Config c = ph::Config::from_json(R"({"block_sizes":[8,512,1024],"loop_orders":[],"num_threads":2})");
  c.num_threads = std::min(2, ph::backend::cpu::Host::detect().threads);  // a one-core host allows only 1
  std::string b = ph::kernels::softmax_two_pass.compile({x}, &c).block_ir();
  const std::string grid = "launch 0: grid (t0: 1000/8 = 125) = 125 steps on " + std::to_string(c.num_threads) +
                           (c.num_threads == 1 ? " thread" : " threads");
  for (const std::string& want :
       std::vector<std::string>{grid, "in  arg0 f32 block [8, 512] at (t0*8, t1*512) direct 16.0 KiB",
                                "out buf0 f32 block [8, 1024] at (t0*8, t2*1024) direct 32.0 KiB",
                                "scratch v0 f32 [8] 32 B", "inner loop t1: 3000/512 = 6 trips", "footprint "})
    EXPECT_NE(b.find(want), std::string::npos) << want << "\n" << b;
}

TEST(Fusion, MaterializesOnlyWhatMustBe) {
  ph::Array x = ph::Array::zeros({64, 256}, ph::DType::f32);
  const auto& K = ph::kernels::softmax.compile({x}).impl();
  const auto& L = K.program.launches.at(0);
  // amax and sum are reductions; exp(x - max) feeds both the sum and the store: computed once.
  auto materialized = [](const ph::lower::LaunchPlan& plan) {
    int n = 0;
    for (const ph::lower::Scratch& s : plan.scratch) n += s.kind == ph::lower::Scratch::Materialized;
    return n;
  };
  EXPECT_EQ(materialized(L), 3);
  const auto& A = ph::kernels::add.compile({x, x}).impl();
  EXPECT_EQ(materialized(A.program.launches.at(0)), 0);  // loads and add fuse into the store
}

}  // namespace

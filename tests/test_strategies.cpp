// Inner-loop strategies (stream, pipeline with 1-3 buffers, resident): every one computes the
// same result, the Block IR and the generated code show what each does, and a resident extent
// that does not fit fast memory is rejected before compiling, with the numbers.
#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "driver/compiled_kernel_impl.h"
#include "kernels/kernels.h"
#include "kernels/registry.h"
#include "lower/lower.h"

namespace ph = parhelion;

namespace {

ph::Config with_strategy(ph::Config c, const std::string& strategy, int buffers) {
  for (auto& l : c.inner_loops) l = {strategy, buffers};
  return c;
}

struct Case {
  std::string kernel;
  ph::Shape shape;
  ph::DType dtype;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.kernel << " " << ph::shape_to_string(c.shape) << " " << ph::dtype_name(c.dtype);
}

class StrategyTest : public ::testing::TestWithParam<Case> {};

TEST_P(StrategyTest, EveryStrategyAndBufferCountMatchesTheReference) {
  const Case& tc = GetParam();
  const auto& e = ph::kernels::find_kernel(tc.kernel);
  auto in = e.make_inputs(tc.shape, tc.dtype, 7);
  auto args = in.args();
  auto want = e.reference(in);
  ph::CompiledKernel def = e.kernel->compile(args);
  ASSERT_FALSE(def.config_spec().inner_loops.empty());
  // Small blocks so that every loop takes several trips, ragged at the end.
  ph::Config base = def.config();
  for (size_t i = 0; i < base.block_sizes.size(); ++i) base.block_sizes[i] = std::min<int64_t>(base.block_sizes[i], 16);
  std::vector<std::pair<std::string, int>> choices = {
      {"stream", 2}, {"pipeline", 1}, {"pipeline", 2}, {"pipeline", 3}, {"resident", 2}};
  for (auto [strategy, buffers] : choices) {
    ph::Config c = with_strategy(base, strategy, buffers);
    SCOPED_TRACE(tc.kernel + " " + ph::shape_to_string(tc.shape) + " " + c.to_json());
    ph::CompiledKernel k = e.kernel->compile(args, &c);
    auto out = k.run(args);
    ASSERT_EQ(out.size(), want.size());
    for (size_t i = 0; i < out.size(); ++i) {
      auto cmp = ph::kernels::compare(out[i], want[i], tc.dtype, e.tolerance(tc.shape));
      EXPECT_TRUE(cmp.ok) << "output " << i << " max abs error " << cmp.max_abs_err;
    }
    // A second call: resident blocks are refilled per call, never stale.
    auto again = k.run(args);
    for (size_t i = 0; i < out.size(); ++i) EXPECT_TRUE(ph::kernels::compare(again[i], want[i], tc.dtype).ok);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, StrategyTest,
                         ::testing::Values(Case{"attention", {2, 2, 67, 40}, ph::DType::f32},
                                           Case{"attention", {1, 131, 24}, ph::DType::bf16},
                                           Case{"causal_attention", {1, 2, 67, 24}, ph::DType::f32},
                                           Case{"causal_attention", {3, 45, 40}, ph::DType::bf16},
                                           Case{"softmax_two_pass", {7, 301}, ph::DType::f32},
                                           Case{"layer_norm_looped", {5, 333}, ph::DType::bf16},
                                           Case{"cross_entropy", {97, 45}, ph::DType::f32},
                                           Case{"welford", {9, 250}, ph::DType::f32}),
                         [](const auto& param_info) {
                           const Case& c = param_info.param;
                           std::string s = c.kernel + "_" + std::string(ph::dtype_name(c.dtype));
                           for (int64_t d : c.shape) s += "_" + std::to_string(d);
                           return s;
                         });

const ph::kernels::KernelEntry& attention() { return ph::kernels::find_kernel("attention"); }

TEST(Strategies, BlockIrAndCodeShowStagingAndReuse) {
  auto in = attention().make_inputs({1, 2, 100, 32}, ph::DType::f32, 1);
  ph::CompiledKernel def = attention().kernel->compile(in.args());
  ph::Config pipe = with_strategy(def.config(), "pipeline", 3);
  pipe.block_sizes = {32, 16};
  ph::CompiledKernel k = attention().kernel->compile(in.args(), &pipe);
  std::string block = k.block_ir();
  EXPECT_NE(block.find("pipeline x3 buffers"), std::string::npos) << block;
  EXPECT_NE(block.find("stage arg1 [1, 1, 16, 32] x3"), std::string::npos) << block;
  EXPECT_NE(k.source().find("__builtin_prefetch"), std::string::npos);
  ph::Config res = with_strategy(pipe, "resident", 2);
  ph::CompiledKernel r = attention().kernel->compile(in.args(), &res);
  EXPECT_NE(r.block_ir().find("stage arg1 [1, 1, 100, 32]"), std::string::npos) << r.block_ir();
  EXPECT_NE(r.block_ir().find("refilled when (off_t0, off_t1) changes"), std::string::npos) << r.block_ir();
  EXPECT_NE(r.source().find("ph_have"), std::string::npos);
}

TEST(Strategies, ResidentThatDoesNotFitIsRejectedWithTheNumbers) {
  // K and V of 16384 x 128 f32 are 8 MiB each: more than the 2 MiB of fast memory given here
  // (a target of its own keeps the test independent of this machine's L2).
  auto in = attention().make_inputs({1, 16384, 128}, ph::DType::f32, 1);
  ph::CompiledKernel def = attention().kernel->compile(in.args());
  ph::backend::cpu::Host small_host = ph::backend::cpu::Host::detect();
  small_host.fast_memory_bytes = 2 << 20;
  const ph::backend::cpu::CpuBackend small(small_host);
  ph::Config res = with_strategy(def.config(), "resident", 2);
  try {
    ph::lower::lower(def.impl().fn, res, small);
    FAIL() << "expected a fit error";
  } catch (const ph::UserError& err) {
    std::string m = err.what();
    EXPECT_NE(m.find("does not fit"), std::string::npos) << m;
    EXPECT_NE(m.find("stage0(arg1) 8.0 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("the target has 2.0 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("pipeline strategy"), std::string::npos) << m;
  }
  // The same loop pipelined fits.
  EXPECT_NO_THROW(ph::lower::lower(def.impl().fn, with_strategy(def.config(), "pipeline", 2), small));
}

TEST(Strategies, ConfigKnobsParseValidateAndRoundTrip) {
  auto in = attention().make_inputs({1, 64, 16}, ph::DType::f32, 1);
  ph::CompiledKernel def = attention().kernel->compile(in.args());
  const ph::ConfigSpec& spec = def.config_spec();
  ASSERT_EQ(spec.inner_loops.size(), 1u);
  EXPECT_NE(spec.describe().find("inner_loops[0]: strategy stream, pipeline, resident; buffers 1..3"),
            std::string::npos)
      << spec.describe();
  ph::Config c = with_strategy(def.config(), "pipeline", 3);
  EXPECT_EQ(ph::Config::from_json(c.to_json()), c);
  EXPECT_THROW(spec.validate(with_strategy(c, "pipeline", 4)), ph::UserError);
  try {
    spec.validate(with_strategy(c, "unroll", 2));
    FAIL();
  } catch (const ph::UserError& err) {
    EXPECT_NE(std::string(err.what()).find("is not one of stream, pipeline, resident"), std::string::npos);
  }
  EXPECT_THROW(ph::Config::from_json(R"({"inner_loops":[{"strategy":"resident","depth":2}]})"), ph::UserError);
}

}  // namespace

// Partial-match checks of the generated C++: the structure that makes it correct and fast.
#include <gtest/gtest.h>
#include <algorithm>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/host.h"
#include "kernels/kernels.h"
#include "kernels/registry.h"
#include "runtime/gemm/gemm.h"

namespace ph = parhelion;

namespace {

void expect_contains(const std::string& src, const std::string& want) {
  EXPECT_NE(src.find(want), std::string::npos) << "missing: " << want;
}

TEST(Codegen, VectorWidthsAreTheHostsWidestFirst) {
  using ph::backend::cpu::vector_widths;
  EXPECT_EQ(vector_widths("avx2 fma avx512f avx512bw avx512bf16"), (std::vector<int>{512, 256, 128}));
  EXPECT_EQ(vector_widths("avx2 fma"), (std::vector<int>{256, 128}));
  EXPECT_TRUE(vector_widths("").empty());  // 128-bit vectors only: no knob
  // Unset (0), the default's width: for add, the widest, and no pragma. A width set is kept, the
  // widest too, through JSON, where the default is narrower (a kernel that draws, on AMD's Zen 1).
  ph::Array x = ph::Array::zeros({100, 300}, ph::DType::f32);
  ph::CompiledKernel plain = ph::kernels::add.compile({x, x});
  EXPECT_EQ(plain.config().vector_bits, 0);
  EXPECT_EQ(plain.source().find("prefer-vector-width"), std::string::npos);
  const std::vector<int> widths = plain.config_spec().vector_bits;
  if (widths.empty()) GTEST_SKIP() << "this host has 128-bit vectors only, or its compiler is not GCC";
  for (int bits : {widths.front(), 128}) {
    SCOPED_TRACE(bits);
    ph::Config set = ph::Config::from_json("{\"vector_bits\":" + std::to_string(bits) + "}");
    ph::CompiledKernel drop = ph::kernels::dropout.compile({x, 0.25, int64_t{5}}, &set);
    EXPECT_EQ(drop.config().vector_bits, bits);
    ph::Config again = ph::Config::from_json(drop.config().to_json());
    EXPECT_EQ(ph::kernels::dropout.compile({x, 0.25, int64_t{5}}, &again).config().vector_bits, bits);
    expect_contains(drop.source(), "#pragma GCC target(\"prefer-vector-width=" + std::to_string(bits) + "\")");
  }
}

// A where whose arms read only their blocks' own elements computes both and blends them (a
// conditional bf16 load has no AVX2 instruction, and kept the loop scalar); an arm that gathers
// stays behind the condition, read only where chosen.
TEST(Codegen, AWheresArmsAreBlendedUnlessAnArmGathers) {
  ph::KernelBase k("where_arms", {true, true, true}, [](const std::vector<ph::KernelBase::TraceArg>& a) {
    ph::Tensor x = a[0].tensor, w = a[1].tensor, ids = a[2].tensor;
    const int64_t n = x.size(0);
    auto out = ph::empty({n}, ph::DType::f32);
    for (auto t : ph::tile(n)) {
      auto i = ids[t].to(ph::DType::i64);
      out[t] = ph::where(i > 2, x[t] * 2.0f, 0.5f) + ph::where(i > 4, w[i], -1.0f);
    }
    return std::vector<ph::Tensor>{out};
  });
  const int64_t n = 1003;
  ph::Array x = ph::Array::zeros({n}, ph::DType::bf16), w = ph::Array::zeros({n}, ph::DType::bf16),
            ids = ph::Array::zeros({n}, ph::DType::i32);
  for (int64_t j = 0; j < n; ++j) {
    x.set(j, 0.25 * static_cast<double>(j % 37) - 3);
    w.set(j, static_cast<double>(j % 11) - 5);
    ids.set(j, static_cast<double>((j * 7919) % n));
  }
  std::vector<ph::Arg> args = {x, w, ids};
  ph::CompiledKernel c = k.compile(args);
  const std::string s = c.source();
  expect_contains(s, "ph_rt::self(");
  // the gathering where keeps its ternary
  const size_t gather = s.find("T1[");
  ASSERT_NE(gather, std::string::npos);
  const size_t q = s.rfind(" ? ", gather);
  ASSERT_NE(q, std::string::npos);
  EXPECT_EQ(s.substr(q, gather - q).find("ph_rt::self"), std::string::npos) << s.substr(q, gather - q);
  EXPECT_EQ(ph::max_abs_diff(c.run(args)[0], k.interpret(args)[0]), 0.0);
}

TEST(Codegen, AddIsOneFusedVectorizedNestWithRaggedEdges) {
  ph::Array x = ph::Array::zeros({1000, 1003}, ph::DType::f32);
  ph::Config c = ph::Config::from_json(R"({"block_sizes":[16,1024],"loop_orders":[[0,1]],"num_threads":2})");
  c.num_threads = std::min(2, ph::backend::cpu::Host::detect().threads);  // a one-core host allows only 1
  std::string s = ph::kernels::add.compile({x, x}, &c).source();
  expect_contains(s, "extern \"C\" void ph_launch_0(");
  expect_contains(s, "const int64_t n_t0 = ph_min_i64(16, 1000 - off_t0);");
  expect_contains(s, "const int64_t n_t1 = ph_min_i64(1024, 1003 - off_t1);");
  expect_contains(s, "#pragma omp simd\n");
  expect_contains(s, "for (int64_t i1 = 0; i1 < n_t1; ++i1) {");
  expect_contains(s, "T2[(off_t0 + i0) * 1003 + (off_t1 + i1)] = (T");
  EXPECT_EQ(s.find("materialize"), std::string::npos);  // nothing goes through scratch
}

TEST(Codegen, LoopOrderPicksTheFastestGridDimension) {
  ph::Array x = ph::Array::zeros({100, 300}, ph::DType::f32);
  ph::Config c = ph::Config::from_json(R"({"block_sizes":[8,64],"loop_orders":[[1,0]],"num_threads":1})");
  std::string s = ph::kernels::add.compile({x, x}, &c).source();
  // t0 is innermost now: decoded first from the step index.
  expect_contains(s, "const int64_t g_t0 = ph_rest % 13; ph_rest /= 13;");
  expect_contains(s, "const int64_t g_t1 = ph_rest;");
}

TEST(Codegen, SoftmaxReductionsAndMaterializedExp) {
  ph::Array x = ph::Array::zeros({64, 2048}, ph::DType::bf16);
  std::string s = ph::kernels::softmax.compile({x}).source();
  // The row max keeps its lanes with plain compares and a NaN seen in a lane apart.
  expect_contains(s, "accv[k] = accv[k] > ph_x ? accv[k] : ph_x;");
  expect_contains(s, "nanv[k] = ph_x != ph_x ? ph_x : nanv[k];");
  expect_contains(s, "if (nanv[0] != nanv[0]) accv[0] = nanv[0];");
  expect_contains(s, "accv[k] = accv[k] + ");
  // The lanes fold in one simd loop per halving (each a vector op); a lane-by-lane fold is a
  // chain of 31 dependent scalar ops.
  expect_contains(s, "#pragma omp simd\n");
  expect_contains(s, "for (int k = 0; k < 16; ++k) accv[k] = ph_max(accv[k], accv[k + 16]);");
  expect_contains(s, "for (int k = 0; k < 1; ++k) accv[k] = ph_max(accv[k], accv[k + 1]);");
  expect_contains(s, "for (int k = 0; k < 16; ++k) accv[k] = accv[k] + accv[k + 16];");
  EXPECT_EQ(s.find("acc = ph_max(acc, accv[k])"), std::string::npos);
  // exp(x - max) is stored once, inside the sum's loop (one pass), and reread by the store.
  expect_contains(s, "const float e = ph_rt::exp(");
  expect_contains(s, "accv[k] = accv[k] + e;");
  EXPECT_EQ(s.find("// materialize %"), std::string::npos);
  expect_contains(s, "ph_rt::exp(");
  expect_contains(s, "ph_rt::bf16_to_f32(T0[");
  // The bf16 rows are stored from an f32 buffer, rounded a row at a time (emit/row_stores.cpp).
  expect_contains(s, "ph_rt::f32_row_to_bf16(");
}

// Whether the micro-kernel a bf16 dot gets by default on this host takes 16-bit operands (the
// AVX-512-BF16 and AMX kernels do; the AVX2 and widening ones take f32).
bool default_bf16_kernel_takes_bf16() {
  return ph::runtime::gemm_kernel_takes_bf16(ph::runtime::gemm_kernel_choices(true).front());
}

TEST(Codegen, A16BitCastIsRoundedOnceWhenStored) {
  ph::Array q = ph::Array::zeros({1, 2, 256, 64}, ph::DType::bf16);
  std::string s = ph::kernels::attention.compile({q, q, q, 0.125}).source();
  // cast(p, bf16) and cast(q * scale, bf16) are materialized for the dots: narrowed once, not
  // narrowed, widened and narrowed again. q's in a nest of its own; p's by the row sum's loop,
  // from the exp it has just computed (p itself has no f32 buffer). In bf16 where the default
  // micro-kernel takes bf16 operands; else in f32, rounded to bf16, which that kernel reads in
  // place (no widening while packing).
  EXPECT_EQ(s.find("f32_to_bf16(ph_rt::bf16_to_f32(ph_rt::f32_to_bf16("), std::string::npos);
  expect_contains(s, " (cast)\n");
  if (default_bf16_kernel_takes_bf16()) {
    expect_contains(s, "] = ph_rt::f32_to_bf16(static_cast<float>((ph_rt::bf16_to_f32(T0[");
    expect_contains(s, "] = ph_rt::f32_to_bf16(static_cast<float>(e));");
  } else {
    expect_contains(s, "] = ph_rt::round_to_bf16(static_cast<float>((ph_rt::bf16_to_f32(T0[");
    expect_contains(s, "] = ph_rt::round_to_bf16(static_cast<float>(e));");
    EXPECT_EQ(s.find("g.a_dtype = PH_BF16;"), std::string::npos);
  }
  EXPECT_EQ(s.find("] = e;"), std::string::npos);
}

TEST(Codegen, RotaryStoresItsRotatedPairsInOneNestOverWholeHeads) {
  // x [B, S, H, D] as pairs: the two rotated halves are joined and stored as pairs. Each half is
  // computed once per pair (the pair dim is unrolled), so both are fused into the store's nest:
  // no buffer per half and no second pass to interleave them. And the default grows the heads
  // (the run of a row that continues the pairs' 512 bytes) before the positions: blocks of one
  // head at 32 positions read 512-byte runs 8 KiB apart (1.7x slower on an AMD EPYC).
  ph::Array x = ph::Array::zeros({2, 256, 16, 128}, ph::DType::f32), cs = ph::Array::zeros({256, 64}, ph::DType::f32);
  ph::CompiledKernel k = ph::kernels::rotary.compile({x, cs, cs});
  const std::string s = k.source();
  EXPECT_EQ(s.find("materialize"), std::string::npos);
  expect_contains(s, "* 2 + 0] = ((T");
  expect_contains(s, "* 2 + 1] = ((T");
  const std::vector<int64_t>& b = k.config().block_sizes;  // B, S, H, D/2
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[3], 64) << k.config().to_json();
  if (b[1] > 1) {
    EXPECT_EQ(b[2], 16) << k.config().to_json();
  }
}

TEST(Codegen, AGatheredBf16DotOperandIsMaterializedInBf16) {
  // moe_matmul's x[tokens, :] is a gather: materialized, in bf16 (exact), so that the dot takes
  // the bf16 kernels. In f32 the tile kernel the config offers fell back to a vector one. On a
  // host whose default kernel widens bf16, in f32 (the same values), which it reads in place.
  const auto& moe = ph::kernels::find_kernel("moe_matmul");
  ph::kernels::Inputs in = moe.make_specs({67, 31, 17, 4, 3}, ph::DType::bf16);
  std::string s = moe.kernel->compile(in.args()).source();
  const bool takes_bf16 = default_bf16_kernel_takes_bf16();
  expect_contains(s, takes_bf16 ? "g.a_dtype = PH_BF16;" : "g.a_dtype = PH_F32;");
  EXPECT_EQ(s.find(takes_bf16 ? "g.a_dtype = PH_F32;" : "g.a_dtype = PH_BF16;"), std::string::npos);
}

TEST(Codegen, ScalarArgumentsAndInnerLoops) {
  ph::Array x = ph::Array::zeros({8, 300}, ph::DType::f32), w = ph::Array::zeros({300}, ph::DType::f32);
  std::string s = ph::kernels::rms_norm.compile({x, w, 1e-5}).source();
  expect_contains(s, "const float sp0 = static_cast<float>(ph_scalars[0]);");
  expect_contains(s, "ph_rt::rsqrt(");
  std::string t = ph::kernels::softmax_two_pass.compile({x}).source();
  expect_contains(t, "for (int64_t off_t1 = 0; off_t1 < 300; off_t1 += ");
  expect_contains(t, "// assign var v1");
}

// Causal attention's key loop stops at the diagonal (ir/trip_guard.h): the key blocks above it
// are neither computed, staged nor prefetched. (The numbers: test_kernels and the fuzzer.)
TEST(Codegen, CausalKeyLoopStopsAtTheDiagonal) {
  // 64 x 64 blocks: a 221 KiB footprint on an AVX2 host, under a 256 KiB L2 (128 x 128 needed
  // 524 KiB there, over a Zen 1's 512 KiB, and the config was refused).
  ph::Array q = ph::Array::zeros({1, 2, 1000, 64}, ph::DType::f32);
  ph::Config c = ph::Config::from_json(
      R"({"block_sizes":[64,64],"inner_loops":[{"strategy":"pipeline","buffers":2}],"loop_orders":[[0,1,2]],"micro_kernels":[0,0],"num_threads":1})");
  std::string s = ph::kernels::causal_attention.compile({q, q, q, 0.125}, &c).source();
  expect_contains(s, "const int64_t stop_t3 = ph_min_i64(1000, (off_t2 + n_t2));");
  expect_contains(s, "for (int64_t off_t3 = 0; off_t3 < stop_t3; off_t3 += 64) {");
  expect_contains(s, "if (off_t3 + 64 < stop_t3) {  // prefetch 1 trip(s) ahead");
  // (attention has no such guard: its loop runs over every key block)
  std::string a = ph::kernels::attention.compile({q, q, q, 0.125}, &c).source();
  EXPECT_EQ(a.find("stop_t3"), std::string::npos);
  expect_contains(a, "for (int64_t off_t3 = 0; off_t3 < 1000; off_t3 += 64) {");
}

}  // namespace

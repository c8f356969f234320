// A value computed inside the loop of the row reduction that consumes it first, whose only other
// consumer is a cast (lower/fusion.h, ReductionProducer): the loop stores the cast, the value
// itself gets no buffer. The results must be the interpreter's, bit for bit where the arithmetic
// is exact: a buffer a dot reads (16-bit where the dot's micro-kernel takes 16-bit operands, else
// f32 holding the rounded values), an f32 one that two stores read, bf16 and f16, ragged
// blocks and rows whose length leaves a tail after the vector loop. Flash attention's p is the
// case this was built for (its numbers: test_kernels and test_decided_wheres).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "exact_rows.h"
#include "parhelion/parhelion.h"
#include "runtime/gemm/gemm.h"

namespace ph = parhelion;
using exact_rows::costly;
using exact_rows::expect_outputs_near;
using exact_rows::sixteenths;

namespace {

// (`costly` is not exact in bf16 or f16: the cast's rounding shows.)

// The cast read by a dot, the sum dividing the product.
template <ph::DType kHalf>
ph::Tensor rows_through_a_dot(ph::Tensor x, ph::Tensor w) {
  auto out = ph::empty({x.size(0), w.size(1)}, ph::DType::f32);
  for (auto tm : ph::tile(x.size(0))) {
    auto p = costly(x[tm, ph::all]);
    auto s = ph::sum(p, -1);
    auto c = ph::cast(p, kHalf);
    out[tm, ph::all] = ph::dot(c, w[ph::all, ph::all]) / s.unsqueeze(-1);
  }
  return out;
}

// The cast read by two stores (an f32 buffer of rounded values).
template <ph::DType kHalf>
std::tuple<ph::Tensor, ph::Tensor> rows_stored_twice(ph::Tensor x) {
  auto a = ph::empty_like(x), b = ph::empty_like(x);
  for (auto tm : ph::tile(x.size(0))) {
    auto p = costly(x[tm, ph::all]);
    auto s = ph::sum(p, -1);
    auto c = ph::cast(p, kHalf);
    a[tm, ph::all] = c - s.unsqueeze(-1);
    b[tm, ph::all] = c * 2.0f;
  }
  return {a, b};
}

// The cast consumed first by a second reduction (its own producer in that loop), after a Var the
// value reads is reassigned: the value keeps its buffer, which the second loop reads, and is not
// recomputed from the Var's new contents.
std::tuple<ph::Tensor, ph::Tensor> cast_reduced_again(ph::Tensor x) {
  auto a = ph::empty_like(x);
  auto b = ph::empty({x.size(0)}, ph::DType::f32);
  for (auto tm : ph::tile(x.size(0))) {
    ph::Var v = ph::full({tm}, 0.25);
    auto p = costly(x[tm, ph::all] - v.unsqueeze(-1));
    auto l = ph::sum(p, -1);
    v = l;
    auto c = ph::cast(p, ph::DType::bf16);
    auto m = ph::amax(c, -1);
    a[tm, ph::all] = c + m.unsqueeze(-1) + v.unsqueeze(-1);
    b[tm] = m;
  }
  return {a, b};
}

// Every block size below on `args`: the interpreter's values within `tolerance` (relative), and a
// source in which the sum's loop stores the cast (`stored`, of its element `e`) and no buffer
// holds the costly value.
template <class K>
void check_against_interpreter(K& k, const std::vector<ph::Arg>& args, double tolerance, const std::string& stored) {
  const std::vector<ph::Array> want = k.interpret(args);
  for (int64_t block : {1, 4, 16, 64}) {
    ph::Config c = k.compile(args).config();
    c.block_sizes = {block};
    SCOPED_TRACE(c.to_json());
    ph::CompiledKernel ck = k.compile(args, &c);
    EXPECT_NE(ck.source().find("] = " + stored + ";"), std::string::npos) << ck.source();
    EXPECT_EQ(ck.source().find("] = e;"), std::string::npos) << "the costly value has a buffer of its own";
    expect_outputs_near(ck.run(args), want, tolerance);
  }
}

}  // namespace

TEST(ReductionStores, ACastReadByADotIsStoredByTheSumsLoop) {
  ph::Array x = sixteenths({45, 77}, 1);
  ph::Array w = ph::Array::random({77, 24}, ph::DType::f32, 2);
  for (int64_t i = 0; i < w.numel(); ++i) w.set(i, std::round(w.get(i) * 8) / 4);  // exact products
  // The default config's micro-kernel for this dot (w is f32: the choices of a dot without two
  // bf16 operands): the cast in bf16 where that kernel takes bf16 operands (vdpbf16ps), else in
  // f32, rounded; f16 in f32 on every host (no kernel takes it).
  const bool takes_bf16 = ph::runtime::gemm_kernel_takes_bf16(ph::runtime::gemm_kernel_choices(false).front());
  ph::Kernel bf16("rows_through_a_dot_bf16", rows_through_a_dot<ph::DType::bf16>);
  check_against_interpreter(
      bf16, {x, w}, 1e-6,
      takes_bf16 ? "ph_rt::f32_to_bf16(static_cast<float>(e))" : "ph_rt::round_to_bf16(static_cast<float>(e))");
  ph::Kernel f16("rows_through_a_dot_f16", rows_through_a_dot<ph::DType::f16>);
  check_against_interpreter(f16, {x, w}, 1e-6, "ph_rt::f16_to_f32(ph_rt::f32_to_f16(static_cast<float>(e)))");
}

TEST(ReductionStores, ACastThatASecondReductionReadsFirstKeepsTheValuesBuffer) {
  ph::Array x = sixteenths({45, 77}, 5);
  ph::Kernel k("cast_reduced_again", cast_reduced_again);
  const std::vector<ph::Array> want = k.interpret({x});
  for (int64_t block : {1, 16, 64}) {
    ph::Config c = k.compile({x}).config();
    c.block_sizes = {block};
    SCOPED_TRACE("block " + std::to_string(block));
    ph::CompiledKernel ck = k.compile({x}, &c);
    EXPECT_NE(ck.source().find("] = e;"), std::string::npos) << "the value is stored by the sum's loop";
    expect_outputs_near(ck.run({x}), want, 1e-6);
  }
}

TEST(ReductionStores, ACastReadByTwoStoresIsStoredByTheSumsLoop) {
  ph::Array x = sixteenths({45, 77}, 3);
  ph::Kernel bf16("rows_stored_twice_bf16", rows_stored_twice<ph::DType::bf16>);
  check_against_interpreter(bf16, {x}, 0, "ph_rt::round_to_bf16(static_cast<float>(e))");
  ph::Kernel f16("rows_stored_twice_f16", rows_stored_twice<ph::DType::f16>);
  check_against_interpreter(f16, {x}, 0, "ph_rt::f16_to_f32(ph_rt::f32_to_f16(static_cast<float>(e)))");
}

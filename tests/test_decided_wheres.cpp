// Wheres decided per block (src/backend/cpu/emit/decided_wheres.cpp): a mask that compares tile
// indices is emitted in versions (every element inside, none, the general code), chosen per block.
// The versions must give the interpreter's values at block sizes where blocks fall wholly inside,
// wholly outside and across the mask's boundary, ragged ones included; masks of every comparison,
// shifted by constants, and-ed, or-ed and negated; in a fused elementwise store, a materialized
// value and reductions (a softmax's max and sum); and causal attention's own source.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/registry.h"
#include "parhelion/parhelion.h"

namespace ph = parhelion;

namespace {

constexpr const char* kVersioned = "holds on all of this block";

// A band: rows.index() - 3 <= cols.index() < rows.index() + 5, as a sliding window writes it.
ph::Tensor band_softmax(ph::Tensor x) {
  auto out = ph::empty_like(x);
  for (auto tm : ph::tile(x.size(0))) {
    auto row = x[tm, ph::all];
    auto cols = ph::arange(x.size(1));
    auto r = tm.index().unsqueeze(-1);
    auto keep = r - 3 <= cols && cols < r + 5;
    auto s = ph::where(keep, row, -INFINITY);
    auto e = ph::exp(s - ph::amax(s, -1).unsqueeze(-1));
    out[tm, ph::all] = e / ph::sum(e, -1).unsqueeze(-1);
  }
  return out;
}

// Triangles of each comparison over a 2-D grid of blocks, shifted, negated, or-ed: each output a
// statement of its own, and the first two wheres in one statement (versioned within each other).
std::tuple<ph::Tensor, ph::Tensor, ph::Tensor> triangles(ph::Tensor x) {
  auto o1 = ph::empty_like(x), o2 = ph::empty_like(x), o3 = ph::empty_like(x);
  for (auto [tm, tn] : ph::tile(x.size(0), x.size(1))) {
    auto r = tm.index().unsqueeze(-1), c = tn.index();
    auto v = x[tm, tn];
    o1[tm, tn] = ph::where(r >= c, v, 0.0f) + ph::where(r + 2 < c, v * 2.0f, 1.0f);
    o2[tm, tn] = ph::where(!(c > r - 7), v * 3.0f, -1.0f);
    o3[tm, tn] = ph::where(c <= r - 20 || r < c - 20, v * 5.0f, 0.5f);
  }
  return {o1, o2, o3};
}

// Every config of `k` over the block sizes below on `args`: the interpreter's values, and at
// least one config whose source has the versions.
template <class K>
void check_against_interpreter(K& k, const std::vector<ph::Arg>& args,
                               const std::vector<std::vector<int64_t>>& blocks) {
  const std::vector<ph::Array> want = k.interpret(args);
  int versioned = 0;
  for (const std::vector<int64_t>& b : blocks) {
    ph::CompiledKernel def = k.compile(args);
    ph::Config c = def.config();
    ASSERT_EQ(c.block_sizes.size(), b.size());
    c.block_sizes = b;
    SCOPED_TRACE(c.to_json());
    ph::CompiledKernel ck = k.compile(args, &c);
    versioned += ck.source().find(kVersioned) != std::string::npos;
    const std::vector<ph::Array> got = ck.run(args);
    ASSERT_EQ(got.size(), want.size());
    for (size_t o = 0; o < got.size(); ++o)
      for (int64_t i = 0; i < want[o].numel(); ++i) {
        const double x = got[o].get(i), y = want[o].get(i);
        ASSERT_TRUE(std::abs(x - y) <= 1e-5 * (1 + std::abs(y)) || (x != x && y != y)) << "element " << i;
      }
  }
  EXPECT_EQ(versioned, static_cast<int>(blocks.size())) << "every config's source has the versions";
}

}  // namespace

TEST(DecidedWheres, ABandMaskedSoftmaxMatchesTheInterpreter) {
  ph::Kernel k("band_softmax", band_softmax);
  ph::Array x = ph::Array::random({45, 40}, ph::DType::f32, 3);
  check_against_interpreter(k, {x}, {{1}, {4}, {8}, {16}, {64}});
}

TEST(DecidedWheres, TrianglesOfEveryComparisonMatchTheInterpreter) {
  ph::Kernel k("triangles", triangles);
  ph::Array x = ph::Array::random({70, 53}, ph::DType::f32, 4);
  check_against_interpreter(k, {x}, {{8, 8}, {16, 4}, {4, 32}, {32, 64}, {1, 16}});
}

// Causal attention's score statements are versioned, and its values hold at query and key
// blocks that put the diagonal inside, at the edge of, and across blocks (ragged S).
TEST(DecidedWheres, CausalAttentionIsVersionedAndMatchesItsReference) {
  const auto& e = ph::kernels::find_kernel("causal_attention");
  for (ph::DType dt : {ph::DType::f32, ph::DType::bf16}) {
    ph::kernels::Inputs in = e.make_inputs({1, 2, 77, 32}, dt, 5);
    const std::vector<ph::Array> want = e.reference(in);
    for (auto [bq, bk] : std::vector<std::pair<int64_t, int64_t>>{{16, 16}, {16, 32}, {32, 16}, {64, 128}}) {
      ph::CompiledKernel def = e.kernel->compile(in.args());
      ph::Config c = def.config();
      c.block_sizes = {bq, bk};
      SCOPED_TRACE(c.to_json());
      ph::CompiledKernel ck = e.kernel->compile(in.args(), &c);
      EXPECT_NE(ck.source().find(kVersioned), std::string::npos);
      const std::vector<ph::Array> got = ck.run(in.args());
      double err = 0;
      for (int64_t i = 0; i < want[0].numel(); ++i) err = std::max(err, std::abs(got[0].get(i) - want[0].get(i)));
      EXPECT_LT(err, dt == ph::DType::f32 ? 1e-5 : 2e-2);
    }
  }
}

// The default config keeps a causal key block at most twice the query block, and the two together
// near an eighth of S (the query block not below 128): the trip across the diagonal computes a
// whole key block, the part above it masked out.
TEST(DecidedWheres, TheDefaultCausalKeyBlockIsAtMostTwiceTheQueryBlock) {
  const auto& e = ph::kernels::find_kernel("causal_attention");
  for (int64_t s : {1024, 4096})
    for (ph::DType dt : {ph::DType::f32, ph::DType::bf16}) {
      ph::kernels::Inputs in = e.make_specs({1, 4, s, 128}, dt);
      const ph::Config c = e.kernel->compile(in.args()).config();
      ASSERT_EQ(c.block_sizes.size(), 2u);
      EXPECT_LE(c.block_sizes[1], 2 * c.block_sizes[0]) << c.to_json();
      EXPECT_TRUE(8 * (c.block_sizes[0] + c.block_sizes[1]) <= s || c.block_sizes[0] <= 128) << c.to_json();
    }
}

namespace {

// A masked load whose mask is the decided where's condition (or its negation) is decided with it:
// concat's halves are plain loads in the blocks on either side of the seam, so a 16-bit half
// needs no masked (scalar) read there. The values stay the interpreter's.
TEST(DecidedWheres, AMaskedLoadUnderItsWheresConditionIsAPlainLoad) {
  const auto& concat = ph::kernels::find_kernel("concat");
  for (ph::DType dt : {ph::DType::f32, ph::DType::bf16}) {
    ph::kernels::Inputs in = concat.make_inputs({6, 64, 32}, dt, 5);
    ph::Config c = concat.kernel->compile(in.args()).config();
    c.block_sizes = {2, 32};  // blocks on either side of the seam, at 64
    ph::CompiledKernel k = concat.kernel->compile(in.args(), &c);
    const std::string src = k.source();
    ASSERT_NE(src.find(kVersioned), std::string::npos);
    // Each half read under its mask only in the general code, which straddles the seam.
    auto count = [&](const std::string& s) {
      size_t n = 0;
      for (size_t p = src.find(s); p != std::string::npos; p = src.find(s, p + 1)) ++n;
      return n;
    };
    const std::string t0 = dt == ph::DType::f32 ? "? T0[" : "? ph_rt::bf16_to_f32(T0[";
    const std::string t1 = dt == ph::DType::f32 ? "? T1[" : "? ph_rt::bf16_to_f32(T1[";
    EXPECT_EQ(count(t0), 2u) << src;  // the fast and the checked copy of the general code's loop
    EXPECT_EQ(count(t1), 2u) << src;
    EXPECT_EQ(ph::max_abs_diff(k.run(in.args())[0], concat.kernel->interpret(in.args())[0]), 0.0);
  }
}

}  // namespace

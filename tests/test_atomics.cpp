// Atomic updates: ph::atomic_add / atomic_max / atomic_min from grid steps that meet on the same
// elements (split-K), from repeated indices of a gather block (a histogram), under a mask and
// through both cpu strategies (atomic instructions, per-thread partials), against plain C++
// references and the interpreter; the rules the verifier enforces, with the user's line.
#include <gtest/gtest.h>

#include <tuple>

#include <cmath>
#include <string>
#include <vector>

#include "driver/compiled_kernel_impl.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "kernels/kernels.h"
#include "kernels/references.h"
#include "parhelion/parhelion.h"

#include "tests/config_sweep.h"
#include "tests/user_error.h"

namespace ph = parhelion;

namespace {

// Every config's strategy for each atomically updated tensor, on 1 and 2 threads.
template <class K>
void check_strategies(K& k, const std::vector<ph::Arg>& args, const ph::Array& want, double tol) {
  ph::CompiledKernel def = k.compile(args);
  const ph::ConfigSpec& spec = def.config_spec();
  ASSERT_FALSE(spec.atomics.empty());
  for (const std::string strategy : {"atomic", "partials"})
    for (int threads : {1, 2}) {
      ph::Config c = def.config();
      c.num_threads = std::min(threads, spec.max_threads);
      for (std::string& a : c.atomics) a = strategy;
      SCOPED_TRACE(c.to_json());
      EXPECT_LT(ph::max_abs_diff(k.compile(args, &c).run(args).at(0), want), tol);
    }
}

TEST(Atomics, SplitKMatmulAddsThePartialProductsOfItsGridSteps) {
  // (the library's split_k_matmul: a [M, K] . b [K, N], the reduction split over the grid, each
  // step adding its partial product atomically)
  auto& k = ph::kernels::split_k_matmul;
  ph::Array a = ph::Array::random({37, 300}, ph::DType::f32, 1), b = ph::Array::random({300, 45}, ph::DType::f32, 2);
  const ph::Array want = ph::ref::matmul(a, b);
  check_configs(k, {a, b}, want, 1e-3, 6);
  check_strategies(k, {a, b}, want, 1e-3);
  // Small blocks of the split: many steps add into each output block.
  ph::CompiledKernel def = k.compile({a, b});
  ph::Config c = def.config();
  for (size_t i = 0; i < c.block_sizes.size(); ++i) c.block_sizes[i] = 16;
  c.num_threads = def.config_spec().max_threads;
  EXPECT_LT(ph::max_abs_diff(k.compile({a, b}, &c).run({a, b}).at(0), want), 1e-3);

  const std::string ir = ph::ir::print(k.trace({a, b})->fn);
  EXPECT_HAS(ir, "atomic_add ");
  EXPECT_EQ(ph::ir::print(ph::ir::parse(ir, "split_k.tir")), ir);  // the text form reads back
  EXPECT_HAS(def.config_spec().describe(), "atomics[0]: atomic, partials  (atomic updates of");
}

TEST(Atomics, TheDefaultSplitOfKIsAtLeastItsInnerBlock) {
  // split_k_matmul's blocks: M, N, the split of K over the grid, K within the split. A split of
  // block 1 cut every inner block to one element and added the output block once per element
  // of K (13x slower than torch where the dot blocks filled the L2). The default starts the
  // split at the inner block and the config fits the host.
  auto& k = ph::kernels::split_k_matmul;
  ph::Array a = ph::Array::random({64, 8192}, ph::DType::f32, 3), b = ph::Array::random({8192, 48}, ph::DType::f32, 4);
  ph::CompiledKernel def = k.compile({a, b});
  const std::vector<int64_t>& blocks = def.config().block_sizes;
  ASSERT_EQ(blocks.size(), 4u) << def.config().to_json();
  EXPECT_GE(blocks[2], blocks[3]) << def.config().to_json();
  EXPECT_GT(blocks[3], 1) << def.config().to_json();
  EXPECT_LT(ph::max_abs_diff(def.run({a, b}).at(0), ph::ref::matmul(a, b)), 2e-3);
}

// Row sums through three nested tiles (each re-tiles the block of the one around it): only the
// innermost indexes memory, so only it is grown; each enclosing tile's default block is at least
// the block inside it, or the inner blocks would be cut short (to one element under a block of 1).
ph::Tensor nested_row_sums(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m});
  for (auto outer : ph::tile(m))
    for (auto middle : ph::tile(outer))
      for (auto inner : ph::tile(middle)) out[inner] = ph::sum(x[inner, ph::all], 1);
  return out;
}

TEST(Atomics, EachEnclosingTilesDefaultBlockHoldsTheBlockInsideIt) {
  ph::Kernel k("nested_row_sums", nested_row_sums);
  ph::Array x = ph::Array::random({4096, 512}, ph::DType::f32, 2);
  ph::CompiledKernel def = k.compile({x});
  const std::vector<int64_t>& b = def.config().block_sizes;  // outer, middle, inner
  ASSERT_EQ(b.size(), 3u) << def.config().to_json();
  EXPECT_GE(b[0], b[1]) << def.config().to_json();
  EXPECT_GE(b[1], b[2]) << def.config().to_json();
  EXPECT_GT(b[2], 1) << def.config().to_json();
  ph::Array want = ph::Array::zeros({4096}, ph::DType::f32);
  for (int64_t r = 0; r < 4096; ++r) {
    double s = 0;
    for (int64_t c = 0; c < 512; ++c) s += x.get(r * 512 + c);
    want.set(r, s);
  }
  EXPECT_LT(ph::max_abs_diff(def.run({x}).at(0), want), 1e-3);
}

// A matmul that also sums each row of A through two tiles nested in the dot's K tile: the dot's
// K block holds both (they come down to it), and the default config ends. (A growth of an inner
// tile that the dot's block takes back is no growth; a review found that the grow loop would
// retry it forever, which this shape does not reach: its row-sum blocks are not grown.)
std::tuple<ph::Tensor, ph::Tensor> matmul_and_row_sums(ph::Tensor a, ph::Tensor b) {
  auto [m, k] = a.sizes<2>();
  auto n = b.size(1);
  auto out = ph::empty({m, n});
  auto sums = ph::empty({m, n});
  for (auto [tm, tn] : ph::tile(m, n)) {
    ph::Var acc = ph::zeros({tm, tn});
    ph::Var rs = ph::zeros({tm});
    for (auto tk : ph::tile(k)) {
      acc = acc + ph::dot(a[tm, tk], b[tk, tn]);
      for (auto middle : ph::tile(tk))
        for (auto inner : ph::tile(middle)) rs = rs + ph::sum(a[tm, inner], 1);
    }
    out[tm, tn] = acc;
    sums[tm, tn] = rs.unsqueeze(1) + ph::zeros({tm, tn});
  }
  return {out, sums};
}

TEST(Atomics, TilesInsideADotsTileComeDownToItsBlock) {
  ph::Kernel k("matmul_and_row_sums", matmul_and_row_sums);
  // (Few rows: the row sums' blocks could grow far past the dot's K block.)
  ph::Array a = ph::Array::random({8, 8192}, ph::DType::f32, 3), b = ph::Array::random({8192, 8}, ph::DType::f32, 4);
  ph::CompiledKernel def = k.compile({a, b});
  const std::vector<int64_t>& blocks = def.config().block_sizes;  // m, n, k, middle, inner
  ASSERT_EQ(blocks.size(), 5u) << def.config().to_json();
  EXPECT_GE(blocks[2], blocks[3]) << def.config().to_json();
  EXPECT_GE(blocks[3], blocks[4]) << def.config().to_json();
  std::vector<ph::Array> got = def.run({a, b});
  EXPECT_LT(ph::max_abs_diff(got.at(0), ph::ref::matmul(a, b)), 2e-3);
  for (int64_t i = 0; i < 8; i += 3) {
    double s = 0;
    for (int64_t j = 0; j < 8192; ++j) s += a.get(i * 8192 + j);
    EXPECT_NEAR(got.at(1).get(i * 8 + 5), s, 1e-2) << "row " << i;
  }
}

// counts[ids[i]] += 1 for every i: a repeated index counts once per time it appears.
ph::Tensor histogram(ph::Tensor ids) {
  auto n = ids.sizes<1>()[0];
  auto counts = ph::zeros({64}, ph::DType::i32);
  for (auto t : ph::tile(n)) ph::atomic_add(counts, {ids[t]}, 1);
  return counts;
}

// (i * i * 7 + 3) % 61 for i < n: uneven counts, some bins empty.
ph::Array bins_of(int64_t n) {
  ph::Array ids = ph::Array::zeros({n}, ph::DType::i64);
  for (int64_t i = 0; i < n; ++i) ids.set(i, static_cast<double>((i * i * 7 + 3) % 61));
  return ids;
}

TEST(Atomics, AHistogramCountsEveryRepeatedIndex) {
  ph::Kernel k("histogram", histogram);
  const ph::Array ids = bins_of(1000);
  ph::Array want = ph::Array::zeros({64}, ph::DType::i32);
  for (int64_t i = 0; i < 1000; ++i)
    want.set(static_cast<int64_t>(ids.get(i)), want.get(static_cast<int64_t>(ids.get(i))) + 1);
  check_configs(k, {ids}, want, 0.5, 6);
  check_strategies(k, {ids}, want, 0.5);
}

// The positive values of w summed into their bins: a masked scatter-add.
ph::Tensor positive_weights(ph::Tensor ids, ph::Tensor w) {
  auto n = ids.sizes<1>()[0];
  auto out = ph::zeros({64});
  for (auto t : ph::tile(n)) {
    auto v = w[t];
    ph::atomic_add(out, {ids[t]}, v, v > 0.0f);
  }
  return out;
}

TEST(Atomics, AMaskedScatterAddUpdatesOnlyItsActiveElements) {
  ph::Kernel k("positive_weights", positive_weights);
  const ph::Array ids = bins_of(777);
  ph::Array w = ph::Array::random({777}, ph::DType::f32, 4);
  ph::Array want = ph::Array::zeros({64}, ph::DType::f32);
  for (int64_t i = 0; i < 777; ++i) {
    const auto bin = static_cast<int64_t>(ids.get(i));
    if (w.get(i) > 0) want.set(bin, want.get(bin) + w.get(i));
  }
  check_configs(k, {ids, w}, want, 1e-4, 6);
  check_strategies(k, {ids, w}, want, 1e-4);
}

// Column maxima of x [M, N] into a bf16 tensor, over row blocks that meet on each column block.
ph::Tensor column_max(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::full({n}, -1e30, ph::DType::bf16);
  for (auto [tm, tn] : ph::tile(m, n)) ph::atomic_max(out, {tn}, ph::amax(x[tm, tn], 0));
  return out;
}

// Column minima, one grid step per row (a grid loop meets on every column).
ph::Tensor column_min(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::full({n}, 1e30);
  for (auto g : ph::grid(m))
    for (auto tn : ph::tile(n)) ph::atomic_min(out, {tn}, x[g, tn]);
  return out;
}

ph::Array column_extreme(const ph::Array& x, bool max, ph::DType dtype) {
  const int64_t m = x.shape()[0], n = x.shape()[1];
  ph::Array want = ph::Array::zeros({n}, dtype);
  for (int64_t j = 0; j < n; ++j) {
    double e = x.get(j);
    for (int64_t i = 1; i < m; ++i) e = max ? std::max(e, x.get(i * n + j)) : std::min(e, x.get(i * n + j));
    want.set(j, e);
  }
  return want;
}

TEST(Atomics, MaxIntoBf16AndMinOverGridSteps) {
  ph::Kernel kmax("column_max", column_max), kmin("column_min", column_min);
  ph::Array x = ph::Array::random({50, 300}, ph::DType::f32, 3);
  check_configs(kmax, {x}, column_extreme(x, true, ph::DType::bf16), 1e-2, 6);  // bf16 rounding
  check_strategies(kmax, {x}, column_extreme(x, true, ph::DType::bf16), 1e-2);
  check_configs(kmin, {x}, column_extreme(x, false, ph::DType::f32), 1e-7, 6);  // exact
  check_strategies(kmin, {x}, column_extreme(x, false, ph::DType::f32), 1e-7);
}

// Row sums of x [M, N] added into column 1 of out [M, 2] through a transposed view of it: partial
// copies shadow the root tensor, so an update through a view has only the atomic strategy.
ph::Tensor into_a_view(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::zeros({m, 2});
  auto cols = out.transpose(0, 1);  // [2, M]
  for (auto [tm, tn] : ph::tile(m, n)) ph::atomic_add(cols, {1, tm}, ph::sum(x[tm, tn], 1));
  return out;
}

TEST(Atomics, AnUpdateThroughAViewTakesAtomicInstructions) {
  ph::Kernel k("into_a_view", into_a_view);
  ph::Array x = ph::Array::random({33, 130}, ph::DType::f32, 6);
  ph::Array want = ph::Array::zeros({33, 2}, ph::DType::f32);
  for (int64_t i = 0; i < 33; ++i) {
    double s = 0;
    for (int64_t j = 0; j < 130; ++j) s += x.get(i * 130 + j);
    want.set(i * 2 + 1, s);
  }
  check_configs(k, {x}, want, 1e-4, 6);
  const ph::ConfigSpec& spec = k.compile({x}).config_spec();
  ASSERT_EQ(spec.atomics.size(), 1u);
  EXPECT_EQ(spec.atomics[0].choices, std::vector<std::string>{"atomic"});
}

// --- the rules ---------------------------------------------------------------------------------

ph::Tensor reads_what_it_updates(ph::Tensor x) {
  auto n = x.sizes<1>()[0];
  auto out = ph::zeros({n});
  for (auto t : ph::tile(n)) {
    ph::atomic_add(out, {t}, x[t]);
    out[t] = out[t] * 2.0f;
  }
  return out;
}

ph::Tensor two_functions(ph::Tensor x) {
  auto n = x.sizes<1>()[0];
  auto out = ph::zeros({n});
  for (auto t : ph::tile(n)) {
    ph::atomic_add(out, {t}, x[t]);
    ph::atomic_max(out, {t}, x[t]);
  }
  return out;
}

ph::Tensor bool_flags(ph::Tensor x) {
  auto n = x.sizes<1>()[0];
  auto out = ph::zeros({n}, ph::DType::boolean);
  for (auto t : ph::tile(n)) ph::atomic_max(out, {t}, x[t] > 0.0f);
  return out;
}

TEST(Atomics, TheRulesAreCheckedAtTheUsersLine) {
  ph::Array x = ph::Array::random({100}, ph::DType::f32, 5);
  ph::Kernel reads("reads_what_it_updates", reads_what_it_updates), two("two_functions", two_functions),
      flags("bool_flags", bool_flags);
  EXPECT_HAS(user_error_of([&] { reads.trace({x}); }), "which the same launch updates atomically (atomic_add at");
  EXPECT_HAS(user_error_of([&] { reads.trace({x}); }), "test_atomics.cpp:");
  EXPECT_HAS(user_error_of([&] { two.trace({x}); }), "this atomic_max to ");
  EXPECT_HAS(user_error_of([&] { two.trace({x}); }), "meets the launch's atomic_add");
  EXPECT_HAS(user_error_of([&] { flags.trace({x}); }), "atomics take numbers");
  // A config names a strategy the knob does not have.
  ph::Kernel k("histogram", histogram);
  const ph::Array ids = bins_of(100);
  ph::Config c = k.compile({ids}).config();
  c.atomics = {"locked"};
  EXPECT_HAS(user_error_of([&] { k.compile({ids}, &c); }), "atomics[0] = \"locked\" is not one of atomic, partials");
  EXPECT_EQ(ph::Config::from_json(c.to_json()), c);  // the knob reads back
}

// The per-thread partials are combined after the launch: the generated code says which way each
// tensor is updated, and the Block IR how much memory the partials take.
TEST(Atomics, TheGeneratedCodeAndBlockIrStateTheStrategy) {
  ph::Kernel k("histogram", histogram);
  const ph::Array ids = bins_of(1000);
  ph::CompiledKernel def = k.compile({ids});
  if (def.config_spec().max_threads < 2) GTEST_SKIP() << "one hardware thread: every update is in place";
  ph::Config c = def.config();
  c.num_threads = 2;
  c.atomics = {"partials"};
  ph::CompiledKernel partials = k.compile({ids}, &c);
  EXPECT_HAS(partials.source(), "this thread's partial copy");
  EXPECT_HAS(partials.source(), "ph_launch_0_partials");
  c.atomics = {"atomic"};
  EXPECT_HAS(k.compile({ids}, &c).source(), "__atomic_fetch_add");
  EXPECT_HAS(partials.block_ir(), "atomic_add buf0: per-thread partials");
}

}  // namespace

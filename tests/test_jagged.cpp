// Jagged loops: tiles over ranges computed in the kernel (ph::range of i64 scalars, ph::jagged
// over row offsets). Each kernel runs on the cpu backend at configs spread over its block-size
// domains, with one and two threads, against a plain C++ reference and the interpreter, on
// offsets with empty groups, one-row groups and a group of every row.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/pallas/interpret.h"
#include "driver/compiled_kernel_impl.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "kernels/registry.h"
#include "parhelion/parhelion.h"

#include "tests/config_sweep.h"
#include "tests/user_error.h"

namespace ph = parhelion;
namespace pallas = ph::backend::pallas;

namespace {

ph::Array offsets_of(const std::vector<int64_t>& lengths) {
  ph::Array o = ph::Array::zeros({static_cast<int64_t>(lengths.size()) + 1}, ph::DType::i64);
  int64_t at = 0;
  for (size_t g = 0; g < lengths.size(); ++g) {
    o.set(static_cast<int64_t>(g), static_cast<double>(at));
    at += lengths[g];
  }
  o.set(static_cast<int64_t>(lengths.size()), static_cast<double>(at));
  return o;
}

int64_t total_of(const std::vector<int64_t>& lengths) {
  int64_t n = 0;
  for (int64_t l : lengths) n += l;
  return n;
}

// out[g, :] = the sum of the rows of group g: a grid over groups, a jagged loop over its rows.
ph::Tensor jagged_row_sum(ph::Tensor x, ph::Tensor offsets) {
  auto [total, m] = x.sizes<2>();
  (void)total;
  const int64_t groups = offsets.size(0) - 1;
  auto out = ph::empty({groups, 1, m});  // (the group's row at a leading index, for TPU blocks)
  for (auto [g, tm] : ph::tile(ph::Extent(groups).block(1), m)) {
    ph::Var acc = ph::zeros({tm});
    for (auto tr : ph::tile(ph::jagged(offsets, g.begin()))) acc = acc + ph::sum(x[tr, tm], 0);
    out[g, 0, tm] = acc;
  }
  return out.view({groups, m});
}

ph::Array row_sums(const ph::Array& x, const std::vector<int64_t>& lengths) {
  const int64_t m = x.shape()[1];
  ph::Array want = ph::Array::zeros({static_cast<int64_t>(lengths.size()), m}, ph::DType::f32);
  int64_t row = 0;
  for (size_t g = 0; g < lengths.size(); ++g)
    for (int64_t r = 0; r < lengths[g]; ++r, ++row)
      for (int64_t j = 0; j < m; ++j)
        want.set(static_cast<int64_t>(g) * m + j, want.get(static_cast<int64_t>(g) * m + j) + x.get(row * m + j));
  return want;
}

TEST(Jagged, RowSumOverGroupsWithEmptyAndOneRowGroups) {
  ph::Kernel k("jagged_row_sum", jagged_row_sum);
  const std::vector<int64_t> lengths = {3, 0, 1, 17, 0, 0, 6, 2};
  ph::Array x = ph::Array::random({total_of(lengths), 5}, ph::DType::f32, 1);
  check_configs(k, {x, offsets_of(lengths)}, row_sums(x, lengths), 1e-4, 6);
}

TEST(Jagged, OneGroupOfEveryRowAndAllEmpty) {
  ph::Kernel k("jagged_row_sum", jagged_row_sum);
  ph::Array x = ph::Array::random({40, 3}, ph::DType::f32, 2);
  check_configs(k, {x, offsets_of({40})}, row_sums(x, {40}), 1e-4, 6);
  check_configs(k, {x, offsets_of({0, 0, 0})}, row_sums(x, {0, 0, 0}), 1e-4, 6);
}

// out[g] = a[rows of g]^T . b[rows of g]: a product whose K is a group's rows (a grouped GEMM's
// weight gradient), accumulated into zeros over a jagged loop. An empty group runs no trip and
// must keep its zeros: a loop whose first trip would write the accumulator instead of adding into
// it (lower/fusion.h: AccumulatingDot::first_trip_writes) may not be a jagged one.
ph::Tensor jagged_k_product(ph::Tensor a, ph::Tensor b, ph::Tensor offsets) {
  auto [total, m] = a.sizes<2>();
  auto n = b.size(1);
  (void)total;
  const int64_t groups = offsets.size(0) - 1;
  auto out = ph::empty({groups, m, n});
  for (auto [g, tm, tn] : ph::tile(ph::Extent(groups).block(1), m, n)) {
    ph::Var acc = ph::zeros({tm, tn});
    for (auto tr : ph::tile(ph::jagged(offsets, g.begin()))) acc = acc + ph::dot(ph::transpose(a[tr, tm]), b[tr, tn]);
    out[g, tm, tn] = acc.unsqueeze(0);
  }
  return out;
}

TEST(Jagged, AnEmptyGroupKeepsTheZerosItsProductAccumulatesInto) {
  ph::Kernel k("jagged_k_product", jagged_k_product);
  const std::vector<int64_t> lengths = {5, 0, 1, 19, 0, 7};
  const int64_t m = 6, n = 9;
  ph::Array a = ph::Array::random({total_of(lengths), m}, ph::DType::f32, 3);
  ph::Array b = ph::Array::random({total_of(lengths), n}, ph::DType::f32, 4);
  ph::Array want = ph::Array::zeros({static_cast<int64_t>(lengths.size()), m, n}, ph::DType::f32);
  int64_t row = 0;
  for (size_t g = 0; g < lengths.size(); ++g)
    for (int64_t r = 0; r < lengths[g]; ++r, ++row)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const int64_t at = (static_cast<int64_t>(g) * m + i) * n + j;
          want.set(at, want.get(at) + a.get(row * m + i) * b.get(row * n + j));
        }
  check_configs(k, {a, b, offsets_of(lengths)}, want, 1e-4, 6);
}

// The rows of each group, scaled by their position in the group and by the block number they
// fall in: t.index(), t.begin() and t.id() of a jagged tile count from the group's own start.
ph::Tensor jagged_positions(ph::Tensor x, ph::Tensor offsets) {
  const int64_t groups = offsets.size(0) - 1;
  auto out = ph::zeros_like(x);
  for (auto g : ph::grid(groups)) {
    auto start = offsets[g];
    for (auto tr : ph::tile(ph::range(start, offsets[g.begin() + 1]).block(8))) {
      auto pos = (tr.index() - start).to(ph::DType::f32);
      auto within = (tr.begin() - start).to(ph::DType::f32) + tr.id().to(ph::DType::f32) * 100.0f;
      out[tr, ph::all] = x[tr, ph::all] * pos.unsqueeze(1) + within;
    }
  }
  return out;
}

TEST(Jagged, TileIndexBeginAndIdCountFromTheGroupsStart) {
  ph::Kernel k("jagged_positions", jagged_positions);
  const std::vector<int64_t> lengths = {5, 0, 19, 1, 9};
  ph::Array x = ph::Array::random({total_of(lengths), 3}, ph::DType::f32, 3);
  ph::Array want = ph::Array::zeros(x.shape(), ph::DType::f32);
  int64_t row = 0;
  for (int64_t len : lengths)
    for (int64_t r = 0; r < len; ++r, ++row) {
      const int64_t block = r / 8;  // (the block number: an integer by design)
      for (int64_t j = 0; j < 3; ++j)
        want.set(row * 3 + j, x.get(row * 3 + j) * static_cast<double>(r) + static_cast<double>(block * 8) +
                                  100.0 * static_cast<double>(block));
    }
  check_configs(k, {x, offsets_of(lengths)}, want, 1e-4, 6);
}

// A jagged loop over a computed range: the first `count[g]` rows after offsets[g] (count <= the
// group's length), and a tile within each jagged block (ph::tile(outer)).
ph::Tensor jagged_prefix_within(ph::Tensor x, ph::Tensor offsets, ph::Tensor count) {
  const int64_t groups = offsets.size(0) - 1;
  auto out = ph::zeros_like(x);
  for (auto g : ph::grid(groups)) {
    auto start = offsets[g];
    for (auto tr : ph::tile(ph::range(start, start + count[g])))
      for (auto ti : ph::tile(tr)) out[ti, ph::all] = x[ti, ph::all] + 1.0f;
  }
  return out;
}

TEST(Jagged, ComputedEndAndATileWithinAJaggedBlock) {
  ph::Kernel k("jagged_prefix_within", jagged_prefix_within);
  const std::vector<int64_t> lengths = {6, 0, 11, 3};
  const std::vector<int64_t> counts = {4, 0, 11, 1};
  ph::Array x = ph::Array::random({total_of(lengths), 2}, ph::DType::f32, 4);
  ph::Array count = ph::Array::zeros({4}, ph::DType::i64);
  for (int g = 0; g < 4; ++g) count.set(g, static_cast<double>(counts[g]));
  ph::Array want = ph::Array::zeros(x.shape(), ph::DType::f32);
  int64_t row = 0;
  for (size_t g = 0; g < lengths.size(); ++g)
    for (int64_t r = 0; r < lengths[g]; ++r, ++row)
      if (r < counts[g])
        for (int64_t j = 0; j < 2; ++j) want.set(row * 2 + j, x.get(row * 2 + j) + 1.0);
  check_configs(k, {x, offsets_of(lengths), count}, want, 1e-4, 6);
}

TEST(Jagged, AReversedRangeRunsNoTrip) {
  ph::Kernel k("jagged_row_sum", jagged_row_sum);
  ph::Array x = ph::Array::random({6, 2}, ph::DType::f32, 5);
  ph::Array offsets = ph::Array::zeros({3}, ph::DType::i64);
  offsets.set(0, 4);  // group 0: 4..2, reversed (empty); group 1: 2..6
  offsets.set(1, 2);
  offsets.set(2, 6);
  ph::Array want = ph::Array::zeros({2, 2}, ph::DType::f32);
  for (int64_t r = 2; r < 6; ++r)
    for (int64_t j = 0; j < 2; ++j) want.set(2 + j, want.get(2 + j) + x.get(r * 2 + j));
  check_configs(k, {x, offsets}, want, 1e-4, 6);
}

// The bound of a jagged tile is the smallest dim it indexes; its block-size choices stop there.
TEST(Jagged, TheTilesBoundIsTheSmallestDimItIndexes) {
  ph::Kernel k("jagged_row_sum", jagged_row_sum);
  ph::Array x = ph::Array::random({12, 2}, ph::DType::f32, 6);
  auto impl = k.trace({x, offsets_of({5, 7})});
  const std::string ir = ph::ir::print(impl->fn);
  EXPECT_HAS(ir, "in 0..12 by $b");
  EXPECT_HAS(ir, " over %");
  // The text form reads back to the same function.
  EXPECT_EQ(ph::ir::print(ph::ir::parse(ir, "jagged.tir")), ir);
  for (const auto& b : impl->spec.block_sizes) EXPECT_LE(b.choices.back(), 16);
}

TEST(Jagged, ARangeOutsideTheDimsItIndexesNamesTheLine) {
  ph::Kernel k("jagged_row_sum", jagged_row_sum);
  ph::Array x = ph::Array::random({6, 2}, ph::DType::f32, 7);
  ph::Array offsets = ph::Array::zeros({3}, ph::DType::i64);
  offsets.set(1, 3);
  offsets.set(2, 9);  // past the 6 rows of x
  const std::string interp = user_error_of([&] { k.interpret({x, offsets}); });
  EXPECT_HAS(interp, "test_jagged.cpp:");
  EXPECT_HAS(interp, "is outside 0..6");
  const std::string cpu = user_error_of([&] { k(x, offsets); });
  EXPECT_HAS(cpu, "test_jagged.cpp:");
  EXPECT_HAS(cpu, "index 9 is out of bounds for the range of jagged tile");
  // (one bad entry at a time: with two, the threads that run them race to report theirs first)
  offsets.set(2, 6);
  offsets.set(0, -2);
  const std::string below = user_error_of([&] { k(x, offsets); });
  EXPECT_HAS(below, "index -2 is out of bounds");
}

// --- pallas ------------------------------------------------------------------------------------

// The jagged kernels above, emitted for TPUs and run in JAX's TPU interpret mode at the default
// config and at other jagged blocks: row offsets read from SMEM, a fori_loop over each entry's
// trips, reads at clamped starts masked to the trip's rows, stores into a whole dim in VMEM;
// each also lowered for a TPU (jax.export).
TEST(Jagged, PallasRunsJaggedLoopsInInterpretMode) {
  ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
  struct Case {
    std::string name;
    ph::KernelBase* kernel;
    std::vector<ph::Arg> args;
    ph::Array want;
  };
  const std::vector<int64_t> lengths = {3, 0, 1, 17, 0, 6, 9};
  const int64_t rows = total_of(lengths);
  ph::Array x = ph::Array::random({rows, 256}, ph::DType::f32, 11), off = offsets_of(lengths);
  ph::Array x3 = ph::Array::random({rows, 3}, ph::DType::f32, 12);
  ph::Kernel sum_k("jagged_row_sum", jagged_row_sum);
  ph::Kernel pos_k("jagged_positions", jagged_positions);
  const auto& mean = ph::kernels::find_kernel("jagged_mean");
  ph::kernels::Inputs mean_in = mean.make_inputs({6, 128, 13}, ph::DType::bf16, 3);
  std::vector<Case> cases = {{"row_sum", &sum_k, {x, off}, row_sums(x, lengths)},
                             {"positions", &pos_k, {x3, off}, pos_k.interpret({x3, off}).at(0)},
                             {"jagged_mean", mean.kernel, mean_in.args(), mean.reference(mean_in).at(0)}};
  std::vector<pallas::InterpretCase> runs;
  std::vector<const Case*> of_run;
  for (const Case& c : cases) {
    ph::PallasModule def = c.kernel->emit_pallas(c.args, "v7x");
    EXPECT_HAS(def.source, "jax.lax.fori_loop(");
    EXPECT_HAS(def.source, "memory_space=pltpu.SMEM");
    std::vector<ph::Config> configs = {def.config};
    // Another legal block for each symbol (the jagged tile's included), where there is one.
    const ph::ConfigSpec& spec = c.kernel->trace(c.args, "pallas:v7x")->spec;
    ph::Config other = def.config;
    for (size_t i = 0; i < spec.block_sizes.size(); ++i)
      for (int64_t b : spec.block_sizes[i].choices)
        if (b != def.config.block_sizes[i] && b >= 8) {
          other.block_sizes[i] = b;
          break;
        }
    if (!(other == def.config)) configs.push_back(other);
    for (const ph::Config& cfg : configs) {
      std::vector<ph::Array> inputs;
      std::vector<double> scalars;
      for (const ph::Arg& a : c.args)
        if (a.is_tensor())
          inputs.push_back(*a.array);
        else
          scalars.push_back(a.scalar);
      runs.push_back({c.name + " " + cfg.to_json(), c.kernel->emit_pallas(c.args, "v7x", &cfg).source, c.kernel->name(),
                      inputs, scalars, true});
      of_run.push_back(&c);
    }
  }
  std::vector<pallas::InterpretResult> results = pallas::run_in_interpret_mode(runs);
  ASSERT_EQ(results.size(), runs.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    SCOPED_TRACE(runs[i].name);
    ASSERT_TRUE(results[i].ok) << results[i].error << "\n" << runs[i].source;
    EXPECT_FALSE(results[i].races);
    EXPECT_EQ(results[i].export_status, "ok");
    EXPECT_LT(ph::max_abs_diff(results[i].outputs.at(0), of_run[i]->want), 2e-2) << runs[i].source;
  }
}

// --- integer kernel arguments ----------------------------------------------------------------

// The column sums of rows [skip, n): a runtime integer argument (ph::Int) as a jagged loop's end,
// and a compile-time one (int64_t) that host code reads (the rows to skip, a static range).
ph::Tensor leading_rows_sum(ph::Tensor x, ph::Int n, int64_t skip) {
  auto m = x.size(1);
  auto out = ph::empty({m});
  for (auto tm : ph::tile(m)) {
    ph::Var acc = ph::zeros({tm});
    for (auto tr : ph::tile(ph::range(skip, n))) acc = acc + ph::sum(x[tr, tm], 0);
    out[tm] = acc;
  }
  return out;
}

ph::Array column_sums(const ph::Array& x, int64_t from, int64_t to) {
  const int64_t m = x.shape()[1];
  ph::Array want = ph::Array::zeros({m}, ph::DType::f32);
  for (int64_t r = from; r < to; ++r)
    for (int64_t j = 0; j < m; ++j) want.set(j, want.get(j) + x.get(r * m + j));
  return want;
}

TEST(IntegerArguments, ARuntimeIntBoundsALoopAndAConstantSpecializesTheKernel) {
  ph::Kernel k("leading_rows_sum", leading_rows_sum);
  ph::Array x = ph::Array::random({23, 6}, ph::DType::f32, 9);
  for (int64_t n : {23, 7, 0, 1})
    for (int64_t skip : {0, 2}) {
      SCOPED_TRACE("n " + std::to_string(n) + ", skip " + std::to_string(skip));
      check_configs(k, {x, n, skip}, column_sums(x, skip, n), 1e-4, 6);
    }
  // n is a runtime value: one trace for every n; skip is traced once per value.
  EXPECT_EQ(k.trace({x, int64_t{3}, int64_t{0}}), k.trace({x, int64_t{9}, int64_t{0}}));
  EXPECT_NE(k.trace({x, int64_t{3}, int64_t{0}}), k.trace({x, int64_t{3}, int64_t{2}}));
  EXPECT_HAS(ph::ir::print(k.trace({x, int64_t{3}, int64_t{0}})->fn), "scalar_param arg1 : i64");
  // Bad values: a fractional integer argument, a range past the rows, a fractional constant.
  EXPECT_HAS(user_error_of([&] { k.run({x, 2.5, int64_t{0}}); }), "integer argument arg1 is 2.5");
  EXPECT_HAS(user_error_of([&] { k.interpret({x, 2.5, int64_t{0}}); }), "integer argument arg1 is 2.5");
  EXPECT_HAS(user_error_of([&] { k(x, 24, 0); }), "index 24 is out of bounds for the range of jagged tile");
  EXPECT_HAS(user_error_of([&] { k.run({x, int64_t{3}, 0.5}); }), "argument 2 is a compile-time integer");
}

// --- user errors ------------------------------------------------------------------------------

ph::Tensor float_bound(ph::Tensor x, ph::Tensor offsets) {
  auto out = ph::zeros_like(x);
  for (auto g : ph::grid(offsets.size(0) - 1)) {
    auto end = offsets[g].to(ph::DType::f32);
    for (auto t : ph::tile(ph::range(0, end))) out[t, ph::all] = x[t, ph::all];
  }
  return out;
}

ph::Tensor jagged_offsets_2d(ph::Tensor x, ph::Tensor offsets) {
  auto out = ph::zeros_like(x);
  for (auto g : ph::grid(2))
    for (auto t : ph::tile(ph::jagged(x, g))) out[t, ph::all] = x[t, ph::all] + offsets[g].to(ph::DType::f32);
  return out;
}

TEST(Jagged, ErrorsNameTheLineAndWhatWasExpected) {
  ph::Array x = ph::Array::random({4, 2}, ph::DType::f32, 8);
  ph::Array offsets = offsets_of({2, 2});
  {
    ph::Kernel k("float_bound", float_bound);
    const std::string e = user_error_of([&] { k(x, offsets); });
    EXPECT_HAS(e, "test_jagged.cpp:");
    EXPECT_HAS(e, "the end of ph::range(start, end) must be an i64 scalar");
  }
  {
    ph::Kernel k("jagged_offsets_2d", jagged_offsets_2d);
    const std::string e = user_error_of([&] { k(x, offsets); });
    EXPECT_HAS(e, "test_jagged.cpp:");
    EXPECT_HAS(e, "row offsets of rank 1 and an integer dtype");
  }
}

}  // namespace

// Scans over a tile dimension (ph::cumsum, ph::cumprod, ph::associative_scan; src/ir/scan.h):
// known answers of torch.cumsum / torch.cumprod semantics along either axis, forward and
// reversed, on whole rows and on ragged blocks at several configs (a block's missing elements
// never enter its scan), carried across the blocks of an inner loop, exact i64 sums, bf16 data
// computed in f32, user combine functions of one block and of pairs (a segmented sum), the
// same results as Pallas in TPU interpret mode, and the text form.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/pallas/interpret.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "parhelion/parhelion.h"

#include "tests/user_error.h"

namespace ph = parhelion;
namespace pallas = ph::backend::pallas;

namespace {

// --- references: plain loops over a row-major [m, n] array ------------------------------------

enum class Op { sum, prod, max };

// The inclusive scan of each line of `x` [m, n] along `axis`, in lines cut into pieces of
// `piece` elements (a block size; 0: whole lines), reversed or not, in double.
std::vector<double> reference_scan(const ph::Array& x, int axis, Op op, bool reverse, int64_t piece = 0) {
  const int64_t m = x.shape()[0], n = x.shape()[1];
  const int64_t len = axis == 0 ? m : n, lines = axis == 0 ? n : m;
  std::vector<double> out(static_cast<size_t>(m * n));
  auto at = [&](int64_t line, int64_t k) { return axis == 0 ? k * n + line : line * n + k; };
  const int64_t p = piece > 0 ? piece : len;
  for (int64_t l = 0; l < lines; ++l)
    for (int64_t start = 0; start < len; start += p) {
      const int64_t end = std::min(len, start + p);
      double acc = 0;
      for (int64_t s = 0; s < end - start; ++s) {
        const int64_t k = reverse ? end - 1 - s : start + s;
        const double v = x.get(at(l, k));
        acc = s == 0 ? v : op == Op::sum ? acc + v : op == Op::prod ? acc * v : std::max(acc, v);
        out[static_cast<size_t>(at(l, k))] = acc;
      }
    }
  return out;
}

std::vector<double> reference_of(const ph::Array& a) {
  std::vector<double> v(static_cast<size_t>(a.numel()));
  for (int64_t i = 0; i < a.numel(); ++i) v[static_cast<size_t>(i)] = a.get(i);
  return v;
}

double max_diff(const ph::Array& got, const std::vector<double>& want) {
  double d = 0;
  for (int64_t i = 0; i < got.numel(); ++i) d = std::max(d, std::abs(got.get(i) - want[static_cast<size_t>(i)]));
  return d;
}

// --- kernels --------------------------------------------------------------------------------

// Whole lines per block: the result does not depend on the config.
ph::Tensor cumsum_rows(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m, n});
  for (auto tm : ph::tile(m)) out[tm, ph::all] = ph::cumsum(x[tm, ph::all], 1);
  return out;
}
ph::Tensor cumsum_cols_reversed(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m, n});
  for (auto tn : ph::tile(n)) out[ph::all, tn] = ph::cumsum(x[ph::all, tn], 0, /*reverse=*/true);
  return out;
}
ph::Tensor cumprod_rows_reversed(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m, n});
  for (auto tm : ph::tile(m)) out[tm, ph::all] = ph::cumprod(x[tm, ph::all], -1, true);
  return out;
}
ph::Tensor cumprod_cols(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m, n});
  for (auto tn : ph::tile(n)) out[ph::all, tn] = ph::cumprod(x[ph::all, tn], 0);
  return out;
}
// Scans of each block along a tiled dim: the lines are the blocks' (ragged last one included).
ph::Tensor cumsum_blocks(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m, n});
  for (auto [tm, tn] : ph::tile(m, n)) out[tm, tn] = ph::cumsum(x[tm, tn] * 2.0f, 1);
  return out;
}
ph::Tensor cummax_blocks_reversed(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m, n});
  for (auto [tm, tn] : ph::tile(m, n))
    out[tm, tn] = ph::associative_scan(
        x[tm, tn], 0, [](const ph::Tensor& a, const ph::Tensor& b) { return ph::maximum(a, b); }, true);
  return out;
}
// A row's cumsum across the blocks of an inner loop: each block's scan plus the carried sum of
// the blocks before it.
ph::Tensor cumsum_carried(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m, n});
  for (auto tm : ph::tile(m)) {
    ph::Var carry = ph::zeros({tm});
    for (auto tn : ph::tile(n)) {
      auto v = x[tm, tn];
      out[tm, tn] = ph::cumsum(v, 1) + carry.unsqueeze(1);
      carry = carry + ph::sum(v, 1);
    }
  }
  return out;
}
// i64 data sums exactly; a bool block counts (as torch.cumsum of a bool tensor).
std::tuple<ph::Tensor, ph::Tensor> cumsum_integers(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m, n}, ph::DType::i64), count = ph::empty({m, n}, ph::DType::i64);
  for (auto tm : ph::tile(m)) {
    auto v = x[tm, ph::all];
    out[tm, ph::all] = ph::cumsum(v, 1);
    count[tm, ph::all] = ph::cumsum(v > 0, 1);
  }
  return {out, count};
}

// A segmented sum by sorted segment ids: values and ids scanned as pairs.
ph::Tensor segmented_cumsum(ph::Tensor x, ph::Tensor ids) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m, n});
  for (auto tn : ph::tile(n)) {
    auto [sums, last_ids] = ph::associative_scan(
        std::pair{x[ph::all, tn], ids[ph::all].unsqueeze(1)}, 0,
        [](const ph::Tensor& av, const ph::Tensor& ai, const ph::Tensor& bv, const ph::Tensor& bi) {
          return std::pair{ph::where(ai == bi, av + bv, bv), bi};
        });
    out[ph::all, tn] = sums;
  }
  return out;
}

ph::Array ragged_input(int64_t m, int64_t n, uint64_t seed, double lo = -1, double hi = 1) {
  return ph::Array::random({m, n}, ph::DType::f32, seed, lo, hi);
}

// Configs whose block sizes cut the dims raggedly (and one whole-extent default).
std::vector<ph::Config> configs_of(ph::KernelBase& k, const std::vector<ph::Arg>& args) {
  ph::CompiledKernel c = k.compile(args);
  std::vector<ph::Config> out = {c.config()};
  const ph::ConfigSpec& spec = c.config_spec();
  for (int v = 0; v < 3; ++v) {
    ph::Config cfg = c.config();
    for (size_t i = 0; i < spec.block_sizes.size(); ++i) {
      const auto& ch = spec.block_sizes[i].choices;
      cfg.block_sizes[i] = ch[static_cast<size_t>(v + 1 + static_cast<int>(i)) % ch.size()];
    }
    cfg.num_threads = 1 + v % 2;
    out.push_back(cfg);
  }
  return out;
}

TEST(Scan, CumsumAndCumprodKnownAnswersOnWholeLines) {
  struct Case {
    const char* name;
    ph::Tensor (*fn)(ph::Tensor);
    int axis;
    Op op;
    bool reverse;
  };
  const std::vector<Case> cases = {{"cumsum_rows", cumsum_rows, 1, Op::sum, false},
                                   {"cumsum_cols_reversed", cumsum_cols_reversed, 0, Op::sum, true},
                                   {"cumprod_rows_reversed", cumprod_rows_reversed, 1, Op::prod, true},
                                   {"cumprod_cols", cumprod_cols, 0, Op::prod, false}};
  // Factors near 1 keep the products of 37 elements in range.
  const ph::Array x = ragged_input(37, 29, 5, 0.8, 1.2);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ph::Kernel k(c.name, c.fn);
    const std::vector<double> want = reference_scan(x, c.axis, c.op, c.reverse);
    EXPECT_LE(max_diff(k.interpret({x})[0], want), 4e-6);  // (stores round to f32)
    for (const ph::Config& cfg : configs_of(k, {x})) {
      SCOPED_TRACE(cfg.to_json());
      EXPECT_LE(max_diff(k.compile({x}, &cfg).run({x})[0], want), 2e-5);
    }
  }
}

// Each block's scan covers its valid elements only: NaN-free results equal to the per-block
// reference at block sizes that leave a ragged last block along the scanned dim.
TEST(Scan, RaggedBlocksScanOnlyTheirValidElements) {
  const ph::Array x = ragged_input(19, 45, 7);
  ph::Kernel sums("cumsum_blocks", cumsum_blocks), maxes("cummax_blocks_reversed", cummax_blocks_reversed);
  ph::Array doubled = ph::Array::zeros({19, 45}, ph::DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) doubled.set(i, 2 * x.get(i));
  for (const ph::Config& cfg : configs_of(sums, {x})) {
    SCOPED_TRACE(cfg.to_json());
    const int64_t bn = cfg.block_sizes.at(1);
    EXPECT_LE(max_diff(sums.compile({x}, &cfg).run({x})[0], reference_scan(doubled, 1, Op::sum, false, bn)), 1e-5);
  }
  for (const ph::Config& cfg : configs_of(maxes, {x})) {
    SCOPED_TRACE(cfg.to_json());
    const int64_t bm = cfg.block_sizes.at(0);
    EXPECT_EQ(max_diff(maxes.compile({x}, &cfg).run({x})[0], reference_scan(x, 0, Op::max, true, bm)), 0.0);
  }
  // The interpreter takes each tunable block whole.
  EXPECT_LE(max_diff(sums.interpret({x})[0], reference_scan(doubled, 1, Op::sum, false)), 4e-6);
  EXPECT_EQ(max_diff(maxes.interpret({x})[0], reference_scan(x, 0, Op::max, true)), 0.0);
}

TEST(Scan, CarriedAcrossTheBlocksOfALoopGivesTheRowsCumsum) {
  ph::Kernel k("cumsum_carried", cumsum_carried);
  for (ph::DType dt : {ph::DType::f32, ph::DType::bf16}) {
    SCOPED_TRACE(std::string(ph::dtype_name(dt)));
    ph::Array x = ph::Array::random({13, 300}, dt, 11);
    const std::vector<double> want = reference_scan(x, 1, Op::sum, false);  // bf16 values, summed exactly
    EXPECT_LE(max_diff(k.interpret({x})[0], want), 4e-6);
    for (const ph::Config& cfg : configs_of(k, {x})) {
      SCOPED_TRACE(cfg.to_json());
      EXPECT_LE(max_diff(k.compile({x}, &cfg).run({x})[0], want), 1e-4);
    }
  }
}

// i64 sums beyond 2^53 stay exact (computed here with int64_t, as torch.cumsum does).
TEST(Scan, IntegerCumsumIsExact) {
  const int64_t m = 3, n = 40;
  ph::Array x = ph::Array::zeros({m, n}, ph::DType::i64);
  std::vector<int64_t> want(m * n), count(m * n);
  for (int64_t r = 0; r < m; ++r) {
    int64_t acc = 0, c = 0;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t v = (j % 3 == 0 ? -1 : 1) * ((int64_t{1} << 55) + 12345 * j + r);
      x.data_as<int64_t>()[r * n + j] = v;  // (Array::set goes through a double)
      acc += v;
      c += v > 0;
      want[r * n + j] = acc;
      count[r * n + j] = c;
    }
  }
  ph::Kernel k("cumsum_integers", cumsum_integers);
  auto [got, counted] = k(x);
  ASSERT_EQ(got.dtype(), ph::DType::i64);
  for (int64_t i = 0; i < m * n; ++i) {
    EXPECT_EQ(got.data_as<int64_t>()[i], want[i]) << "element " << i;
    EXPECT_EQ(counted.data_as<int64_t>()[i], count[i]) << "element " << i;
  }
}

// Segments of equal sorted ids restart the sum; a combine over pairs expresses it.
TEST(Scan, PairScanComputesASegmentedSum) {
  const int64_t m = 23, n = 70;
  const ph::Array x = ragged_input(m, n, 13);
  ph::Array ids = ph::Array::zeros({m}, ph::DType::i64);
  const std::vector<int64_t> id_of = {0, 0, 0, 2, 2, 3, 5, 5, 5, 5, 6, 7, 7, 7, 7, 7, 7, 9, 9, 10, 11, 11, 11};
  for (int64_t i = 0; i < m; ++i) ids.set(i, static_cast<double>(id_of[i]));
  std::vector<double> want(m * n);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) {
      const bool restart = i == 0 || id_of[i] != id_of[i - 1];
      want[i * n + j] = x.get(i * n + j) + (restart ? 0.0 : want[(i - 1) * n + j]);
    }
  ph::Kernel k("segmented_cumsum", segmented_cumsum);
  EXPECT_LE(max_diff(k.interpret({x, ids})[0], want), 4e-6);
  for (const ph::Config& cfg : configs_of(k, {x, ids})) {
    SCOPED_TRACE(cfg.to_json());
    EXPECT_LE(max_diff(k.compile({x, ids}, &cfg).run({x, ids})[0], want), 2e-5);
  }
}

// The text form of a scan (its combine region, reverse, the component) reads back.
TEST(Scan, TextFormRoundTrips) {
  ph::Array x = ragged_input(23, 70, 1), ids = ph::Array::zeros({23}, ph::DType::i64);
  using Fn = ph::Tensor (*)(ph::Tensor);
  for (auto [name, fn] : {std::pair<const char*, Fn>{"cumprod_rows_reversed", cumprod_rows_reversed},
                          std::pair<const char*, Fn>{"cummax_blocks_reversed", cummax_blocks_reversed}}) {
    ph::Kernel k(name, fn);
    const std::string text = k.compile({x}).ir();
    EXPECT_HAS(text, "reverse");
    EXPECT_EQ(ph::ir::print(ph::ir::parse(text, "scan.tir")), text);
  }
  ph::Kernel seg("segmented_cumsum", segmented_cumsum);
  const std::string text = seg.compile({x, ids}).ir();
  EXPECT_HAS(text, "yield");
  EXPECT_EQ(ph::ir::print(ph::ir::parse(text, "scan.tir")), text);
}

}  // namespace

namespace {

// The same kernels emitted for a TPU and run in JAX's TPU interpret mode (and lowered for a TPU
// by jax.export, which checks that Mosaic takes the rolls and selects of the log-step scan).
// Extents that leave ragged (padded) blocks along the scanned dim, reversed scans among them.
TEST(Scan, PallasMatchesInInterpretMode) {
  ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
  const ph::Array x = ragged_input(20, 200, 3, 0.8, 1.2);
  ph::Array ids = ph::Array::zeros({20}, ph::DType::i64);
  for (int64_t i = 0; i < 20; ++i) {
    const int64_t segment = i / 3;  // segments of 3 rows
    ids.set(i, static_cast<double>(segment));
  }
  using Fn1 = ph::Tensor (*)(ph::Tensor);
  struct Case {
    const char* name;
    Fn1 fn;
  };
  const std::vector<Case> cases = {{"cumsum_rows", cumsum_rows},
                                   {"cumsum_cols_reversed", cumsum_cols_reversed},
                                   {"cumprod_rows_reversed", cumprod_rows_reversed},
                                   {"cummax_blocks_reversed", cummax_blocks_reversed},
                                   {"cumsum_carried", cumsum_carried}};
  std::vector<std::unique_ptr<ph::Kernel<ph::Tensor(ph::Tensor)>>> kernels;
  std::vector<pallas::InterpretCase> runs;
  std::vector<ph::Config> configs;
  for (const Case& c : cases) {
    kernels.push_back(std::make_unique<ph::Kernel<ph::Tensor(ph::Tensor)>>(c.name, c.fn));
    ph::PallasModule mod = kernels.back()->emit_pallas({x}, "v6e");
    if (std::string(c.name) == "cummax_blocks_reversed") {  // row blocks of 8: the last one ragged
      ph::Config rows8 = mod.config;
      rows8.block_sizes.at(0) = 8;
      mod = kernels.back()->emit_pallas({x}, "v6e", &rows8);
    }
    configs.push_back(mod.config);
    runs.push_back({c.name, mod.source, c.name, {x}, {}, true});
  }
  ph::Kernel seg("segmented_cumsum", segmented_cumsum);
  runs.push_back({"segmented_cumsum", seg.emit_pallas({x, ids}, "v6e").source, "segmented_cumsum", {x, ids}, {}, true});
  std::vector<pallas::InterpretResult> results = pallas::run_in_interpret_mode(runs);
  ASSERT_EQ(results.size(), runs.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    SCOPED_TRACE(runs[i].name);
    const pallas::InterpretResult& r = results[i];
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_FALSE(r.races);
    EXPECT_EQ(r.export_status, "ok");
    std::vector<double> want;
    if (i == cases.size()) {
      want = reference_of(seg.interpret({x, ids})[0]);
    } else if (runs[i].name == "cummax_blocks_reversed") {
      // Its lines are the emitted config's row blocks (the interpreter takes blocks whole).
      want = reference_scan(x, 0, Op::max, true, configs[i].block_sizes.at(0));
    } else {
      want = reference_of(kernels[i]->interpret({x})[0]);
    }
    EXPECT_LE(max_diff(r.outputs[0], want), 1e-4);  // (sums up to 240: f32 ulps there are 1.5e-5)
  }
}

}  // namespace

// --- user errors: each names the user's line and what was expected ----------------------------

namespace {

std::string here(int line) { return "test_scan.cpp:" + std::to_string(line); }

constexpr int kLineAxis = __LINE__ + 3;
ph::Tensor scan_missing_axis(ph::Tensor x) {
  auto out = ph::empty_like(x);
  for (auto t : ph::tile(x.size(0))) out[t] = ph::cumsum(x[t], 1);
  return out;
}

constexpr int kLineDtype = __LINE__ + 4;
ph::Tensor combine_wrong_dtype(ph::Tensor x) {
  auto out = ph::empty_like(x);
  for (auto t : ph::tile(x.size(0)))
    out[t] = ph::associative_scan(x[t], 0, [](const ph::Tensor& a, const ph::Tensor& b) { return a > b; });
  return out;
}

constexpr int kLineScan = __LINE__ + 4, kLineBlock = __LINE__ + 5;
ph::Tensor combine_makes_a_block(ph::Tensor x) {
  auto out = ph::empty_like(x);
  for (auto t : ph::tile(x.size(0)))
    out[t] = ph::associative_scan(
        x[t], 0, [](const ph::Tensor& a, const ph::Tensor& b) { return ph::sum(a + b + ph::zeros({4}), 0); });
  return out;
}

constexpr int kLineCapture = __LINE__ + 5;
ph::Tensor combine_reads_a_block(ph::Tensor x) {
  auto out = ph::empty_like(x);
  for (auto t : ph::tile(x.size(0))) {
    auto w = x[t];
    out[t] = ph::associative_scan(w, 0, [&](const ph::Tensor& a, const ph::Tensor& b) { return a + b * w; });
  }
  return out;
}

constexpr int kLineLoad = __LINE__ + 4;
ph::Tensor combine_loads(ph::Tensor x) {
  auto out = ph::empty_like(x);
  for (auto t : ph::tile(x.size(0))) {
    out[t] = ph::associative_scan(x[t], 0, [&](const ph::Tensor& a, const ph::Tensor& b) { return a + b * x[0]; });
  }
  return out;
}

constexpr int kLinePair = __LINE__ + 4;
ph::Tensor pair_does_not_broadcast(ph::Tensor x, ph::Tensor ids) {
  auto out = ph::empty_like(x);
  for (auto [tm, tn] : ph::tile(x.size(0), x.size(1))) {
    auto [s, i] = ph::associative_scan(
        std::pair{x[tm, tn], ids[tm]}, 0,
        [](const ph::Tensor& av, const ph::Tensor& /*ai*/, const ph::Tensor& bv, const ph::Tensor& bi) {
          return std::pair{av + bv, bi};
        });
    out[tm, tn] = s;
  }
  return out;
}

constexpr int kLineHost = __LINE__ + 2;
ph::Tensor scan_in_host_code(ph::Tensor x) {
  auto c = ph::cumsum(x, 0);
  (void)c;
  return ph::empty_like(x);
}

TEST(ScanErrors, EachNamesTheLineAndWhatWasExpected) {
  ph::Array x = ph::Array::zeros({16}, ph::DType::f32), x2 = ph::Array::zeros({8, 16}, ph::DType::f32);
  ph::Array ids = ph::Array::zeros({8}, ph::DType::i64);
  std::string m = user_error_of([&] { ph::Kernel("scan_missing_axis", scan_missing_axis)(x); });
  EXPECT_HAS(m, here(kLineAxis));
  EXPECT_HAS(m, "cumsum: scan over axis 1 of a block with shape [t0] (rank 1)");

  m = user_error_of([&] { ph::Kernel("combine_wrong_dtype", combine_wrong_dtype)(x); });
  EXPECT_HAS(m, here(kLineDtype));
  EXPECT_HAS(m, "must return the dtype of what it scans: result 0 is bool, the scanned block is f32 (cast it)");

  m = user_error_of([&] { ph::Kernel("combine_makes_a_block", combine_makes_a_block)(x); });
  EXPECT_HAS(m, here(kLineScan));
  EXPECT_HAS(m, here(kLineBlock));
  EXPECT_HAS(m, "the combine function of a scan computes on single elements");

  m = user_error_of([&] { ph::Kernel("combine_reads_a_block", combine_reads_a_block)(x); });
  EXPECT_HAS(m, here(kLineCapture));
  EXPECT_HAS(m, "may only use its arguments and values it computes from them");

  m = user_error_of([&] { ph::Kernel("combine_loads", combine_loads)(x); });
  EXPECT_HAS(m, here(kLineLoad));
  EXPECT_HAS(m, "(load is not allowed in it)");

  m = user_error_of([&] { ph::Kernel("pair_does_not_broadcast", pair_does_not_broadcast)(x2, ids); });
  EXPECT_HAS(m, here(kLinePair));
  EXPECT_HAS(m, "associative_scan: the blocks scanned together must broadcast");

  m = user_error_of([&] { ph::Kernel("scan_in_host_code", scan_in_host_code)(x); });
  EXPECT_HAS(m, here(kLineHost));
  EXPECT_HAS(m, "a whole tensor (arg0) used as a value");
}

// The parser refuses a combine that does not type (the verifier's rule, at the text's line).
TEST(ScanErrors, ParserChecksTheCombine) {
  ph::Kernel k("cumsum_rows", cumsum_rows);
  const std::string text = k.compile({ragged_input(4, 8, 1)}).ir();

  EXPECT_HAS(text, "combine(");
  std::string bad = text;
  const size_t y = bad.find("yield %");
  ASSERT_NE(y, std::string::npos);
  bad.replace(bad.find('%', y), bad.find('\n', y) - bad.find('%', y), "%0");  // a value from outside
  const std::string m = user_error_of([&] { ph::ir::parse(bad, "bad.tir"); });
  EXPECT_HAS(m, "bad.tir:");
  EXPECT_HAS(m, "scan: the combine returns %0, which it does not define");
}

}  // namespace

namespace {

// A rank-1 block on pallas (a vector: Mosaic rolls it as one row), forward and reversed, its
// last block ragged.
std::tuple<ph::Tensor, ph::Tensor> cumsum_vector(ph::Tensor x) {
  auto out = ph::empty_like(x), back = ph::empty_like(x);
  for (auto t : ph::tile(x.size(0))) {
    out[t] = ph::cumsum(x[t], 0);
    back[t] = ph::cumsum(x[t], 0, true);
  }
  return {out, back};
}

TEST(Scan, PallasScansAVectorInInterpretMode) {
  ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
  const int64_t n = 300;
  const ph::Array x = ph::Array::random({n}, ph::DType::f32, 23);
  ph::Kernel k("cumsum_vector", cumsum_vector);
  ph::Config cfg = k.emit_pallas({x}, "v7x").config;
  cfg.block_sizes.at(0) = 128;  // 300 = 2 x 128 + 44: the last block padded
  ph::PallasModule m = k.emit_pallas({x}, "v7x", &cfg);
  std::vector<pallas::InterpretResult> r =
      pallas::run_in_interpret_mode({{"cumsum_vector", m.source, "cumsum_vector", {x}, {}, true}});
  ASSERT_EQ(r.size(), 1u);
  ASSERT_TRUE(r[0].ok) << r[0].error;
  EXPECT_EQ(r[0].export_status, "ok");
  const ph::Array row = ph::Array::wrap(x.data(), {1, n}, {n, 1}, ph::DType::f32);  // (the reference takes [m, n])
  EXPECT_LE(max_diff(r[0].outputs[0], reference_scan(row, 1, Op::sum, false, 128)), 1e-5);
  EXPECT_LE(max_diff(r[0].outputs[1], reference_scan(row, 1, Op::sum, true, 128)), 1e-5);
}

// A block with more lines than the stack should carry (10000 lines of 4): the carried values
// move to the heap, and the sums are the same.
ph::Tensor cumsum_wide_block(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m, n});
  for (auto g : ph::grid(1)) {
    (void)g;
    out[ph::all, ph::all] = ph::cumsum(x[ph::all, ph::all], 0);
  }
  return out;
}

TEST(Scan, ABlockOfManyLinesCarriesThemOnTheHeap) {
  const ph::Array x = ragged_input(4, 10000, 17);
  ph::Kernel k("cumsum_wide_block", cumsum_wide_block);
  ph::CompiledKernel c = k.compile({x});
  EXPECT_HAS(c.source(), "= new float[10000];");
  EXPECT_LE(max_diff(c.run({x})[0], reference_scan(x, 0, Op::sum, false)), 1e-5);
}

}  // namespace

namespace {

// A cumsum over each group's rows of a jagged tensor: a scan along a jagged loop's tile,
// carried across its trips. On pallas a trip's rows are a window of the block it reads, so the
// scan starts at the window (the rows before it are another group's).
ph::Tensor jagged_cumsum(ph::Tensor values, ph::Tensor offsets) {
  auto [t, m] = values.sizes<2>();
  const int64_t groups = offsets.size(0) - 1;
  auto out = ph::zeros({t, m});
  for (auto g : ph::tile(ph::range(groups).block(1))) {
    auto start = offsets[g.begin()], end = offsets[g.begin() + 1];
    ph::Var carry = ph::zeros({m});
    for (auto tr : ph::tile(ph::range(start, end))) {
      auto v = values[tr, ph::all];
      out[tr, ph::all] = ph::cumsum(v, 0) + carry.unsqueeze(0);
      carry = carry + ph::sum(v, 0);
    }
  }
  return out;
}

TEST(Scan, AlongAJaggedLoopOnEveryBackend) {
  const int64_t t = 70, m = 128;
  const ph::Array x = ragged_input(t, m, 29);
  const std::vector<int64_t> off = {0, 9, 9, 40, 41, 70};  // an empty group, a group of one
  ph::Array offsets = ph::Array::zeros({static_cast<int64_t>(off.size())}, ph::DType::i64);
  for (size_t i = 0; i < off.size(); ++i) offsets.set(static_cast<int64_t>(i), static_cast<double>(off[i]));
  std::vector<double> want(t * m);
  for (size_t g = 0; g + 1 < off.size(); ++g)
    for (int64_t j = 0; j < m; ++j) {
      double acc = 0;
      for (int64_t r = off[g]; r < off[g + 1]; ++r) want[r * m + j] = acc += x.get(r * m + j);
    }
  ph::Kernel k("jagged_cumsum", jagged_cumsum);
  EXPECT_LE(max_diff(k.interpret({x, offsets})[0], want), 4e-6);
  for (const ph::Config& cfg : configs_of(k, {x, offsets})) {
    SCOPED_TRACE(cfg.to_json());
    EXPECT_LE(max_diff(k.compile({x, offsets}, &cfg).run({x, offsets})[0], want), 2e-5);
  }
  ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
  ph::Config cfg = k.emit_pallas({x, offsets}, "v7x").config;
  cfg.block_sizes.back() = 16;  // trips of 16 rows: windows that start inside the block read
  ph::PallasModule mod = k.emit_pallas({x, offsets}, "v7x", &cfg);
  std::vector<pallas::InterpretResult> r =
      pallas::run_in_interpret_mode({{"jagged_cumsum", mod.source, "jagged_cumsum", {x, offsets}, {}, true}});
  ASSERT_EQ(r.size(), 1u);
  ASSERT_TRUE(r[0].ok) << r[0].error;
  EXPECT_EQ(r[0].export_status, "ok");
  EXPECT_LE(max_diff(r[0].outputs[0], want), 2e-5);
}

}  // namespace

// Atomic updates on the pallas backend. A TPU has no atomics across cores: the grid steps that
// update one block run one after another ("arbitrary" grid dims) and read-modify-write it in
// VMEM; an update at indices computed from data keeps the whole tensor in VMEM. Each case runs
// in JAX's TPU interpret mode (uninitialized memory poisoned with NaN, race detection on) against
// a plain C++ reference and the reference interpreter, and is lowered for a TPU with jax.export;
// all cases run in one Python process. Then the refusals, with the user's line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/pallas/interpret.h"
#include "kernels/references.h"
#include "parhelion/parhelion.h"
#include "parhelion/tpu.h"

#include "tests/user_error.h"

namespace ph = parhelion;
namespace pallas = ph::backend::pallas;

namespace {

// --- kernels ------------------------------------------------------------------------------------

// a [M, K] . b [K, N], the reduction split over the grid (ts): each step adds its partial
// product into the output block, which the steps of one (tm, tn) share.
constexpr int kLineSplitK = __LINE__ + 8;
ph::Tensor split_k(ph::Tensor a, ph::Tensor b) {
  auto [m, k] = a.sizes<2>();
  auto n = b.sizes<2>()[1];
  auto out = ph::zeros({m, n});
  for (auto [tm, tn, ts] : ph::tile(m, n, k)) {
    ph::Var acc = ph::zeros({tm, tn});
    for (auto tk : ph::tile(ts)) acc = acc + ph::dot(a[tm, tk], b[tk, tn]);
    ph::atomic_add(out, {tm, tn}, acc);
  }
  return out;
}

// The maximum over s of x [S, M, N] into a bf16 tensor that starts at 0.25: the row blocks of
// x along s meet on each output block.
ph::Tensor block_max(ph::Tensor x) {
  auto [s, m, n] = x.sizes<3>();
  auto out = ph::full({m, n}, 0.25, ph::DType::bf16);
  for (auto [tm, tn, ts] : ph::tile(m, n, s)) ph::atomic_max(out, {tm, tn}, ph::amax(x[ts, tm, tn], 0));
  return out;
}

// The same written with the meeting dim first: its own loop order (ts, tm, tn) cannot run on a
// TPU, so the default config reorders it.
constexpr int kLineSFirst = __LINE__ + 4;
ph::Tensor block_max_s_first(ph::Tensor x) {
  auto [s, m, n] = x.sizes<3>();
  auto out = ph::full({m, n}, 0.25, ph::DType::bf16);
  for (auto [ts, tm, tn] : ph::tile(s, m, n)) ph::atomic_max(out, {tm, tn}, ph::amax(x[ts, tm, tn], 0));
  return out;
}

// min(0.5, the positive elements over s of x): a masked atomic at grid level, one grid step
// per s (a tile of block 1).
ph::Tensor positive_min(ph::Tensor x) {
  auto [s, m, n] = x.sizes<3>();
  auto out = ph::full({m, n}, 0.5);
  for (auto [tm, tn, ts] : ph::tile(m, n, ph::Extent(s).block(1))) {
    auto v = ph::amin(x[ts, tm, tn], 0);  // (the one element along s)
    ph::atomic_min(out, {tm, tn}, v, v > 0.0f);
  }
  return out;
}

// counts[ids[i]] += 1 for every i: repeated indices inside one index block count each time.
ph::Tensor histogram(ph::Tensor ids) {
  auto n = ids.sizes<1>()[0];
  auto counts = ph::zeros({64}, ph::DType::i32);
  for (auto t : ph::tile(n)) ph::atomic_add(counts, {ids[t]}, 1);
  return counts;
}

// The positive w[i] summed into bin ids[i] (rank 1, masked).
ph::Tensor positive_weights(ph::Tensor ids, ph::Tensor w) {
  auto n = ids.sizes<1>()[0];
  auto out = ph::zeros({64});
  for (auto t : ph::tile(n)) {
    auto v = w[t];
    ph::atomic_add(out, {ids[t]}, v, v > 0.0f);
  }
  return out;
}

// Rows of w [N, 128] added into rows ids[i] of a table [64, 128] that starts at 0.5 (a scatter-
// add of rank 2; ids is [N, 1] so that its blocks are legal TPU blocks of any row count).
ph::Tensor scatter_rows(ph::Tensor ids, ph::Tensor w) {
  auto n = w.size(0);
  auto out = ph::full({64, w.size(1)}, 0.5);
  for (auto t : ph::tile(n)) ph::atomic_add(out, {ids[t, 0], ph::all}, w[t, ph::all]);
  return out;
}

// x [N, 8, 128] added into out [4, 8, 128] at out[ids[g]]: a scalar index loaded per grid step.
ph::Tensor scatter_slabs(ph::Tensor ids, ph::Tensor x) {
  auto n = x.size(0);
  auto out = ph::full({4, x.size(1), x.size(2)}, 1.0);
  for (auto g : ph::grid(n)) ph::atomic_add(out, {ids[g], ph::all, ph::all}, x[g, ph::all, ph::all]);
  return out;
}

// Column sums of x into out [1, N] through the inner loop's own tile: a loop slot (resident).
constexpr int kLineColSums = __LINE__ + 5;
ph::Tensor col_sums(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::zeros({1, n});
  for (auto tm : ph::tile(m)) {
    for (auto tn : ph::tile(n)) ph::atomic_add(out, {0, tn}, ph::sum(x[tm, tn], 0));
  }
  return out;
}

// Row sums of x into out [M, 1] from inside the inner loop over columns: the grid's block,
// read-modify-written at every trip (the loop may stay pipelined).
ph::Tensor row_sums(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::full({m, 1}, 2.0);
  for (auto tm : ph::tile(m)) {
    for (auto tn : ph::tile(n)) ph::atomic_add(out, {tm, 0}, ph::sum(x[tm, tn], 1));
  }
  return out;
}

// Rows [starts[g], ends[g]) of x added into out, for every window g: windows overlap, so a row
// takes the sum of x over the windows that hold it (a jagged loop's rows, updated atomically).
ph::Tensor window_sums(ph::Tensor starts, ph::Tensor ends, ph::Tensor x) {
  auto out = ph::full({x.size(0), x.size(1)}, 1.0);
  for (auto g : ph::grid(starts.size(0)))
    for (auto r : ph::tile(ph::range(starts[g], ends[g]))) ph::atomic_add(out, {r, ph::all}, x[r, ph::all]);
  return out;
}

// --- references -----------------------------------------------------------------------------

// Over s of x [S, M, N]: max (or min) with `start`, counting only values that pass `keep`.
ph::Array reduce_s(const ph::Array& x, bool max, double start, const std::function<bool(double)>& keep,
                   ph::DType dtype) {
  const int64_t s = x.shape()[0], mn = x.shape()[1] * x.shape()[2];
  ph::Array want = ph::Array::zeros({x.shape()[1], x.shape()[2]}, dtype);
  for (int64_t j = 0; j < mn; ++j) {
    double e = start;
    for (int64_t i = 0; i < s; ++i) {
      const double v = x.get(i * mn + j);
      if (keep(v)) e = max ? std::max(e, v) : std::min(e, v);
    }
    want.set(j, e);
  }
  return want;
}

// (i * i * 7 + 3) % 61 for i < n: uneven counts, repeats inside every block, some bins empty.
ph::Array bins_of(int64_t n, ph::Shape shape = {}) {
  ph::Array ids = ph::Array::zeros(shape.empty() ? ph::Shape{n} : shape, ph::DType::i64);
  for (int64_t i = 0; i < n; ++i) ids.set(i, static_cast<double>((i * i * 7 + 3) % 61));
  return ids;
}

// --- the interpret-mode batch -------------------------------------------------------------------

struct Case {
  std::string name;
  ph::Array want;    // the C++ reference
  ph::Array interp;  // the reference interpreter
  double tol;
};

class Batch {
 public:
  template <class K>
  std::string add(K& k, const std::string& name, const std::vector<ph::Array>& inputs, const std::string& cfg,
                  const ph::Array& want, double tol) {
    std::vector<ph::Arg> args(inputs.begin(), inputs.end());
    std::unique_ptr<ph::Config> config;
    if (!cfg.empty()) config = std::make_unique<ph::Config>(ph::Config::from_json(cfg));
    ph::PallasModule m = k.emit_pallas(args, "v7x", config.get());
    const std::string full = name + " " + (cfg.empty() ? "default" : cfg);
    runs_.push_back({full, m.source, k.name(), inputs, {}, true});
    cases_.push_back({full, want, k.interpret(args).at(0), tol});
    return m.source;
  }

  void check() {
    ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
    auto results = pallas::run_in_interpret_mode(runs_);
    ASSERT_EQ(results.size(), runs_.size());
    for (size_t i = 0; i < results.size(); ++i) {
      SCOPED_TRACE(runs_[i].name);
      ASSERT_TRUE(results[i].ok) << results[i].error << "\n" << runs_[i].source;
      EXPECT_FALSE(results[i].races);
      EXPECT_EQ(results[i].export_status, "ok") << runs_[i].source;
      const ph::Array& got = results[i].outputs.at(0);
      ASSERT_EQ(got.shape(), cases_[i].want.shape());
      EXPECT_LE(ph::max_abs_diff(got, cases_[i].want), cases_[i].tol) << runs_[i].source;
      EXPECT_LE(ph::max_abs_diff(cases_[i].interp, cases_[i].want), cases_[i].tol) << "interpreter";
    }
  }

 private:
  std::vector<pallas::InterpretCase> runs_;
  std::vector<Case> cases_;
};

TEST(PallasAtomics, RunInInterpretModeAndLowerForATpu) {
  Batch batch;
  // Split-K: k = 300 is ragged in every split block (128, 256); m = 37 and n = 45 are whole
  // blocks (an output updated in place takes no ragged block); 48 x 256 takes several blocks.
  {
    ph::Kernel k("split_k", split_k);
    ph::Array a = ph::Array::random({37, 300}, ph::DType::f32, 1), b = ph::Array::random({300, 45}, ph::DType::f32, 2);
    batch.add(k, "split_k 37x300x45", {a, b}, "", ph::ref::matmul(a, b), 1e-3);
    ph::Array a2 = ph::Array::random({48, 300}, ph::DType::f32, 3),
              b2 = ph::Array::random({300, 256}, ph::DType::f32, 4);
    const ph::Array want = ph::ref::matmul(a2, b2);
    batch.add(k, "split_k 48x300x256", {a2, b2}, "", want, 1e-3);
    // 520 rows updated in place: the default takes a block that divides them (8), not 512.
    ph::Array a3 = ph::Array::random({520, 300}, ph::DType::f32, 10),
              b3 = ph::Array::random({300, 200}, ph::DType::f32, 11);
    EXPECT_HAS(batch.add(k, "split_k 520x300x200", {a3, b3}, "", ph::ref::matmul(a3, b3), 1e-3),
               "\"block_sizes\":[8,256,");
    // (block_sizes: tm, tn, ts, tk) three splits of 128 (the last 44), each one trip of its 128
    for (const char* cfg :
         {R"({"block_sizes":[16,128,128,128],"loop_orders":[[0,1,2]],"micro_kernels":[0],"num_threads":1})",
          R"({"block_sizes":[8,256,256,128],"loop_orders":[[1,0,2]],"micro_kernels":[0],"num_threads":1})",
          R"({"block_sizes":[64,256,256,128],"loop_orders":[[0,1,2]],"micro_kernels":[0],"num_threads":1})"})
      batch.add(k, "split_k 48x300x256", {a2, b2}, cfg, want, 1e-3);
  }
  // atomic_max into bf16: 20 rows of s in blocks of 8 (ragged) meet on each output block.
  {
    ph::Array x = ph::Array::random({20, 32, 256}, ph::DType::f32, 5);
    const ph::Array want = reduce_s(
        x, true, 0.25, [](double) { return true; }, ph::DType::bf16);
    ph::Kernel k("block_max", block_max), kf("block_max_s_first", block_max_s_first);
    batch.add(k, "block_max", {x}, "", want, 0.0);  // (max is exact; the bf16 rounding is the reference's)
    batch.add(k, "block_max", {x}, R"({"block_sizes":[16,128,8],"loop_orders":[[1,0,2]],"num_threads":1})", want, 0.0);
    batch.add(kf, "block_max_s_first", {x}, "", want, 0.0);
    const ph::Array wmin = reduce_s(
        x, false, 0.5, [](double v) { return v > 0; }, ph::DType::f32);
    ph::Kernel km("positive_min", positive_min);
    batch.add(km, "positive_min", {x}, "", wmin, 0.0);
    batch.add(km, "positive_min", {x}, R"({"block_sizes":[8,128],"loop_orders":[[1,0,2]],"num_threads":1})", wmin, 0.0);
  }
  // Histograms: 3000 ids in blocks of 1024 (ragged), 2048 and whole; every block repeats bins.
  {
    ph::Kernel k("histogram", histogram);
    const ph::Array ids = bins_of(3000);
    ph::Array want = ph::Array::zeros({64}, ph::DType::i32);
    for (int64_t i = 0; i < 3000; ++i) {
      const auto bin = static_cast<int64_t>(ids.get(i));
      want.set(bin, want.get(bin) + 1);
    }
    batch.add(k, "histogram", {ids}, "", want, 0.0);
    for (const char* cfg : {R"({"block_sizes":[2048],"num_threads":1})", R"({"block_sizes":[4096],"num_threads":1})"})
      batch.add(k, "histogram", {ids}, cfg, want, 0.0);
  }
  {
    ph::Kernel k("positive_weights", positive_weights);
    const ph::Array ids = bins_of(777);
    ph::Array w = ph::Array::random({777}, ph::DType::f32, 6);
    ph::Array want = ph::Array::zeros({64}, ph::DType::f32);
    for (int64_t i = 0; i < 777; ++i) {
      const auto bin = static_cast<int64_t>(ids.get(i));
      if (w.get(i) > 0) want.set(bin, want.get(bin) + w.get(i));
    }
    batch.add(k, "positive_weights", {ids, w}, "", want, 1e-4);
  }
  {
    ph::Kernel k("scatter_rows", scatter_rows);
    const ph::Array ids = bins_of(300, {300, 1});
    ph::Array w = ph::Array::random({300, 128}, ph::DType::f32, 7);
    ph::Array want = ph::Array::zeros({64, 128}, ph::DType::f32);
    for (int64_t i = 0; i < want.numel(); ++i) want.set(i, 0.5);
    for (int64_t i = 0; i < 300; ++i)
      for (int64_t j = 0; j < 128; ++j) {
        const int64_t at = static_cast<int64_t>(ids.get(i)) * 128 + j;
        want.set(at, want.get(at) + w.get(i * 128 + j));
      }
    batch.add(k, "scatter_rows", {ids, w}, "", want, 1e-4);
    for (const char* cfg : {R"({"block_sizes":[8],"num_threads":1})", R"({"block_sizes":[64],"num_threads":1})"})
      batch.add(k, "scatter_rows", {ids, w}, cfg, want, 1e-4);
  }
  {
    ph::Kernel k("scatter_slabs", scatter_slabs);
    ph::Array ids = ph::Array::zeros({6}, ph::DType::i64);
    for (int64_t i = 0; i < 6; ++i) ids.set(i, static_cast<double>((i * 3) % 4));  // 0 3 2 1 0 3
    ph::Array x = ph::Array::random({6, 8, 128}, ph::DType::f32, 8);
    ph::Array want = ph::Array::zeros({4, 8, 128}, ph::DType::f32);
    for (int64_t i = 0; i < want.numel(); ++i) want.set(i, 1.0);
    for (int64_t g = 0; g < 6; ++g)
      for (int64_t e = 0; e < 8 * 128; ++e) {
        const int64_t at = static_cast<int64_t>(ids.get(g)) * 1024 + e;
        want.set(at, want.get(at) + x.get(g * 1024 + e));
      }
    batch.add(k, "scatter_slabs", {ids, x}, "", want, 1e-5);
  }
  {
    ph::Kernel k("window_sums", window_sums);
    const std::vector<int64_t> lo = {0, 10, 5, 30}, hi = {40, 64, 30, 30};  // (the last one empty)
    ph::Array starts = ph::Array::zeros({4}, ph::DType::i64), ends = ph::Array::zeros({4}, ph::DType::i64);
    for (int64_t g = 0; g < 4; ++g) {
      starts.set(g, static_cast<double>(lo[g]));
      ends.set(g, static_cast<double>(hi[g]));
    }
    ph::Array x = ph::Array::random({64, 128}, ph::DType::f32, 12);
    ph::Array want = ph::Array::zeros({64, 128}, ph::DType::f32);
    for (int64_t i = 0; i < 64; ++i)
      for (int64_t j = 0; j < 128; ++j) {
        double v = 1.0;
        for (int64_t g = 0; g < 4; ++g)
          if (lo[g] <= i && i < hi[g]) v += x.get(i * 128 + j);
        want.set(i * 128 + j, v);
      }
    batch.add(k, "window_sums", {starts, ends, x}, "", want, 1e-5);
    batch.add(k, "window_sums", {starts, ends, x}, R"({"block_sizes":[16],"num_threads":1})", want, 1e-5);
  }
  // Inner loops: through the loop's own tile (resident: the default falls back from pipeline)
  // and at grid level from inside a pipelined loop.
  {
    ph::Array x = ph::Array::random({64, 384}, ph::DType::f32, 9);
    ph::Array cs = ph::Array::zeros({1, 384}, ph::DType::f32), rs = ph::Array::zeros({64, 1}, ph::DType::f32);
    for (int64_t i = 0; i < 64; ++i)
      for (int64_t j = 0; j < 384; ++j) {
        cs.set(j, cs.get(j) + x.get(i * 384 + j));
        rs.set(i, rs.get(i) + x.get(i * 384 + j));
      }
    for (int64_t i = 0; i < 64; ++i) rs.set(i, rs.get(i) + 2.0);
    ph::Kernel kc("col_sums", col_sums), kr("row_sums", row_sums);
    batch.add(kc, "col_sums", {x}, "", cs, 1e-4);
    batch.add(kc, "col_sums", {x},
              R"({"block_sizes":[16,128],"inner_loops":[{"strategy":"resident","buffers":2}],"num_threads":1})", cs,
              1e-4);
    batch.add(kr, "row_sums", {x}, "", rs, 1e-4);
    batch.add(kr, "row_sums", {x},
              R"({"block_sizes":[16,128],"inner_loops":[{"strategy":"pipeline","buffers":3}],"num_threads":1})", rs,
              1e-4);
  }
  batch.check();
}

// --- the generated code states it -------------------------------------------------------------

TEST(PallasAtomics, TheGeneratedCodeSaysWhichDimsRunInOrder) {
  ph::Kernel k("split_k", split_k);
  ph::Array a = ph::Array::random({48, 300}, ph::DType::f32, 1), b = ph::Array::random({300, 256}, ph::DType::f32, 2);
  const std::string src = k.emit_pallas({a, b}, "v7x").source;
  EXPECT_HAS(src, "# atomic_add to t2 (buf0) at ");
  EXPECT_HAS(src, "test_pallas_atomics.cpp:" + std::to_string(kLineSplitK) + ": grid dims (t2) run in order");
  EXPECT_HAS(src, "grid dims (t2) run in order (\"arbitrary\"); each block is read-modify-written in VMEM");
  EXPECT_HAS(src, "dimension_semantics=(\"parallel\", \"parallel\", \"arbitrary\")");
  EXPECT_HAS(src, "@pl.when((g_t2 == 0))");
  EXPECT_HAS(src, "(o2_ref[...] + jnp.broadcast_to(");
  // The default config of a kernel written with the meeting dim first puts it last.
  ph::Kernel kf("block_max_s_first", block_max_s_first);
  ph::Array x = ph::Array::random({20, 32, 256}, ph::DType::f32, 5);
  const ph::PallasModule m = kf.emit_pallas({x}, "v7x");
  EXPECT_HAS(m.source, "\"loop_orders\":[[1,2,0]]");
  EXPECT_HAS(m.source, "dimension_semantics=(\"parallel\", \"parallel\", \"arbitrary\")");
  // Indices from data: the whole tensor, every dim in order.
  ph::Kernel h("histogram", histogram);
  const std::string hs = h.emit_pallas({bins_of(3000)}, "v7x").source;
  EXPECT_HAS(hs, "indices computed from data, so the whole tensor stays in VMEM across the launch");
  EXPECT_HAS(hs, "dimension_semantics=(\"arbitrary\",)");
  EXPECT_HAS(hs, "_atomic_rows(");
}

// The TPU model replays the plan of atomic kernels: the updated block moves in (its prior
// contents) and out once per run of the steps that meet on it.
TEST(PallasAtomics, TheTpuModelPredictsAtomicKernels) {
  ph::Kernel k("split_k", split_k);
  ph::Kernel h("histogram", histogram);
  ph::Array a = ph::Array::random({48, 300}, ph::DType::f32, 1), b = ph::Array::random({300, 256}, ph::DType::f32, 2);
  ph::Config c = ph::Config::from_json(
      R"({"block_sizes":[16,128,128,128],"loop_orders":[[0,1,2]],"micro_kernels":[0],"num_threads":1})");
  for (const ph::TpuPrediction& p :
       {ph::predict_tpu(k, {a, b}, "v7x", &c), ph::predict_tpu(h, {bins_of(3000)}, "v7x")}) {
    EXPECT_TRUE(p.fits) << p.to_json();
    EXPECT_GT(p.seconds, 0) << p.to_json();
    EXPECT_GT(p.dma_s, 0) << p.to_json();
  }
}

// --- refusals -------------------------------------------------------------------------------------

TEST(PallasAtomics, AnIllegalLoopOrderOrAPipelinedUpdateIsRefusedAtTheUsersLine) {
  ph::Array x = ph::Array::random({20, 32, 256}, ph::DType::f32, 5);
  ph::Kernel kf("block_max_s_first", block_max_s_first);
  ph::Config c = ph::Config::from_json(R"({"block_sizes":[8,16,128],"loop_orders":[[0,1,2]],"num_threads":1})");
  std::string m = user_error_of([&] { kf.emit_pallas({x}, "v7x", &c); });
  EXPECT_HAS(m, "test_pallas_atomics.cpp:" + std::to_string(kLineSFirst));
  EXPECT_HAS(m, "cannot run atomic_max to t1 (buf0) in this loop order");
  EXPECT_HAS(m, "depends on grid dims (t1, t2), which must come before (t0)");
  EXPECT_HAS(m,
             "the launch's loop order is (t0, t1, t2) (config loop_orders[0] = [0, 1, 2]): use loop_orders[0] = "
             "[1, 2, 0]");
  // The same order on the cpu is fine: its atomics need no order.
  EXPECT_LE(ph::max_abs_diff(kf.compile({x}, &c).run({x}).at(0),
                             reduce_s(
                                 x, true, 0.25, [](double) { return true; }, ph::DType::bf16)),
            0.0);

  ph::Kernel kc("col_sums", col_sums);
  ph::Array y = ph::Array::random({64, 384}, ph::DType::f32, 9);
  ph::Config p = ph::Config::from_json(
      R"({"block_sizes":[16,128],"inner_loops":[{"strategy":"pipeline","buffers":2}],"num_threads":1})");
  m = user_error_of([&] { kc.emit_pallas({y}, "v7x", &p); });
  EXPECT_HAS(m, "test_pallas_atomics.cpp:" + std::to_string(kLineColSums));
  EXPECT_HAS(m, "cannot pipeline atomic_add into buf0 through the loop over t1 (config inner_loops[0] = pipeline)");
  EXPECT_HAS(m, "give that loop the strategy \"resident\"");
  // The default takes the resident strategy.
  EXPECT_HAS(kc.emit_pallas({y}, "v7x").source, "\"inner_loops\":[{\"strategy\":\"resident\"}]");
}

// counts [R, 8, 128] updated at a computed row: the whole tensor must fit in VMEM.
ph::Tensor big_slabs(ph::Tensor ids, ph::Tensor x) {
  auto out = ph::zeros({32768, 8, 128});
  for (auto g : ph::grid(x.size(0))) ph::atomic_add(out, {ids[g], ph::all, ph::all}, x[g, ph::all, ph::all]);
  return out;
}

TEST(PallasAtomics, AWholeTensorThatDoesNotFitVmemIsRefusedWithTheNumbers) {
  ph::Kernel k("big_slabs", big_slabs);
  ph::Array ids = ph::Array::zeros({4}, ph::DType::i64);
  ph::Array x = ph::Array::random({4, 8, 128}, ph::DType::f32, 1);
  const std::string m = user_error_of([&] { k.emit_pallas({ids, x}, "v7x"); });
  EXPECT_HAS(m, "test_pallas_atomics.cpp:");
  EXPECT_HAS(m, "keeps buf0 whole in VMEM for atomic_add at indices computed from data");
  EXPECT_HAS(m, "4 x 128.0 MiB = 512.0 MiB");
}

}  // namespace

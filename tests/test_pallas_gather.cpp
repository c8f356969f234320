// The pallas backend's gather strategies (config knob gathers[i]: "onehot" or "dma"; see
// src/backend/pallas/gather.h): the knob in the config space and the Config JSON, where dma is
// offered and where it is not, the TPU model's choice, and both strategies run in TPU interpret
// mode (and lowered with jax.export for a TPU) against references written here, out-of-range
// indices included (a TPU kernel cannot raise: NaN rows for floats, 0 for integer tables).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "backend/pallas/interpret.h"
#include "backend/pallas/plan.h"
#include "driver/compiled_kernel_impl.h"
#include "kernels/kernels.h"
#include "kernels/references.h"
#include "kernels/registry.h"
#include "lower/lower.h"
#include "parhelion/parhelion.h"
#include "parhelion/tpu.h"
#include "tests/interpret_check.h"
#include "tests/user_error.h"
#include "tpu_model/hardware.h"
#include "tune/search.h"

namespace ph = parhelion;
namespace pallas = ph::backend::pallas;

namespace {

std::string here(int line) { return std::string("test_pallas_gather.cpp:") + std::to_string(line) + ": "; }

ph::Array ids_array(const std::vector<int64_t>& v, ph::DType dt) {
  ph::Array a = ph::Array::zeros({static_cast<int64_t>(v.size())}, dt);
  for (size_t i = 0; i < v.size(); ++i) a.set(static_cast<int64_t>(i), static_cast<double>(v[i]));
  return a;
}

// Rows of `w` through ids, as written: an index block loaded directly from a tensor (dma legal).
ph::Tensor rows_of(ph::Tensor ids, ph::Tensor w) {
  auto out = ph::empty({ids.size(0), w.size(1)}, w.dtype());
  for (auto [tt, te] : ph::tile(ids.size(0), w.size(1))) out[tt, te] = w[ids[tt], te];
  return out;
}

// The same through a computed index block: its row numbers are not a tensor's block, so a TPU
// kernel cannot read them as scalars (dma is not offered).
constexpr int kLineShifted = __LINE__ + 4;
ph::Tensor shifted_rows(ph::Tensor ids, ph::Tensor w) {
  auto out = ph::empty({ids.size(0), w.size(1)}, w.dtype());
  for (auto [tt, te] : ph::tile(ids.size(0), w.size(1))) {
    out[tt, te] = w[ids[tt] + 1, te];
  }
  return out;
}

const ph::ConfigSpec& pallas_spec(ph::KernelBase& k, const std::vector<ph::Arg>& args,
                                  std::shared_ptr<ph::CompiledKernel::Impl>& keep) {
  keep = k.trace(args, "pallas:v7x");
  return keep->spec;
}

// --- the knob ------------------------------------------------------------------------------------

TEST(PallasGatherKnob, OnePerGatherSiteOnPallasNoneOnCpu) {
  ph::Kernel k("rows_of", rows_of);
  ph::Array ids = ids_array({3, 0, 5, 1}, ph::DType::i64), w = ph::Array::random({8, 128}, ph::DType::f32, 1);
  // The cpu backend reads gathered elements in place: no strategy, no knob, none in its JSON.
  ph::CompiledKernel c = k.compile({ids, w});
  EXPECT_TRUE(c.config_spec().gathers.empty());
  EXPECT_EQ(c.config().to_json().find("gathers"), std::string::npos) << c.config().to_json();
  std::shared_ptr<ph::CompiledKernel::Impl> keep;
  const ph::ConfigSpec& spec = pallas_spec(k, {ids, w}, keep);
  ASSERT_EQ(spec.gathers.size(), 1u);
  EXPECT_EQ(spec.gathers[0].tensor, "arg1");
  EXPECT_HAS(spec.gathers[0].defined_at, "test_pallas_gather.cpp:");
  // A table of 8 rows: one-hot first (the default), dma offered.
  EXPECT_EQ(spec.gathers[0].choices, (std::vector<std::string>{"onehot", "dma"}));
  EXPECT_HAS(spec.describe(), "gathers[0]: onehot, dma  (gather from arg1 at ");
  EXPECT_EQ(keep->config.gathers, (std::vector<std::string>{"onehot"}));
  // A large vocabulary defaults to dma (the size rule: more than 1024 rows).
  ph::Array big = ph::Array::random({5000, 128}, ph::DType::f32, 2);
  std::shared_ptr<ph::CompiledKernel::Impl> keep2;
  EXPECT_EQ(pallas_spec(k, {ids, big}, keep2).gathers[0].choices, (std::vector<std::string>{"dma", "onehot"}));
  EXPECT_EQ(keep2->config.gathers, (std::vector<std::string>{"dma"}));
}

TEST(PallasGatherKnob, ConfigJsonRoundTripAndOldConfigs) {
  ph::Config c =
      ph::Config::from_json(R"({"block_sizes":[4,128],"loop_orders":[[0,1]],"num_threads":1,"gathers":["dma"]})");
  EXPECT_EQ(c.gathers, (std::vector<std::string>{"dma"}));
  EXPECT_EQ(ph::Config::from_json(c.to_json()), c);
  EXPECT_HAS(c.to_json(), R"("gathers":["dma"])");
  EXPECT_HAS(user_error_of([] { ph::Config::from_json(R"({"gathers":[1]})"); }), "'gathers' has the wrong type");
  // A config written before the knob existed: the default for this shape fills it in.
  ph::Kernel k("rows_of", rows_of);
  ph::Array ids = ids_array({3, 0, 5, 1}, ph::DType::i64), w = ph::Array::random({8, 128}, ph::DType::f32, 1);
  ph::Config old = ph::Config::from_json(R"({"block_sizes":[4,128],"loop_orders":[[0,1]],"num_threads":1})");
  EXPECT_EQ(k.emit_pallas({ids, w}, "v7x", &old).config.gathers, (std::vector<std::string>{"onehot"}));
  // A value outside the site's domain names it and the line.
  ph::Config bad = old;
  bad.gathers = {"rows"};
  std::string m = user_error_of([&] { k.emit_pallas({ids, w}, "v7x", &bad); });
  EXPECT_HAS(m, "gathers[0] = \"rows\" is not one of onehot, dma (the gather from arg1 at ");
}

TEST(PallasGatherKnob, DmaIsNotOfferedForAComputedIndexBlockAndRefusedAtItsLine) {
  ph::Kernel k("shifted_rows", shifted_rows);
  ph::Array ids = ids_array({3, 0, 5, 1}, ph::DType::i64), w = ph::Array::random({2000, 128}, ph::DType::f32, 1);
  std::shared_ptr<ph::CompiledKernel::Impl> keep;
  const ph::ConfigSpec& spec = pallas_spec(k, {ids, w}, keep);
  ASSERT_EQ(spec.gathers.size(), 1u);
  EXPECT_EQ(spec.gathers[0].choices, (std::vector<std::string>{"onehot"}));  // even for 2000 rows
  // The tuner's codec has one value there: no search can reach dma.
  ph::tune::ConfigCodec codec(spec);
  std::mt19937_64 gen(1);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(codec.decode(codec.random(gen)).gathers, std::vector<std::string>{"onehot"});
  // Forced, the config is out of the space; past the space (the plan alone, as a hand-written
  // Block IR would reach it), the pallas plan refuses it naming the line, the construct and why.
  ph::Config c = keep->config;
  c.gathers = {"dma"};
  EXPECT_HAS(user_error_of([&] {
               ph::predict_tpu(k, {ids, w}, "v7x", &c);
             }),
             "gathers[0] = \"dma\" is not one of onehot (the gather from arg1 at ");
  std::string m = user_error_of([&] { pallas::plan_pallas(ph::lower::plan(keep->fn, c, *keep->backend)); });
  EXPECT_HAS(m, here(kLineShifted));
  EXPECT_HAS(m,
             "the pallas backend cannot gather from arg1 by DMA (config gathers[0] = \"dma\"): its index block is a "
             "computed value");
}

// An integer table: one-hot is not exact for integers, so its only strategy is dma; where dma
// cannot be used either, the refusal names both.
constexpr int kLineIntShifted = __LINE__ + 4;
ph::Tensor int_shifted(ph::Tensor ids, ph::Tensor w) {
  auto out = ph::empty({ids.size(0), w.size(1)}, w.dtype());
  for (auto [tt, te] : ph::tile(ids.size(0), w.size(1))) {
    out[tt, te] = w[ids[tt] + 1, te];
  }
  return out;
}

TEST(PallasGatherKnob, IntegerTablesTakeDmaAndOneHotNamesTheKnob) {
  ph::Kernel k("rows_of", rows_of);
  ph::Array ids = ids_array({3, 0, 5, 1}, ph::DType::i64), w = ph::Array::random({8, 128}, ph::DType::i32, 1, 0, 50);
  std::shared_ptr<ph::CompiledKernel::Impl> keep;
  EXPECT_EQ(pallas_spec(k, {ids, w}, keep).gathers[0].choices, std::vector<std::string>{"dma"});
  EXPECT_NE(k.emit_pallas({ids, w}, "v7x").source.find("_dma_rows("), std::string::npos);
  ph::Kernel s("int_shifted", int_shifted);
  std::string m = user_error_of([&] { s.emit_pallas({ids, w}, "v7x"); });
  EXPECT_HAS(m, here(kLineIntShifted));
  EXPECT_HAS(m, "a one-hot gather from an integer or boolean tensor");
  EXPECT_HAS(m,
             "give this gather the strategy \"dma\" (config gathers[0]), which cannot take it either: its index "
             "block is a computed value");
}

// --- the TPU model's choice ----------------------------------------------------------------------

TEST(PallasGatherModel, DmaForALargeVocabularyOneHotForATinyOne) {
  const auto& e = ph::kernels::find_kernel("embedding");
  {
    auto in = e.make_specs({4096, 50000, 1024}, ph::DType::f32);
    ph::TpuTuneReport r = ph::tune_tpu(*e.kernel, in.args(), "v7x", 64);
    EXPECT_EQ(r.best_config.gathers, std::vector<std::string>{"dma"}) << r.why;
    EXPECT_HAS(r.why, "chose gathers:dma");
    EXPECT_HAS(r.why, "gathers:onehot does not fit");  // the 50000-row table in VMEM
    EXPECT_EQ(r.best.strategy, "gathers:dma");
    EXPECT_LT(r.best.vmem_bytes, int64_t{50000} * 1024 * 4 / 8);  // the table is not in VMEM
  }
  {
    auto in = e.make_specs({4096, 64, 128}, ph::DType::f32);
    ph::TpuTuneReport r = ph::tune_tpu(*e.kernel, in.args(), "v7x", 64);
    EXPECT_EQ(r.best_config.gathers, std::vector<std::string>{"onehot"}) << r.why;
    EXPECT_HAS(r.why, "chose gathers:onehot");
    EXPECT_HAS(r.why, "best gathers:dma");
    // dma pays a DMA per row: slower here, by the model's per-DMA cost.
    ph::Config dma = r.best_config;
    dma.gathers = {"dma"};
    ph::TpuPrediction p = ph::predict_tpu(*e.kernel, in.args(), "v7x", &dma);
    EXPECT_GT(p.seconds, r.best.seconds);
  }
}

// --- interpret mode ------------------------------------------------------------------------------

// The reference with the TPU's out-of-range rule: NaN rows for floating tables, 0 for integers.
ph::Array tpu_rows(const ph::Array& ids, const ph::Array& w) {
  const int64_t n = ids.shape()[0], v = w.shape()[0], e = w.shape()[1];
  ph::Array out = ph::Array::zeros({n, e}, ph::DType::f32);
  for (int64_t i = 0; i < n; ++i) {
    const auto r = static_cast<int64_t>(ids.get(i));
    for (int64_t j = 0; j < e; ++j)
      out.set(i * e + j, r >= 0 && r < v ? w.get(r * e + j) : ph::is_floating(w.dtype()) ? NAN : 0.0);
  }
  return out;
}

// MoE-style row scatters: rows of v to the rows idx names, into zeros (unindexed rows stay 0)
// and in place into an argument (unindexed rows keep its values).
ph::Tensor scatter_to_zeros(ph::Tensor idx, ph::Tensor v, ph::Tensor like) {
  auto out = ph::zeros({like.size(0), v.size(1)}, v.dtype());
  for (auto [tt, te] : ph::tile(idx.size(0), v.size(1))) out[idx[tt], te] = v[tt, te] * 2.0f;
  return out;
}
ph::Tensor scatter_in_place(ph::Tensor dst, ph::Tensor idx, ph::Tensor v) {
  for (auto [tt, te] : ph::tile(idx.size(0), v.size(1))) dst[idx[tt], te] = v[tt, te] + 1.0f;
  return dst;
}

// The scatter's meaning on a TPU: each row i of `v` (times `scale`, plus `add`) to row idx[i]
// of `base`; an out-of-range index writes nothing.
ph::Array tpu_scatter(const ph::Array& base, const ph::Array& idx, const ph::Array& v, double scale, double add) {
  ph::Array out = ph::Array::zeros(base.shape(), ph::DType::f32);
  for (int64_t i = 0; i < base.numel(); ++i) out.set(i, base.get(i));
  const int64_t m = base.shape()[0], e = base.shape()[1];
  for (int64_t i = 0; i < idx.numel(); ++i) {
    const auto r = static_cast<int64_t>(idx.get(i));
    if (r < 0 || r >= m) continue;
    for (int64_t j = 0; j < e; ++j) out.set(r * e + j, v.get(i * e + j) * scale + add);
  }
  return out;
}

// A gather and a scatter in an inner loop over the columns: dma only (a one-hot gather would
// hold the table in VMEM for every trip); each trip moves its columns of the rows.
std::tuple<ph::Tensor, ph::Tensor> rows_in_loop(ph::Tensor ids, ph::Tensor w, ph::Tensor to) {
  // (out is empty: a filled output is updated in place, and check_ragged_blocks does not yet
  // refuse its ragged blocks, which interpret mode finds out of bounds)
  auto out = ph::empty({ids.size(0), w.size(1)}, w.dtype());
  auto moved = ph::zeros({w.size(0), w.size(1)}, w.dtype());
  for (auto tt : ph::tile(ids.size(0))) {
    for (auto te : ph::tile(w.size(1))) {
      auto r = w[ids[tt], te];
      out[tt, te] = r;
      moved[to[tt], te] = r * 3.0f;
    }
  }
  return {out, moved};
}

TEST(PallasGather, GathersAndScattersInInterpretModeWithExport) {
  ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
  ph::Kernel k("rows_of", rows_of);
  struct Run {
    std::string name;
    ph::Array ids, w;
    std::string config;  // "" = the default
    std::string strategy;
  };
  // Indices 37 i + 11 mod v (distinct when v does not divide 37 and n <= v), some out of range.
  auto ragged_ids = [](int64_t n, int64_t v, bool out_of_range) {
    std::vector<int64_t> x;
    for (int64_t i = 0; i < n; ++i) x.push_back((i * 37 + 11) % v);
    if (out_of_range) {
      x[1] = -1;
      x[n - 1] = v;  // the last, ragged block's last row
      x[n / 2] = v + 1000;
    }
    return ids_array(x, ph::DType::i64);
  };
  auto cfg = [](int64_t bt, int64_t be, const std::string& g) {
    return R"({"block_sizes":[)" + std::to_string(bt) + "," + std::to_string(be) +
           R"(],"loop_orders":[[0,1]],"num_threads":1)" + (g.empty() ? "" : R"(,"gathers":[")" + g + R"("])") + "}";
  };
  std::vector<Run> cases;
  // 200 rows in blocks of 128 (a ragged last block), 384 columns in blocks of 256 (a ragged
  // tail copy), out-of-range indices, both strategies.
  for (const char* g : {"dma", "onehot"})
    cases.push_back({std::string("f32 ragged ") + g, ragged_ids(200, 300, true),
                     ph::Array::random({300, 384}, ph::DType::f32, 3), cfg(128, 256, g), g});
  cases.push_back({"bf16 dma", ragged_ids(40, 77, true), ph::Array::random({77, 128}, ph::DType::bf16, 4),
                   cfg(64, 128, "dma"), "dma"});
  cases.push_back({"i32 dma", ragged_ids(200, 50, true), ph::Array::random({50, 256}, ph::DType::i32, 5, -100, 100),
                   cfg(128, 128, "dma"), "dma"});
  // The default for a vocabulary above the size rule's 1024 rows: dma.
  cases.push_back(
      {"f32 default (dma)", ragged_ids(64, 2000, false), ph::Array::random({2000, 128}, ph::DType::f32, 6), "", "dma"});
  std::vector<pallas::InterpretCase> runs;
  std::vector<ph::Array> want;
  std::vector<int> nan_rows;
  for (const Run& r : cases) {
    std::unique_ptr<ph::Config> c;
    if (!r.config.empty()) c = std::make_unique<ph::Config>(ph::Config::from_json(r.config));
    ph::PallasModule m = k.emit_pallas({r.ids, r.w}, "v7x", c.get());
    EXPECT_EQ(m.config.gathers, std::vector<std::string>{r.strategy}) << r.name;
    EXPECT_EQ(m.source.find("_dma_rows(s") != std::string::npos, r.strategy == "dma") << r.name << m.source;
    EXPECT_EQ(m.source.find("_gather(v") != std::string::npos, r.strategy == "onehot") << r.name;
    if (r.strategy == "dma") {
      EXPECT_HAS(m.source, "memory_space=pltpu.SMEM)");
    }
    runs.push_back({r.name, m.source, "rows_of", {r.ids, r.w}, {}, true});
    want.push_back(tpu_rows(r.ids, r.w));
    nan_rows.push_back(r.w.dtype() == ph::DType::i32 || r.config.empty() ? 0 : 3);
  }
  // Scatters: 200 of 300 rows (a ragged row block, a ragged column tail), three out of range.
  {
    ph::Kernel z("scatter_to_zeros", scatter_to_zeros);
    ph::Array idx = ragged_ids(200, 300, true), v = ph::Array::random({200, 384}, ph::DType::f32, 7),
              like = ph::Array::zeros({300, 1}, ph::DType::f32);
    ph::Config c = ph::Config::from_json(cfg(128, 256, ""));
    ph::PallasModule m = z.emit_pallas({idx, v, like}, "v7x", &c);
    EXPECT_HAS(m.source, "input_output_aliases=");
    EXPECT_HAS(m.source, "_dma_rows(o");
    runs.push_back({"scatter into zeros", m.source, "scatter_to_zeros", {idx, v, like}, {}, true});
    want.push_back(tpu_scatter(ph::Array::zeros({300, 384}, ph::DType::f32), idx, v, 2.0, 0.0));
    nan_rows.push_back(0);
    ph::Kernel p("scatter_in_place", scatter_in_place);
    ph::Array dst = ph::Array::random({300, 256}, ph::DType::bf16, 8), idx2 = ragged_ids(120, 300, true),
              v2 = ph::Array::random({120, 256}, ph::DType::bf16, 9);
    ph::PallasModule m2 = p.emit_pallas({dst, idx2, v2}, "v7x");
    runs.push_back({"scatter in place bf16", m2.source, "scatter_in_place", {dst, idx2, v2}, {}, true});
    // (v + 1 rounds to bf16 when stored)
    ph::Array v2p = ph::Array::zeros({120, 256}, ph::DType::bf16);
    for (int64_t i = 0; i < v2.numel(); ++i) v2p.set(i, v2.get(i) + 1.0);
    want.push_back(tpu_scatter(dst, idx2, v2p, 1.0, 0.0));
    nan_rows.push_back(0);
  }
  // In an inner loop, pipelined and resident: 200 rows in blocks of 128, 384 columns in trips
  // of 256 (a ragged last trip), out-of-range gather and scatter indices.
  std::vector<size_t> two_outputs;
  {
    ph::Kernel l("rows_in_loop", rows_in_loop);
    ph::Array ids = ragged_ids(200, 300, true), w = ph::Array::random({300, 384}, ph::DType::f32, 10),
              to = ragged_ids(200, 300, true);
    std::shared_ptr<ph::CompiledKernel::Impl> keep;
    const ph::ConfigSpec& spec = pallas_spec(l, {ids, w, to}, keep);
    ASSERT_EQ(spec.gathers.size(), 1u);
    EXPECT_EQ(spec.gathers[0].choices, std::vector<std::string>{"dma"});
    for (const char* st : {"pipeline", "resident"}) {
      ph::Config c =
          ph::Config::from_json(std::string(R"({"block_sizes":[128,256],"inner_loops":[{"strategy":")") + st +
                                R"(","buffers":2}],"loop_orders":[],"num_threads":1,"gathers":["dma"]})");
      ph::PallasModule m = l.emit_pallas({ids, w, to}, "v7x", &c);
      two_outputs.push_back(runs.size());
      runs.push_back({std::string("in a loop, ") + st, m.source, "rows_in_loop", {ids, w, to}, {}, true});
      want.push_back(tpu_rows(ids, w));
      nan_rows.push_back(3);
    }
  }
  auto results = pallas::run_in_interpret_mode(runs);
  ASSERT_EQ(results.size(), runs.size());
  for (size_t i = 0; i < results.size(); ++i) {
    SCOPED_TRACE(runs[i].name);
    ASSERT_TRUE(results[i].ok) << results[i].error << "\n" << runs[i].source;
    EXPECT_FALSE(results[i].races);
    EXPECT_EQ(results[i].export_status, "ok");
    const bool looped = std::find(two_outputs.begin(), two_outputs.end(), i) != two_outputs.end();
    ASSERT_EQ(results[i].outputs.size(), looped ? 2u : 1u);
    if (looped) {  // the scatter of the gathered rows (NaN rows included) times 3, into zeros
      const ph::Array ids = runs[i].inputs[0], to = runs[i].inputs[2];
      const ph::Array moved = tpu_scatter(ph::Array::zeros({300, 384}, ph::DType::f32), to, want[i], 3.0, 0.0);
      const ph::Array& got = results[i].outputs[1];
      for (int64_t j = 0; j < got.numel(); ++j) {
        if (std::isnan(moved.get(j)))
          EXPECT_TRUE(std::isnan(got.get(j))) << "moved element " << j;
        else
          ASSERT_EQ(got.get(j), moved.get(j)) << "moved element " << j;
      }
    }
    const ph::Array& got = results[i].outputs[0];
    ASSERT_EQ(got.numel(), want[i].numel());
    int nans = 0;
    for (int64_t j = 0; j < got.numel(); ++j) {
      const double a = got.get(j), b = want[i].get(j);
      if (std::isnan(b)) {
        EXPECT_TRUE(std::isnan(a)) << "element " << j;
        nans += j % want[i].shape()[1] == 0;
      } else {
        // Rows are copied (dma) or gathered at precision HIGHEST (one-hot): exact.
        ASSERT_EQ(a, b) << "element " << j;
      }
    }
    EXPECT_EQ(nans, nan_rows[i]);
  }
}

// Whole gathered rows times another tensor's column block, in an inner loop over those columns:
// no index of the table is the loop's tile, so its block is the grid step's and one-hot is
// offered there (the table in VMEM once for all the trips), dma too.
ph::Tensor rows_beside_loop(ph::Tensor ids, ph::Tensor w, ph::Tensor y) {
  auto out = ph::empty({ids.size(0), y.size(1)}, ph::DType::f32);
  for (auto tt : ph::tile(ids.size(0))) {
    for (auto tc : ph::tile(y.size(1))) out[tt, tc] = ph::dot(w[ids[tt], ph::all], y[ph::all, tc]);
  }
  return out;
}

TEST(PallasGather, OneHotInAnInnerLoopFromAGridLevelTable) {
  ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
  ph::Kernel k("rows_beside_loop", rows_beside_loop);
  std::vector<int64_t> v;
  for (int64_t i = 0; i < 40; ++i) v.push_back((i * 37 + 11) % 77);
  ph::Array ids = ids_array(v, ph::DType::i64), w = ph::Array::random({77, 128}, ph::DType::f32, 11),
            y = ph::Array::random({128, 384}, ph::DType::f32, 12);
  std::shared_ptr<ph::CompiledKernel::Impl> keep;
  const ph::ConfigSpec& spec = pallas_spec(k, {ids, w, y}, keep);
  ASSERT_EQ(spec.gathers.size(), 1u);
  EXPECT_EQ(spec.gathers[0].choices, (std::vector<std::string>{"onehot", "dma"}));
  ph::Array want = ph::Array::zeros({40, 384}, ph::DType::f32);
  for (int64_t i = 0; i < 40; ++i)
    for (int64_t c = 0; c < 384; ++c) {
      double acc = 0;
      for (int64_t e = 0; e < 128; ++e) acc += w.get(v[i] * 128 + e) * y.get(e * 384 + c);
      want.set(i * 384 + c, acc);
    }
  std::vector<pallas::InterpretCase> runs;
  for (const char* st : {"pipeline", "resident"}) {
    // (trips of 256 over 384 columns: the last one ragged)
    ph::Config c = ph::Config::from_json(std::string(R"({"block_sizes":[64,256],"inner_loops":[{"strategy":")") + st +
                                         R"(","buffers":2}],"loop_orders":[],"micro_kernels":[0],"num_threads":1,)" +
                                         R"("gathers":["onehot"]})");
    ph::PallasModule m = k.emit_pallas({ids, w, y}, "v7x", &c);
    EXPECT_HAS(m.source, "_gather(v");
    runs.push_back({std::string("one-hot in a loop, ") + st, m.source, "rows_beside_loop", {ids, w, y}, {}, true});
  }
  check_interpreted(runs, 1, [&](size_t, const pallas::InterpretResult& r) {
    auto cmp = ph::kernels::compare(r.outputs[0], want, ph::DType::f32);
    EXPECT_TRUE(cmp.ok) << "max abs error " << cmp.max_abs_err;
  });
}

// The library's embedding with ids of rank 2 and 3: flattened on the host (a view, which the
// module's wrapper reshapes), then the rank-1 gather, by both strategies; a ragged token block.
TEST(PallasGather, LibraryEmbeddingOfRank2And3Ids) {
  ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
  const ph::Array w = ph::Array::random({50, 256}, ph::DType::f32, 13);
  std::vector<pallas::InterpretCase> runs;
  std::vector<ph::Array> want;
  for (const ph::Shape& s : {ph::Shape{3, 50}, ph::Shape{2, 5, 13}}) {  // (150, 130 tokens)
    const ph::Array ids = ph::Array::random(s, ph::DType::i32, 14, 0, 50);
    for (const char* g : {"onehot", "dma"}) {
      ph::Config c = ph::Config::from_json(std::string(R"({"block_sizes":[128,128],"loop_orders":[[0,1]],)") +
                                           R"("num_threads":1,"gathers":[")" + g + R"("]})");
      ph::PallasModule m = ph::kernels::embedding.emit_pallas({ids, w}, "v7x", &c);
      runs.push_back({"embedding " + ph::shape_to_string(s) + " " + g, m.source, "embedding", {ids, w}, {}, true});
      want.push_back(ph::ref::embedding(ids, w));
    }
  }
  check_interpreted(runs, 1, [&](size_t i, const pallas::InterpretResult& r) {
    auto cmp = ph::kernels::compare(r.outputs[0], want[i], ph::DType::f32);
    EXPECT_TRUE(cmp.ok) << "max abs error " << cmp.max_abs_err;
  });
}

// The model's cost of moved rows: one DMA per index row, each at the DMA size curve's rate for
// one row (its fixed cost plus the bytes), for scatters as for gathers, and every trip of an
// inner loop for a gather in one.
TEST(PallasGatherModel, ScattersAndLoopGathersPayADmaPerRow) {
  const auto& hw = ph::tpu_model::tpu_hardware("v7x");
  const double row = 1024 * 4, per_row = (row + hw.dma_half_bytes) / (hw.hbm_bytes_per_s * hw.dma_peak_fraction);
  ph::Kernel z("scatter_to_zeros", scatter_to_zeros);
  auto scatter = [&](int64_t n) {
    ph::Array idx = ph::Array::placeholder({n}, ph::DType::i64), v = ph::Array::placeholder({n, 1024}, ph::DType::f32),
              like = ph::Array::placeholder({8192, 1}, ph::DType::f32);
    return ph::predict_tpu(z, {idx, v, like}, "v7x");
  };
  const ph::TpuPrediction a = scatter(1024), b = scatter(4096);
  EXPECT_GE(a.dma_s, 1024 * per_row);
  EXPECT_GE(b.dma_s, 4096 * per_row);
  EXPECT_GT(b.seconds, 3.5 * a.seconds);
  ph::Kernel l("rows_in_loop", rows_in_loop);
  ph::Array ids = ph::Array::placeholder({1024}, ph::DType::i64),
            w = ph::Array::placeholder({50000, 1024}, ph::DType::f32),
            to = ph::Array::placeholder({1024}, ph::DType::i64);
  // Two row DMAs per index row (the gather's and the scatter's), whatever the loop's trips.
  EXPECT_GE(ph::predict_tpu(l, {ids, w, to}, "v7x").dma_s, 2 * 1024 * per_row);
}

}  // namespace

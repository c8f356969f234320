// Slices, sub-range and nested tiles, block numbers (t.id()), blocks sized by a registered block
// size and per-block partials sized by ph::num_blocks: each kernel runs on the cpu backend at
// several configs (ragged blocks, blocks of 1, one block) against a plain reference and the
// interpreter.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "backend/pallas/interpret.h"
#include "driver/compiled_kernel_impl.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "parhelion/parhelion.h"

#include "tests/config_sweep.h"
#include "tests/user_error.h"

namespace ph = parhelion;
namespace pallas = ph::backend::pallas;

namespace {

using Ref = std::function<double(int64_t)>;  // element i of the flat expected output

ph::Array expected(const ph::Shape& shape, const Ref& f) {
  ph::Array a = ph::Array::zeros(shape, ph::DType::f32);
  for (int64_t i = 0; i < a.numel(); ++i) a.set(i, f(i));
  return a;
}

// --- static slices ------------------------------------------------------------------------------

ph::Tensor slice_columns(ph::Tensor x) {
  auto m = x.size(0);
  auto out = ph::empty({m, 3});
  for (auto t : ph::tile(m)) out[t, ph::all] = x[t, ph::slice(2, 5)] * 2.0f;
  return out;
}

TEST(Slices, StaticSliceLoad) {
  ph::Kernel k("slice_columns", slice_columns);
  ph::Array x = ph::Array::random({37, 7}, ph::DType::f32, 1);
  ph::Array want = expected({37, 3}, [&](int64_t i) { return 2 * x.get((i / 3) * 7 + 2 + i % 3); });
  check_configs(k, {x}, want);
}

ph::Tensor slice_store(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::zeros({m, n + 4});
  for (auto t : ph::tile(m)) out[t, ph::slice(1, n + 1)] = x[t, ph::all] + 1.0f;
  return out;
}

TEST(Slices, StaticSliceStore) {
  ph::Kernel k("slice_store", slice_store);
  ph::Array x = ph::Array::random({19, 5}, ph::DType::f32, 2);
  ph::Array want = expected({19, 9}, [&](int64_t i) {
    int64_t r = i / 9, c = i % 9;
    return c >= 1 && c < 6 ? x.get(r * 5 + c - 1) + 1 : 0.0;
  });
  check_configs(k, {x}, want);
}

TEST(Slices, StaticSliceOutOfRangeIsAUserErrorAtTheLine) {
  ph::Kernel k(
      "bad_slice", +[](ph::Tensor x) {
        auto out = ph::empty({x.size(0), 3});
        for (auto t : ph::tile(x.size(0))) out[t, ph::all] = x[t, ph::slice(5, 8)];  // the line
        return out;
      });
  ph::Array x = ph::Array::random({4, 7}, ph::DType::f32, 1);
  std::string msg = user_error_of([&] { k.compile({x}); });
  EXPECT_NE(msg.find("test_slices.cpp:" + std::to_string(__LINE__ - 5)), std::string::npos) << msg;
  EXPECT_NE(msg.find("ph::slice(5, 8)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("size 7"), std::string::npos) << msg;
}

// --- dynamic slices -----------------------------------------------------------------------------

// A window of 4 columns per row, starting where `start` says.
constexpr int kWindowLine = __LINE__ + 4;
ph::Tensor window(ph::Tensor x, ph::Tensor start) {
  auto m = x.size(0);
  auto out = ph::empty({m, 4});
  for (auto g : ph::grid(m)) out[g, ph::all] = x[g, ph::slice(start[g], ph::length(4))];  // kWindowLine
  return out;
}

TEST(Slices, DynamicSliceLoad) {
  ph::Kernel k("window", window);
  ph::Array x = ph::Array::random({13, 9}, ph::DType::f32, 3);
  ph::Array s = ph::Array::zeros({13}, ph::DType::i64);
  for (int64_t i = 0; i < 13; ++i) s.set(i, static_cast<double>((i * 5) % 6));  // 0..5: in range
  ph::Array want = expected({13, 4}, [&](int64_t i) {
    int64_t r = i / 4;
    return x.get(r * 9 + static_cast<int64_t>(s.get(r)) + i % 4);
  });
  check_configs(k, {x, s}, want);
}

TEST(Slices, DynamicSliceOutOfRangeNamesTensorDimensionValueAndLine) {
  ph::Kernel k("window", window);
  ph::Array x = ph::Array::random({13, 9}, ph::DType::f32, 3);
  ph::Array s = ph::Array::zeros({13}, ph::DType::i64);
  s.set(7, 6);  // 6 + 4 > 9
  const std::string line = "test_slices.cpp:" + std::to_string(kWindowLine);
  std::string msg = user_error_of([&] { k.run({x, s}); });
  EXPECT_NE(msg.find(line), std::string::npos) << msg;
  EXPECT_NE(msg.find("6"), std::string::npos) << msg;
  EXPECT_NE(msg.find("dimension 1 of arg0"), std::string::npos) << msg;
  std::string imsg = user_error_of([&] { k.interpret({x, s}); });
  EXPECT_NE(imsg.find(line), std::string::npos) << imsg;
  EXPECT_NE(imsg.find("starting at 6"), std::string::npos) << imsg;
}

// --- sub-range tiles ------------------------------------------------------------------------------

ph::Tensor middle(ph::Tensor x) {
  auto n = x.size(0);
  auto out = ph::zeros({n});
  for (auto t : ph::tile(ph::range(3, n - 2))) out[t] = x[t] * 3.0f + t.index().to(ph::DType::f32);
  return out;
}

TEST(Slices, SubRangeTile) {
  ph::Kernel k("middle", middle);
  ph::Array x = ph::Array::random({41}, ph::DType::f32, 4);
  ph::Array want = expected({41}, [&](int64_t i) { return i >= 3 && i < 39 ? 3 * x.get(i) + i : 0.0; });
  check_configs(k, {x}, want);
}

// --- tiles over an enclosing tile's block -----------------------------------------------------------

// Row sums, the rows of each outer block cut again by the inner tile; and the outer block's
// column sums accumulated over the inner blocks.
ph::Tensor nested_rows(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m});
  for (auto to : ph::tile(m)) {
    for (auto ti : ph::tile(to)) out[ti] = ph::sum(x[ti, ph::all], 1) + ti.id().to(ph::DType::f32) * 0.0f;
  }
  return out;
}

TEST(Slices, NestedTileOverOuterBlock) {
  ph::Kernel k("nested_rows", nested_rows);
  ph::Array x = ph::Array::random({53, 6}, ph::DType::f32, 5);
  ph::Array want = expected({53}, [&](int64_t r) {
    double s = 0;
    for (int64_t c = 0; c < 6; ++c) s += x.get(r * 6 + c);
    return s;
  });
  check_configs(k, {x}, want);
}

// The number of each inner block within its outer block, stored per row: checks t.id() of a
// nested tile counts from the outer block's start, under ragged outer and inner blocks.
ph::Tensor nested_ids(ph::Tensor x) {
  auto m = x.size(0);
  auto out = ph::empty({m});
  for (auto to : ph::tile(m)) {
    ph::Var acc = ph::zeros({});
    for (auto ti : ph::tile(to)) {
      acc = acc + ph::sum(x[ti], 0);
      out[ti] = ph::zeros({ti}) + acc;  // the running sum of the outer block so far
    }
  }
  return out;
}

TEST(Slices, NestedTileVarCarriesAcrossInnerBlocksOfOneOuterBlock) {
  ph::Kernel k("nested_ids", nested_ids);
  ph::Array x = ph::Array::random({29}, ph::DType::f32, 6);
  ph::CompiledKernel def = k.compile({x});
  // Outer 8, inner 2: the running sum over whole inner blocks of each outer block.
  ph::Config c = def.config();
  c.block_sizes = {8, 2};
  ph::Array got = k.compile({x}, &c).run({x}).at(0);
  for (int64_t r = 0; r < 29; ++r) {
    int64_t ob = r / 8 * 8, ie = std::min<int64_t>(std::min<int64_t>(r / 2 * 2 + 2, ob + 8), 29);
    double s = 0;
    for (int64_t i = ob; i < ie; ++i) s += x.get(i);
    EXPECT_NEAR(got.get(r), s, 1e-4) << r;
  }
}

// --- per-block partials: t.id() and ph::num_blocks -------------------------------------------------

std::tuple<ph::Tensor, ph::Tensor> column_sums(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto bm = ph::register_block_size(m);
  auto part = ph::empty({ph::num_blocks(bm), n});
  auto counts = ph::empty({ph::num_blocks(bm)});
  for (auto [tm, tn] : ph::tile(ph::Extent(m).block(bm), n)) part[tm.id(), tn] = ph::sum(x[tm, tn], 0);
  // Rows in each block (the ragged last one too), through a block dim of the symbol bm.
  for (auto tm : ph::tile(ph::Extent(m).block(bm))) counts[tm.id()] = ph::sum(ph::full({bm}, 1.0f), 0);
  auto out = ph::empty({n});
  for (auto tn : ph::tile(n)) {
    ph::Var acc = ph::zeros({tn});
    for (auto tb : ph::tile(ph::num_blocks(bm))) acc = acc + ph::sum(part[tb, tn], 0);
    out[tn] = acc;
  }
  auto rows = ph::empty({1});
  for (auto g : ph::grid(1)) {
    ph::Var acc = ph::zeros({});
    for (auto tb : ph::tile(ph::num_blocks(bm))) acc = acc + ph::sum(counts[tb], 0);
    rows[g] = acc;
  }
  return {out, rows};
}

TEST(Slices, PerBlockPartialsSizedByNumBlocks) {
  ph::Kernel k("column_sums", column_sums);
  ph::Array x = ph::Array::random({45, 11}, ph::DType::f32, 7);
  ph::Array want = expected({11}, [&](int64_t c) {
    double s = 0;
    for (int64_t r = 0; r < 45; ++r) s += x.get(r * 11 + c);
    return s;
  });
  check_configs(k, {x}, want);
  // The rows counted over all blocks are m whatever the block: the blocks cover m exactly once.
  ph::CompiledKernel def = k.compile({x});
  for (int64_t b : {1, 4, 8, 64}) {
    ph::Config c = def.config();
    c.block_sizes[0] = b;
    EXPECT_EQ(k.compile({x}, &c).run({x}).at(1).get(0), 45) << b;
  }
}

TEST(Slices, NumBlocksDimRefusesAll) {
  ph::Kernel k(
      "nb_all", +[](ph::Tensor x) {
        auto bm = ph::register_block_size(x.size(0));
        auto part = ph::empty({ph::num_blocks(bm), x.size(1)});
        for (auto tm : ph::tile(ph::Extent(x.size(0)).block(bm))) part[tm.id(), ph::all] = ph::sum(x[tm, ph::all], 0);
        auto out = ph::empty({x.size(1)});
        for (auto g : ph::grid(1)) out[ph::all] = ph::sum(part[ph::all, ph::all], 0) + g.begin().to(ph::DType::f32);
        return out;
      });
  ph::Array x = ph::Array::random({9, 3}, ph::DType::f32, 1);
  std::string msg = user_error_of([&] { k.compile({x}); });
  EXPECT_NE(msg.find("ph::num_blocks"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test_slices.cpp:" + std::to_string(__LINE__ - 6)), std::string::npos) << msg;
}

// --- blocks sized by a registered block size ------------------------------------------------------

ph::Tensor block_dim(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto bm = ph::register_block_size(m);
  auto out = ph::empty({m, n});
  for (auto [tm, tn] : ph::tile(ph::Extent(m).block(bm), n)) {
    auto z = ph::zeros({bm, tn});  // the dim of tm: its ragged last block too
    out[tm, tn] = z + x[tm, tn] + 1.0f;
  }
  return out;
}

TEST(Slices, ZerosSizedByARegisteredBlockSize) {
  ph::Kernel k("block_dim", block_dim);
  ph::Array x = ph::Array::random({23, 10}, ph::DType::f32, 8);
  ph::Array want = expected({23, 10}, [&](int64_t i) { return x.get(i) + 1; });
  check_configs(k, {x}, want);
}

TEST(Slices, RegisteredBlockSizeDimNeedsAnOpenTileOfIt) {
  ph::Kernel k(
      "bad_block_dim", +[](ph::Tensor x) {
        auto bm = ph::register_block_size(x.size(0));
        auto out = ph::empty_like(x);
        for (auto t : ph::tile(x.size(0))) out[t] = x[t] + ph::sum(ph::zeros({bm}), 0);
        return out;
      });
  ph::Array x = ph::Array::random({9}, ph::DType::f32, 1);
  std::string msg = user_error_of([&] { k.compile({x}); });
  EXPECT_NE(msg.find("open tile loop of that block size"), std::string::npos) << msg;
}

}  // namespace

// --- the Tile IR text form ------------------------------------------------------------------------

namespace {

template <class K>
void round_trips(K& k, const std::vector<ph::Arg>& args) {
  const ph::ir::Function& fn = k.compile(args).impl().fn;
  const std::string text = ph::ir::print(fn);
  EXPECT_EQ(ph::ir::print(ph::ir::parse(text, "k.tir")), text);
}

TEST(Slices, TileIrRoundTrips) {
  ph::Array x = ph::Array::random({45, 11}, ph::DType::f32, 7), s = ph::Array::zeros({45}, ph::DType::i64);
  ph::Kernel a("slice_columns", slice_columns);
  ph::Kernel b("slice_store", slice_store);
  ph::Kernel c("window", window);
  ph::Kernel d("middle", middle);
  ph::Kernel e("nested_rows", nested_rows);
  ph::Kernel f("column_sums", column_sums);
  ph::Kernel g("block_dim", block_dim);
  round_trips(a, {x});
  round_trips(b, {x});
  round_trips(c, {x, s});
  round_trips(d, {s});
  round_trips(e, {x});
  round_trips(f, {x});
  round_trips(g, {x});
  const std::string text = ph::ir::print(f.compile({x}).impl().fn);
  EXPECT_NE(text.find("num_blocks(0, $b0, 45)"), std::string::npos) << text;
  EXPECT_NE(text.find("tile_id t"), std::string::npos) << text;
  EXPECT_NE(ph::ir::print(e.compile({x}).impl().fn).find(" within t0"), std::string::npos);
  EXPECT_NE(ph::ir::print(c.compile({x, s}).impl().fn).find("slice(%"), std::string::npos);
}

}  // namespace

// --- the pallas backend, in TPU interpret mode --------------------------------------------------

namespace {

struct PallasRun {
  std::string name;
  std::vector<ph::Array> inputs;
  std::vector<ph::Array> want;  // the cpu backend's outputs at the same config
};

template <class K>
void add_pallas_case(K& k, const std::string& name, const std::vector<ph::Array>& inputs, const std::string& cfg,
                     std::vector<pallas::InterpretCase>& runs, std::vector<PallasRun>& expect) {
  std::vector<ph::Arg> args(inputs.begin(), inputs.end());
  std::unique_ptr<ph::Config> config;
  if (!cfg.empty()) config = std::make_unique<ph::Config>(ph::Config::from_json(cfg));
  ph::PallasModule m = k.emit_pallas(args, "v7x", config.get());
  // The interpreter's outputs: independent of the config (the partials are bound per config).
  runs.push_back({name + " " + (cfg.empty() ? "default" : cfg), m.source, k.name(), inputs, {}, true});
  expect.push_back({runs.back().name, inputs, k.interpret(args)});
}

// Rows centred on their mean, the rows of each outer block cut again by the inner tile, and
// the outer block's column sums accumulated over its inner blocks (a Var across the trips).
std::tuple<ph::Tensor, ph::Tensor> nested_center(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto bm = ph::register_block_size(m);
  auto out = ph::empty({m, n});
  auto part = ph::empty({ph::num_blocks(bm), 1, n});  // (the block number leads: TPU layouts)
  for (auto to : ph::tile(ph::Extent(m).block(bm))) {
    ph::Var acc = ph::zeros({n});
    for (auto ti : ph::tile(to)) {
      auto rows = x[ti, ph::all];
      out[ti, ph::all] = rows - ph::mean(rows, 1, true);
      acc = acc + ph::sum(rows, 0);
    }
    part[to.id(), 0, ph::all] = acc;
  }
  return {out, part};
}

TEST(Slices, NestedTileWithPartials) {
  ph::Kernel k("nested_center", nested_center);
  ph::Array x = ph::Array::random({45, 256}, ph::DType::f32, 1);
  std::vector<ph::Array> want = k.interpret({x});
  ph::CompiledKernel def = k.compile({x});
  for (auto [bo, bi] : {std::pair<int64_t, int64_t>{16, 8}, {8, 8}, {32, 4}, {64, 64}, {1, 1}}) {
    ph::Config c = def.config();
    c.block_sizes = {bo, bi};
    std::vector<ph::Array> got = k.compile({x}, &c).run({x});
    EXPECT_LT(ph::max_abs_diff(got[0], want[0]), 1e-4) << bo << " " << bi;
    // The partials: one row per outer block; their sum is the column sums (the interpreter's one row).
    ASSERT_EQ(got[1].shape()[0], (45 + bo - 1) / bo);
    for (int64_t col = 0; col < 256; col += 37) {
      double s = 0;
      for (int64_t b = 0; b < got[1].shape()[0]; ++b) s += got[1].get(b * 256 + col);
      EXPECT_NEAR(s, want[1].get(col), 1e-3);
    }
  }
}

// Column sums through per-block partials laid out for a TPU (the block number leads).
ph::Tensor column_sums3(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto bm = ph::register_block_size(m);
  auto part = ph::empty({ph::num_blocks(bm), 1, n});
  for (auto [tm, tn] : ph::tile(ph::Extent(m).block(bm), n)) part[tm.id(), 0, tn] = ph::sum(x[tm, tn], 0);
  auto out = ph::empty({1, n});
  for (auto tn : ph::tile(n)) {
    ph::Var acc = ph::zeros({1, tn});
    for (auto tb : ph::tile(ph::num_blocks(bm))) acc = acc + ph::sum(part[tb, ph::all, tn], 0);
    out[ph::all, tn] = acc;
  }
  return out;
}

// Sums over dim 0: partials have one row per block, a number the config decides.
ph::Array sum_rows(const ph::Array& a) {
  const int64_t rows = a.shape()[0], cols = a.numel() / std::max<int64_t>(1, rows);
  ph::Array r = ph::Array::zeros({cols}, ph::DType::f32);
  for (int64_t c = 0; c < cols; ++c) {
    double s = 0;
    for (int64_t b = 0; b < rows; ++b) s += a.get(b * cols + c);
    r.set(c, s);
  }
  return r;
}

TEST(SlicesPallas, InterpretModeMatchesTheInterpreter) {
  ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
  std::vector<pallas::InterpretCase> runs;
  std::vector<PallasRun> expect;
  ph::Kernel sums("column_sums3", column_sums3);
  ph::Kernel nested("nested_center", nested_center);
  ph::Kernel cols("slice_columns", slice_columns);
  ph::Kernel bdim("block_dim", block_dim);
  ph::Array x = ph::Array::random({45, 256}, ph::DType::f32, 1);  // 45 rows: ragged blocks
  add_pallas_case(sums, "column_sums3", {x}, "", runs, expect);
  add_pallas_case(sums, "column_sums3", {x}, R"({"block_sizes":[8,128,128,8],"loop_orders":[[0,1]],"num_threads":1})",
                  runs, expect);
  // (The partials of nested_center have one row per outer block: compared at one block below.)
  ph::Array x64 = ph::Array::random({64, 256}, ph::DType::f32, 3);
  add_pallas_case(nested, "nested_center", {x64}, R"({"block_sizes":[64,16],"loop_orders":[],"num_threads":1})", runs,
                  expect);
  add_pallas_case(nested, "nested_center", {x}, R"({"block_sizes":[16,8],"loop_orders":[],"num_threads":1})", runs,
                  expect);
  add_pallas_case(nested, "nested_center", {x}, "", runs, expect);
  ph::Array y = ph::Array::random({45, 7}, ph::DType::f32, 2);
  add_pallas_case(cols, "slice_columns", {y}, "", runs, expect);
  add_pallas_case(bdim, "block_dim", {x}, R"({"block_sizes":[16,128],"loop_orders":[[0,1]],"num_threads":1})", runs,
                  expect);
  auto results = pallas::run_in_interpret_mode(runs);
  for (size_t i = 0; i < results.size(); ++i) {
    SCOPED_TRACE(runs[i].name);
    ASSERT_TRUE(results[i].ok) << results[i].error << "\n" << runs[i].source;
    EXPECT_FALSE(results[i].races);
    EXPECT_EQ(results[i].export_status, "ok");
    ASSERT_EQ(results[i].outputs.size(), expect[i].want.size());
    for (size_t o = 0; o < results[i].outputs.size(); ++o) {
      const ph::Array &got = results[i].outputs[o], &want = expect[i].want[o];
      if (got.shape() == want.shape())
        EXPECT_LT(ph::max_abs_diff(got, want), 1e-3) << "output " << o;
      else  // per-block partials: as many rows as blocks; their sum is the interpreter's one row
        EXPECT_LT(ph::max_abs_diff(sum_rows(got), sum_rows(want)), 1e-3) << "output " << o;
    }
  }
}

TEST(SlicesPallas, WhatTheTpuCannotTakeIsRefusedAtTheUsersLine) {
  ph::Array x = ph::Array::random({16, 256}, ph::DType::f32, 1), s = ph::Array::zeros({16}, ph::DType::i64);
  ph::Kernel win("window", window);
  std::string msg = user_error_of([&] { win.emit_pallas({x, s}, "v7x"); });
  EXPECT_HAS(msg, "a ph::slice whose start is computed with load");
  EXPECT_HAS(msg, "test_slices.cpp:" + std::to_string(kWindowLine));
  ph::Kernel mid("middle", middle);
  EXPECT_HAS(user_error_of([&] { mid.emit_pallas({s}, "v7x"); }),
             "a tile over ph::range(3, 14) whose start is not a multiple of its block (16) at grid level");
}

}  // namespace

namespace {

// Found by the fuzzer: slices of a 1-D tensor and stores into slices on pallas (refused).
ph::Tensor slices_1d(ph::Tensor x0, ph::Tensor x1) {
  auto out0 = ph::empty({5, 4});
  for (auto t0 : ph::tile(2)) {
    out0[t0, ph::slice(1, 3)] = x0[t0, ph::slice(0, 2)] + x1[ph::slice(0, 2)];
    out0[t0, ph::slice(0, 1)] = 0.5f * x0[t0, ph::slice(0, 1)];
    out0[t0, ph::slice(3, 4)] = x0[t0, ph::slice(2, 3)];
  }
  for (auto t1 : ph::tile(ph::range(2, 5))) out0[t1, ph::slice(0, 1)] = x0[t1, ph::slice(1, 2)];
  return out0;
}

TEST(SlicesPallas, SliceStoresAreRefusedNotCrashed) {
  ph::Kernel k("slices_1d", slices_1d);
  ph::Array x0 = ph::Array::random({5, 3}, ph::DType::f32, 1), x1 = ph::Array::random({3}, ph::DType::f32, 2);
  EXPECT_HAS(user_error_of([&] { k.emit_pallas({x0, x1}, "v7x"); }), "no legal TPU block for this loop");
}

}  // namespace

// Stores that keep part of their block on the pallas backend: masked stores, stores into slices,
// slices with starts computed in the kernel. Each case runs in JAX's TPU interpret mode (outputs
// poisoned with NaN, race detection on) against a plain C++ reference and the cpu backend, and
// is lowered for a TPU with jax.export; all cases run in one Python process.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "backend/pallas/interpret.h"
#include "parhelion/parhelion.h"

#include "tests/user_error.h"

namespace ph = parhelion;
namespace pallas = ph::backend::pallas;

namespace {

std::string here(int line) { return "test_pallas_stores.cpp:" + std::to_string(line); }
std::string dn(ph::DType d) { return " " + std::string(ph::dtype_name(d)); }

// Element i of a flat expected output, in f32.
using Ref = std::function<double(int64_t)>;

// (in `dtype`: a reference for a bf16 output is rounded as the stored values are)
ph::Array expected(const ph::Shape& shape, const Ref& f, ph::DType dtype = ph::DType::f32) {
  ph::Array a = ph::Array::zeros(shape, dtype);
  for (int64_t i = 0; i < a.numel(); ++i) a.set(i, f(i));
  return a;
}

// An array of `shape` whose element i is f(i), in `dtype` (rounded to it).
ph::Array filled(const ph::Shape& shape, ph::DType dtype, const Ref& f) {
  ph::Array a = ph::Array::zeros(shape, dtype);
  for (int64_t i = 0; i < a.numel(); ++i) a.set(i, f(i));
  return a;
}

struct Case {
  std::string name;
  ph::Array want;  // the reference (f32)
  ph::Array cpu;   // the cpu backend at the same config
};

class Batch {
 public:
  template <class K>
  void add(K& k, const std::string& name, const std::vector<ph::Array>& inputs, const std::string& cfg,
           const ph::Array& want) {
    std::vector<ph::Arg> args(inputs.begin(), inputs.end());
    std::unique_ptr<ph::Config> config;
    if (!cfg.empty()) config = std::make_unique<ph::Config>(ph::Config::from_json(cfg));
    ph::PallasModule m = k.emit_pallas(args, "v7x", config.get());
    const std::string full = name + " " + (cfg.empty() ? "default" : cfg);
    runs_.push_back({full, m.source, k.name(), inputs, {}, true});
    // (copies: an argument written in place is updated by the cpu run)
    std::vector<ph::Arg> copies;
    std::vector<ph::Array> keep;
    for (const ph::Array& a : inputs) keep.push_back(a.clone());
    for (const ph::Array& a : keep) copies.push_back(a);
    cases_.push_back({full, want, k.compile(copies, config.get()).run(copies).at(0)});
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
      // Bit-exact copies: stores move values, the only arithmetic is a product by 2 or 3.
      EXPECT_LE(ph::max_abs_diff(got, cases_[i].want), 0.0) << runs_[i].source;
      EXPECT_LE(ph::max_abs_diff(cases_[i].cpu, cases_[i].want), 0.0) << "cpu backend";
    }
  }

 private:
  std::vector<pallas::InterpretCase> runs_;
  std::vector<Case> cases_;
};

// --- masked stores ------------------------------------------------------------------------------

// Into an allocation filled with zeros: its prior contents.
ph::Tensor masked_copy(ph::Tensor x) {
  auto out = ph::zeros_like(x);
  for (auto [tm, tn] : ph::tile(x.size(0), x.size(1))) ph::store(out, {tm, tn}, x[tm, tn] * 2.0f, x[tm, tn] > 0.0f);
  return out;
}

// Into an argument: the caller's contents are the prior contents.
ph::Tensor masked_into(ph::Tensor out, ph::Tensor x) {
  for (auto [tm, tn] : ph::tile(x.size(0), x.size(1))) ph::store(out, {tm, tn}, x[tm, tn] * 2.0f, x[tm, tn] > 0.0f);
  return out;
}

// Only rows < m - 5 and columns < n - 37 are written: the rest keeps the -1 fill.
ph::Tensor ragged_tail(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::full({m, n}, -1.0, x.dtype());
  for (auto [tm, tn] : ph::tile(m, n)) {
    auto keep = (tm.index() < m - 5).unsqueeze(-1) && (tn.index() < n - 37).unsqueeze(0);
    ph::store(out, {tm, tn}, x[tm, tn] * 3.0f, keep);
  }
  return out;
}

// Columns [0, n1) from x, [n1, n1 + n2) from y: two masked stores into one block. Into zeros, the
// second store must see the first one's elements (not the block's prior contents); into an
// empty tensor the first store's masked-off elements are undefined until the second writes them.
template <bool kZeros>
ph::Tensor concat_stores(ph::Tensor x, ph::Tensor y) {
  auto m = x.size(0), n1 = x.size(1), n2 = y.size(1);
  auto out = kZeros ? ph::zeros({m, n1 + n2}, x.dtype()) : ph::empty({m, n1 + n2}, x.dtype());
  for (auto [tm, tn] : ph::tile(m, n1 + n2)) {
    auto j = tn.index();
    auto left = j < n1;
    ph::store(out, {tm, tn}, ph::load(x, {tm, j}, left, 0.0f), left);
    ph::store(out, {tm, tn}, ph::load(y, {tm, j - n1}, !left, 0.0f), !left);
  }
  return out;
}

// Masked stores in an inner loop (pipelined or resident, by the config).
ph::Tensor masked_rows_loop(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::full({m, n}, 5.0, x.dtype());
  for (auto tm : ph::tile(m)) {
    for (auto tn : ph::tile(n)) ph::store(out, {tm, tn}, x[tm, tn] * 3.0f, x[tm, tn] < 0.0f);
  }
  return out;
}

double pos2(double v) { return v > 0 ? 2 * v : 0.0; }

TEST(PallasStores, MaskedStoresKeepThePriorContents) {
  Batch b;
  ph::Kernel copy("masked_copy", masked_copy);
  for (ph::DType dt : {ph::DType::f32, ph::DType::bf16}) {
    // 45 x 200: ragged in both dims at the default blocks.
    ph::Array x = ph::Array::random({45, 200}, dt, 1);
    b.add(copy, "masked_copy" + dn(dt), {x}, "",
          expected(
              {45, 200}, [&](int64_t i) { return pos2(x.get(i)); }, dt));
  }
  ph::Array x = ph::Array::random({48, 256}, ph::DType::f32, 2);
  b.add(copy, "masked_copy blocks", {x}, R"({"block_sizes":[16,128],"loop_orders":[[0,1]],"num_threads":1})",
        expected({48, 256}, [&](int64_t i) { return pos2(x.get(i)); }));
  // Prior contents aliased to the output with a ragged last block of rows (45 in blocks of 16):
  // the block reads and writes the buffer's tile padding (refused while the rule said an
  // aliased tensor is not padded).
  ph::Array rag = ph::Array::random({45, 256}, ph::DType::f32, 3);
  b.add(copy, "masked_copy ragged in place", {rag}, R"({"block_sizes":[16,128],"loop_orders":[[0,1]],"num_threads":1})",
        expected({45, 256}, [&](int64_t i) { return pos2(rag.get(i)); }));

  ph::Kernel into("masked_into", masked_into);
  for (ph::DType dt : {ph::DType::f32, ph::DType::bf16}) {
    ph::Array out = filled({32, 256}, dt, [](int64_t i) { return static_cast<double>(i % 97) - 40; });
    ph::Array y = ph::Array::random({32, 256}, dt, 3);
    b.add(into, "masked_into" + dn(dt), {out, y}, R"({"block_sizes":[16,128],"loop_orders":[[0,1]],"num_threads":1})",
          expected(
              {32, 256}, [&](int64_t i) { return y.get(i) > 0 ? 2 * y.get(i) : out.get(i); }, dt));
  }

  ph::Kernel tail("ragged_tail", ragged_tail);
  for (ph::DType dt : {ph::DType::f32, ph::DType::bf16}) {
    ph::Array r = ph::Array::random({45, 300}, dt, 4);
    b.add(tail, "ragged_tail" + dn(dt), {r}, "",
          expected(
              {45, 300}, [&](int64_t i) { return i / 300 < 40 && i % 300 < 263 ? 3 * r.get(i) : -1.0; }, dt));
  }

  ph::Kernel cz("concat_stores", concat_stores<true>), ce("concat_stores", concat_stores<false>);
  for (ph::DType dt : {ph::DType::f32, ph::DType::bf16}) {
    ph::Array a = ph::Array::random({24, 100}, dt, 5), c = ph::Array::random({24, 90}, dt, 6);
    ph::Array want = expected({24, 190}, [&](int64_t i) {
      int64_t r = i / 190, col = i % 190;
      return col < 100 ? a.get(r * 100 + col) : c.get(r * 90 + col - 100);
    });
    b.add(cz, "concat_stores zeros" + dn(dt), {a, c}, "", want);
    b.add(ce, "concat_stores empty" + dn(dt), {a, c}, "", want);
  }

  ph::Kernel loop("masked_rows_loop", masked_rows_loop);
  ph::Array l = ph::Array::random({32, 512}, ph::DType::f32, 7);
  ph::Array lwant = expected({32, 512}, [&](int64_t i) { return l.get(i) < 0 ? 3 * l.get(i) : 5.0; });
  b.add(
      loop, "masked_rows_loop pipeline", {l},
      R"({"block_sizes":[16,128],"loop_orders":[],"inner_loops":[{"strategy":"pipeline","buffers":2}],"num_threads":1})",
      lwant);
  b.add(loop, "masked_rows_loop resident", {l},
        R"({"block_sizes":[16,128],"loop_orders":[],"inner_loops":[{"strategy":"resident"}],"num_threads":1})", lwant);
  // (300 columns: the resident loop's last trip is ragged; the rows divide, see below)
  ph::Array lr = ph::Array::random({48, 300}, ph::DType::bf16, 8);
  b.add(loop, "masked_rows_loop resident ragged bf16", {lr},
        R"({"block_sizes":[16,128],"loop_orders":[],"inner_loops":[{"strategy":"resident"}],"num_threads":1})",
        expected(
            {48, 300}, [&](int64_t i) { return lr.get(i) < 0 ? 3 * lr.get(i) : 5.0; }, ph::DType::bf16));
  // Ragged grid blocks into an empty tensor (no prior contents to read, none aliased).
  ph::Array a = ph::Array::random({24, 100}, ph::DType::f32, 9), c = ph::Array::random({24, 90}, ph::DType::f32, 10);
  b.add(ce, "concat_stores empty ragged", {a, c}, R"({"block_sizes":[16,128],"loop_orders":[[0,1]],"num_threads":1})",
        expected({24, 190}, [&](int64_t i) {
          int64_t r = i / 190, col = i % 190;
          return col < 100 ? a.get(r * 100 + col) : c.get(r * 90 + col - 100);
        }));
  b.check();
}

// --- stores into slices, slices with computed starts ----------------------------------------------

// Columns [1, n + 1) of a zero tensor of n + 4 columns (the lane dim, a static offset).
ph::Tensor slice_store_cols(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::zeros({m, n + 4}, x.dtype());
  for (auto t : ph::tile(m)) out[t, ph::slice(1, n + 1)] = x[t, ph::all] * 2.0f;
  return out;
}

// Rows concatenated by two slice stores (along the second-to-last dim), into an empty tensor.
ph::Tensor concat_rows(ph::Tensor x, ph::Tensor y) {
  auto m1 = x.size(0), m2 = y.size(0), n = x.size(1);
  auto out = ph::empty({m1 + m2, n}, x.dtype());
  for (auto tn : ph::tile(n)) {
    out[ph::slice(0, m1), tn] = x[ph::all, tn];
    out[ph::slice(m1, m1 + m2), tn] = y[ph::all, tn];
  }
  return out;
}

// Overlapping windows: out[w] = 2 * x[8w + 2 .. 8w + 18), rows at a start computed from the
// window's grid index (the second-to-last dim of x).
ph::Tensor windows(ph::Tensor x) {
  auto n = x.size(1);
  auto w = (x.size(0) - 18) / 8 + 1;
  auto out = ph::empty({w, 16, n}, x.dtype());
  for (auto [g, tn] : ph::tile(ph::Extent(w).block(1), n))
    out[g, ph::all, tn] = x[ph::slice(g.begin() * 8 + 2, ph::length(16)), tn] * 2.0f;
  return out;
}

// Rows moved down by 8 in blocks of 8 (an inner grid loop, slice starts from its trip offset):
// a store at a computed start; rows [0, 8) keep the -1 fill.
ph::Tensor shift_rows(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::full({m + 8, n}, -1.0, x.dtype());
  for (auto tn : ph::tile(n)) {
    for (auto r : ph::grid(m / 8)) {
      out[ph::slice(r.begin() * 8 + 8, ph::length(8)), tn] = x[ph::slice(r.begin() * 8, ph::length(8)), tn];
    }
  }
  return out;
}

// Columns shifted by 128 (the lane dim) at starts computed from t.id(): multiples of 128.
constexpr int kLaneLine = __LINE__ + 7;
template <int64_t kSkew>
ph::Tensor lane_windows(ph::Tensor x) {
  auto m = x.size(0);
  auto out = ph::empty({m, 256}, x.dtype());
  for (auto tm : ph::tile(m)) {
    for (auto j : ph::grid(2)) {
      auto v = x[tm, ph::slice(j.id() * 128 + kSkew, ph::length(128))];
      out[tm, ph::slice(j.id() * 128, ph::length(128))] = v;
    }
  }
  return out;
}

TEST(PallasStores, SliceStoresAndComputedStarts) {
  Batch b;
  ph::Kernel cols("slice_store_cols", slice_store_cols);
  ph::Kernel rows("concat_rows", concat_rows);
  ph::Kernel win("windows", windows);
  ph::Kernel shift("shift_rows", shift_rows);
  ph::Kernel lanes("lane_windows", lane_windows<128>);
  for (ph::DType dt : {ph::DType::f32, ph::DType::bf16}) {
    const std::string d = dn(dt);
    ph::Array x = ph::Array::random({45, 124}, dt, 1);
    b.add(cols, "slice_store_cols" + d, {x}, "",
          expected(
              {45, 128},
              [&](int64_t i) {
                int64_t r = i / 128, c = i % 128;
                return c >= 1 && c < 125 ? 2 * x.get(r * 124 + c - 1) : 0.0;
              },
              dt));
    ph::Array a = ph::Array::random({40, 200}, dt, 2), c = ph::Array::random({24, 200}, dt, 3);
    b.add(rows, "concat_rows" + d, {a, c}, "",
          expected({64, 200}, [&](int64_t i) { return i < 40 * 200 ? a.get(i) : c.get(i - 40 * 200); }));
    ph::Array xw = ph::Array::random({58, 256}, dt, 4);  // 6 windows
    b.add(win, "windows" + d, {xw}, "",
          expected(
              {6, 16, 256},
              [&](int64_t i) {
                int64_t w = i / (16 * 256), r = i / 256 % 16, col = i % 256;
                return 2 * xw.get((8 * w + 2 + r) * 256 + col);
              },
              dt));
    ph::Array xs = ph::Array::random({48, 200}, dt, 5);
    b.add(shift, "shift_rows" + d, {xs}, "",
          expected({56, 200}, [&](int64_t i) { return i < 8 * 200 ? -1.0 : xs.get(i - 8 * 200); }));
    ph::Array xl = ph::Array::random({40, 384}, dt, 6);
    b.add(lanes, "lane_windows" + d, {xl}, "",
          expected({40, 256}, [&](int64_t i) { return xl.get(i / 256 * 384 + 128 + i % 256); }));
  }
  b.check();
}

// --- tiles over sub-ranges ---------------------------------------------------------------------

// [128, n - 40) of a 1-D tensor: block indices offset by 128 / block; the last block runs past
// n - 40, whose elements keep their zeros.
ph::Tensor middle_1d(ph::Tensor x) {
  auto n = x.size(0);
  auto out = ph::zeros({n}, x.dtype());
  for (auto t : ph::tile(ph::range(128, n - 40))) out[t] = x[t] * 3.0f + t.index().to(ph::DType::f32);
  return out;
}

// Rows [16, m - 3), all columns; the rest keeps the -1 fill.
ph::Tensor middle_rows(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::full({m, n}, -1.0, x.dtype());
  for (auto [tm, tn] : ph::tile(ph::range(16, m - 3), n)) out[tm, tn] = x[tm, tn] * 2.0f;
  return out;
}

// Columns [128, n - 50) in an inner loop (pipelined or resident).
ph::Tensor middle_cols_loop(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::full({m, n}, 7.0, x.dtype());
  for (auto tm : ph::tile(m)) {
    for (auto tn : ph::tile(ph::range(128, n - 50))) out[tm, tn] = x[tm, tn] * 3.0f;
  }
  return out;
}

TEST(PallasStores, TilesOverSubRanges) {
  Batch b;
  ph::Kernel mid("middle_1d", middle_1d);
  ph::Kernel rows("middle_rows", middle_rows);
  ph::Kernel cols("middle_cols_loop", middle_cols_loop);
  // (f32: a 1-D bf16 block must be a multiple of 256, which does not divide 128)
  ph::Array x = ph::Array::random({1024}, ph::DType::f32, 1);
  auto want = expected({1024}, [&](int64_t i) { return i >= 128 && i < 984 ? 3 * x.get(i) + i : 0.0; });
  b.add(mid, "middle_1d", {x}, R"({"block_sizes":[128],"loop_orders":[],"num_threads":1})", want);
  b.add(mid, "middle_1d", {x}, "", want);  // (the default picks a block that divides 128)
  for (ph::DType dt : {ph::DType::f32, ph::DType::bf16}) {
    ph::Array y = ph::Array::random({64, 256}, dt, 2);
    b.add(rows, "middle_rows" + dn(dt), {y}, R"({"block_sizes":[16,128],"loop_orders":[[0,1]],"num_threads":1})",
          expected(
              {64, 256}, [&](int64_t i) { return i / 256 >= 16 && i / 256 < 61 ? 2 * y.get(i) : -1.0; }, dt));
  }
  ph::Array z = ph::Array::random({32, 512}, ph::DType::f32, 3);
  auto zwant = expected({32, 512}, [&](int64_t i) { return i % 512 >= 128 && i % 512 < 462 ? 3 * z.get(i) : 7.0; });
  b.add(
      cols, "middle_cols_loop pipeline", {z},
      R"({"block_sizes":[16,128],"loop_orders":[],"inner_loops":[{"strategy":"pipeline","buffers":2}],"num_threads":1})",
      zwant);
  b.add(cols, "middle_cols_loop resident", {z},
        R"({"block_sizes":[16,128],"loop_orders":[],"inner_loops":[{"strategy":"resident"}],"num_threads":1})", zwant);
  b.check();
}

// What stays refused names the construct, the backend and the line.
constexpr int kLoadedStartLine = __LINE__ + 4;
ph::Tensor loaded_start(ph::Tensor x, ph::Tensor start) {
  auto out = ph::empty({x.size(0), 4});
  for (auto g : ph::grid(x.size(0))) {
    out[g, ph::all] = x[g, ph::slice(start[g], ph::length(4))];
  }
  return out;
}

constexpr int kOutOfRangeLine = __LINE__ + 4;
ph::Tensor past_the_end(ph::Tensor x) {
  auto out = ph::empty({3, 4, x.size(1)});
  for (auto [g, tn] : ph::tile(ph::Extent(3).block(1), x.size(1))) {
    out[g, ph::all, tn] = x[ph::slice(g.begin() * 8, ph::length(4)), tn];
  }
  return out;
}

// One plane of a zero-filled tensor written: the others keep their zeros, so the output is
// aliased to its prior value (passed in unblocked).
constexpr int kPlaneLine = __LINE__ + 4;
ph::Tensor one_plane(ph::Tensor x) {
  auto out = ph::zeros({3, x.size(0), x.size(1)});
  for (auto [tm, tn] : ph::tile(x.size(0), x.size(1))) {
    out[1, tm, tn] = x[tm, tn];
  }
  return out;
}

// A ragged last block of such a tensor within its tile padding runs (33 rows in blocks of 8:
// padded to 40); one past the padding (blocks of 32) is refused, naming the verification's limit.
TEST(PallasStores, RaggedBlocksOfAnAliasedOutput) {
  ph::Kernel plane("one_plane", one_plane);
  ph::Array x = ph::Array::random({33, 128}, ph::DType::f32, 5);
  Batch b;
  b.add(plane, "one_plane ragged within the padding", {x},
        R"({"block_sizes":[8,128],"loop_orders":[[0,1]],"num_threads":1})",
        expected({3, 33, 128}, [&](int64_t i) { return i / (33 * 128) == 1 ? x.get(i % (33 * 128)) : 0.0; }));
  b.check();
  ph::Config past = ph::Config::from_json(R"({"block_sizes":[32,128],"loop_orders":[[0,1]],"num_threads":1})");
  std::string m = user_error_of([&] { plane.emit_pallas({x}, "v7x", &past); });
  EXPECT_HAS(m, here(kPlaneLine));
  EXPECT_HAS(m, "cannot update buf0 in place");
  EXPECT_HAS(m, "ends at 64, past the buffer's tile padding (33 -> 40)");
  // The default config takes a legal block.
  EXPECT_NO_THROW(plane.emit_pallas({x}, "v7x"));
}

TEST(PallasStores, WhatStaysRefusedNamesTheConstructAndTheLine) {
  ph::Array x = ph::Array::random({16, 256}, ph::DType::f32, 1), s = ph::Array::zeros({16}, ph::DType::i64);
  ph::Kernel loaded("loaded_start", loaded_start);
  std::string m = user_error_of([&] { loaded.emit_pallas({x, s}, "v7x"); });
  EXPECT_HAS(m, here(kLoadedStartLine));
  EXPECT_HAS(m, "the pallas backend does not support a ph::slice whose start is computed with load");

  ph::Kernel skew("lane_windows", lane_windows<64>);
  ph::Array xl = ph::Array::random({16, 384}, ph::DType::f32, 2);
  m = user_error_of([&] { skew.emit_pallas({xl}, "v7x"); });
  EXPECT_HAS(m, here(kLaneLine));
  EXPECT_HAS(m,
             "the pallas backend does not support a ph::slice of arg0's last dim whose computed start is not "
             "always a multiple of 128 (it takes the value 64;");

  // A sub-range whose start is not a multiple of the block, at grid level.
  ph::Kernel mid("middle_rows", middle_rows);
  ph::Array y = ph::Array::random({64, 256}, ph::DType::f32, 4);
  ph::Config c = ph::Config::from_json(R"({"block_sizes":[32,128],"loop_orders":[[0,1]],"num_threads":1})");
  m = user_error_of([&] { mid.emit_pallas({y}, "v7x", &c); });
  EXPECT_HAS(m,
             "the pallas backend does not support a tile over ph::range(16, 61) whose start is not a multiple of its "
             "block (32) at grid level (a TPU BlockSpec moves whole blocks: use a block size that divides 16) yet");
  EXPECT_HAS(m, "test_pallas_stores.cpp:");

  // g = 2 reads rows [16, 20) of 16: the cpu backend fails at run time, pallas when it compiles.
  ph::Kernel past("past_the_end", past_the_end);
  m = user_error_of([&] { past.emit_pallas({x}, "v7x"); });
  EXPECT_HAS(m, here(kOutOfRangeLine));
  EXPECT_HAS(m, "the pallas backend checks a computed ph::slice start when it compiles");
  EXPECT_HAS(m, "starting at 16 is out of bounds for dimension 0 of arg0, which has size 16");
  EXPECT_HAS(user_error_of([&] { past.run({x}); }), "index 16 is out of bounds for the start of a slice");
}

}  // namespace

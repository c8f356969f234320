// Views: host views of tensors (view/reshape, permute, transpose, expand, squeeze/unsqueeze,
// narrow, views of views; loads and stores through them) and block views of device values
// (reshape, permute, expand, squeeze, split, join, stack, cat), and subscripts of five to eight
// indices. Each kernel runs on the cpu backend at its default config and at the smallest
// blocks, and in the interpreter, against results computed here by plain loops, on ragged
// shapes and sizes of 1.
#include <gtest/gtest.h>

#include <functional>

#include "backend/pallas/interpret.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "kernels/registry.h"
#include "parhelion/parhelion.h"
#include "user_error.h"

namespace ph = parhelion;

namespace {

using Expected = std::function<double(const std::vector<int64_t>&)>;

std::vector<int64_t> unravel(int64_t f, const ph::Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (size_t k = s.size(); k-- > 0;) {
    idx[k] = f % s[k];
    f /= s[k];
  }
  return idx;
}

void expect_array(const ph::Array& a, const ph::Shape& shape, const Expected& want, const std::string& what) {
  ASSERT_EQ(a.shape(), shape) << what;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double w = want(unravel(i, shape));
    ASSERT_NEAR(a.get(i), w, 1e-5 * (1 + std::abs(w))) << what << " at flat " << i;
  }
}

// Runs `k` on args (cpu default config, cpu smallest blocks, interpreter) and checks output 0.
template <class K>
void check_all(K& k, const std::vector<ph::Arg>& args, const ph::Shape& shape, const Expected& want) {
  expect_array(k.interpret(args).at(0), shape, want, "interpreter");
  expect_array(k.run(args).at(0), shape, want, "cpu default");
  ph::CompiledKernel c = k.compile(args);
  ph::Config small = c.config();
  for (auto& b : small.block_sizes) b = 1;
  ph::CompiledKernel c1 = k.compile(args, &small);
  expect_array(c1.run(args).at(0), shape, want, "cpu smallest blocks");
}

// --- block views ---------------------------------------------------------------------------

// Rotates interleaved pairs: x [n, 2m] viewed as [t, m, 2]; out = (a - b, a + 2b) per pair,
// written back through join + reshape.
ph::Tensor pairs(ph::Tensor x) {
  auto [n, d] = x.sizes<2>();
  auto out = ph::empty_like(x);
  for (auto t : ph::tile(n)) {
    auto v = ph::reshape(x[t, ph::all], {t, d / 2, 2});
    auto [a, b] = ph::split(v);
    out[t, ph::all] = ph::reshape(ph::join(a - b, a + b * 2.0f), {t, d});
  }
  return out;
}

TEST(BlockViews, SplitJoinReshapeOfPairs) {
  ph::Kernel k("pairs", pairs);
  for (ph::Shape s : {ph::Shape{1, 2}, ph::Shape{37, 10}, ph::Shape{5, 66}}) {
    ph::Array x = ph::Array::random(s, ph::DType::f32, 3);
    check_all(k, {x}, s, [&](const std::vector<int64_t>& i) {
      int64_t base = i[0] * s[1] + (i[1] / 2) * 2;
      double a = x.get(base), b = x.get(base + 1);
      return i[1] % 2 == 0 ? a - b : a + 2 * b;
    });
  }
}

// permute of a 3-d block, expand of a row, squeeze, stack and cat.
ph::Tensor mix(ph::Tensor x, ph::Tensor row) {
  auto [b, m, n] = x.sizes<3>();  // row: [1, n]
  auto out = ph::empty({n, b, m + 2, 3});
  for (auto [tb, tn] : ph::tile(b, n)) {
    auto v = ph::permute(x[tb, ph::all, tn], {2, 0, 1});                       // [tn, tb, m]
    auto r = ph::squeeze(ph::expand(row[ph::all, tn], {1, tn}), 0);            // [tn]
    auto rr = ph::expand(ph::unsqueeze(ph::unsqueeze(r, 1), 2), {tn, tb, 2});  // [tn, tb, 2]
    auto c = ph::cat({v, rr}, 2);                                              // [tn, tb, m + 2]
    out[tn, tb, ph::all, ph::all] = ph::stack({c, c * 2.0f, -c}, -1);          // [tn, tb, m + 2, 3]
  }
  return out;
}

TEST(BlockViews, PermuteExpandSqueezeStackCat) {
  ph::Kernel k("mix", mix);
  for (ph::Shape s : {ph::Shape{1, 1, 1}, ph::Shape{3, 4, 37}, ph::Shape{5, 2, 9}}) {
    ph::Array x = ph::Array::random(s, ph::DType::f32, 4);
    ph::Array row = ph::Array::random({1, s[2]}, ph::DType::f32, 5);
    const int64_t m = s[1];
    check_all(k, {x, row}, {s[2], s[0], m + 2, 3}, [&](const std::vector<int64_t>& i) {
      double c = i[2] < m ? x.get((i[1] * m + i[2]) * s[2] + i[0]) : row.get(i[0]);
      return i[3] == 0 ? c : i[3] == 1 ? 2 * c : -c;
    });
  }
}

// --- host views ----------------------------------------------------------------------------

// x [B, S, H, D] viewed as [B, S, H, D/2, 2]: a five-index subscript.
ph::Tensor swap_pairs(ph::Tensor x) {
  auto [B, S, H, D] = x.sizes<4>();
  auto out = ph::empty_like(x);
  auto xv = x.view({B, S, H, D / 2, 2});
  auto ov = out.view({B, S, H, -1, 2});
  for (auto [tb, ts, th] : ph::tile(B, S, H)) {
    for (auto g : ph::grid(D / 2)) {
      ov[tb, ts, th, g, 0] = xv[tb, ts, th, g, 1];
      ov[tb, ts, th, g, 1] = xv[tb, ts, th, g, 0];
    }
  }
  return out;
}

// The same with whole pairs: a block [tb, ts, th, tj, 2] split and joined.
ph::Tensor swap_pairs_split(ph::Tensor x) {
  auto [B, S, H, D] = x.sizes<4>();
  auto out = ph::empty_like(x);
  auto xv = x.view({B, S, H, D / 2, 2});
  auto ov = out.view({B, S, H, -1, 2});
  for (auto [tb, ts, th] : ph::tile(B, S, H)) {
    for (auto tj : ph::tile(D / 2)) {
      auto [a, b] = ph::split(xv[tb, ts, th, tj, ph::all]);
      ov[tb, ts, th, tj, ph::all] = ph::join(b, a);
    }
  }
  return out;
}

TEST(HostViews, FiveIndexSubscriptsThroughViews) {
  ph::Kernel k2("swap_pairs_split", swap_pairs_split);
  ph::Kernel k("swap_pairs", swap_pairs);
  for (ph::Shape s : {ph::Shape{1, 1, 1, 2}, ph::Shape{2, 5, 3, 6}}) {
    ph::Array x = ph::Array::random(s, ph::DType::f32, 6);
    auto want = [&](const std::vector<int64_t>& i) {
      int64_t f = ((i[0] * s[1] + i[1]) * s[2] + i[2]) * s[3] + (i[3] ^ 1);
      return x.get(f);
    };
    check_all(k, {x}, s, want);
    check_all(k2, {x}, s, want);
  }
}

// Reads x through a transpose and a narrow, a row through an expand; writes out through a
// permuted view of a narrowed allocation, and returns the base.
ph::Tensor host_views(ph::Tensor x, ph::Tensor row) {
  auto [m, n] = x.sizes<2>();                       // row: [n]
  auto xt = x.transpose(0, 1).narrow(0, 1, n - 1);  // [n - 1, m]
  auto rb = row.unsqueeze(1).narrow(0, 1, n - 1).expand({n - 1, m});
  auto out = ph::full({m + 1, n - 1}, 7.0f);
  auto ov = out.narrow(0, 1, m).permute({1, 0});  // [n - 1, m]
  for (auto [ti, tj] : ph::tile(n - 1, m)) ov[ti, tj] = xt[ti, tj] + rb[ti, tj];
  return out;
}

TEST(HostViews, TransposeNarrowExpandAndStoresThroughAPermutedNarrow) {
  ph::Kernel k("host_views", host_views);
  for (ph::Shape s : {ph::Shape{1, 2}, ph::Shape{37, 11}, ph::Shape{4, 130}}) {
    ph::Array x = ph::Array::random(s, ph::DType::f32, 7);
    ph::Array row = ph::Array::random({s[1]}, ph::DType::f32, 8);
    check_all(k, {x, row}, {s[0] + 1, s[1] - 1}, [&](const std::vector<int64_t>& i) {
      if (i[0] == 0) return 7.0;
      return x.get((i[0] - 1) * s[1] + i[1] + 1) + row.get(i[1] + 1);
    });
  }
}

// A view of a strided argument and a returned view.
ph::Tensor returns_view(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({n, m});
  auto xt = x.permute({1, 0});
  for (auto [ti, tj] : ph::tile(n, m)) out[ti, tj] = xt[ti, tj] * 2.0f;
  return out.view({m * n});
}

TEST(HostViews, ReturnedViewAndAViewOfAStridedArgument) {
  ph::Kernel k("returns_view", returns_view);
  ph::Array big = ph::Array::random({9, 16}, ph::DType::f32, 9);
  ph::Array x = ph::Array::wrap(big.data(), {9, 5}, {16, 2}, ph::DType::f32);  // every other column
  check_all(k, {x}, {45}, [&](const std::vector<int64_t>& i) {
    int64_t r = i[0] % 9, c = i[0] / 9;  // out [n=5, m=9] flattened
    return 2 * big.get(r * 16 + 2 * c);
  });
}

// --- pallas: the same kernels in TPU interpret mode (and lowered for a TPU), against the
// interpreter ---------------------------------------------------------------------------------

TEST(Views, PallasMatchesTheInterpreter) {
  namespace pallas = ph::backend::pallas;
  ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
  std::vector<pallas::InterpretCase> runs;
  std::vector<std::vector<ph::Array>> want;
  auto add = [&](ph::KernelBase& k, const std::string& name, std::vector<ph::Array> in) {
    std::vector<ph::Arg> args(in.begin(), in.end());
    ph::PallasModule m = k.emit_pallas(args, "v7x");
    runs.push_back({name, m.source, name, in, {}, /*export_for_tpu=*/true});
    want.push_back(k.interpret(args));
  };
  ph::Kernel kp("pairs", pairs);
  ph::Kernel km("mix", mix);
  ph::Kernel ks("swap_pairs_split", swap_pairs_split);
  ph::Kernel kh("host_views", host_views);
  ph::Kernel kr("returns_view", returns_view);
  add(kp, "pairs", {ph::Array::random({37, 10}, ph::DType::f32, 3)});
  add(kp, "pairs", {ph::Array::random({8, 256}, ph::DType::f32, 3)});
  add(km, "mix", {ph::Array::random({3, 4, 37}, ph::DType::f32, 4), ph::Array::random({1, 37}, ph::DType::f32, 5)});
  add(ks, "swap_pairs_split", {ph::Array::random({2, 5, 3, 6}, ph::DType::f32, 6)});
  add(kh, "host_views", {ph::Array::random({37, 11}, ph::DType::f32, 7), ph::Array::random({11}, ph::DType::f32, 8)});
  add(kr, "returns_view", {ph::Array::random({9, 5}, ph::DType::f32, 9)});
  std::vector<pallas::InterpretResult> results = pallas::run_in_interpret_mode(runs);
  for (size_t k = 0; k < results.size(); ++k) {
    SCOPED_TRACE(runs[k].name);
    const pallas::InterpretResult& r = results[k];
    ASSERT_TRUE(r.ok) << r.error << "\n" << runs[k].source;
    EXPECT_FALSE(r.races);
    EXPECT_EQ(r.export_status, "ok");
    ASSERT_EQ(r.outputs.size(), want[k].size());
    for (size_t i = 0; i < want[k].size(); ++i) {
      auto cmp = ph::kernels::compare(r.outputs[i], want[k][i], ph::DType::f32, 1e-5);
      EXPECT_TRUE(cmp.ok) << "output " << i << " max abs error " << cmp.max_abs_err;
    }
  }
}

}  // namespace

namespace {

// --- errors at the user's line ------------------------------------------------------------------

ph::Tensor store_through_expand(ph::Tensor x) {
  auto out = ph::zeros({1, x.size(0)});
  auto e = out.expand({4, x.size(0)});
  for (auto [i, j] : ph::tile(4, x.size(0))) e[i, j] = x[j] + ph::zeros({i, j});
  return out;
}

ph::Tensor racy_transpose(ph::Tensor x) {
  auto xt = x.transpose(0, 1);
  for (auto [i, j] : ph::tile(x.size(0), x.size(1))) xt[i, j] = x[i, j] * 2.0f;
  return x;
}

ph::Tensor bad_view(ph::Tensor x) { return x.transpose(0, 1).view({x.size(0) * x.size(1)}); }

ph::Tensor bad_block_reshape(ph::Tensor x) {
  auto out = ph::empty_like(x);
  for (auto [i, j] : ph::tile(x.size(0), x.size(1))) out[i, j] = ph::reshape(x[i, j], {j, i});
  return out;
}

TEST(ViewErrors, NameTheConstructAndTheLine) {
  ph::Array x = ph::Array::random({4, 4}, ph::DType::f32, 1), v = ph::Array::random({4}, ph::DType::f32, 1);
  ph::Kernel k1("store_through_expand", store_through_expand);
  std::string e1 = user_error_of([&] { k1(v); });
  EXPECT_HAS(e1, "expanded view");
  EXPECT_HAS(e1, "test_views.cpp:");
  ph::Kernel k2("racy_transpose", racy_transpose);
  std::string e2 = user_error_of([&] { k2(x); });
  EXPECT_HAS(e2, "through another view");
  EXPECT_HAS(e2, "test_views.cpp:");
  ph::Kernel k3("bad_view", bad_view);
  std::string e3 = user_error_of([&] { k3(x); });
  EXPECT_HAS(e3, "without a copy");
  EXPECT_HAS(e3, "test_views.cpp:");
  ph::Kernel k4("bad_block_reshape", bad_block_reshape);
  std::string e4 = user_error_of([&] { k4(x); });
  EXPECT_HAS(e4, "tile dims must stay");
  EXPECT_HAS(e4, "test_views.cpp:");
}

// The Tile IR text of view kernels parses back to the same text.
TEST(Views, TileIrRoundTrips) {
  ph::Kernel k("host_views", host_views);
  ph::Array x = ph::Array::random({5, 7}, ph::DType::f32, 1), row = ph::Array::random({7}, ph::DType::f32, 2);
  std::string ir = k.compile({x, row}).ir();
  EXPECT_HAS(ir, "= view ");
  ph::Kernel km("mix", mix);
  std::string ir2 =
      km.compile({ph::Array::random({3, 4, 37}, ph::DType::f32, 4), ph::Array::random({1, 37}, ph::DType::f32, 5)})
          .ir();
  EXPECT_HAS(ir2, "permute ");
  EXPECT_HAS(ir2, "stack ");
  for (const std::string& t : {ir, ir2}) EXPECT_EQ(ph::ir::print(ph::ir::parse(t, "views.tir")), t);
}

}  // namespace

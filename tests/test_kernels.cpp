// Every library kernel against its independent reference: shapes that are not multiples of
// the block sizes (1-sized dimensions and a large prime included), every dtype, and several
// configs per case (the heuristic default, the smallest blocks, and seeded random points).
#include <gtest/gtest.h>

#include <random>

#include "kernels/kernels.h"
#include "kernels/registry.h"

namespace ph = parhelion;

namespace {

std::vector<ph::Shape> shapes_for(const ph::kernels::KernelEntry& e) {
  // The matmul family: M, N, K of 1, not multiples of any block or micro-tile, and a prime.
  if (e.name == "matmul" || e.name == "epilogue_subtiling" || e.name == "matmul_layernorm" || e.name == "fp8_matmul" ||
      e.name == "split_k_matmul")
    return {{1, 1, 1}, {1, 37, 5}, {13, 1, 29}, {37, 53, 1}, {67, 131, 97}, {9, 2000, 11}};
  // Mixture of experts (T,K,N,E,TOPK): one token, primes, an expert without tokens (E >= 4),
  // top-k of every expert left, more experts than tokens.
  if (e.name == "moe_matmul") return {{1, 1, 1, 1, 1}, {37, 13, 29, 5, 2}, {67, 31, 17, 4, 3}, {5, 8, 9, 7, 1}};
  if (e.name == "int4_matmul") return {{1, 2, 1, 2}, {13, 64, 29, 32}, {37, 96, 53, 96}, {67, 256, 131, 64}};
  if (e.name == "bmm" || e.name == "broadcast_matmul") return {{1, 1, 1, 1}, {3, 13, 29, 37}, {2, 33, 1, 17}};
  // Grouped GEMM (M,K,N,G): one row, primes, more groups than rows (empty groups).
  if (e.name == "grouped_gemm") return {{1, 1, 1, 1}, {37, 13, 29, 5}, {67, 31, 17, 3}, {5, 8, 9, 7}};
  // Segment sum and cumsum (N,D,S): one row, rows in several row blocks (segments crossing block
  // ends), a segment per row, one column, more segments than rows (empty ones).
  if (e.name.rfind("segment_", 0) == 0) return {{1, 1, 1}, {37, 5, 9}, {300, 33, 17}, {129, 1, 200}, {64, 130, 1}};
  // Attention: B*H of 1, S odd and prime, D not a power of two, both layouts.
  if (e.name.find("attention") != std::string::npos) return {{1, 1, 1}, {1, 131, 24}, {2, 3, 67, 40}};
  // Rotary: D of 2, sizes of 1, a ragged odd S and H, pairs not a multiple of any block.
  if (e.name.rfind("rotary", 0) == 0) return {{1, 1, 1, 2}, {2, 37, 3, 10}, {1, 5, 1, 130}};
  if (e.min_rank == 3) return {{1, 1, 1}, {3, 7, 1009}, {2, 33, 65}};
  if (e.min_rank == 2) return {{1, 1}, {1, 1009}, {37, 1}, {67, 1009}, {5, 4099}};
  return {{1}, {1009}, {1, 1}, {7, 1009}, {3, 5, 130}};
}

// Seeded random points of the config space (each validated by the spec).
std::vector<ph::Config> configs_for(const ph::CompiledKernel& k, int n, uint64_t seed) {
  std::vector<ph::Config> out;
  const ph::ConfigSpec& spec = k.config_spec();
  ph::Config smallest = k.config();
  for (auto& b : smallest.block_sizes) b = 1;
  smallest.num_threads = spec.max_threads;
  out.push_back(smallest);
  std::mt19937_64 gen(seed);
  for (int i = 0; i < n; ++i) {
    ph::Config c = k.config();
    for (size_t j = 0; j < spec.block_sizes.size(); ++j) {
      const auto& ch = spec.block_sizes[j].choices;
      c.block_sizes[j] = ch[gen() % ch.size()];
    }
    for (auto& order : c.loop_orders) std::shuffle(order.begin(), order.end(), gen);
    for (size_t j = 0; j < spec.inner_loops.size(); ++j) {
      const auto& st = spec.inner_loops[j].strategies;
      c.inner_loops[j] = {st[gen() % st.size()], 1 + static_cast<int>(gen() % spec.inner_loops[j].max_buffers)};
    }
    for (size_t j = 0; j < spec.atomics.size(); ++j)
      c.atomics[j] = spec.atomics[j].choices[gen() % spec.atomics[j].choices.size()];
    c.num_threads = 1 + static_cast<int>(gen() % spec.max_threads);
    out.push_back(c);
  }
  return out;
}

class KernelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(KernelTest, MatchesReferenceAcrossShapesDtypesAndConfigs) {
  const auto& e = ph::kernels::find_kernel(GetParam());
  int cases = 0;
  for (ph::DType dt : e.dtypes) {
    for (const ph::Shape& shape : shapes_for(e)) {
      auto in = e.make_inputs(shape, dt, 42);
      auto args = in.args();
      auto want = e.reference(in);
      ph::CompiledKernel def = e.kernel->compile(args);
      std::vector<ph::Config> configs = {def.config()};
      if (dt == ph::DType::f32) {
        auto more = configs_for(def, 2, shape.back() * 31 + shape.size());
        configs.insert(configs.end(), more.begin(), more.end());
      } else {
        configs.push_back(configs_for(def, 1, shape.back())[1]);
      }
      for (const ph::Config& c : configs) {
        SCOPED_TRACE(e.name + " " + ph::shape_to_string(shape) + " " + std::string(ph::dtype_name(dt)) + " config " +
                     c.to_json());
        std::unique_ptr<ph::CompiledKernel> k;
        try {
          k = std::make_unique<ph::CompiledKernel>(e.kernel->compile(args, &c));
        } catch (const ph::UserError& err) {
          // A random point may not fit fast memory; that must be said, with the numbers.
          ASSERT_NE(std::string(err.what()).find("does not fit"), std::string::npos) << err.what();
          continue;
        }
        auto out = k->run(args);
        ASSERT_EQ(out.size(), want.size());
        for (size_t i = 0; i < out.size(); ++i) {
          auto cmp = ph::kernels::compare(out[i], want[i], dt, e.tolerance(shape));
          EXPECT_TRUE(cmp.ok) << "output " << i << " max abs error " << cmp.max_abs_err;
        }
        ++cases;
      }
    }
  }
  EXPECT_GT(cases, 10);
}

std::vector<std::string> all_kernels() {
  std::vector<std::string> names;
  for (const auto& e : ph::kernels::registry()) names.push_back(e.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Library, KernelTest, ::testing::ValuesIn(all_kernels()),
                         [](const auto& param_info) { return param_info.param; });

// Specialization: a known signature is reused; a new one compiles once.
TEST(Specialization, ReusesKnownShapesAndCompilesNewOnesOnce) {
  const auto& e = ph::kernels::find_kernel("add");
  auto a = e.make_inputs({3, 11}, ph::DType::f32, 1);
  auto k1 = e.kernel->compile(a.args());
  auto k2 = e.kernel->compile(a.args());
  EXPECT_EQ(&k1.impl(), &k2.impl());
  auto b = e.make_inputs({3, 12}, ph::DType::f32, 1);
  auto k3 = e.kernel->compile(b.args());
  EXPECT_NE(&k1.impl(), &k3.impl());
  auto c = e.make_inputs({3, 11}, ph::DType::bf16, 1);
  EXPECT_NE(&k1.impl(), &e.kernel->compile(c.args()).impl());
}

// Strided (non-contiguous) inputs are specialized on, not copied or misread.
TEST(Specialization, StridedInputs) {
  ph::Array base = ph::Array::random({6, 10}, ph::DType::f32, 3);
  // A [6,5] view taking every other column.
  ph::Array view = ph::Array::wrap(base.data(), {6, 5}, {10, 2}, ph::DType::f32);
  ph::Array y = ph::Array::random({6, 5}, ph::DType::f32, 4);
  ph::Array out = ph::kernels::add(view, y);
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t c = 0; c < 5; ++c)
      EXPECT_FLOAT_EQ(out.get(r * 5 + c), float(base.get(r * 10 + 2 * c)) + float(y.get(r * 5 + c)));
}

// A tensor argument written in place (no allocation) and a scalar argument.
ph::Tensor scale_in_place(ph::Tensor x, ph::Scalar s) {
  for (auto tile : ph::tile(x.sizes())) x[tile] = x[tile] * s;
  return x;
}

TEST(Language, InPlaceUpdateAndScalarArgument) {
  ph::Kernel k("scale_in_place", scale_in_place);
  ph::Array x = ph::Array::full({3, 17}, 2.0, ph::DType::f32);
  ph::Array out = k(x, 1.5);
  EXPECT_EQ(out.data(), x.data());
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(x.get(i), 3.0);
  k(x, -2.0);  // a runtime scalar: same compiled kernel, new value
  EXPECT_EQ(x.get(0), -6.0);
}

// grid(): scalar loops; integer indices; where; comparisons; casts; arange.
ph::Tensor row_argmax_like(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m}, ph::DType::i64);
  for (auto row : ph::grid(m)) {
    auto v = x[row, ph::all];    // [n]
    auto best = ph::amax(v, 0);  // scalar
    auto idx = ph::where(v == best, ph::arange(n), n);
    out[row] = ph::amin(idx, 0);  // first index of the max
  }
  return out;
}

TEST(Language, GridLoopsWhereArangeAndIntegerOutputs) {
  ph::Kernel k("row_argmax_like", row_argmax_like);
  ph::Array x = ph::Array::random({9, 131}, ph::DType::f32, 5);
  ph::Array out = k(x);
  ASSERT_EQ(out.dtype(), ph::DType::i64);
  for (int64_t r = 0; r < 9; ++r) {
    int64_t best = 0;
    for (int64_t c = 1; c < 131; ++c)
      if (x.get(r * 131 + c) > x.get(r * 131 + best)) best = c;
    EXPECT_EQ(out.get(r), best) << "row " << r;
  }
}

// register_block_size: two loops share one block-size symbol (one config knob).
ph::Tensor shared_blocks(ph::Tensor x, ph::Tensor y) {
  auto [m, n] = x.sizes<2>();
  auto bs = ph::register_block_size(n);
  auto out = ph::empty_like(x);
  for (auto rows : ph::tile(m)) {
    ph::Var acc = ph::zeros({rows});
    for (auto cols : ph::tile(ph::range(n).block(bs))) acc = acc + ph::sum(x[rows, cols], -1);
    for (auto cols : ph::tile(ph::range(n).block(bs)))
      out[rows, cols] = y[rows, cols] + acc.unsqueeze(-1) + ph::cast(cols.index(), ph::DType::f32);
  }
  return out;
}

TEST(Language, RegisteredBlockSizeIsSharedAndResultsMatch) {
  ph::Kernel k("shared_blocks", shared_blocks);
  ph::Array x = ph::Array::random({5, 77}, ph::DType::f32, 6), y = ph::Array::random({5, 77}, ph::DType::f32, 7);
  auto compiled = k.compile({x, y});
  const auto& spec = compiled.config_spec();
  ASSERT_EQ(spec.block_sizes.size(), 2u);  // the shared column block (registered first), and rows
  EXPECT_EQ(spec.block_sizes[0].extent, 77);
  for (int64_t bc : {1, 8, 128}) {
    ph::Config c = compiled.config();
    c.block_sizes[0] = bc;
    ph::Array out = k.compile({x, y}, &c).run({x, y})[0];
    for (int64_t r = 0; r < 5; ++r) {
      double s = 0;
      for (int64_t j = 0; j < 77; ++j) s += x.get(r * 77 + j);
      for (int64_t j = 0; j < 77; ++j) EXPECT_NEAR(out.get(r * 77 + j), y.get(r * 77 + j) + s + j, 1e-4);
    }
  }
}

// Pointwise op coverage against std:: on one block: unary ops, min/max, comparisons, casts.
ph::Tensor pointwise_zoo(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({12, m, n}, ph::DType::f32);
  for (auto [tm, tn] : ph::tile(m, n)) {
    auto v = x[tm, tn];
    auto pos = ph::abs(v) + 0.5f;
    out[0, tm, tn] = ph::log(pos);
    out[1, tm, tn] = ph::sqrt(pos);
    out[2, tm, tn] = ph::rsqrt(pos);
    out[3, tm, tn] = ph::tanh(v);
    out[4, tm, tn] = ph::sigmoid(v);
    out[5, tm, tn] = ph::maximum(v, 0.25f) - ph::minimum(v, -0.25f);
    out[6, tm, tn] = ph::cast(v > 0.0f, ph::DType::f32) + ph::cast(v <= -0.5f, ph::DType::f32) * 2.0f;
    out[7, tm, tn] = ph::cast(v * 100.0f, ph::DType::i32);  // truncation toward zero
    out[8, tm, tn] = ph::cast(v * 3.0f, ph::DType::bf16);   // rounds to bf16 precision
    out[9, tm, tn] = -v / 3.0f;
    out[10, tm, tn] = ph::pow(pos, 1.5f);
    out[11, tm, tn] = ph::where(v > 0.0f && v < 0.5f, 1.0f, 0.0f);
  }
  return out;
}

TEST(Language, PointwiseOpsMatchStd) {
  ph::Kernel k("pointwise_zoo", pointwise_zoo);
  ph::Array x = ph::Array::random({3, 67}, ph::DType::f32, 8, -2, 2);
  ph::Array out = k(x);
  for (int64_t i = 0; i < x.numel(); ++i) {
    float v = static_cast<float>(x.get(i)), pos = std::abs(v) + 0.5f;
    auto at = [&](int j) { return out.get(j * x.numel() + i); };
    EXPECT_NEAR(at(0), std::log(pos), 1e-6);
    EXPECT_NEAR(at(1), std::sqrt(pos), 1e-6);
    EXPECT_NEAR(at(2), 1 / std::sqrt(pos), 1e-6);
    EXPECT_NEAR(at(3), std::tanh(v), 1e-6);
    EXPECT_NEAR(at(4), 1 / (1 + std::exp(-v)), 1e-6);
    EXPECT_NEAR(at(5), std::max(v, 0.25f) - std::min(v, -0.25f), 1e-6);
    EXPECT_EQ(at(6), (v > 0 ? 1 : 0) + (v <= -0.5f ? 2 : 0));
    EXPECT_EQ(at(7), static_cast<int32_t>(v * 100.0f));
    EXPECT_EQ(at(8), ph::bf16_to_f32(ph::f32_to_bf16(v * 3.0f)));
    EXPECT_NEAR(at(9), -v / 3.0f, 1e-6);
    EXPECT_NEAR(at(10), std::pow(pos, 1.5f), 2e-6 * std::pow(pos, 1.5f));
    EXPECT_EQ(at(11), (v > 0 && v < 0.5f) ? 1.0 : 0.0);
  }
}

}  // namespace

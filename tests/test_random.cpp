// Counter-based random numbers (ph::rand, ph::randn; include/parhelion/lang.h): known answers
// of Philox-4x32-10, the same stream at every config, in the interpreter and as Pallas in TPU
// interpret mode, plausible statistics, a dropout mask recomputed in a backward kernel, and
// the type errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "backend/cpu/jit.h"
#include "backend/pallas/interpret.h"
#include "kernels/kernels.h"
#include "parhelion/parhelion.h"

#include "ph_math.h"
#include "tests/user_error.h"

namespace ph = parhelion;
namespace pallas = ph::backend::pallas;

namespace {

// rand and randn of 1-D offsets under a literal seed: out[0] = rand, out[1] = randn.
template <int64_t Seed>
std::vector<ph::Tensor> draw(const std::vector<ph::Tensor>& in) {
  const int64_t n = in[0].size(0);
  auto u = ph::empty({n}, ph::DType::f32), z = ph::empty({n}, ph::DType::f32);
  for (auto t : ph::tile(n)) {
    auto offsets = in[0][t].to(ph::DType::i64);
    u[t] = ph::rand(Seed, offsets);
    z[t] = ph::randn(Seed, offsets);
  }
  return {u, z};
}

template <int64_t Seed>
std::unique_ptr<ph::KernelBase> draw_kernel() {
  return std::make_unique<ph::KernelBase>(
      "draw", std::vector<bool>{true},
      [](const std::vector<ph::KernelBase::TraceArg>& a) { return draw<Seed>({a[0].tensor}); });
}

const std::vector<int64_t> kOffsets = {0, 1, 2, 3, 1000003, 2147483647, 77, 123456789};

ph::Array offsets_array(const std::vector<int64_t>& v, ph::DType dt) {
  ph::Array a = ph::Array::zeros({static_cast<int64_t>(v.size())}, dt);
  for (size_t i = 0; i < v.size(); ++i) a.set(static_cast<int64_t>(i), static_cast<double>(v[i]));
  return a;
}

// The stream of Triton's tl.rand / tl.randn (Triton 3.9, TRITON_INTERPRET=1) at kOffsets: the
// same Philox-4x32-10 and the same maps, computed by an implementation that is not ours. The
// first four words under seed 0 are Random123's published known answer for counter 0, key 0
// (0x6627e8d5 -> 0x1.989fa2p-1).
struct KnownAnswers {
  int64_t seed;
  std::vector<float> rand;
  std::vector<double> randn;
};
const std::vector<KnownAnswers>& known_answers() {
  static const std::vector<KnownAnswers> k = {
      {0,
       {0x1.989fa2p-1f, 0x1.c6ccd4p-5f, 0x1.3ea8c8p-5f, 0x1.b37884p-2f, 0x1.a9b4eep-1f, 0x1.7ecfeep-1f, 0x1.e3adb8p-1f,
        0x1.d49db6p-2f},
       {0.0465515293, -0.388361424, -1.63795197, 0.631531477, 0.418287456, -0.762560606, 0.158288434, -1.1209029}},
      {12345,
       {0x1.702e0ap-2f, 0x1.6cd25p-8f, 0x1.b0b35p-1f, 0x1.27068ep-1f, 0x1.261142p-2f, 0x1.6215dp-2f, 0x1.3eaedep-2f,
        0x1.382a7ep-4f},
       {-0.98624301, -0.773667097, -0.321866572, 0.387071073, -1.30226624, -0.985058486, 1.45922494, 1.87578917}},
      {-7,
       {0x1.b5e58ap-3f, 0x1.dfdc38p-1f, 0x1.f37496p-1f, 0x1.442874p-2f, 0x1.53b734p-1f, 0x1.ea9f9p-3f, 0x1.d8b9bep-1f,
        0x1.ff32ccp-1f},
       {0.352154106, -0.253511965, 0.0391000733, 1.0161556, -0.790539443, -0.840255201, -0.382839501, 0.0467554182}},
  };
  return k;
}

// randn's Box-Muller goes through a logarithm, a square root and a cosine, each evaluated a
// little differently per implementation: equal to a few ulps of the result's scale.
constexpr double kNormalTol = 4e-6;

void expect_known(const std::vector<ph::Array>& got, const KnownAnswers& k, const std::string& what) {
  SCOPED_TRACE(what + ", seed " + std::to_string(k.seed));
  ASSERT_EQ(got.size(), 2u);
  for (size_t i = 0; i < kOffsets.size(); ++i) {
    const auto at = static_cast<int64_t>(i);
    EXPECT_EQ(static_cast<float>(got[0].get(at)), k.rand[i]) << "rand at offset " << kOffsets[i];
    EXPECT_NEAR(got[1].get(at), k.randn[i], kNormalTol) << "randn at offset " << kOffsets[i];
  }
}

std::vector<std::unique_ptr<ph::KernelBase>> seeded_kernels() {
  std::vector<std::unique_ptr<ph::KernelBase>> out;
  out.push_back(draw_kernel<0>());
  out.push_back(draw_kernel<12345>());
  out.push_back(draw_kernel<-7>());
  return out;
}

TEST(Random, KnownAnswersOnCpuAndInTheInterpreter) {
  auto kernels = seeded_kernels();
  for (ph::DType dt : {ph::DType::i64, ph::DType::i32}) {
    ph::Array offs = offsets_array(kOffsets, dt);
    for (size_t s = 0; s < kernels.size(); ++s) {
      expect_known(kernels[s]->run({offs}), known_answers()[s], "cpu");
      expect_known(kernels[s]->interpret({offs}), known_answers()[s], "interpreter");
    }
  }
}

// A 2-D stream at offsets row * n + col: the same numbers at every block size, loop order and
// thread count (the offsets, not the blocks, decide them), and in the interpreter.
std::vector<ph::Tensor> draw_2d(const std::vector<ph::Tensor>& in) {
  auto [m, n] = in[0].sizes<2>();
  auto u = ph::empty({m, n}, ph::DType::f32), z = ph::empty({m, n}, ph::DType::f32);
  for (auto [tm, tn] : ph::tile(m, n)) {
    auto offsets = ph::unsqueeze(tm.index(), 1) * n + tn.index();
    u[tm, tn] = ph::rand(42, offsets) + in[0][tm, tn] * 0.0f;
    z[tm, tn] = ph::randn(ph::cast(in[1][0], ph::DType::i64), offsets);
  }
  return {u, z};
}

TEST(Random, SameStreamAtEveryConfig) {
  ph::KernelBase k("draw_2d", {true, true}, [](const std::vector<ph::KernelBase::TraceArg>& a) {
    return draw_2d({a[0].tensor, a[1].tensor});
  });
  ph::Array x = ph::Array::zeros({37, 131}, ph::DType::f32), seed = ph::Array::zeros({1}, ph::DType::i32);
  seed.set(0, 9);
  std::vector<ph::Arg> args = {x, seed};
  std::vector<ph::Array> want = k.interpret(args);
  ph::CompiledKernel c = k.compile(args);
  const ph::ConfigSpec& spec = c.config_spec();
  for (int v = 0; v < 4; ++v) {
    ph::Config cfg = c.config();
    for (size_t i = 0; i < spec.block_sizes.size(); ++i) {
      const auto& ch = spec.block_sizes[i].choices;
      cfg.block_sizes[i] = ch[static_cast<size_t>(v * 3 + static_cast<int>(i)) % ch.size()];
    }
    for (auto& order : cfg.loop_orders)
      if (v % 2) std::reverse(order.begin(), order.end());
    cfg.num_threads = 1 + v % 2;
    // Every vector width of the host (Philox's 64-bit products are where widths differ most).
    if (!spec.vector_bits.empty()) cfg.vector_bits = spec.vector_bits[static_cast<size_t>(v) % spec.vector_bits.size()];
    SCOPED_TRACE(cfg.to_json());
    ph::CompiledKernel at = k.compile(args, &cfg);
    EXPECT_EQ(at.source().find("prefer-vector-width") != std::string::npos, at.config().vector_bits != 0);
    std::vector<ph::Array> got = at.run(args);
    EXPECT_EQ(ph::max_abs_diff(got[0], want[0]), 0.0) << "rand";
    EXPECT_LE(ph::max_abs_diff(got[1], want[1]), kNormalTol) << "randn";
  }
}

// The row helper a simd loop draws through (emit/random_rows.cpp), compiled as the JIT compiles
// it: philox()'s words for every counter. Offsets whose low words carry into the high word
// within a vector, negative and arbitrary 64-bit offsets, seeds of every sign, a row of 4099
// (the vector loop and a scalar tail).
std::vector<ph::Tensor> draw_at(const std::vector<ph::Tensor>& in) {
  const int64_t n = in[0].size(0);
  auto u = ph::empty({n}, ph::DType::f32), z = ph::empty({n}, ph::DType::f32);
  for (auto t : ph::tile(n)) {
    const auto seed = ph::cast(in[1][0], ph::DType::i64);
    u[t] = ph::rand(seed, in[0][t]);
    z[t] = ph::randn(seed, in[0][t]);
  }
  return {u, z};
}

TEST(Random, PhiloxRowIsPhiloxPerCounter) {
  ph::KernelBase k("draw_at", {true, true}, [](const std::vector<ph::KernelBase::TraceArg>& a) {
    return draw_at({a[0].tensor, a[1].tensor});
  });
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&] {  // splitmix64
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  constexpr int64_t n = 4099;
  ph::Array offsets = ph::Array::zeros({n}, ph::DType::i64), seed = ph::Array::zeros({1}, ph::DType::i64);
  std::vector<int64_t> at(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t part = i / 1024;  // carries at 2^32 and 2^33, negatives, anything, around 2^62
    at[i] = part == 0   ? int64_t{0xFFFFFFF0} + i
            : part == 1 ? (int64_t{3} << 32) - 512 + i
            : part == 2 ? -3000 + i
            : part == 3 ? static_cast<int64_t>(next())
                        : (int64_t{1} << 62) + i;
    offsets.data_as<int64_t>()[i] = at[i];
  }
  for (int64_t s : {int64_t{0}, int64_t{-7}, static_cast<int64_t>(next()), static_cast<int64_t>(next())}) {
    SCOPED_TRACE("seed " + std::to_string(s));
    seed.data_as<int64_t>()[0] = s;
    ph::CompiledKernel c = k.compile({offsets, seed});
    EXPECT_NE(c.source().find("ph_rt::philox_row("), std::string::npos);
    const std::vector<ph::Array> got = c.run({offsets, seed});
    int64_t wrong_u = 0;
    double worst_z = 0;
    for (int64_t i = 0; i < n; ++i) {
      const ph_rt::philox_words w = ph_rt::philox(s, at[i]);
      wrong_u += static_cast<float>(got[0].get(i)) != ph_rt::uniform_of(w.w0);
      worst_z = std::max(worst_z, std::abs(got[1].get(i) - static_cast<double>(ph_rt::normal_of(w.w0, w.w1))));
    }
    EXPECT_EQ(wrong_u, 0);
    EXPECT_LE(worst_z, kNormalTol);
  }
}

// A simd loop that draws under a scalar seed draws a row at a time (philox_row over chunks of
// 256; 1000 columns leave a ragged last chunk, 37 x 131 blocks a row shorter than one), and gives
// the interpreter's numbers.
TEST(Random, ASimdLoopDrawsItsRowsAtATime) {
  ph::KernelBase k("draw_2d", {true, true}, [](const std::vector<ph::KernelBase::TraceArg>& a) {
    return draw_2d({a[0].tensor, a[1].tensor});
  });
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{3, 1000}, std::vector<int64_t>{37, 131}}) {
    ph::Array x = ph::Array::zeros(shape, ph::DType::f32), seed = ph::Array::zeros({1}, ph::DType::i32);
    seed.set(0, 5);
    std::vector<ph::Arg> args = {x, seed};
    ph::CompiledKernel c = k.compile(args);
    EXPECT_NE(c.source().find("ph_rt::philox_row("), std::string::npos) << c.source();
    const std::vector<ph::Array> want = k.interpret(args), got = c.run(args);
    EXPECT_EQ(ph::max_abs_diff(got[0], want[0]), 0.0) << "rand";
    EXPECT_LE(ph::max_abs_diff(got[1], want[1]), kNormalTol) << "randn";
  }
}

// Draws whose offsets could read out of range at an element the body does not compute, or that
// the body names itself, keep the per-element draw: offsets gathered through an index (computed
// ahead of a loop, they would be read at every element, guards or not), a loop whose gather is
// checked ahead, and a scan's combine (its operands are declared inside the loop). Each gives the
// interpreter's numbers, with index checks on and off.
std::vector<ph::Tensor> guarded_draws(const std::vector<ph::Tensor>& in) {
  const int64_t n = in[0].size(0);
  auto [rows, cols] = in[2].sizes<2>();
  auto picked = ph::empty({n}, ph::DType::f32), beside = ph::empty({n}, ph::DType::f32);
  auto scanned = ph::empty({rows, cols}, ph::DType::i64);
  for (auto t : ph::tile(n)) {
    auto ids = in[0][t];
    auto ok = ids >= 0;
    auto safe = ph::where(ok, ids, 0);
    picked[t] = ph::where(ok, ph::rand(7, in[1][safe]), -1.0f);  // a gathered offset
    beside[t] = ph::rand(7, t.index()) + ph::cast(in[1][safe], ph::DType::f32) * 0.0f;
  }
  for (auto [tm, tn] : ph::tile(rows, cols))  // (a loop over the rows inside the scan along tn)
    scanned[tm, tn] = ph::associative_scan(in[2][tm, tn], 1, [](const ph::Tensor& a, const ph::Tensor& b) {
      return b + ph::cast(ph::rand(a, b) >= 2.0f, ph::DType::i64) * a;  // b: rand < 1
    });
  return {picked, beside, scanned};
}

TEST(Random, DrawsThatCouldReadOutOfRangeAreMadePerElement) {
  ph::KernelBase k("guarded_draws", {true, true, true}, [](const std::vector<ph::KernelBase::TraceArg>& a) {
    return guarded_draws({a[0].tensor, a[1].tensor, a[2].tensor});
  });
  constexpr int64_t n = 700;
  ph::Array ids = ph::Array::zeros({n}, ph::DType::i64), table = ph::Array::zeros({n}, ph::DType::i64);
  for (int64_t i = 0; i < n; ++i) {
    ids.data_as<int64_t>()[i] = i % 3 == 0 ? -1 : (i * 7) % n;
    table.data_as<int64_t>()[i] = i * 1000003;
  }
  ph::Array grid = ph::Array::zeros({40, 300}, ph::DType::i64);
  for (int64_t i = 0; i < 40 * 300; ++i) grid.data_as<int64_t>()[i] = i * 977;
  const std::vector<ph::Arg> args = {ids, table, grid};
  const std::vector<ph::Array> want = k.interpret(args);
  const std::regex gathered(R"(philox_uniform\(s[0-9]+, T1\[)"),
      drawn_beside(R"(philox_uniform\(s[0-9]+, \(off_t0 \+ i0\)\))");
  for (bool checks : {true, false}) {
    SCOPED_TRACE(checks ? "index checks" : "no index checks");
    ph::Config c = k.compile(args).config();
    c.index_checks = checks;
    ph::CompiledKernel ck = k.compile(args, &c);
    const std::vector<ph::Array> got = ck.run(args);
    for (size_t o = 0; o < want.size(); ++o) EXPECT_EQ(ph::max_abs_diff(got[o], want[o]), 0.0) << "output " << o;
    EXPECT_TRUE(std::regex_search(ck.source(), gathered));  // always per element
    // Beside a gather checked ahead: per element; unchecked, a row at a time.
    EXPECT_EQ(std::regex_search(ck.source(), drawn_beside), checks);
    EXPECT_EQ(ck.source().find("ph_rt::philox_row(") == std::string::npos, checks);
  }
}

// A kernel that draws takes 128-bit vectors on an AVX2 host whose compiler's tuning prefers them
// (Philox's products cross the halves of a vector that is two); elsewhere, and a kernel that
// draws nothing, the widest (unset).
TEST(Random, AKernelThatDrawsTakesTheCompilersPreferredWidth) {
  const int preferred = ph::backend::cpu::compiler_preferred_vector_bits();
  EXPECT_TRUE(preferred == 0 || preferred == 128 || preferred == 256 || preferred == 512) << preferred;
  ph::Array x = ph::Array::zeros({64, 300}, ph::DType::f32);
  ph::CompiledKernel drop = ph::kernels::dropout.compile({x, 0.25, int64_t{5}});
  const std::vector<int>& widths = drop.config_spec().vector_bits;
  EXPECT_EQ(drop.config().vector_bits, !widths.empty() && widths.front() == 256 && preferred == 128 ? 128 : 0);
  EXPECT_EQ(ph::kernels::add.compile({x, x}).config().vector_bits, 0);
}

// Over 2^20 offsets: the moments within five standard errors, rand inside [0, 1), randn's
// tails at the normal's frequencies, and no two neighbouring offsets correlated.
TEST(Random, StatisticsArePlausible) {
  const int64_t n = int64_t{1} << 20;
  std::vector<int64_t> offs(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) offs[static_cast<size_t>(i)] = i;
  auto k = draw_kernel<12345>();
  std::vector<ph::Array> out = k->run({offsets_array(offs, ph::DType::i64)});
  double su = 0, suu = 0, sz = 0, szz = 0, lag = 0, tails = 0;
  float lo = 1, hi = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double u = out[0].get(i), z = out[1].get(i);
    su += u, suu += u * u, sz += z, szz += z * z, tails += std::abs(z) > 3;
    if (i) lag += (u - 0.5) * (out[0].get(i - 1) - 0.5);
    lo = std::min(lo, static_cast<float>(u)), hi = std::max(hi, static_cast<float>(u));
  }
  const double N = static_cast<double>(n);
  EXPECT_GE(lo, 0.0f);
  EXPECT_LT(hi, 1.0f);
  EXPECT_NEAR(su / N, 0.5, 5 * std::sqrt(1.0 / 12 / N));
  EXPECT_NEAR(suu / N - (su / N) * (su / N), 1.0 / 12, 5 * std::sqrt((1.0 / 80 - 1.0 / 144) / N));
  EXPECT_NEAR(sz / N, 0.0, 5 / std::sqrt(N));
  EXPECT_NEAR(szz / N, 1.0, 5 * std::sqrt(2.0 / N));
  EXPECT_NEAR(lag / N, 0.0, 5 / 12.0 / std::sqrt(N));
  EXPECT_NEAR(tails / N, 0.0026998, 5 * std::sqrt(0.0027 / N));
}

// Dropout: the backward kernel recomputes the forward's mask from the seed and offsets, so the
// gradient flows exactly where the forward kept values.
constexpr float kP = 0.3f;
ph::Tensor dropout(ph::Tensor x, int64_t seed) {
  auto [m, n] = x.sizes<2>();
  auto y = ph::empty_like(x);
  for (auto [tm, tn] : ph::tile(m, n)) {
    auto keep = ph::rand(seed, ph::unsqueeze(tm.index(), 1) * n + tn.index()) >= kP;
    y[tm, tn] = ph::where(keep, x[tm, tn] * (1.0f / (1.0f - kP)), 0.0f);
  }
  return y;
}
ph::Tensor dropout_fwd(ph::Tensor x) { return dropout(x, 2024); }
ph::Tensor dropout_bwd(ph::Tensor g) { return dropout(g, 2024); }

TEST(Random, DropoutMaskIsRecomputedInTheBackward) {
  ph::Kernel fwd("dropout_fwd", dropout_fwd), bwd("dropout_bwd", dropout_bwd);
  ph::Array x = ph::Array::random({64, 300}, ph::DType::f32, 3), g = ph::Array::random({64, 300}, ph::DType::f32, 4);
  ph::Array y = fwd.run({x})[0];
  ph::CompiledKernel cb = bwd.compile({g});
  ph::Config other = cb.config();
  for (size_t i = 0; i < other.block_sizes.size(); ++i) other.block_sizes[i] = 8;  // another blocking
  ph::Array dx = bwd.compile({g}, &other).run({g})[0];
  int64_t kept = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const bool fwd_kept = y.get(i) != 0, bwd_kept = dx.get(i) != 0;
    EXPECT_EQ(fwd_kept, bwd_kept) << "element " << i;
    kept += fwd_kept;
    if (fwd_kept) {
      EXPECT_FLOAT_EQ(static_cast<float>(y.get(i)), static_cast<float>(x.get(i) / (1 - kP)));
    }
  }
  const double frac = static_cast<double>(kept) / static_cast<double>(x.numel());
  EXPECT_NEAR(frac, 1 - kP, 5 * std::sqrt(kP * (1 - kP) / static_cast<double>(x.numel())));
}

constexpr int kLineBadSeed = __LINE__ + 4;
ph::Tensor float_offsets(ph::Tensor x) {
  auto y = ph::empty_like(x);
  for (auto t : ph::tile(x.size(0))) {
    y[t] = ph::rand(1, x[t]);
  }
  return y;
}

TEST(Random, FloatOffsetsAreAnErrorAtTheLine) {
  ph::Kernel k("float_offsets", float_offsets);
  ph::Array x = ph::Array::random({16}, ph::DType::f32, 1);
  std::string m = user_error_of([&] { k.run({x}); });
  EXPECT_HAS(m, "test_random.cpp:" + std::to_string(kLineBadSeed));
  EXPECT_HAS(m, "rand needs an integer seed and integer offsets (got i64 and f32); cast them to i64 first");
}

// The same streams from the emitted Pallas modules in TPU interpret mode (and lowered for a
// TPU by jax.export): Philox in 32-bit integer arithmetic gives the same words.
TEST(Random, PallasMatchesInInterpretMode) {
  ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
  auto kernels = seeded_kernels();
  ph::Array offs = offsets_array(kOffsets, ph::DType::i32);
  std::vector<pallas::InterpretCase> runs;
  for (size_t s = 0; s < kernels.size(); ++s)
    runs.push_back(
        {"draw" + std::to_string(s), kernels[s]->emit_pallas({offs}, "v6e").source, "draw", {offs}, {}, true});
  ph::KernelBase k2("draw_2d", {true, true}, [](const std::vector<ph::KernelBase::TraceArg>& a) {
    return draw_2d({a[0].tensor, a[1].tensor});
  });
  ph::Array x = ph::Array::zeros({24, 256}, ph::DType::f32), seed = ph::Array::zeros({1}, ph::DType::i32);
  seed.set(0, 9);
  runs.push_back({"draw_2d", k2.emit_pallas({x, seed}, "v6e").source, "draw_2d", {x, seed}, {}, true});
  std::vector<pallas::InterpretResult> results = pallas::run_in_interpret_mode(runs);
  ASSERT_EQ(results.size(), runs.size());
  for (size_t s = 0; s < kernels.size(); ++s) {
    ASSERT_TRUE(results[s].ok) << results[s].error;
    EXPECT_EQ(results[s].export_status, "ok");
    expect_known(results[s].outputs, known_answers()[s], "pallas");
  }
  const pallas::InterpretResult& r = results.back();
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.export_status, "ok");
  std::vector<ph::Array> want = k2.interpret({x, seed});
  EXPECT_EQ(ph::max_abs_diff(r.outputs[0], want[0]), 0.0) << "rand";
  EXPECT_LE(ph::max_abs_diff(r.outputs[1], want[1]), kNormalTol) << "randn";
}

}  // namespace

// Numbers and types: the i8/u8/fp8 dtypes and their conversions, integer arithmetic (floor
// division, remainder, bitwise ops, shifts), the roundings, erf, exact gelu and clamp. Each is
// checked against values computed here from the definitions (include/parhelion/lang.h,
// dtype.h), on the cpu backend and in the interpreter, and the same kernels run as Pallas in TPU
// interpret mode (with the jax.export TPU lowering).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <regex>
#include <tuple>
#include <vector>

#include "backend/pallas/interpret.h"
#include "parhelion/parhelion.h"
#include "runtime/gemm/gemm.h"

namespace ph = parhelion;
namespace pallas = ph::backend::pallas;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// --- host conversions, from the formats' definitions -----------------------------------------

// The value of an fp8 code from first principles (sign, exponent, mantissa).
double fp8_value(uint8_t c, int m, int bias, bool fn) {
  int e = (c & 0x7f) >> m, mant = c & ((1 << m) - 1);
  double s = (c & 0x80) ? -1 : 1;
  if (fn && (c & 0x7f) == 0x7f) return kNaN;
  if (!fn && e == (1 << (7 - m)) - 1) return mant ? kNaN : s * kInf;
  if (e == 0) return s * std::ldexp(mant, 1 - bias - m);
  return s * std::ldexp(1.0 + mant / double(1 << m), e - bias);
}

// The nearest-even fp8 value of x by search over all codes, saturating (the language's rule).
double fp8_round(double x, int m, int bias, bool fn) {
  if (std::isnan(x)) return kNaN;
  double max = fn ? 448 : 57344;
  if (std::isinf(x) && !fn) return x;
  x = std::max(-max, std::min(max, x));
  double best = 0;
  int best_code = 0;
  double err = kInf;
  for (int c = 0; c < 128; ++c) {
    double v = fp8_value(static_cast<uint8_t>(c), m, bias, fn);
    if (std::isnan(v) || std::isinf(v)) continue;
    double d = std::abs(std::abs(x) - v);
    if (d < err || (d == err && (c & 1) == 0)) err = d, best = v, best_code = c;
  }
  (void)best_code;
  return std::signbit(x) ? -best : best;
}

std::vector<float> probe_values() {
  std::vector<float> v = {0.0f,        -0.0f,       1.0f,         -1.0f,         448.0f,   449.0f,   464.0f,
                          465.0f,      480.0f,      1e6f,         -1e6f,         57344.0f, 61440.0f, 65536.0f,
                          1e30f,       -1e30f,      INFINITY,     -INFINITY,     NAN,      0.0625f,  1.0f / 512,
                          1.0f / 1024, 3.0f / 1024, 1.0f / 65536, 3.0f / 131072, 1e-10f,   -1e-10f};
  for (int c = 0; c < 256; ++c) {  // every code, and the midpoints and near-midpoints between codes
    for (double x : {fp8_value(c, 3, 7, true), fp8_value(c, 2, 15, false)}) {
      if (!std::isfinite(x)) continue;
      v.push_back(static_cast<float>(x));
      double up = std::nextafter(x, kInf);
      (void)up;
    }
  }
  for (int c = 0; c < 127; ++c) {
    for (auto [m, bias, fn] : {std::tuple{3, 7, true}, std::tuple{2, 15, false}}) {
      double a = fp8_value(c, m, bias, fn), b = fp8_value(c + 1, m, bias, fn);
      if (!std::isfinite(a) || !std::isfinite(b)) continue;
      float mid = static_cast<float>((a + b) / 2);
      v.push_back(mid);
      v.push_back(-mid);
      v.push_back(std::nextafter(mid, INFINITY));
      v.push_back(std::nextafter(mid, -INFINITY));
    }
  }
  return v;
}

TEST(Fp8, HostConversionsRoundToNearestEvenAndSaturate) {
  for (float x : probe_values()) {
    double want4 = fp8_round(x, 3, 7, true), want5 = fp8_round(x, 2, 15, false);
    double got4 = ph::f8e4m3_to_f32(ph::f32_to_f8e4m3(x)), got5 = ph::f8e5m2_to_f32(ph::f32_to_f8e5m2(x));
    if (std::isnan(want4))
      EXPECT_TRUE(std::isnan(got4)) << x;
    else
      EXPECT_EQ(got4, want4) << "e4m3 of " << x;
    if (std::isnan(want5))
      EXPECT_TRUE(std::isnan(got5)) << x;
    else
      EXPECT_EQ(got5, want5) << "e5m2 of " << x;
  }
  for (int c = 0; c < 256; ++c) {
    double a = fp8_value(c, 3, 7, true), b = fp8_value(c, 2, 15, false);
    double ga = ph::f8e4m3_to_f32(c), gb = ph::f8e5m2_to_f32(c);
    EXPECT_TRUE(std::isnan(a) ? std::isnan(ga) : ga == a) << c;
    EXPECT_TRUE(std::isnan(b) ? std::isnan(gb) : gb == b) << c;
  }
  EXPECT_EQ(ph::f32_to_f8e4m3(1e9f), 0x7e);  // saturates to 448
  EXPECT_EQ(ph::f32_to_f8e4m3(-INFINITY), 0xfe);
  EXPECT_EQ(ph::f32_to_f8e5m2(1e9f), 0x7b);      // 57344
  EXPECT_EQ(ph::f32_to_f8e5m2(INFINITY), 0x7c);  // infinities stay
  EXPECT_EQ(ph::parse_dtype("f8e4m3"), ph::DType::f8e4m3);
  EXPECT_EQ(ph::dtype_name(ph::DType::u8), "u8");
  EXPECT_EQ(ph::dtype_size(ph::DType::f8e5m2), 1);
  EXPECT_EQ(ph::compute_dtype(ph::DType::u8), ph::DType::i64);
  EXPECT_EQ(ph::compute_dtype(ph::DType::f8e4m3), ph::DType::f32);
}

// --- conversions in kernels -------------------------------------------------------------------

// Stores to every new dtype, casts in place, and loads back.
std::tuple<ph::Tensor, ph::Tensor, ph::Tensor, ph::Tensor> conversions(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto e4 = ph::empty({m, n}, ph::DType::f8e4m3);
  auto e5 = ph::empty({m, n}, ph::DType::f8e5m2);
  auto c4 = ph::empty({m, n}), c5 = ph::empty({m, n});
  for (auto [tm, tn] : ph::tile(m, n)) {
    e4[tm, tn] = x[tm, tn];
    e5[tm, tn] = x[tm, tn];
    c4[tm, tn] = ph::cast(x[tm, tn], ph::DType::f8e4m3);
    c5[tm, tn] = ph::cast(x[tm, tn] * 2.0f, ph::DType::f8e5m2);
  }
  return {e4, e5, c4, c5};
}

ph::Array probes_2d(int64_t m, int64_t n) {
  std::vector<float> v = probe_values();
  ph::Array x = ph::Array::empty({m, n}, ph::DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) x.set(i, v[static_cast<size_t>(i) % v.size()]);
  return x;
}

void expect_same(const ph::Array& got, const ph::Array& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  for (int64_t i = 0; i < got.numel(); ++i) {
    double g = got.get(i), w = want.get(i);
    if (std::isnan(w))
      EXPECT_TRUE(std::isnan(g)) << what << " at " << i;
    else
      EXPECT_EQ(g, w) << what << " at " << i;
  }
}

TEST(Fp8, StoresAndCastsRoundLikeTheHostOnCpuAndInTheInterpreter) {
  ph::Kernel k("conversions", conversions);
  ph::Array x = probes_2d(9, 131);
  auto got = k.run({x});
  auto interp = k.interpret({x});
  ph::Array want4 = x.to(ph::DType::f8e4m3), want5 = x.to(ph::DType::f8e5m2);
  ph::Array c4 = ph::Array::empty({9, 131}, ph::DType::f32), c5 = ph::Array::empty({9, 131}, ph::DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) {
    c4.set(i, ph::f8e4m3_to_f32(ph::f32_to_f8e4m3(static_cast<float>(x.get(i)))));
    c5.set(i, ph::f8e5m2_to_f32(ph::f32_to_f8e5m2(static_cast<float>(x.get(i) * 2))));
  }
  for (const auto* r : {&got, &interp}) {
    expect_same(r->at(0), want4, "e4m3 store");
    expect_same(r->at(1), want5, "e5m2 store");
    expect_same(r->at(2), c4, "e4m3 cast");
    expect_same(r->at(3), c5, "e5m2 cast");
    // Bit for bit: the stored codes are the host's.
    EXPECT_EQ(std::memcmp(r->at(0).data(), want4.data(), static_cast<size_t>(x.numel())), 0);
    EXPECT_EQ(std::memcmp(r->at(1).data(), want5.data(), static_cast<size_t>(x.numel())), 0);
  }
}

// A bf16 store and a cast to bf16 that stays in f32 (ph_rt::f32_to_bf16, ph_rt::round_to_bf16 in
// vector loops).
std::tuple<ph::Tensor, ph::Tensor> bf16_roundings(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto stored = ph::empty({m, n}, ph::DType::bf16), cast = ph::empty({m, n});
  for (auto [tm, tn] : ph::tile(m, n)) {
    stored[tm, tn] = x[tm, tn];
    cast[tm, tn] = ph::cast(x[tm, tn], ph::DType::bf16);
  }
  return {stored, cast};
}

// Every bit of the rounding, in the generated (vectorized) code and in the interpreter, against
// the host's f32_to_bf16: ties to even both ways, a carry into the exponent, max float to inf,
// subnormals, infinities, and NaNs (payloads in the dropped bits only, signalling, negative)
// kept NaN with their sign and high payload, the quiet bit set; then random bit patterns.
TEST(Bf16, StoresAndCastsRoundBitForBitOnCpuAndInTheInterpreter) {
  std::vector<uint32_t> patterns = {0x3f808000u, 0x3f818000u, 0x3f808001u, 0xbf818000u, 0x3fffc000u, 0x7f7fffffu,
                                    0x7f7f7fffu, 0x00000001u, 0x80008000u, 0x007fffffu, 0x7f800000u, 0xff800000u,
                                    0x7f800001u, 0x7fc00000u, 0xffffffffu, 0x7f80ffffu, 0xff800001u, 0x00000000u};
  std::mt19937 rng(5);
  while (patterns.size() < 9 * 131) patterns.push_back(static_cast<uint32_t>(rng()));
  ph::Array x = ph::Array::empty({9, 131}, ph::DType::f32);
  std::memcpy(x.data(), patterns.data(), patterns.size() * 4);
  ph::Kernel k("bf16_roundings", bf16_roundings);
  const auto got = k.run({x}), interp = k.interpret({x});
  for (const auto* r : {&got, &interp})
    for (size_t i = 0; i < patterns.size(); ++i) {
      float f;
      std::memcpy(&f, &patterns[i], 4);
      const uint16_t want = ph::f32_to_bf16(f);
      uint16_t stored;
      uint32_t cast;
      std::memcpy(&stored, static_cast<const char*>(r->at(0).data()) + i * 2, 2);
      std::memcpy(&cast, static_cast<const char*>(r->at(1).data()) + i * 4, 4);
      EXPECT_EQ(stored, want) << std::hex << patterns[i] << (r == &got ? " cpu" : " interpreter");
      EXPECT_EQ(cast, static_cast<uint32_t>(want) << 16)
          << std::hex << patterns[i] << (r == &got ? " cpu" : " interpreter");
    }
}

// An fp8 block loaded for a dot with a mask: its fill is an f32 number, which a bf16 buffer (where
// the dot's kernel takes bf16) would round.
template <int kFillTenths>
ph::Tensor masked_fp8_dot(ph::Tensor x, ph::Tensor w) {
  auto [m, k] = x.sizes<2>();
  auto out = ph::empty({m, w.size(1)});
  for (auto tm : ph::tile(m)) {
    auto a = ph::load(x, {tm, ph::all}, tm.index().unsqueeze(-1) % 3 > 0, kFillTenths / 10.0f);
    out[tm, ph::all] = ph::dot(a, w[ph::all, ph::all]);
  }
  return out;
}

TEST(Fp8, AMaskedLoadsFillIsNotRoundedByTheDotsBuffer) {
  ph::Array x = probes_2d(37, 40).to(ph::DType::f8e4m3);
  ph::Array w = ph::Array::random({40, 24}, ph::DType::bf16, 3);
  ph::Kernel tenth("masked_fp8_dot_tenth", masked_fp8_dot<1>);  // 0.1: no bf16 value
  ph::Kernel half("masked_fp8_dot_half", masked_fp8_dot<5>);    // 0.5: a bf16 value
  auto check = [&](auto& k, const char* what, bool fill_is_bf16) {
    // The load's buffer (the only 16-bit scratch the launch could have): f32 where the fill is
    // not a bf16 value, on every host.
    const std::string block = k.compile({x, w}).block_ir();
    // The dot's micro-kernel (`dot %N: micro-kernel NAME, ...`): where it takes bf16, a bf16 fill
    // keeps the 16-bit buffer (on hosts whose kernels all widen, f32 either way).
    ASSERT_NE(block.find("micro-kernel "), std::string::npos) << block;
    const size_t at = block.find("micro-kernel ") + 13;
    const std::string kernel = block.substr(at, block.find_first_of(", \n", at) - at);
    if (!fill_is_bf16 || !ph::runtime::gemm_kernel_takes_bf16(kernel)) {
      EXPECT_EQ(block.find(" bf16 ["), std::string::npos) << block;
    } else {
      EXPECT_NE(block.find(" bf16 ["), std::string::npos) << block;
    }
    const ph::Array got = k.run({x, w}).at(0), want = k.interpret({x, w}).at(0);
    for (int64_t i = 0; i < want.numel(); ++i)
      ASSERT_NEAR(got.get(i), want.get(i), 1e-5 * (1 + std::abs(want.get(i)))) << what << " element " << i;
  };
  check(tenth, "fill 0.1", false);
  check(half, "fill 0.5", true);
}

// A view of a bf16 load (here ph::split's even and odd columns) feeding a dot holds the same
// bf16 values: its buffer is bf16 too, so the dot takes the bf16 path (int4_matmul's columns of
// a had gone through f32 buffers, and both GEMMs widened). A masked load's fill that bf16 cannot
// hold keeps the buffer f32, through the view as well.
template <int kFillTenths>
ph::Tensor split_columns_dot(ph::Tensor x, ph::Tensor w) {
  auto [m, k] = x.sizes<2>();
  auto pairs = x.view({m, k / 2, 2});
  auto out = ph::empty({m, w.size(1)});
  for (auto tm : ph::tile(m)) {
    auto both = kFillTenths < 0 ? pairs[tm, ph::all, ph::all]
                                : ph::load(pairs, {tm, ph::all, ph::all},
                                           (tm.index() % 3 > 0).unsqueeze(-1).unsqueeze(-1), kFillTenths / 10.0f);
    auto [even, odd] = ph::split(both);
    out[tm, ph::all] = ph::dot(even, w[ph::all, ph::all]) + ph::dot(odd, w[ph::all, ph::all]);
  }
  return out;
}

TEST(Bf16, AViewOfABf16LoadFeedsTheDotInBf16) {
  ph::Array x = ph::Array::random({37, 80}, ph::DType::bf16, 5);
  ph::Array w = ph::Array::random({40, 24}, ph::DType::bf16, 6);
  ph::Kernel plain("split_columns_dot", split_columns_dot<-1>);
  ph::Kernel tenth("split_columns_dot_tenth", split_columns_dot<1>);  // 0.1: no bf16 value
  auto check = [&](auto& k, bool bf16_buffers) {
    const std::string block = k.compile({x, w}).block_ir();
    ASSERT_NE(block.find("micro-kernel "), std::string::npos) << block;
    const size_t at = block.find("micro-kernel ") + 13;
    const std::string kernel = block.substr(at, block.find_first_of(", \n", at) - at);
    // (a materialized value's buffer: `scratch %N bf16 [...]`, not a staging buffer's)
    const bool bf16_values = std::regex_search(block, std::regex("scratch %[0-9]+ bf16 \\["));
    EXPECT_EQ(bf16_values, bf16_buffers && ph::runtime::gemm_kernel_takes_bf16(kernel)) << block;
    const ph::Array got = k.run({x, w}).at(0), want = k.interpret({x, w}).at(0);
    for (int64_t i = 0; i < want.numel(); ++i)
      ASSERT_NEAR(got.get(i), want.get(i), 1e-5 * (1 + std::abs(want.get(i)))) << k.name() << " element " << i;
  };
  check(plain, true);
  check(tenth, false);
}

// Loads of every fp8 code and of 8-bit integers (u8 zero-extends, i8 sign-extends), and
// integer stores that wrap.
std::tuple<ph::Tensor, ph::Tensor, ph::Tensor, ph::Tensor, ph::Tensor, ph::Tensor> widen(ph::Tensor a, ph::Tensor b,
                                                                                         ph::Tensor i, ph::Tensor u) {
  auto n = a.size(0);
  auto fa = ph::empty({n}), fb = ph::empty({n});
  auto i0 = ph::empty({n}, ph::DType::i64), i1 = ph::empty({n}, ph::DType::i64);
  auto i2 = ph::empty({n}, ph::DType::i8), i3 = ph::empty({n}, ph::DType::u8);
  for (auto t : ph::tile(n)) {
    fa[t] = a[t];
    fb[t] = b[t];
    i0[t] = i[t];
    i1[t] = u[t];
    i2[t] = u[t] * 3 + 7;                             // a store wraps into [-128, 127]
    i3[t] = ph::cast(i[t] - 300, ph::DType::u8) + 0;  // a cast wraps into [0, 255]
  }
  return {fa, fb, i0, i1, i2, i3};
}

TEST(Fp8, LoadsWidenEveryCodeAndNarrowIntegersWrap) {
  ph::Kernel k("widen", widen);
  const int64_t n = 256;
  ph::Array a = ph::Array::empty({n}, ph::DType::f8e4m3), b = ph::Array::empty({n}, ph::DType::f8e5m2),
            i = ph::Array::empty({n}, ph::DType::i8), u = ph::Array::empty({n}, ph::DType::u8);
  for (int64_t c = 0; c < n; ++c) {
    static_cast<uint8_t*>(a.data())[c] = static_cast<uint8_t>(c);
    static_cast<uint8_t*>(b.data())[c] = static_cast<uint8_t>(c);
    static_cast<uint8_t*>(i.data())[c] = static_cast<uint8_t>(c);
    static_cast<uint8_t*>(u.data())[c] = static_cast<uint8_t>(c);
  }
  for (const auto& r : {k.run({a, b, i, u}), k.interpret({a, b, i, u})}) {
    for (int64_t c = 0; c < n; ++c) {
      double wa = fp8_value(c, 3, 7, true), wb = fp8_value(c, 2, 15, false);
      EXPECT_TRUE(std::isnan(wa) ? std::isnan(r[0].get(c)) : r[0].get(c) == wa) << c;
      EXPECT_TRUE(std::isnan(wb) ? std::isnan(r[1].get(c)) : r[1].get(c) == wb) << c;
      int64_t sc = static_cast<int8_t>(c);
      EXPECT_EQ(r[2].get(c), sc);
      EXPECT_EQ(r[3].get(c), c);
      EXPECT_EQ(r[4].get(c), static_cast<int8_t>(static_cast<uint8_t>(c * 3 + 7)));
      EXPECT_EQ(r[5].get(c), static_cast<uint8_t>(sc - 300));
    }
  }
}

// --- integer arithmetic -----------------------------------------------------------------------

int64_t floordiv(int64_t a, int64_t b) {
  if (b == 0) return 0;
  return static_cast<int64_t>(std::floor(static_cast<double>(a) / static_cast<double>(b)));
}
int64_t remainder(int64_t a, int64_t b) { return b == 0 ? 0 : a - floordiv(a, b) * b; }
int64_t shl(int64_t a, int64_t n) { return n < 0 || n > 63 ? 0 : a * (int64_t{1} << n); }
int64_t shr(int64_t a, int64_t n) {
  return static_cast<int64_t>(std::floor(static_cast<double>(a) / std::ldexp(1.0, n < 0 || n > 63 ? 63 : n)));
}

constexpr int kIntOps = 11;

// A kernel over tensors that returns a list of outputs (one per op: the pallas backend takes
// no computed integer index, so the ops do not share one stacked output).
std::unique_ptr<ph::KernelBase> list_kernel(const std::string& name, int inputs,
                                            std::vector<ph::Tensor> (*fn)(const std::vector<ph::Tensor>&)) {
  return std::make_unique<ph::KernelBase>(name, std::vector<bool>(inputs, true),
                                          [fn](const std::vector<ph::KernelBase::TraceArg>& a) {
                                            std::vector<ph::Tensor> t;
                                            for (const auto& x : a) t.push_back(x.tensor);
                                            return fn(t);
                                          });
}

std::vector<ph::Tensor> int_ops(const std::vector<ph::Tensor>& in) {
  auto [m, n] = in[0].sizes<2>();
  std::vector<ph::Tensor> o;
  for (int k = 0; k < kIntOps; ++k) o.push_back(ph::empty({m, n}, ph::DType::i64));
  for (auto [tm, tn] : ph::tile(m, n)) {
    auto x = in[0][tm, tn], y = in[1][tm, tn], c = in[2][tm, tn];
    auto out = [&](int k) { return o[k][tm, tn]; };
    out(0) = ph::floordiv(x, y);
    out(1) = x % y;
    out(2) = x & y;
    out(3) = x | y;
    out(4) = x ^ y;
    out(5) = ~x;
    out(6) = x << c;
    out(7) = x >> c;
    out(8) = ph::clamp(x, -3, 5);
    out(9) = x % 7 + ph::floordiv(x, -4);  // integer literals stay integers
    out(10) = ph::cast(x > y, ph::DType::i64) + ph::cast((x > 0) ^ (y > 0), ph::DType::i64) * 2 +
              ph::cast(~(x < y), ph::DType::i64) * 4;
  }
  return o;
}

struct IntInputs {
  ph::Array a, b, s;
};

// Operands of both signs (zero divisors included) and shift counts in and out of range; values
// small enough for the 32-bit integers of the pallas backend.
IntInputs int_inputs(int64_t m, int64_t n, bool wide_counts) {
  IntInputs r{ph::Array::empty({m, n}, ph::DType::i64), ph::Array::empty({m, n}, ph::DType::i64),
              ph::Array::empty({m, n}, ph::DType::i64)};
  const int64_t counts[] = {0, 1, 3, 7, 20, -1, -40, 64, 100, 31, 30};
  for (int64_t i = 0; i < r.a.numel(); ++i) {
    r.a.set(i, static_cast<double>((i * 37 % 201) - 100));
    r.b.set(i, static_cast<double>((i * 11 % 17) - 8));
    int64_t c = counts[i % (wide_counts ? 11 : 9)];
    r.s.set(i, static_cast<double>(c));
  }
  return r;
}

int64_t int_expected(int op, int64_t x, int64_t y, int64_t c) {
  switch (op) {
    case 0:
      return floordiv(x, y);
    case 1:
      return remainder(x, y);
    case 2:
      return x & y;
    case 3:
      return x | y;
    case 4:
      return x ^ y;
    case 5:
      return -x - 1;
    case 6:
      return shl(x, c);
    case 7:
      return shr(x, c);
    case 8:
      return std::max<int64_t>(-3, std::min<int64_t>(5, x));
    case 9:
      return remainder(x, 7) + floordiv(x, -4);
    default:
      return (x > y) + 2 * ((x > 0) != (y > 0)) + 4 * !(x < y);
  }
}

void check_int_ops(const std::vector<ph::Array>& out, const IntInputs& in, const std::string& what) {
  const int64_t e = in.a.numel();
  ASSERT_EQ(out.size(), static_cast<size_t>(kIntOps)) << what;
  for (int op = 0; op < kIntOps; ++op)
    for (int64_t i = 0; i < e; ++i) {
      auto x = static_cast<int64_t>(in.a.get(i)), y = static_cast<int64_t>(in.b.get(i)),
           c = static_cast<int64_t>(in.s.get(i));
      ASSERT_EQ(out[op].get(i), int_expected(op, x, y, c))
          << what << ": op " << op << " of " << x << ", " << y << ", " << c;
    }
}

TEST(Integers, FloorDivRemainderBitwiseAndShiftsFollowTheirDefinitions) {
  auto k = list_kernel("int_ops", 3, int_ops);
  IntInputs in = int_inputs(7, 45, true);
  check_int_ops(k->run({in.a, in.b, in.s}), in, "cpu");
  check_int_ops(k->interpret({in.a, in.b, in.s}), in, "interpreter");
}

// Division by zero and INT64_MIN / -1 never trap on the cpu backend.
ph::Tensor int_edges(ph::Tensor a, ph::Tensor b) {
  auto n = a.size(0);
  auto out = ph::empty({2, n}, ph::DType::i64);
  for (auto t : ph::tile(n)) {
    out[0, t] = ph::floordiv(a[t], b[t]);
    out[1, t] = a[t] % b[t];
  }
  return out;
}

TEST(Integers, DivisionByZeroAndOverflowAreDefinedOnTheCpu) {
  ph::Kernel k("int_edges", int_edges);
  ph::Array a = ph::Array::empty({4}, ph::DType::i64), b = ph::Array::empty({4}, ph::DType::i64);
  int64_t av[] = {std::numeric_limits<int64_t>::min(), 5, -5, std::numeric_limits<int64_t>::min()};
  int64_t bv[] = {-1, 0, 0, 0};
  std::memcpy(a.data(), av, sizeof av);
  std::memcpy(b.data(), bv, sizeof bv);
  ph::Array out = k.run({a, b}).at(0);
  const auto* o = static_cast<const int64_t*>(out.data());
  EXPECT_EQ(o[0], std::numeric_limits<int64_t>::min());  // wraps
  EXPECT_EQ(o[1], 0);
  EXPECT_EQ(o[2], 0);
  EXPECT_EQ(o[4], 0);
  EXPECT_EQ(o[5], 0);
  EXPECT_EQ(o[6], 0);
}

// --- float ops ---------------------------------------------------------------------------------

constexpr int kFloatOps = 11;

std::vector<ph::Tensor> float_ops(const std::vector<ph::Tensor>& in) {
  auto [m, n] = in[0].sizes<2>();
  std::vector<ph::Tensor> o;
  for (int k = 0; k < kFloatOps; ++k) o.push_back(ph::empty({m, n}));
  for (auto [tm, tn] : ph::tile(m, n)) {
    auto a = in[0][tm, tn], b = in[1][tm, tn];
    auto out = [&](int k) { return o[k][tm, tn]; };
    out(0) = ph::round(a);
    out(1) = ph::floor(a);
    out(2) = ph::ceil(a);
    out(3) = ph::trunc(a);
    out(4) = ph::erf(a * 0.25f);
    out(5) = ph::gelu(a * 0.25f, ph::Gelu::exact);
    out(6) = ph::clamp(a, -2.5f, 1.5f);
    out(7) = ph::floordiv(a, b);
    out(8) = a % b;
    out(9) = ph::gelu(a * 0.25f);  // still the tanh approximation
    out(10) = ph::exp2(a);
  }
  return o;
}

double float_expected(int op, double a, double b) {
  switch (op) {
    case 0:
      return std::nearbyint(a);
    case 1:
      return std::floor(a);
    case 2:
      return std::ceil(a);
    case 3:
      return std::trunc(a);
    case 4:
      return std::erf(a * 0.25);
    case 5:
      return 0.5 * (a * 0.25) * (1 + std::erf(a * 0.25 / std::sqrt(2.0)));
    case 6:
      return std::isnan(a) ? a : std::max(-2.5, std::min(1.5, a));
    case 7:
      return std::floor(a / b);
    case 8: {
      double r = std::fmod(a, b);
      return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
    }
    case 10:
      return std::exp2(a);
    default: {
      double u = a * 0.25;
      return 0.5 * u * (1 + std::tanh(std::sqrt(2 / M_PI) * (u + 0.044715 * u * u * u)));
    }
  }
}

// Halves (ties for round), integers, negatives; divisors that divide exactly or not.
ph::Array float_inputs(int64_t m, int64_t n, int which) {
  ph::Array x = ph::Array::empty({m, n}, ph::DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i)
    x.set(i, which == 0 ? static_cast<double>(i % 41 - 20) * 0.5 + (i % 3 == 0 ? 0.25 : 0.0)
                        : static_cast<double>((i % 7) - 3) * 1.5 + (i % 7 == 3 ? 0.75 : 0.0));
  if (which == 0) x.set(5, kNaN);
  return x;
}

void check_float_ops(const std::vector<ph::Array>& out, const ph::Array& x, const ph::Array& y,
                     const std::string& what) {
  const int64_t e = x.numel();
  for (int op = 0; op < kFloatOps; ++op)
    for (int64_t i = 0; i < e; ++i) {
      double want = float_expected(op, x.get(i), y.get(i)), got = out[op].get(i);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << what << " op " << op << " at " << i;
        continue;
      }
      double tol = op == 4 || op == 5 || op == 9 ? 2e-6 : op == 10 ? 3e-7 * std::fabs(want) : 0;
      EXPECT_NEAR(got, want, tol) << what << " op " << op << " of " << x.get(i) << ", " << y.get(i);
    }
}

TEST(Pointwise, RoundingsErfExactGeluClampFloatModuloAndExp2) {
  auto k = list_kernel("float_ops", 2, float_ops);
  ph::Array x = float_inputs(5, 67, 0), y = float_inputs(5, 67, 1);
  check_float_ops(k->run({x, y}), x, y, "cpu");
  check_float_ops(k->interpret({x, y}), x, y, "interpreter");
}

// --- u8 nibbles into a dot (the int4 weight-only matmul's unpacking) --------------------------

// w [K/2, N] packs rows 2k (low nibble) and 2k+1 (high nibble) of an int4 matrix with values
// nibble - 8; x [M, K] is split into its even and odd columns by the caller.
ph::Tensor nibble_matmul(ph::Tensor xe, ph::Tensor xo, ph::Tensor w) {
  auto [m, kh] = xe.sizes<2>();
  auto n = w.size(1);
  auto out = ph::empty({m, n});
  for (auto [tm, tn] : ph::tile(m, n)) {
    ph::Var acc = ph::zeros({tm, tn});
    for (auto tk : ph::tile(kh)) {
      auto p = w[tk, tn];
      auto lo = ph::cast((p & 15) - 8, ph::DType::f32);
      auto hi = ph::cast(((p >> 4) & 15) - 8, ph::DType::bf16);
      acc = acc + ph::dot(xe[tm, tk], lo) + ph::dot(xo[tm, tk], hi);
    }
    out[tm, tn] = acc;
  }
  return out;
}

TEST(Integers, U8NibblesUnpackIntoADot) {
  ph::Kernel k("nibble_matmul", nibble_matmul);
  const int64_t m = 13, kh = 37, n = 19;
  ph::Array xe = ph::Array::random({m, kh}, ph::DType::f32, 1), xo = ph::Array::random({m, kh}, ph::DType::f32, 2);
  ph::Array w = ph::Array::empty({kh, n}, ph::DType::u8);
  for (int64_t i = 0; i < w.numel(); ++i) w.set(i, static_cast<double>((i * 73 + 11) % 256));
  ph::Array want = ph::Array::zeros({m, n}, ph::DType::f32);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < kh; ++p) {
        auto byte = static_cast<int64_t>(w.get(p * n + j));
        s += xe.get(i * kh + p) * static_cast<double>((byte & 15) - 8) +
             xo.get(i * kh + p) * static_cast<double>((byte >> 4) - 8);
      }
      want.set(i * n + j, s);
    }
  for (const auto& r : {k.run({xe, xo, w}), k.interpret({xe, xo, w})})
    for (int64_t i = 0; i < want.numel(); ++i) EXPECT_NEAR(r.at(0).get(i), want.get(i), 1e-4) << i;
}

// --- typing errors at the user's line ---------------------------------------------------------

ph::Tensor bad_bitwise(ph::Tensor x) {
  auto out = ph::empty_like(x);
  for (auto t : ph::tile(x.size(0))) out[t] = x[t] & x[t];  // f32: not an integer
  return out;
}

ph::Tensor bad_shift(ph::Tensor x, ph::Tensor i) {
  auto out = ph::empty_like(i);
  for (auto t : ph::tile(x.size(0))) out[t] = i[t] << x[t];
  return out;
}

ph::Tensor bad_mixed(ph::Tensor i) {
  auto out = ph::empty_like(i);
  for (auto t : ph::tile(i.size(0))) out[t] = ph::cast(i[t] & (i[t] > 0), ph::DType::i64);
  return out;
}

template <class F>
void expect_error_at_line(F&& run, const std::string& fragment) {
  try {
    run();
    FAIL() << "expected a UserError containing '" << fragment << "'";
  } catch (const ph::UserError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
    EXPECT_NE(msg.find("test_numeric.cpp:"), std::string::npos) << msg;
  }
}

TEST(Integers, BitwiseOpsOnFloatsOrMixedOperandsAreErrorsAtTheUsersLine) {
  ph::Array x = ph::Array::random({8}, ph::DType::f32, 1), i = ph::Array::zeros({8}, ph::DType::i64);
  ph::Kernel a("bad_bitwise", bad_bitwise);
  ph::Kernel b("bad_shift", bad_shift);
  ph::Kernel c("bad_mixed", bad_mixed);
  expect_error_at_line([&] { a.run({x}); }, "bitwise bit_and needs two integer or two boolean operands");
  expect_error_at_line([&] { b.run({x, i}); }, "shift shl needs integer operands");
  expect_error_at_line([&] { c.run({i}); }, "bitwise bit_and needs two integer or two boolean operands");
}

// fp8 tensors on a TPU generation without fp8 are refused, naming the load.
ph::Tensor fp8_copy(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m, n});
  for (auto [tm, tn] : ph::tile(m, n)) out[tm, tn] = x[tm, tn];
  return out;
}

TEST(Fp8, PallasRefusesFp8OnTpusWithoutIt) {
  ph::Kernel k("fp8_copy", fp8_copy);
  ph::Array x = ph::Array::zeros({16, 256}, ph::DType::f8e4m3);
  expect_error_at_line([&] { k.emit_pallas({x}, "v5e"); }, "fp8 tensors need a TPU with fp8 support");
  EXPECT_NO_THROW(k.emit_pallas({x}, "v7x"));
}

// --- the same kernels as Pallas, in TPU interpret mode ----------------------------------------

TEST(Pallas, NumericKernelsMatchInInterpretMode) {
  ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
  ph::Kernel conv("conversions", conversions);
  auto ints = list_kernel("int_ops", 3, int_ops);
  auto floats = list_kernel("float_ops", 2, float_ops);
  ph::Kernel nib("nibble_matmul", nibble_matmul);
  ph::Kernel wid("widen", widen);
  ph::Array x = probes_2d(16, 384);
  IntInputs in = int_inputs(8, 256, false);  // shift counts inside [0, 31] or beyond 63
  ph::Array fx = float_inputs(8, 256, 0), fy = float_inputs(8, 256, 1);
  ph::Array xe = ph::Array::random({16, 256}, ph::DType::f32, 1), xo = ph::Array::random({16, 256}, ph::DType::f32, 2);
  ph::Array w = ph::Array::empty({256, 128}, ph::DType::u8);
  for (int64_t i = 0; i < w.numel(); ++i) w.set(i, static_cast<double>((i * 73 + 11) % 256));
  ph::Array a8 = ph::Array::empty({256}, ph::DType::f8e4m3), b8 = ph::Array::empty({256}, ph::DType::f8e5m2),
            i8 = ph::Array::empty({256}, ph::DType::i8), u8 = ph::Array::empty({256}, ph::DType::u8);
  for (int c = 0; c < 256; ++c)
    for (auto* arr : {&a8, &b8, &i8, &u8}) static_cast<uint8_t*>(arr->data())[c] = static_cast<uint8_t>(c);
  std::vector<pallas::InterpretCase> runs = {
      {"conversions", conv.emit_pallas({x}, "v7x").source, "conversions", {x}, {}, true},
      {"int_ops", ints->emit_pallas({in.a, in.b, in.s}, "v7x").source, "int_ops", {in.a, in.b, in.s}, {}, true},
      {"float_ops", floats->emit_pallas({fx, fy}, "v7x").source, "float_ops", {fx, fy}, {}, true},
      {"nibble_matmul", nib.emit_pallas({xe, xo, w}, "v7x").source, "nibble_matmul", {xe, xo, w}, {}, true},
      {"widen", wid.emit_pallas({a8, b8, i8, u8}, "v7x").source, "widen", {a8, b8, i8, u8}, {}, true},
  };
  std::vector<std::vector<ph::Array>> want = {conv.run({x}), ints->run({in.a, in.b, in.s}), floats->run({fx, fy}),
                                              nib.run({xe, xo, w}), wid.run({a8, b8, i8, u8})};
  check_int_ops(want[1], in, "cpu");
  auto results = pallas::run_in_interpret_mode(runs);
  for (size_t k = 0; k < results.size(); ++k) {
    SCOPED_TRACE(runs[k].name);
    ASSERT_TRUE(results[k].ok) << results[k].error;
    EXPECT_FALSE(results[k].races);
    EXPECT_EQ(results[k].export_status, "ok");
    ASSERT_EQ(results[k].outputs.size(), want[k].size());
    for (size_t o = 0; o < want[k].size(); ++o) {
      const ph::Array &g = results[k].outputs[o], &e = want[k][o];
      ASSERT_EQ(g.numel(), e.numel());
      double tol = runs[k].name == "float_ops" ? 2e-6 : runs[k].name == "nibble_matmul" ? 1e-3 : 0;
      for (int64_t i = 0; i < e.numel(); ++i) {
        double gv = g.get(i), ev = e.get(i);
        if (std::isnan(ev)) {
          EXPECT_TRUE(std::isnan(gv)) << "output " << o << " at " << i;
        } else if (std::isinf(ev)) {
          EXPECT_EQ(gv, ev) << "output " << o << " at " << i;
        } else {
          EXPECT_NEAR(gv, ev, tol * std::max(1.0, std::abs(ev))) << "output " << o << " at " << i;
        }
      }
    }
  }
}

}  // namespace

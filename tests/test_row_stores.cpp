// bf16 and f16 stores converted a row at a time (emit/row_stores.cpp): the row is computed in f32
// into a buffer and rounded by ph_rt::f32_row_to_bf16 (vcvtne2ps2bf16 where the JIT targets
// AVX-512-BF16) or f32_row_to_f16 (vcvtps2ph), which must give the bits of rounding each element
// in the loop: ties to even, NaNs quieted with their payload's high bits, overflow to inf, f16
// denormal results, and f32 denormals (which vcvtne2ps2bf16 flushes to zero) rounded, not
// flushed. Rows with a tail after the groups of 32, a denormal alone in a group and groups of
// nothing but denormals; cached and streamed stores.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "parhelion/parhelion.h"
#include "ph_math.h"

namespace ph = parhelion;

namespace {

// out[rows, :] = x[rows, :] * s in a 16-bit dtype; with `kCast`, the product cast to it first
// (the row conversion rounds once: the cast is not rounded twice).
template <ph::DType kOut, bool kCast>
ph::Tensor scale_to_16_bits(ph::Tensor x, ph::Scalar s) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m, n}, kOut);
  for (auto rows : ph::tile(m)) {
    auto v = x[rows, ph::all] * s;
    if constexpr (kCast)
      out[rows, ph::all] = ph::cast(v, kOut);
    else
      out[rows, ph::all] = v;
  }
  return out;
}
ph::Kernel scale_bf16("row_stores_scale_to_bf16", scale_to_16_bits<ph::DType::bf16, false>);
ph::Kernel cast_bf16("row_stores_cast_to_bf16", scale_to_16_bits<ph::DType::bf16, true>);
ph::Kernel scale_f16("row_stores_scale_to_f16", scale_to_16_bits<ph::DType::f16, false>);
ph::Kernel cast_f16("row_stores_cast_to_f16", scale_to_16_bits<ph::DType::f16, true>);

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Rows of `n` f32s: every special case of both roundings, and rows of denormals.
ph::Array special_rows(int64_t m, int64_t n) {
  const std::vector<uint32_t> specials = {
      0x3f808000u, 0x3f818000u, 0x3f808001u,               // bf16 ties: even kept half, odd, just over
      0x7f7fffffu, 0x7f800000u, 0xff800000u,               // FLT_MAX (rounds to inf), +-inf
      0x7fc00001u, 0xffa00001u, 0x7f800001u,               // NaNs, payload in the low bits
      0x80000000u, 0x00000000u, 0x00800000u,               // -0, +0, FLT_MIN
      0x00000001u, 0x807fffffu, 0x00408000u, 0x00418000u,  // f32 denormals, bf16 ties among them
      0x477fefffu, 0x477ff000u,                            // f16: just under overflow (65504), at it (inf)
      0x33800000u, 0x33000000u, 0x33c00000u, 0x387fc000u,  // f16 denormal results, ties among them
  };
  ph::Array x = ph::Array::zeros({m, n}, ph::DType::f32);
  float* p = x.data_as<float>();
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      float v = from_bits(0x3f800000u + static_cast<uint32_t>(r * 7919 + c * 104729) % 0x800000u) * (c % 3 ? 1 : -3);
      if (r % 4 == 1 && c < 32) v = from_bits(0x00000001u + static_cast<uint32_t>(c * 977));  // a group of them
      if (r % 4 == 2 && c == 40) v = from_bits(0x00012345u);  // one f32 denormal in a group
      if (r % 4 == 3) v = from_bits(specials[static_cast<size_t>(c) % specials.size()]);
      p[r * n + c] = v;
    }
  return x;
}

void expect_rounded_in_place_bits(ph::KernelBase& k, ph::DType out, int64_t m, int64_t n, const std::string& hints) {
  SCOPED_TRACE(k.name() + " [" + std::to_string(m) + "," + std::to_string(n) + "] cache_hints " + hints);
  ph::Array x = special_rows(m, n);
  const std::vector<ph::Arg> args = {x, 1.0};
  ph::CompiledKernel def = k.compile(args);
  ph::Config c = def.config();
  for (std::string& h : c.cache_hints) h = hints;
  ph::CompiledKernel ck = k.compile(args, &c);
  const bool bf16 = out == ph::DType::bf16;
  // The path under test, and the streamed one where asked for.
  EXPECT_NE(ck.source().find(bf16 ? "ph_rt::f32_row_to_bf16(" : "ph_rt::f32_row_to_f16("), std::string::npos);
  if (hints == "stream") {
    EXPECT_NE(ck.source().find("ph_stream_store(&T1["), std::string::npos);
  }
  const ph::Array got = ck.run(args).at(0);
  const float* xs = x.data_as<float>();
  const uint16_t* bits = static_cast<const uint16_t*>(got.data());
  int wrong = 0;
  for (int64_t i = 0; i < m * n && wrong < 5; ++i) {
    const float v = xs[i] * 1.0f;  // (the kernel's product: a NaN quieted)
    const uint16_t want = bf16 ? ph_rt::f32_to_bf16(v) : ph_rt::f32_to_f16(v);
    if (bits[i] != want) {
      ++wrong;
      ADD_FAILURE() << "element " << i << ": f32 bits " << std::hex << ph_rt::f2u(xs[i]) << " stored as " << bits[i]
                    << ", rounded in the loop " << want;
    }
  }
}

TEST(RowStores, RowsConvertedApartKeepTheBitsOfRoundingEachElement) {
  const std::vector<std::pair<ph::KernelBase*, ph::DType>> kernels = {{&scale_bf16, ph::DType::bf16},
                                                                      {&cast_bf16, ph::DType::bf16},
                                                                      {&scale_f16, ph::DType::f16},
                                                                      {&cast_f16, ph::DType::f16}};
  for (const auto& [k, dt] : kernels)
    for (const char* hints : {"none", "stream"}) {
      expect_rounded_in_place_bits(*k, dt, 12, 100, hints);  // 3 groups of 32 and a tail of 4
      expect_rounded_in_place_bits(*k, dt, 9, 1100, hints);  // over one 1024-float chunk of the buffer
    }
}

// Rows shorter than one group round in the loop that computes them.
TEST(RowStores, ShortRowsAreRoundedInTheLoop) {
  ph::Array x = special_rows(8, 16);
  const std::string s = scale_bf16.compile({x, 1.0}).source();
  EXPECT_EQ(s.find("ph_rt::f32_row_to_bf16("), std::string::npos);
  EXPECT_NE(s.find("= ph_rt::f32_to_bf16(static_cast<float>("), std::string::npos);
}

}  // namespace

// Test helpers for kernels whose compiled results are compared with the reference interpreter's
// exactly, or nearly: inputs whose sums and products are exact in f32 (multiples of 1/16 in
// [-4, 4)), a value costly enough to be materialized, and the comparison of every output.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "parhelion/parhelion.h"

namespace exact_rows {

// Multiples of 1/16 in [-4, 4): every value of `costly` and every row sum of them is exact.
inline parhelion::Array sixteenths(parhelion::Shape shape, uint64_t seed) {
  parhelion::Array a = parhelion::Array::random(shape, parhelion::DType::f32, seed, -4.0, 4.0);
  for (int64_t i = 0; i < a.numel(); ++i) a.set(i, std::floor(a.get(i) * 16) / 16);
  return a;
}

// A value costly enough to be materialized (more than six ops), exact in f32 for sixteenths and
// not exact in bf16 or f16.
inline parhelion::Tensor costly(parhelion::Tensor x) { return (x * x + x * 3.0f) + (x * 0.5f + 1.0f) * (x - 0.25f); }

// Every element of every output of `got` within `tolerance` (relative: times 1 + |want|) of
// `want`'s; a NaN where `want` has one.
inline void expect_outputs_near(const std::vector<parhelion::Array>& got, const std::vector<parhelion::Array>& want,
                                double tolerance) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t o = 0; o < got.size(); ++o)
    for (int64_t i = 0; i < want[o].numel(); ++i) {
      const double g = got[o].get(i), w = want[o].get(i);
      if (std::isnan(w)) {
        EXPECT_TRUE(std::isnan(g)) << "output " << o << " element " << i;
        continue;
      }
      ASSERT_LE(std::abs(g - w), tolerance * (1 + std::abs(w))) << "output " << o << " element " << i;
    }
}

}  // namespace exact_rows

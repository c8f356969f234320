#include "runtime/gemm/throughput.h"

#include <immintrin.h>

namespace parhelion::runtime {
namespace {

constexpr int kChains = 16;

// The sum of the chains' lanes, through memory: g++ 12's _mm512_reduce_add_ps trips
// -Wuninitialized inside its own header.
__attribute__((target("avx512f"))) float sum_chains(const __m512* acc) {
  alignas(64) float lanes[16];
  float sum = 0;
  for (int i = 0; i < kChains; ++i) {
    _mm512_store_ps(lanes, acc[i]);
    for (float x : lanes) sum += x;
  }
  return sum;
}

}  // namespace

__attribute__((target("avx512f,fma"))) float f32_fma_avx512_loop(int64_t iterations) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it)
#pragma GCC unroll 16
    for (__m512& x : acc) x = _mm512_fmadd_ps(x, a, b);
  return sum_chains(acc);
}

__attribute__((target("avx2,fma"))) float f32_fma_avx2_loop(int64_t iterations) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it)
#pragma GCC unroll 12
    for (__m256& x : acc) x = _mm256_fmadd_ps(x, a, b);
  float sum = 0;
  alignas(32) float lanes[8];
  for (const __m256& x : acc) {
    _mm256_store_ps(lanes, x);
    sum += lanes[0];
  }
  return sum;
}

__attribute__((target("avx512f,avx512bf16"))) float bf16_dot_avx512_loop(int64_t iterations) {
  __m512 acc[kChains];
  for (__m512& x : acc) x = _mm512_setzero_ps();
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380);
  for (int64_t it = 0; it < iterations; ++it)
#pragma GCC unroll 16
    for (__m512& x : acc) x = _mm512_dpbf16_ps(x, a, b);
  return sum_chains(acc);
}

}  // namespace parhelion::runtime

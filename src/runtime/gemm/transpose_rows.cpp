#include "runtime/gemm/transpose_rows.h"

#include <immintrin.h>

namespace parhelion::runtime {
namespace {

// Columns p0..p0+7 of `rows` (8 or 4) consecutive rows of a row-major f32 matrix, stored as
// 8 packed columns of a [k][mr] panel (column q at out + q * mr).
__attribute__((target("avx2"))) inline void transpose_8x8_into(const float* a, int64_t rs, int mr, float* out) {
  __m256 r[8], t[8], s[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(a + i * rs);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);      // rows i, i+1 interleaved: columns 0,1 | 4,5
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);  // columns 2,3 | 6,7
  }
  for (int h = 0; h < 8; h += 4) {  // rows h..h+3: s[h + q] holds column q | column q + 4
    s[h + 0] = _mm256_shuffle_ps(t[h], t[h + 2], _MM_SHUFFLE(1, 0, 1, 0));
    s[h + 1] = _mm256_shuffle_ps(t[h], t[h + 2], _MM_SHUFFLE(3, 2, 3, 2));
    s[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], _MM_SHUFFLE(1, 0, 1, 0));
    s[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int q = 0; q < 4; ++q) {
    _mm256_storeu_ps(out + q * mr, _mm256_permute2f128_ps(s[q], s[4 + q], 0x20));
    _mm256_storeu_ps(out + (q + 4) * mr, _mm256_permute2f128_ps(s[q], s[4 + q], 0x31));
  }
}

__attribute__((target("avx2"))) inline void transpose_4x8_into(const float* a, int64_t rs, int mr, float* out) {
  __m256 r[4], t[4];
  for (int i = 0; i < 4; ++i) r[i] = _mm256_loadu_ps(a + i * rs);
  t[0] = _mm256_unpacklo_ps(r[0], r[1]);
  t[1] = _mm256_unpackhi_ps(r[0], r[1]);
  t[2] = _mm256_unpacklo_ps(r[2], r[3]);
  t[3] = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 s[4] = {
      _mm256_shuffle_ps(t[0], t[2], _MM_SHUFFLE(1, 0, 1, 0)), _mm256_shuffle_ps(t[0], t[2], _MM_SHUFFLE(3, 2, 3, 2)),
      _mm256_shuffle_ps(t[1], t[3], _MM_SHUFFLE(1, 0, 1, 0)), _mm256_shuffle_ps(t[1], t[3], _MM_SHUFFLE(3, 2, 3, 2))};
  for (int q = 0; q < 4; ++q) {
    _mm_storeu_ps(out + q * mr, _mm256_castps256_ps128(s[q]));
    _mm_storeu_ps(out + (q + 4) * mr, _mm256_extractf128_ps(s[q], 1));
  }
}

}  // namespace

__attribute__((target("avx2"))) void transpose_rows_into_strips(const float* a, int64_t rs, int64_t m, int64_t k,
                                                                int mr, float* out) {
  for (int64_t i0 = 0; i0 < m; i0 += mr, out += mr * k) {
    const float* strip = a + i0 * rs;
    if (m - i0 < mr) {  // the ragged last strip: zero-padded, element by element
      for (int64_t p = 0; p < k; ++p)
        for (int r = 0; r < mr; ++r) out[p * mr + r] = i0 + r < m ? strip[r * rs + p] : 0.0f;
      continue;
    }
    const int64_t k8 = k / 8 * 8;
    for (int64_t p = 0; p < k8; p += 8) {
      int r = 0;
      for (; r + 8 <= mr; r += 8) transpose_8x8_into(strip + r * rs + p, rs, mr, out + p * mr + r);
      for (; r + 4 <= mr; r += 4) transpose_4x8_into(strip + r * rs + p, rs, mr, out + p * mr + r);
      for (; r < mr; ++r)
        for (int64_t q = p; q < p + 8; ++q) out[q * mr + r] = strip[r * rs + q];
    }
    for (int64_t p = k8; p < k; ++p)
      for (int r = 0; r < mr; ++r) out[p * mr + r] = strip[r * rs + p];
  }
}

}  // namespace parhelion::runtime

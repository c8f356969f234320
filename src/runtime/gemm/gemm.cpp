#include "runtime/gemm/gemm.h"

#include "parhelion/error.h"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "parhelion/dtype.h"

namespace parhelion::runtime {
namespace {

// --- host features ---------------------------------------------------------------------------

struct Features {
  bool avx2_fma = false, avx512 = false, avx512bf16 = false;
};

const Features& features() {
  static const Features f = [] {
    Features detected;
    __builtin_cpu_init();
    detected.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    detected.avx512 = __builtin_cpu_supports("avx512f") && detected.avx2_fma;
    unsigned a, b, c, d;
    detected.avx512bf16 = detected.avx512 && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5));
    return detected;
  }();
  return f;
}

// --- element access --------------------------------------------------------------------------

inline float load_elem(const void* p, int64_t i, int dt) {
  if (dt == PH_F32) return static_cast<const float*>(p)[i];
  uint16_t h = static_cast<const uint16_t*>(p)[i];
  return dt == PH_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

// --- micro-kernels: C[MR x NR] (+)= Apanel[k][MR] . Bpanel[k][NR] ------------------------------

// A is read at a[i * ars + p * acs] (in elements; for bf16, in k-pair words): packed panels
// have ars = 1, acs = MR; a row-major source block is read in place with ars = lda, acs = 1.
using MicroKernel = void (*)(int64_t k, const void* a, int64_t ars, int64_t acs, const void* b, float* c, int64_t ldc,
                             int accumulate);

// Writes (or adds) the MR x 32 accumulator tile to C.
template <int MR>
__attribute__((target("avx512f"), always_inline)) inline void store_tile(__m512* c0, __m512* c1, float* c, int64_t ldc,
                                                                         int accumulate) {
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    float* row = c + i * ldc;
    if (accumulate) {
      c0[i] = _mm512_add_ps(c0[i], _mm512_loadu_ps(row));
      c1[i] = _mm512_add_ps(c1[i], _mm512_loadu_ps(row + 16));
    }
    _mm512_storeu_ps(row, c0[i]);
    _mm512_storeu_ps(row + 16, c1[i]);
  }
}

// AVX-512 f32: MR rows x 32 columns, 2*MR accumulators (MR = 8: 16, fits powers-of-two
// blocks; MR = 12: 24, fewer loads per FMA).
template <int MR>
__attribute__((target("avx512f,fma"))) void ukr_avx512(int64_t k, const void* ap, int64_t ars, int64_t acs,
                                                       const void* bp, float* c, int64_t ldc, int accumulate) {
  const float* a = static_cast<const float*>(ap);
  const float* b = static_cast<const float*>(bp);
  __m512 c0[MR], c1[MR];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) c0[i] = c1[i] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      __m512 ai = _mm512_set1_ps(a[i * ars]);
      c0[i] = _mm512_fmadd_ps(ai, b0, c0[i]);
      c1[i] = _mm512_fmadd_ps(ai, b1, c1[i]);
    }
    a += acs;
    b += 32;
  }
  store_tile<MR>(c0, c1, c, ldc, accumulate);
}

// bf16 x bf16 -> f32 with vdpbf16ps: panels hold k in pairs, A as [k/2][MR] pairs (one 32-bit
// word each, broadcast), B as [k/2][32 columns][2].
template <int MR>
__attribute__((target("avx512f,avx512bf16,fma"))) void ukr_avx512bf16(int64_t k, const void* ap, int64_t ars,
                                                                      int64_t acs, const void* bp, float* c,
                                                                      int64_t ldc, int accumulate) {
  const uint32_t* a = static_cast<const uint32_t*>(ap);
  const uint16_t* b = static_cast<const uint16_t*>(bp);
  __m512 c0[MR], c1[MR];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) c0[i] = c1[i] = _mm512_setzero_ps();
  for (int64_t p = 0; p < (k + 1) / 2; ++p) {
    __m512bh b0 = (__m512bh)_mm512_load_si512(b), b1 = (__m512bh)_mm512_load_si512(b + 32);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      __m512bh ai = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[i * ars]));
      c0[i] = _mm512_dpbf16_ps(c0[i], ai, b0);
      c1[i] = _mm512_dpbf16_ps(c1[i], ai, b1);
    }
    a += acs;
    b += 64;
  }
  store_tile<MR>(c0, c1, c, ldc, accumulate);
}

__attribute__((target("avx2,fma"))) void ukr_avx2_6x16(int64_t k, const void* ap, int64_t ars, int64_t acs,
                                                       const void* bp, float* c, int64_t ldc, int accumulate) {
  const float* a = static_cast<const float*>(ap);
  const float* b = static_cast<const float*>(bp);
  __m256 c0[6], c1[6];
#pragma GCC unroll 6
  for (int i = 0; i < 6; ++i) c0[i] = c1[i] = _mm256_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 6
    for (int i = 0; i < 6; ++i) {
      __m256 ai = _mm256_broadcast_ss(a + i * ars);
      c0[i] = _mm256_fmadd_ps(ai, b0, c0[i]);
      c1[i] = _mm256_fmadd_ps(ai, b1, c1[i]);
    }
    a += acs;
    b += 16;
  }
#pragma GCC unroll 6
  for (int i = 0; i < 6; ++i) {
    float* row = c + i * ldc;
    if (accumulate) {
      c0[i] = _mm256_add_ps(c0[i], _mm256_loadu_ps(row));
      c1[i] = _mm256_add_ps(c1[i], _mm256_loadu_ps(row + 8));
    }
    _mm256_storeu_ps(row, c0[i]);
    _mm256_storeu_ps(row + 8, c1[i]);
  }
}

void ukr_generic_4x4(int64_t k, const void* ap, int64_t ars, int64_t acs, const void* bp, float* c, int64_t ldc,
                     int accumulate) {
  const float* a = static_cast<const float*>(ap);
  const float* b = static_cast<const float*>(bp);
  float acc[4][4] = {};
  for (int64_t p = 0; p < k; ++p, a += acs, b += 4)
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) acc[i][j] += a[i * ars] * b[j];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) c[i * ldc + j] = (accumulate ? c[i * ldc + j] : 0.0f) + acc[i][j];
}

struct KernelInfo {
  const char* name;
  int mr, nr;
  MicroKernel f32;
  MicroKernel bf16;  // null: bf16 operands are widened to f32 when packed
};

const std::vector<KernelInfo>& kernels() {
  static const std::vector<KernelInfo> k = [] {
    std::vector<KernelInfo> available;
    const Features& f = features();
    if (f.avx512) {
      available.push_back({"avx512_8x32", 8, 32, ukr_avx512<8>, f.avx512bf16 ? ukr_avx512bf16<8> : nullptr});
      available.push_back({"avx512_12x32", 12, 32, ukr_avx512<12>, f.avx512bf16 ? ukr_avx512bf16<12> : nullptr});
    }
    if (f.avx2_fma) available.push_back({"avx2_6x16", 6, 16, ukr_avx2_6x16, nullptr});
    available.push_back({"generic_4x4", 4, 4, ukr_generic_4x4, nullptr});
    return available;
  }();
  return k;
}

// --- packing -------------------------------------------------------------------------------------

// A (m x k) -> [ceil(m/MR)][k][MR] f32, zero-padded rows.
void pack_a_f32(const ph_gemm_args& g, int mr, float* out) {
  if (g.a_cs == 1 && g.a_dtype == PH_F32) {  // row-major f32: read rows contiguously
    const float* a = static_cast<const float*>(g.a);
    for (int64_t i0 = 0; i0 < g.m; i0 += mr, out += mr * g.k) {
      int rows = static_cast<int>(std::min<int64_t>(mr, g.m - i0));
      for (int i = 0; i < mr; ++i) {
        const float* row = a + (i0 + i) * g.a_rs;
        if (i < rows)
          for (int64_t p = 0; p < g.k; ++p) out[p * mr + i] = row[p];
        else
          for (int64_t p = 0; p < g.k; ++p) out[p * mr + i] = 0;
      }
    }
    return;
  }
  for (int64_t i0 = 0; i0 < g.m; i0 += mr) {
    int rows = static_cast<int>(std::min<int64_t>(mr, g.m - i0));
    for (int64_t p = 0; p < g.k; ++p, out += mr) {
      for (int i = 0; i < rows; ++i) out[i] = load_elem(g.a, (i0 + i) * g.a_rs + p * g.a_cs, g.a_dtype);
      for (int i = rows; i < mr; ++i) out[i] = 0;
    }
  }
}

inline float bf16_bits_to_f32(uint16_t h) {
  uint32_t w = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}

// B's panel of `cols` columns from j0, for the two layouts kernels produce (row-major, and
// column-major: a transposed operand such as k^T in attention), without a per-element switch.
template <class T, class Convert>
void pack_b_panel(const T* b, int64_t rs, int64_t cs, int64_t k, int64_t j0, int cols, int nr, float* out,
                  Convert cvt) {
  if (cs == 1) {
    for (int64_t p = 0; p < k; ++p, out += nr) {
      const T* row = b + p * rs + j0;
      for (int j = 0; j < cols; ++j) out[j] = cvt(row[j]);
      for (int j = cols; j < nr; ++j) out[j] = 0;
    }
  } else {
    for (int j = 0; j < cols; ++j) {
      const T* col = b + (j0 + j) * cs;
      for (int64_t p = 0; p < k; ++p) out[p * nr + j] = cvt(col[p * rs]);
    }
    for (int64_t p = 0; p < k; ++p)
      for (int j = cols; j < nr; ++j) out[p * nr + j] = 0;
  }
}

// B (k x n) -> [ceil(n/NR)][k][NR] f32, zero-padded columns.
void pack_b_f32(const ph_gemm_args& g, int nr, float* out) {
  for (int64_t j0 = 0; j0 < g.n; j0 += nr, out += nr * g.k) {
    int cols = static_cast<int>(std::min<int64_t>(nr, g.n - j0));
    if (g.b_dtype == PH_F32 && (g.b_cs == 1 || g.b_rs == 1)) {
      pack_b_panel(static_cast<const float*>(g.b), g.b_rs, g.b_cs, g.k, j0, cols, nr, out, [](float x) { return x; });
    } else if (g.b_dtype == PH_BF16 && (g.b_cs == 1 || g.b_rs == 1)) {
      pack_b_panel(static_cast<const uint16_t*>(g.b), g.b_rs, g.b_cs, g.k, j0, cols, nr, out, bf16_bits_to_f32);
    } else {
      float* o = out;
      for (int64_t p = 0; p < g.k; ++p, o += nr) {
        for (int j = 0; j < cols; ++j) o[j] = load_elem(g.b, p * g.b_rs + (j0 + j) * g.b_cs, g.b_dtype);
        for (int j = cols; j < nr; ++j) o[j] = 0;
      }
    }
  }
}

uint16_t bf16_at(const void* p, int64_t i) { return static_cast<const uint16_t*>(p)[i]; }

// A (m x k, bf16) -> [ceil(m/MR)][ceil(k/2)][MR] words of (a[i][2p], a[i][2p+1]).
void pack_a_bf16(const ph_gemm_args& g, int mr, uint32_t* out) {
  if (g.a_cs == 1 && g.k % 2 == 0) {  // row-major: a k-pair is one 32-bit word of a row
    const uint16_t* a = static_cast<const uint16_t*>(g.a);
    const int64_t kp = g.k / 2;
    for (int64_t i0 = 0; i0 < g.m; i0 += mr, out += mr * kp) {
      int rows = static_cast<int>(std::min<int64_t>(mr, g.m - i0));
      for (int i = 0; i < mr; ++i) {
        const uint16_t* row = a + (i0 + i) * g.a_rs;
        for (int64_t p = 0; p < kp; ++p) {
          uint32_t w = 0;
          if (i < rows) std::memcpy(&w, row + 2 * p, 4);
          out[p * mr + i] = w;
        }
      }
    }
    return;
  }
  for (int64_t i0 = 0; i0 < g.m; i0 += mr)
    for (int64_t p = 0; p < g.k; p += 2, out += mr)
      for (int i = 0; i < mr; ++i) {
        uint32_t lo = 0, hi = 0;
        if (i0 + i < g.m) {
          lo = bf16_at(g.a, (i0 + i) * g.a_rs + p * g.a_cs);
          if (p + 1 < g.k) hi = bf16_at(g.a, (i0 + i) * g.a_rs + (p + 1) * g.a_cs);
        }
        out[i] = lo | (hi << 16);
      }
}

// B (k x n, bf16) -> [ceil(n/NR)][ceil(k/2)][NR][2].
void pack_b_bf16(const ph_gemm_args& g, int nr, uint16_t* out) {
  if (g.b_cs == 1) {  // row-major: interleave two contiguous rows
    const uint16_t* b = static_cast<const uint16_t*>(g.b);
    for (int64_t j0 = 0; j0 < g.n; j0 += nr) {
      int cols = static_cast<int>(std::min<int64_t>(nr, g.n - j0));
      for (int64_t p = 0; p < g.k; p += 2, out += 2 * nr) {
        const uint16_t* r0 = b + p * g.b_rs + j0;
        const uint16_t* r1 = p + 1 < g.k ? b + (p + 1) * g.b_rs + j0 : nullptr;
        for (int j = 0; j < cols; ++j) {
          out[2 * j] = r0[j];
          out[2 * j + 1] = r1 ? r1[j] : 0;
        }
        for (int j = cols; j < nr; ++j) out[2 * j] = out[2 * j + 1] = 0;
      }
    }
    return;
  }
  for (int64_t j0 = 0; j0 < g.n; j0 += nr)
    for (int64_t p = 0; p < g.k; p += 2, out += 2 * nr)
      for (int j = 0; j < nr; ++j) {
        bool in = j0 + j < g.n;
        out[2 * j] = in ? bf16_at(g.b, p * g.b_rs + (j0 + j) * g.b_cs) : 0;
        out[2 * j + 1] = in && p + 1 < g.k ? bf16_at(g.b, (p + 1) * g.b_rs + (j0 + j) * g.b_cs) : 0;
      }
}

}  // namespace

int64_t gemm_workspace_bytes(int64_t m, int64_t n, int64_t k) { return ((m + 16) + (n + 32)) * (k + 2) * 4 + 256; }

const std::vector<std::string>& gemm_kernel_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const KernelInfo& k : kernels()) n.push_back(k.name);
    return n;
  }();
  return names;
}

int gemm_kernel_index(const std::string& name) {
  const auto& names = gemm_kernel_names();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<int>(i);
  throw InternalError("no gemm micro-kernel named " + name + " on this host");
}

void gemm(const ph_gemm_args& g) {
  if (g.m <= 0 || g.n <= 0) return;
  if (g.k <= 0) {
    if (!g.accumulate)
      for (int64_t i = 0; i < g.m; ++i) std::memset(g.c + i * g.ldc, 0, g.n * sizeof(float));
    return;
  }
  const auto& ks = kernels();
  const KernelInfo& K = ks[g.kernel >= 0 && g.kernel < static_cast<int>(ks.size()) ? g.kernel : 0];
  const bool bf16 = K.bf16 && g.a_dtype == PH_BF16 && g.b_dtype == PH_BF16;
  const int mr = K.mr, nr = K.nr;
  const int64_t kp = bf16 ? (g.k + 1) / 2 * 2 : g.k;  // k rounded up to pairs
  const int64_t mp = (g.m + mr - 1) / mr * mr, np = (g.n + nr - 1) / nr * nr;
  char* ws = static_cast<char*>(g.workspace);
  char* apack = ws;
  char* bpack = ws + ((mp * kp * 4 + 63) / 64 * 64);
  // A row-major block of the right dtype is read in place (the broadcasts walk its rows): only
  // its ragged last strip goes through a packed panel.
  const bool a_in_place =
      g.a_cs == 1 &&
      (bf16 ? (g.k % 2 == 0 && g.a_rs % 2 == 0 && reinterpret_cast<uintptr_t>(g.a) % 4 == 0) : g.a_dtype == PH_F32);
  if (a_in_place) {
    // Only the ragged last strip needs a panel: pack it alone, at its own slot.
    int64_t last = g.m / mr * mr;
    if (last < g.m) {
      ph_gemm_args strip = g;
      strip.m = g.m - last;
      strip.a = static_cast<const char*>(g.a) + last * g.a_rs * (bf16 ? 2 : 4);
      char* slot = apack + (last / mr) * (mr * kp * (bf16 ? 2 : 4));
      if (bf16)
        pack_a_bf16(strip, mr, reinterpret_cast<uint32_t*>(slot));
      else
        pack_a_f32(strip, mr, reinterpret_cast<float*>(slot));
    }
    if (bf16)
      pack_b_bf16(g, nr, reinterpret_cast<uint16_t*>(bpack));
    else
      pack_b_f32(g, nr, reinterpret_cast<float*>(bpack));
  } else if (bf16) {
    pack_a_bf16(g, mr, reinterpret_cast<uint32_t*>(apack));
    pack_b_bf16(g, nr, reinterpret_cast<uint16_t*>(bpack));
  } else {
    pack_a_f32(g, mr, reinterpret_cast<float*>(apack));
    pack_b_f32(g, nr, reinterpret_cast<float*>(bpack));
  }
  MicroKernel ukr = bf16 ? K.bf16 : K.f32;
  const int64_t a_stride = mr * kp * (bf16 ? 2 : 4), b_stride = nr * kp * (bf16 ? 2 : 4);
  alignas(64) float tile[16 * 32];
  // B micro-panels outermost: one stays in L1 while the A strips stream past it.
  for (int64_t j0 = 0; j0 < np; j0 += nr) {
    const char* bpanel = bpack + (j0 / nr) * b_stride;
    int cols = static_cast<int>(std::min<int64_t>(nr, g.n - j0));
    for (int64_t i0 = 0; i0 < mp; i0 += mr) {
      int rows = static_cast<int>(std::min<int64_t>(mr, g.m - i0));
      const void* a = apack + (i0 / mr) * a_stride;
      int64_t ars = 1, acs = mr;
      if (a_in_place && rows == mr) {
        a = static_cast<const char*>(g.a) + i0 * g.a_rs * (bf16 ? 2 : 4);
        ars = bf16 ? g.a_rs / 2 : g.a_rs;  // bf16: in k-pair words
        acs = 1;
      }
      float* c = g.c + i0 * g.ldc + j0;
      if (rows == mr && cols == nr) {
        ukr(g.k, a, ars, acs, bpanel, c, g.ldc, g.accumulate);
        continue;
      }
      ukr(g.k, a, ars, acs, bpanel, tile, nr, 0);  // a ragged edge: compute the full tile aside
      for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j) c[i * g.ldc + j] = (g.accumulate ? c[i * g.ldc + j] : 0.0f) + tile[i * nr + j];
    }
  }
}

const ph_runtime* runtime_table() {
  static const ph_runtime t{[](const ph_gemm_args* g) { gemm(*g); }};
  return &t;
}

}  // namespace parhelion::runtime

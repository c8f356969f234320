#include "runtime/gemm/gemm.h"

#include "parhelion/error.h"
#include "runtime/gemm/amx.h"
#include "runtime/gemm/throughput.h"

#include <cpuid.h>
#include <immintrin.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "parhelion/dtype.h"
#include "runtime/gemm/transpose_rows.h"

namespace parhelion::runtime {
namespace {

// --- host features ---------------------------------------------------------------------------

struct Features {
  bool avx2_fma = false, avx512 = false, avx512bf16 = false;
  bool avx512bw = false;  // 16-bit lanes, with masks at 256 bits too (VL): the bf16 packing
  // The L1 data cache's geometry: lines that are `l1_set_span` bytes apart share a set, and a
  // set holds `l1_ways` lines.
  int64_t l1_set_span = 4096;
  int l1_ways = 8;
  int64_t l2_bytes = 1 << 20;  // per core
};

const Features& features() {
  static const Features f = [] {
    Features detected;
    __builtin_cpu_init();
    detected.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    detected.avx512 = __builtin_cpu_supports("avx512f") && detected.avx2_fma;
    detected.avx512bw = detected.avx512 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    unsigned a, b, c, d;
    detected.avx512bf16 = detected.avx512 && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5));
    const long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE), ways = sysconf(_SC_LEVEL1_DCACHE_ASSOC);
    if (l1 > 0 && ways > 0 && l1 % ways == 0) {
      detected.l1_set_span = l1 / ways;
      detected.l1_ways = static_cast<int>(ways);
    }
    if (const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE); l2 > 0) detected.l2_bytes = l2;
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

// AVX2 f32: MR rows x 16 columns (MR = 6: 12 accumulators of the 16 registers). Fewer than 4
// rows keep two sums per accumulator, over even and odd steps of k: the FMA's latency times its
// two pipes wants 8 independent chains, and a ragged strip of 2 rows has 4.
template <int MR>
__attribute__((target("avx2,fma"), always_inline)) inline void avx2_step(const float* a, int64_t ars, const float* b,
                                                                         __m256* c0, __m256* c1) {
  __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    __m256 ai = _mm256_broadcast_ss(a + i * ars);
    c0[i] = _mm256_fmadd_ps(ai, b0, c0[i]);
    c1[i] = _mm256_fmadd_ps(ai, b1, c1[i]);
  }
}

template <int MR>
__attribute__((target("avx2,fma"))) void ukr_avx2(int64_t k, const void* ap, int64_t ars, int64_t acs, const void* bp,
                                                  float* c, int64_t ldc, int accumulate) {
  constexpr int kSums = MR < 4 ? 2 : 1;
  const float* a = static_cast<const float*>(ap);
  const float* b = static_cast<const float*>(bp);
  __m256 c0[kSums][MR], c1[kSums][MR];
  for (int s = 0; s < kSums; ++s)
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) c0[s][i] = c1[s][i] = _mm256_setzero_ps();
  int64_t p = 0;
  for (; p + kSums <= k; p += kSums, a += kSums * acs, b += kSums * 16)
    for (int s = 0; s < kSums; ++s) avx2_step<MR>(a + s * acs, ars, b + s * 16, c0[s], c1[s]);
  for (; p < k; ++p, a += acs, b += 16) avx2_step<MR>(a, ars, b, c0[0], c1[0]);
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    for (int s = 1; s < kSums; ++s) {
      c0[0][i] = _mm256_add_ps(c0[0][i], c0[s][i]);
      c1[0][i] = _mm256_add_ps(c1[0][i], c1[s][i]);
    }
    float* row = c + i * ldc;
    if (accumulate) {
      c0[0][i] = _mm256_add_ps(c0[0][i], _mm256_loadu_ps(row));
      c1[0][i] = _mm256_add_ps(c1[0][i], _mm256_loadu_ps(row + 8));
    }
    _mm256_storeu_ps(row, c0[0][i]);
    _mm256_storeu_ps(row + 8, c1[0][i]);
  }
}

template <int MR>
void ukr_generic(int64_t k, const void* ap, int64_t ars, int64_t acs, const void* bp, float* c, int64_t ldc,
                 int accumulate) {
  const float* a = static_cast<const float*>(ap);
  const float* b = static_cast<const float*>(bp);
  float acc[MR][4] = {};
  for (int64_t p = 0; p < k; ++p, a += acs, b += 4)
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < 4; ++j) acc[i][j] += a[i * ars] * b[j];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < 4; ++j) c[i * ldc + j] = (accumulate ? c[i * ldc + j] : 0.0f) + acc[i][j];
}

// A micro-kernel for each count of rows up to MR: `Pick` names the instance for R rows, and
// entry R - 1 is it. A block whose rows are not a multiple of MR (a power of two with MR 6 or
// 12) runs its last strip with the kernel of that many rows, reading A in place and writing C:
// the full tile, computed aside and copied, did MR rows of work for a few (2 of 128 rows on
// AVX2: 3% of the block's multiply-adds) and packed the strip to pad it.
template <int MR, class Pick>
const MicroKernel* kernels_by_rows(Pick pick) {
  static const auto table = [&]<int... R>(std::integer_sequence<int, R...>) {
    return std::array<MicroKernel, MR>{pick.template operator()<R + 1>()...};
  }
  (std::make_integer_sequence<int, MR>{});
  return table.data();
}

// --- what the host's bf16 dot is worth ---------------------------------------------------------

// The best of three timings of `loop` (seconds): the shortest is the least disturbed.
template <class Loop>
double best_seconds(Loop loop, int64_t iterations) {
  double best = 1e30;
  volatile float sink = 0;
  for (int round = 0; round < 3; ++round) {
    auto t0 = std::chrono::steady_clock::now();
    sink = sink + loop(iterations);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

struct KernelInfo {
  const char* name;
  int mr, nr;
  const MicroKernel* f32;   // [rows - 1]: the kernel for that many rows of A (kernels_by_rows)
  const MicroKernel* bf16;  // the same; null: bf16 operands are widened to f32 when packed
  // A kernel that owns the whole block (its own packing and loops), for bf16 operands only;
  // other dots given it run the host's first kernel instead.
  void (*bf16_block)(const ph_gemm_args&) = nullptr;
};

const std::vector<KernelInfo>& kernels() {
  static const std::vector<KernelInfo> k = [] {
    std::vector<KernelInfo> available;
    const Features& f = features();
    if (amx_bf16_available()) available.push_back({"amx_32x32", 32, 32, nullptr, nullptr, gemm_amx_bf16});
    if (f.avx512) {
      const MicroKernel* f32_8 = kernels_by_rows<8>([]<int R>() { return &ukr_avx512<R>; });
      const MicroKernel* f32_12 = kernels_by_rows<12>([]<int R>() { return &ukr_avx512<R>; });
      const MicroKernel* bf16_8 = kernels_by_rows<8>([]<int R>() { return &ukr_avx512bf16<R>; });
      const MicroKernel* bf16_12 = kernels_by_rows<12>([]<int R>() { return &ukr_avx512bf16<R>; });
      available.push_back({"avx512_8x32", 8, 32, f32_8, f.avx512bf16 ? bf16_8 : nullptr});
      available.push_back({"avx512_12x32", 12, 32, f32_12, f.avx512bf16 ? bf16_12 : nullptr});
      // The same tiles with bf16 operands widened to f32 while packing: on hosts whose bf16 dot
      // instruction retires fewer multiply-adds per cycle than the f32 FMA (measured: an Intel
      // Xeon ran vdpbf16ps at half the f32 rate), the f32 kernels win despite the wider panels.
      if (f.avx512bf16) {
        available.push_back({"avx512_8x32_widened", 8, 32, f32_8, nullptr});
        available.push_back({"avx512_12x32_widened", 12, 32, f32_12, nullptr});
      }
    }
    if (f.avx2_fma)
      available.push_back({"avx2_6x16", 6, 16, kernels_by_rows<6>([]<int R>() { return &ukr_avx2<R>; }), nullptr});
    available.push_back({"generic_4x4", 4, 4, kernels_by_rows<4>([]<int R>() { return &ukr_generic<R>; }), nullptr});
    return available;
  }();
  return k;
}

// --- packing -------------------------------------------------------------------------------------

inline float bf16_bits_to_f32(uint16_t h) {
  uint32_t w = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}

// Whether reading `rows` rows of A in place, `row_bytes` apart, puts more of them in one L1 set
// than it has ways: each step of the micro-kernel then evicts lines the next steps still need.
// Measured on a Zen 4 (8 ways, 4 KiB set span): a 12-row strip of a 4096-column f32 matrix ran
// 12% slower in place than packed, an 8-row strip 6% faster in place.
bool rows_alias_in_l1(int rows, int64_t row_bytes) {
  const Features& f = features();
  auto set_of = [&](int row) { return row * row_bytes % f.l1_set_span / 64; };
  for (int i = 0; i < rows; ++i) {
    int sharing = 0;
    for (int j = 0; j < rows; ++j) sharing += set_of(j) == set_of(i);
    if (sharing > f.l1_ways) return true;
  }
  return false;
}

// How many rows of A (a multiple of `mr`) one pass over B's micro-panels takes, given the bytes
// of a row of A (`a_row_bytes`, its k elements) and of C (`c_row_bytes`): those rows of A and C
// are re-read from L2 by each micro-panel, so they take an eighth of it, leaving the rest to B's
// packed block and whatever the kernel keeps there. Measured on an Intel Xeon (2 MiB L2), f32
// 2048^3 in 512 x 256 x 256 blocks: one pass over all 512 rows ran at 136 GFLOP/s per core,
// passes of 128 rows (this rule) at 150, of 64 at 143.
int64_t rows_per_pass(int mr, int64_t a_row_bytes, int64_t c_row_bytes) {
  const int64_t rows = features().l2_bytes / 8 / std::max<int64_t>(1, a_row_bytes + c_row_bytes);
  return std::max<int64_t>(mr, rows / mr * mr);
}

// A row-major A (m x k) -> [ceil(m/MR)][k][MR] f32: rows read contiguously, converted.
template <class T, class Convert>
void pack_a_rows(const T* a, int64_t rs, int64_t m, int64_t k, int mr, float* out, Convert cvt) {
  for (int64_t i0 = 0; i0 < m; i0 += mr, out += mr * k) {
    int rows = static_cast<int>(std::min<int64_t>(mr, m - i0));
    for (int i = 0; i < mr; ++i) {
      const T* row = a + (i0 + i) * rs;
      if (i < rows)
        for (int64_t p = 0; p < k; ++p) out[p * mr + i] = cvt(row[p]);
      else
        for (int64_t p = 0; p < k; ++p) out[p * mr + i] = 0;
    }
  }
}

// A (m x k) -> [ceil(m/MR)][k][MR] f32, zero-padded rows.
void pack_a_f32(const ph_gemm_args& g, int mr, float* out) {
  if (g.a_cs == 1 && g.a_dtype == PH_F32) {
    if (features().avx2_fma)
      transpose_rows_into_strips(static_cast<const float*>(g.a), g.a_rs, g.m, g.k, mr, out);
    else
      pack_a_rows(static_cast<const float*>(g.a), g.a_rs, g.m, g.k, mr, out, [](float x) { return x; });
    return;
  }
  if (g.a_cs == 1 && g.a_dtype == PH_BF16) {  // the widened micro-kernels' bf16 A
    pack_a_rows(static_cast<const uint16_t*>(g.a), g.a_rs, g.m, g.k, mr, out, bf16_bits_to_f32);
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

// How far ahead (in rows of B) the vector packings prefetch the rows they will read: B's rows
// lie kilobytes apart, and the copies, which do nothing else, stalled on their loads. Measured on
// an AMD EPYC Zen 5, bf16 bmm [16,512,512,512] (B packed once per 256-row block of A): 5.63 ->
// 5.1 ms at 8 or 16 rows ahead, 5.2 at 4.
constexpr int64_t kPackAheadRows = 16;
inline void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }

// Asks for `rows` rows of `bytes` each, `stride` bytes apart. An A read in place reaches the
// micro-kernel from memory during the first micro-panel of B of each pass: MR rows at once, a
// line of each every few steps of k. The hardware prefetchers did not keep up with those
// streams and the micro-kernel waited on them, so while one strip runs, the next strip's rows
// are asked for. Measured on an AMD EPYC Zen 5 with a copy of the bf16 micro-kernel over
// 256 x 256 x 128 blocks of an A larger than the caches, both cores at once: 330-360 -> 460-480
// GFLOP/s per core (bmm bf16 [16,512,512,512] on 2 threads: 5.1 -> 4.8 ms; into L2 only, 5.25).
// A strip larger than a quarter of L1 goes to L2 only (`into_l1` false): into L1 it would evict
// the micro-panel of B that the pass keeps there.
inline void prefetch_rows(const char* at, int rows, int64_t stride, int64_t bytes, bool into_l1) {
  for (int i = 0; i < rows; ++i) {
    const char* row = at + i * stride;
    const char* line = row - reinterpret_cast<uintptr_t>(row) % 64;  // (rows need not start a line)
    for (; line < row + bytes; line += 64)
      if (into_l1)
        prefetch(line);
      else
        _mm_prefetch(line, _MM_HINT_T1);
  }
}

// A row-major B (k x n) -> [ceil(n/NR)][k][NR] f32, one row of B at a time across every panel.
// Packing a panel at a time read 32 columns from each of k rows: with rows kilobytes apart each
// read was a fresh page, which the hardware prefetchers do not follow (at 2048 columns, packing
// took 13% of a call). A whole row is one stream.
template <class T, class Convert>
void pack_b_rows(const T* b, int64_t rs, int64_t k, int64_t n, int nr, float* out, Convert cvt) {
  for (int64_t p = 0; p < k; ++p) {
    const T* row = b + p * rs;
    float* o = out + p * nr;
    for (int64_t j0 = 0; j0 < n; j0 += nr, o += nr * k) {
      const int cols = static_cast<int>(std::min<int64_t>(nr, n - j0));
      for (int j = 0; j < cols; ++j) o[j] = cvt(row[j0 + j]);
      for (int j = cols; j < nr; ++j) o[j] = 0;
    }
  }
}

// The same for f32 and 32-column panels, two zmm copies per row of a panel (ragged columns
// masked, zero-filled).
__attribute__((target("avx512f"))) void pack_b_f32_rows_avx512(const float* b, int64_t rs, int64_t k, int64_t n,
                                                               float* out) {
  const int64_t whole = n / 32 * 32;
  for (int64_t p = 0; p < k; ++p) {
    const float* row = b + p * rs;
    float* o = out + p * 32;
    const bool ahead = p + kPackAheadRows < k;
    for (int64_t j0 = 0; j0 < whole; j0 += 32, o += 32 * k) {
      if (ahead) {
        prefetch(row + kPackAheadRows * rs + j0);
        prefetch(row + kPackAheadRows * rs + j0 + 16);
      }
      _mm512_store_ps(o, _mm512_loadu_ps(row + j0));
      _mm512_store_ps(o + 16, _mm512_loadu_ps(row + j0 + 16));
    }
    if (whole < n) {
      const int64_t rest = n - whole;
      const auto lo = static_cast<__mmask16>((1u << std::min<int64_t>(16, rest)) - 1);
      const auto hi = static_cast<__mmask16>(rest > 16 ? (1u << (rest - 16)) - 1 : 0);
      _mm512_store_ps(o, _mm512_maskz_loadu_ps(lo, row + whole));
      _mm512_store_ps(o + 16, _mm512_maskz_loadu_ps(hi, row + whole + 16));
    }
  }
}

// The same with AVX2, for panels of any multiple of 8 columns (ragged columns masked,
// zero-filled). The scalar loop above, at NR = 16, was 10% of a 1024^3 f32 matmul's profile on a
// Zen 1 host.
__attribute__((target("avx2"))) void pack_b_f32_rows_avx2(const float* b, int64_t rs, int64_t k, int64_t n, int nr,
                                                          float* out) {
  const int64_t whole = n / nr * nr;
  alignas(32) static const int32_t kLanes[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t p = 0; p < k; ++p) {
    const float* row = b + p * rs;
    float* o = out + p * nr;
    for (int64_t j0 = 0; j0 < whole; j0 += nr, o += static_cast<int64_t>(nr) * k)
      for (int j = 0; j < nr; j += 8) _mm256_store_ps(o + j, _mm256_loadu_ps(row + j0 + j));
    for (int j = 0; whole < n && j < nr; j += 8) {  // the ragged panel: lanes past n read nothing
      const int64_t valid = std::clamp<int64_t>(n - whole - j, 0, 8);
      const __m256i mask = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kLanes + 8 - valid));
      _mm256_store_ps(o + j, _mm256_maskload_ps(row + whole + j, mask));
    }
  }
}

// 16 bf16 columns of a row from `at` (those past `valid` read as 0), each in the low half of a
// 32-bit lane. A group wholly past the row's end reads nothing (no load, not even a masked one,
// which some cores slow down with an assist where it would touch an unmapped page).
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) inline __m512i bf16_columns(const uint16_t* at,
                                                                                                int64_t valid) {
  if (valid <= 0) return _mm512_setzero_si512();
  const auto mask = static_cast<__mmask16>((1u << std::clamp<int64_t>(valid, 0, 16)) - 1);
  // (the zero-masking forms, here and below: g++ 12 warns that the plain ones' undefined
  // pass-through may be used uninitialized)
  return _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_maskz_loadu_epi16(mask, at));
}

// A row-major bf16 B (k x n) widened to [ceil(n/NR)][k][NR] f32 (NR a multiple of 16), a row at a
// time across every panel, 16 columns a step: a bf16 is the high half of its f32. The scalar
// loop converted one element at a time.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void pack_b_bf16_widened_rows_avx512(const uint16_t* b, int64_t rs,
                                                                                          int64_t k, int64_t n, int nr,
                                                                                          float* out) {
  for (int64_t p = 0; p < k; ++p)
    for (int64_t j0 = 0; j0 < n; j0 += nr) {  // (panels and columns apart: no division by nr)
      float* o = out + j0 * k + p * nr;
      for (int j = 0; j < nr; j += 16) {
        if (p + kPackAheadRows < k && j % 32 == 0)  // (a cache line holds 32 columns)
          prefetch(b + (p + kPackAheadRows) * rs + j0 + j);
        _mm512_storeu_si512(o + j, _mm512_maskz_slli_epi32(0xFFFF, bf16_columns(b + p * rs + j0 + j, n - j0 - j), 16));
      }
    }
}

// B (k x n) -> [ceil(n/NR)][k][NR] f32, zero-padded columns.
void pack_b_f32(const ph_gemm_args& g, int nr, float* out) {
  if (g.b_cs == 1 && g.b_dtype == PH_F32) {
    if (nr == 32 && features().avx512)
      pack_b_f32_rows_avx512(static_cast<const float*>(g.b), g.b_rs, g.k, g.n, out);
    else if (nr % 8 == 0 && features().avx2_fma)
      pack_b_f32_rows_avx2(static_cast<const float*>(g.b), g.b_rs, g.k, g.n, nr, out);
    else
      pack_b_rows(static_cast<const float*>(g.b), g.b_rs, g.k, g.n, nr, out, [](float x) { return x; });
    return;
  }
  if (g.b_cs == 1 && g.b_dtype == PH_BF16) {  // the widened micro-kernels' bf16 B
    if (nr % 16 == 0 && features().avx512bw)
      pack_b_bf16_widened_rows_avx512(static_cast<const uint16_t*>(g.b), g.b_rs, g.k, g.n, nr, out);
    else
      pack_b_rows(static_cast<const uint16_t*>(g.b), g.b_rs, g.k, g.n, nr, out, bf16_bits_to_f32);
    return;
  }
  // Otherwise B's panels are A's strips of B^T (its columns are the rows, NR of them a strip):
  // a column-major B (attention's K^T) takes A's register transposes, any other layout A's
  // element-wise path.
  ph_gemm_args bt = g;
  bt.a = g.b, bt.a_rs = g.b_cs, bt.a_cs = g.b_rs, bt.a_dtype = g.b_dtype, bt.m = g.n;
  pack_a_f32(bt, nr, out);
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

// A row-major bf16 B (k x n) -> [ceil(n/NR)][ceil(k/2)][NR][2] (NR a multiple of 16), a pair of
// rows at a time across every panel, 16 columns a step: each column's two elements are one
// 32-bit lane, the second row's in the high half. The scalar interleave below, panel by panel,
// took 15% of a bf16 bmm [16,512,512,512] (AMD EPYC Zen 5).
__attribute__((target("avx512f,avx512bw,avx512vl"))) void pack_b_bf16_rows_avx512(const uint16_t* b, int64_t rs,
                                                                                  int64_t k, int64_t n, int nr,
                                                                                  uint16_t* out) {
  const int64_t kp = (k + 1) / 2;
  for (int64_t p = 0; p < kp; ++p) {
    const uint16_t* r0 = b + 2 * p * rs;
    const bool pair = 2 * p + 1 < k;          // (an odd k's last row pairs with zeros)
    for (int64_t j0 = 0; j0 < n; j0 += nr) {  // (panels and columns apart: no division by nr)
      uint16_t* o = out + (j0 * kp + p * nr) * 2;
      for (int j = 0; j < nr; j += 16) {
        if (2 * p + kPackAheadRows < k && j % 32 == 0) {  // (a cache line holds 32 columns)
          prefetch(r0 + kPackAheadRows * rs + j0 + j);
          if (2 * p + kPackAheadRows + 1 < k) prefetch(r0 + (kPackAheadRows + 1) * rs + j0 + j);
        }
        const __m512i lo = bf16_columns(r0 + j0 + j, n - j0 - j);
        const __m512i hi = pair ? bf16_columns(r0 + rs + j0 + j, n - j0 - j) : _mm512_setzero_si512();
        _mm512_storeu_si512(o + j * 2, _mm512_or_si512(lo, _mm512_maskz_slli_epi32(0xFFFF, hi, 16)));
      }
    }
  }
}

// B (k x n, bf16) -> [ceil(n/NR)][ceil(k/2)][NR][2].
void pack_b_bf16(const ph_gemm_args& g, int nr, uint16_t* out) {
  if (g.b_cs == 1 && nr % 16 == 0 && features().avx512bw) {
    pack_b_bf16_rows_avx512(static_cast<const uint16_t*>(g.b), g.b_rs, g.k, g.n, nr, out);
    return;
  }
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

double bf16_dot_speedup() {
  static const double speedup = [] {
    if (!features().avx512bf16) return 0.0;
    constexpr int64_t kIterations = 1 << 14;  // well under a millisecond each
    const double f32 = best_seconds(f32_fma_avx512_loop, kIterations),
                 bf16 = best_seconds(bf16_dot_avx512_loop, kIterations);
    return (kBf16DotAvx512Flops / bf16) / (kF32FmaAvx512Flops / f32);
  }();
  return speedup;
}

std::vector<std::string> gemm_kernel_choices(bool bf16_operands) {
  std::vector<std::string> tiles, native, widened;
  for (const KernelInfo& k : kernels())
    (k.bf16_block ? tiles : std::string(k.name).ends_with("_widened") ? widened : native).push_back(k.name);
  if (!bf16_operands) return native;
  // The tile kernels first (an AMX step does 16 times the multiply-adds of a vdpbf16ps), then
  // the faster vector family, so that the default config (the first choice) takes the best; the
  // tuner searches them all. A margin keeps a noisy probe from flipping hosts where they tie.
  const bool widen_first = !widened.empty() && bf16_dot_speedup() < 0.8;
  std::vector<std::string> choices = tiles;
  for (const std::string& name : widen_first ? widened : native) choices.push_back(name);
  for (const std::string& name : widen_first ? native : widened) choices.push_back(name);
  return choices;
}

namespace {

// Whether micro-kernel `name` is one of the tile (AMX) kernels.
bool is_tile_kernel(const std::string& name) {
  const auto& ks = kernels();
  return std::any_of(ks.begin(), ks.end(), [&](const KernelInfo& k) { return k.name == name && k.bf16_block; });
}

const KernelInfo& kernel_named(const std::string& kernel) {
  const auto& ks = kernels();
  const auto it = std::find_if(ks.begin(), ks.end(), [&](const KernelInfo& ki) { return ki.name == kernel; });
  if (it == ks.end()) throw InternalError("no gemm micro-kernel named " + kernel + " on this host");
  return *it;
}

}  // namespace

bool gemm_kernel_takes_bf16(const std::string& kernel) {
  const KernelInfo& k = kernel_named(kernel);
  return k.bf16 != nullptr || k.bf16_block != nullptr;
}

int64_t gemm_b_panels_bytes(int64_t n, int64_t k, const std::string& kernel, bool bf16_operands) {
  const KernelInfo& info = kernel_named(kernel);
  if (info.bf16_block && bf16_operands) return 0;
  // A vector kernel's panels: n rounded up to its NR (a tile kernel given other operands hands
  // them to the host's first vector kernel: the widest NR there is), k to pairs, an element as
  // packed (2 bytes where the kernel multiplies bf16 operands as they are, else 4).
  const int64_t nr = info.bf16_block ? 32 : info.nr;
  const int64_t elem = bf16_operands && info.bf16 ? 2 : 4;
  return 64 + (n + nr - 1) / nr * nr * ((k + 1) / 2 * 2) * elem;
}

int64_t gemm_workspace_bytes(int64_t m, int64_t n, int64_t k, const std::string& kernel, bool bf16_operands,
                             bool a_in_place, bool b_kept) {
  // A's strips (m rounded up to an MR of at most 16, k to pairs), then B's (n rounded up to an NR
  // of at most 32) unless B goes to kept panels; alignment slack. An element as packed: 2 bytes
  // where the kernel multiplies bf16 operands as they are, else an f32 (and, for kernel "", any
  // kernel's). Sized at 4 bytes for both, a bf16 GEMM's footprint was twice what it touches,
  // and the default config's fit halved its K for room it did not need.
  const int64_t elem = bf16_operands && !kernel.empty() && gemm_kernel_takes_bf16(kernel) ? 2 : 4;
  const int64_t vector = ((m + 16) + (b_kept ? 0 : n + 32)) * (k + 2) * elem + 256;
  if (!amx_bf16_available()) return vector;
  // A tile kernel given operands that are not both bf16 falls back to a vector kernel (gemm()):
  // the config offers it by the dot's IR, where a bf16 load that is also read by other ops is
  // still bf16 but reaches the GEMM materialized in f32.
  if (is_tile_kernel(kernel) && bf16_operands) return amx_workspace_bytes(m, n, k, a_in_place);
  return kernel.empty() ? std::max(vector, amx_workspace_bytes(m, n, k)) : vector;
}

const std::vector<std::string>& gemm_kernel_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const KernelInfo& k : kernels()) n.push_back(k.name);
    return n;
  }();
  return names;
}

GemmBlock gemm_preferred_block(const std::string& name) {
  // Measured on a Xeon with AMX, matmul 2048^3 bf16: 256 x 512 x 256 blocks ran 1.3x faster than
  // 128 x 256 x 256 with the amx kernel (the tuner's pick). The vector kernels: 256 x 256 x 256
  // in f32 ran 1.11x faster than 128 rows, now that a call packs B once for all its rows.
  return is_tile_kernel(name) ? GemmBlock{256, 512, 256} : GemmBlock{256, 256, 256};
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
  const KernelInfo* chosen = &ks[g.kernel >= 0 && g.kernel < static_cast<int>(ks.size()) ? g.kernel : 0];
  if (chosen->bf16_block) {
    if (g.a_dtype == PH_BF16 && g.b_dtype == PH_BF16) {
      chosen->bf16_block(g);
      return;
    }
    chosen = &*std::find_if(ks.begin(), ks.end(), [](const KernelInfo& k) { return k.f32 != nullptr; });
  }
  const KernelInfo& K = *chosen;
  const bool bf16 = K.bf16 && g.a_dtype == PH_BF16 && g.b_dtype == PH_BF16;
  const int mr = K.mr, nr = K.nr;
  const int64_t kp = bf16 ? (g.k + 1) / 2 * 2 : g.k;  // k rounded up to pairs
  const int64_t elem = bf16 ? 2 : 4;                  // bytes of an operand element as packed (and as read in place)
  const int64_t a_row_bytes = g.a_rs * elem;          // (an A read in place)
  const int64_t mp = (g.m + mr - 1) / mr * mr, np = (g.n + nr - 1) / nr * nr;
  char* ws = static_cast<char*>(g.workspace);
  char* apack = ws;  // A's strips, then B's panels, each element as packed (gemm_workspace_bytes)
  char* bpack = ws + ((mp * kp * elem + 63) / 64 * 64);
  // A workspace sized for other dtypes than the call's (gemm_workspace_bytes' bf16_operands)
  // would be overrun: an internal error, stopped here rather than written past.
  if (const int64_t need = (bpack - ws) + (g.b_panels ? 0 : np * kp * elem);
      g.workspace_bytes > 0 && need > g.workspace_bytes) {
    std::fprintf(stderr, "parhelion internal error: a gemm call needs %lld bytes of workspace and was given %lld\n",
                 static_cast<long long>(need), static_cast<long long>(g.workspace_bytes));
    std::abort();
  }
  // A row-major block of the right dtype is read in place (the broadcasts walk its rows), unless
  // its rows crowd one L1 set. (A ragged last strip is read in place too: its kernel reads only
  // its rows.)
  const bool a_in_place =
      g.a_cs == 1 &&
      (bf16 ? (g.k % 2 == 0 && g.a_rs % 2 == 0 && reinterpret_cast<uintptr_t>(g.a) % 4 == 0) : g.a_dtype == PH_F32) &&
      !rows_alias_in_l1(mr, a_row_bytes);
  if (!a_in_place && bf16) pack_a_bf16(g, mr, reinterpret_cast<uint32_t*>(apack));
  if (!a_in_place && !bf16) pack_a_f32(g, mr, reinterpret_cast<float*>(apack));
  // B's panels: kept from an earlier call with the same B where the caller keeps them (the
  // packing was 10-15% of a call whose M is a few hundred rows), else packed here.
  bool b_packed = false;
  if (g.b_panels) {
    static_assert(sizeof(ph_gemm_panels_key) == 56, "compared as bytes: no padding");
    const ph_gemm_panels_key key{
        g.b, g.b_rs, g.b_cs, g.k, g.n, g.b_dtype, static_cast<int>(chosen - ks.data()), bf16 ? 1 : 0, 0};
    auto* kept = static_cast<ph_gemm_panels_key*>(g.b_panels);
    b_packed = std::memcmp(kept, &key, sizeof key) == 0;
    bpack = static_cast<char*>(g.b_panels) + 64;
    if (!b_packed) *kept = key;  // (set before packing: the panels are this call's on return)
  }
  if (!b_packed && bf16) pack_b_bf16(g, nr, reinterpret_cast<uint16_t*>(bpack));
  if (!b_packed && !bf16) pack_b_f32(g, nr, reinterpret_cast<float*>(bpack));
  const MicroKernel* ukr = bf16 ? K.bf16 : K.f32;  // [rows - 1]
  const int64_t a_stride = mr * kp * elem, b_stride = nr * kp * elem;
  alignas(64) float tile[16 * 32];
  // The rows of A in passes of `pass` rows; in each, the B micro-panels outermost: one stays in
  // L1 while the pass's A strips stream past it from L2, and B, packed once per call, serves
  // every pass (a block of many rows amortizes its packing).
  const int64_t pass = rows_per_pass(mr, kp * elem, g.n * 4);
  const bool prefetch_into_l1 = mr * g.k * elem <= features().l1_set_span * features().l1_ways / 4;
  for (int64_t ic = 0; ic < mp; ic += pass)
    for (int64_t j0 = 0; j0 < np; j0 += nr) {
      const char* bpanel = bpack + (j0 / nr) * b_stride;
      int cols = static_cast<int>(std::min<int64_t>(nr, g.n - j0));
      for (int64_t i0 = ic; i0 < std::min(mp, ic + pass); i0 += mr) {
        int rows = static_cast<int>(std::min<int64_t>(mr, g.m - i0));
        if (a_in_place && j0 == 0 && i0 + 2 * mr <= std::min(g.m, ic + pass))  // (the next strip is whole)
          prefetch_rows(static_cast<const char*>(g.a) + (i0 + mr) * a_row_bytes, mr, a_row_bytes, g.k * elem,
                        prefetch_into_l1);
        const void* a = apack + (i0 / mr) * a_stride;
        int64_t ars = 1, acs = mr;
        if (a_in_place) {
          a = static_cast<const char*>(g.a) + i0 * a_row_bytes;
          ars = bf16 ? g.a_rs / 2 : g.a_rs;  // bf16: in k-pair words
          acs = 1;
        }
        float* c = g.c + i0 * g.ldc + j0;
        if (cols == nr) {
          ukr[rows - 1](g.k, a, ars, acs, bpanel, c, g.ldc, g.accumulate);
          continue;
        }
        ukr[rows - 1](g.k, a, ars, acs, bpanel, tile, nr, 0);  // ragged columns: the tile computed aside
        for (int i = 0; i < rows; ++i)
          for (int j = 0; j < cols; ++j) c[i * g.ldc + j] = (g.accumulate ? c[i * g.ldc + j] : 0.0f) + tile[i * nr + j];
      }
    }
}

const ph_runtime* runtime_table() {
  static const ph_runtime t{[](const ph_gemm_args* g) { gemm(*g); }, nullptr, nullptr, nullptr, nullptr, nullptr};
  return &t;
}

}  // namespace parhelion::runtime

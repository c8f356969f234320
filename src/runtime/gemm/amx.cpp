#include "runtime/gemm/amx.h"

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "runtime/gemm/transpose_rows.h"

namespace parhelion::runtime {
namespace {

constexpr int kTile = 16;                  // rows of every tile; columns of a C or B tile
constexpr int kStepK = 32;                 // bf16 elements of k per tile step (a 64-byte tile row)
constexpr int kBlock = 32;                 // the 2 x 2 tiles of C a step updates
constexpr int kPanelRow = 2 * kBlock * 2;  // bytes of one k-pair row of a packed B panel
// Steps of k per pass over the whole blocks of C: a B panel's chunk (16 KiB) stays in L1 while
// the strips of A pass it, and C is read back once per chunk. Measured on a Xeon with AMX
// (48 KiB L1): 4 steps ran 30% slower, 16 steps or all of k 5-10% slower, than 8.
constexpr int64_t kChunkSteps = 8;

// Linux keeps the 8 KiB tile state off until a process asks for it (arch_prctl, kernel 5.16+).
constexpr long kArchRequestXcompPerm = 0x1023;
constexpr long kXfeatureXtiledata = 18;

// The GCC tile intrinsics are asm statements that declare no memory effects; this fence keeps the
// compiler from moving ordinary loads and stores of the same buffers across them.
inline void compiler_fence() { asm volatile("" ::: "memory"); }

// The tile shapes of the kernel: C tiles 0-3 (16 x 16 f32), A tiles 4-5 (16 x 32 bf16), B tiles
// 6-7 (16 k-pairs x 16 columns): every one 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
  TileConfig() {
    for (int t = 0; t < 8; ++t) {
      colsb[t] = 64;
      rows[t] = kTile;
    }
  }
};

uint16_t bf16_at(const void* p, int64_t i) { return static_cast<const uint16_t*>(p)[i]; }
int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// B (k x n) -> [np / 32][kp / 2][32][2] bf16, zero-padded: row p of a panel holds the k-pair
// (2p, 2p + 1) of its 32 columns, so a 16 x 16 B tile is 16 such rows from column 0 or 16.
__attribute__((target("avx512f,avx512bw"))) void pack_b_vnni(const ph_gemm_args& g, int64_t kp, char* out) {
  const int64_t pairs = kp / 2;
  if (g.b_cs == 1) {
    // Two rows of 32 columns interleave into one packed row with a two-source word permute.
    alignas(64) static constexpr uint16_t kLow[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                      8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
    alignas(64) static constexpr uint16_t kHigh[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                                       24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
    const __m512i low = _mm512_load_si512(kLow), high = _mm512_load_si512(kHigh);
    const uint16_t* b = static_cast<const uint16_t*>(g.b);
    // Pairs of rows outermost: the source is read along its rows, not down 4 KiB-strided columns
    // whose lines share one L1 set.
    const int64_t panel_bytes = pairs * kPanelRow;
    for (int64_t p = 0; p < pairs; ++p) {
      const int64_t r0 = 2 * p, r1 = 2 * p + 1;
      char* o = out + p * kPanelRow;
      for (int64_t j0 = 0; j0 < g.n; j0 += kBlock, o += panel_bytes) {
        const int cols = static_cast<int>(std::min<int64_t>(kBlock, g.n - j0));
        const __mmask32 mask = cols == 32 ? ~0u : (1u << cols) - 1;
        __m512i x = r0 < g.k ? _mm512_maskz_loadu_epi16(mask, b + r0 * g.b_rs + j0) : _mm512_setzero_si512();
        __m512i y = r1 < g.k ? _mm512_maskz_loadu_epi16(mask, b + r1 * g.b_rs + j0) : _mm512_setzero_si512();
        _mm512_storeu_si512(o, _mm512_permutex2var_epi16(x, low, y));
        _mm512_storeu_si512(o + 64, _mm512_permutex2var_epi16(x, high, y));
      }
    }
    return;
  }
  if (g.b_rs == 1 && g.k % kStepK == 0 && g.b_cs % 2 == 0) {
    // A column-major B whose k is whole tile steps: a column's k-pairs are the 32-bit words of a
    // source row, and a panel's packed rows are those words transposed, 32 columns wide.
    transpose_rows_into_strips(static_cast<const float*>(g.b), g.b_cs / 2, g.n, pairs, kBlock,
                               reinterpret_cast<float*>(out));
    return;
  }
  if (g.b_rs == 1 && g.k % 2 == 0 && g.b_cs < (int64_t{1} << 25)) {
    // A column-major B (a K block read as K^T, as attention's scores are): the k-pair of a column
    // is one 32-bit word of the source, so a packed row is two 16-word gathers.
    const uint16_t* b = static_cast<const uint16_t*>(g.b);
    const __m512i lanes = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i index = _mm512_mullo_epi32(lanes, _mm512_set1_epi32(static_cast<int>(g.b_cs)));
    for (int64_t j0 = 0; j0 < g.n; j0 += kBlock) {
      const int cols = static_cast<int>(std::min<int64_t>(kBlock, g.n - j0));
      const __mmask16 left = cols >= 16 ? 0xffff : (1u << cols) - 1;
      const __mmask16 right = cols >= 32 ? 0xffff : cols <= 16 ? 0 : (1u << (cols - 16)) - 1;
      const uint16_t* lo = b + j0 * g.b_cs;
      const uint16_t* hi = lo + 16 * g.b_cs;
      for (int64_t p = 0; p < pairs; ++p, out += kPanelRow) {
        if (2 * p >= g.k) {
          _mm512_storeu_si512(out, _mm512_setzero_si512());
          _mm512_storeu_si512(out + 64, _mm512_setzero_si512());
          continue;
        }
        const __m512i zero = _mm512_setzero_si512();
        _mm512_storeu_si512(out, _mm512_mask_i32gather_epi32(zero, left, index, lo + 2 * p, 2));
        _mm512_storeu_si512(out + 64, _mm512_mask_i32gather_epi32(zero, right, index, hi + 2 * p, 2));
      }
    }
    return;
  }
  auto* o = reinterpret_cast<uint16_t*>(out);
  for (int64_t j0 = 0; j0 < g.n; j0 += kBlock)
    for (int64_t p = 0; p < pairs; ++p)
      for (int j = 0; j < kBlock; ++j)
        for (int h = 0; h < 2; ++h, ++o) {
          const int64_t r = 2 * p + h, col = j0 + j;
          *o = r < g.k && col < g.n ? bf16_at(g.b, r * g.b_rs + col * g.b_cs) : 0;
        }
}

// A (m x k) -> [mp / 32][kp / 32][32 rows][32] bf16, zero-padded past m and k: the two A tiles
// of one step of one strip are 2 KiB in a row, so the kernel streams them at full speed and no
// source row stride can make them share cache sets.
__attribute__((target("avx512f,avx512bw"))) void pack_a_tiles(const ph_gemm_args& g, int64_t kp, char* out) {
  const int64_t steps = kp / kStepK;
  for (int64_t i0 = 0; i0 < g.m; i0 += kBlock)
    for (int i = 0; i < kBlock; ++i) {
      const int64_t row = i0 + i;
      char* o = out + (i0 / kBlock) * steps * 2048 + i * 64;
      if (row >= g.m) {
        for (int64_t s = 0; s < steps; ++s) _mm512_storeu_si512(o + s * 2048, _mm512_setzero_si512());
        continue;
      }
      if (g.a_cs == 1) {
        const uint16_t* src = static_cast<const uint16_t*>(g.a) + row * g.a_rs;
        for (int64_t s = 0; s < steps; ++s) {
          const int64_t left = g.k - s * kStepK;
          const __mmask32 mask = left >= 32 ? ~0u : (1u << left) - 1;
          _mm512_storeu_si512(o + s * 2048, _mm512_maskz_loadu_epi16(mask, src + s * kStepK));
        }
        continue;
      }
      for (int64_t s = 0; s < steps; ++s) {
        auto* words = reinterpret_cast<uint16_t*>(o + s * 2048);
        for (int p = 0; p < kStepK; ++p) {
          const int64_t col = s * kStepK + p;
          words[p] = col < g.k ? bf16_at(g.a, row * g.a_rs + col * g.a_cs) : 0;
        }
      }
    }
}

// Where a strip of A's tiles lie: the rows of one tile `row_bytes` apart, a step of k
// `step_bytes` on. Packed (pack_a_tiles): 64 and 2048; read in place: A's row stride and 64.
struct AStrip {
  const char* at;
  int64_t row_bytes, step_bytes;
};

// One 32 x 32 block of C over `steps` 32-deep steps of k: the A strip `a`, the B panel
// kPanelRow bytes a k-pair row (pack_b_vnni), C rows `ldc` bytes apart, read first when
// `accumulate`. (The strip by reference: copied into the argument area, its two 8-byte halves
// were written and then read as one 16-byte word, a failed store forward on every call.)
__attribute__((target("amx-tile,amx-bf16,avx512f"))) void block_32x32(int64_t steps, const AStrip& a_strip,
                                                                      const char* b, char* c, int64_t ldc,
                                                                      int accumulate) {
  if (accumulate) {
    _tile_loadd(0, c, ldc);
    _tile_loadd(1, c + 64, ldc);
    _tile_loadd(2, c + kTile * ldc, ldc);
    _tile_loadd(3, c + kTile * ldc + 64, ldc);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  const char* a = a_strip.at;
  const int64_t lda = a_strip.row_bytes;
  for (int64_t s = 0; s < steps; ++s, a += a_strip.step_bytes, b += kTile * kPanelRow) {
    _tile_loadd(4, a, lda);
    _tile_loadd(5, a + kTile * lda, lda);
    _tile_loadd(6, b, kPanelRow);
    _tile_loadd(7, b + 64, kPanelRow);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  if (accumulate) {  // (C's lines are in L1: the tiles were just loaded from them)
    _tile_stored(0, c, ldc);
    _tile_stored(1, c + 64, ldc);
    _tile_stored(2, c + kTile * ldc, ldc);
    _tile_stored(3, c + kTile * ldc + 64, ldc);
    return;
  }
  // A C not read first goes to a buffer on the stack (in L1), and from there to C by vector
  // stores: a tile store straight into lines not in L1 (attention's scores, 256 KiB a block) held
  // the tile unit until they arrived, where vector stores retire into the store buffer. Measured
  // on a Xeon with AMX, whole calls of 128 x 512 x 128 (attention's scores): 32 -> 26 us; through
  // the buffer also when C was read first (its P x V), 25 -> 26 us.
  alignas(64) float out[kBlock * kBlock];
  _tile_stored(0, out, kBlock * 4);
  _tile_stored(1, out + kTile, kBlock * 4);
  _tile_stored(2, out + kTile * kBlock, kBlock * 4);
  _tile_stored(3, out + kTile * kBlock + kTile, kBlock * 4);
  compiler_fence();
  for (int r = 0; r < kBlock; ++r) {
    float* row = reinterpret_cast<float*>(c + r * ldc);
    _mm512_storeu_ps(row, _mm512_load_ps(out + r * kBlock));
    _mm512_storeu_ps(row + kTile, _mm512_load_ps(out + r * kBlock + kTile));
  }
}

__attribute__((target("amx-tile"))) void load_tile_config() {
  // Static: GCC's ldtilecfg asm names only the first word of the block as its input, so the
  // stores that fill a local one could be dropped as dead.
  static const TileConfig config;
  _tile_loadconfig(&config);
}

__attribute__((target("amx-tile"))) void release_tiles() { _tile_release(); }

__attribute__((target("amx-tile,amx-bf16"))) void tile_products(int64_t steps) {
  load_tile_config();
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  _tile_zero(5);
  _tile_zero(6);
  _tile_zero(7);
  for (int64_t s = 0; s < steps; ++s) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  release_tiles();
}

}  // namespace

bool amx_bf16_available() {
  static const bool available = [] {
    unsigned a, b, c, d;
    // CPUID.(7,0):EDX bit 22 AMX-BF16, bit 24 AMX-TILE.
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)) || !(d & (1u << 24))) return false;
    return syscall(SYS_arch_prctl, kArchRequestXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return available;
}

float amx_tile_loop(int64_t iterations) {
  tile_products(iterations);
  return 0;
}

int64_t amx_workspace_bytes(int64_t m, int64_t n, int64_t k, bool a_in_place) {
  const int64_t kp = round_up(k, kStepK);
  return round_up(round_up(n, kBlock) * kp * 2, 64) + (a_in_place ? kBlock : round_up(m, kBlock)) * kp * 2 + 64;
}

bool amx_reads_a_in_place(int64_t a_rs, int64_t a_cs, int64_t k) {
  return a_cs == 1 && k % kStepK == 0 && (a_rs * 2) % 4096 != 0;
}

void gemm_amx_bf16(const ph_gemm_args& g) {
  const int64_t kp = round_up(g.k, kStepK), mp = round_up(g.m, kBlock), np = round_up(g.n, kBlock);
  const int64_t steps = kp / kStepK;
  char* bpack = static_cast<char*>(g.workspace);
  char* apack = bpack + round_up(np * kp * 2, 64);
  pack_b_vnni(g, kp, bpack);
  // A row-major A's whole strips are read in place by the tile loads (a flash kernel's P and Q
  // blocks: their packing was a sixth of attention's time); only a ragged last strip is packed,
  // into the first strip slot. Otherwise every strip is packed up front, or, in a workspace sized
  // for an A read in place (`workspace_bytes`: a lowering that expected one), each strip into
  // that slot when a block needs it (correct, and never expected).
  const int64_t a_row_bytes = g.a_rs * 2;
  const bool a_in_place = amx_reads_a_in_place(g.a_rs, g.a_cs, g.k);
  const bool a_packed =
      !a_in_place && (g.workspace_bytes == 0 || g.workspace_bytes >= amx_workspace_bytes(g.m, g.n, g.k, false));
  int64_t strip_in_slot = -1;  // the strip the slot holds
  auto pack_strip = [&](int64_t i0) {
    ph_gemm_args strip = g;
    strip.m = std::min<int64_t>(kBlock, g.m - i0);
    strip.a = static_cast<const char*>(g.a) + i0 * g.a_rs * 2;
    pack_a_tiles(strip, kp, apack);
    strip_in_slot = i0;
  };
  const int64_t mfull = g.m / kBlock * kBlock, nfull = g.n / kBlock * kBlock;
  if (a_packed) pack_a_tiles(g, kp, apack);
  if (a_in_place && mfull < g.m) pack_strip(mfull);
  compiler_fence();

  load_tile_config();
  const int64_t ldc = g.ldc * 4;
  auto a_strip = [&](int64_t i0, int64_t s0) {
    if (a_in_place && i0 < mfull)
      return AStrip{static_cast<const char*>(g.a) + i0 * a_row_bytes + s0 * kStepK * 2, a_row_bytes, kStepK * 2};
    if (a_packed) return AStrip{apack + ((i0 / kBlock) * steps + s0) * 2048, 64, 2048};
    if (strip_in_slot != i0) {
      compiler_fence();
      pack_strip(i0);
      compiler_fence();
    }
    return AStrip{apack + s0 * 2048, 64, 2048};
  };
  auto b_panel = [&](int64_t j0, int64_t s0) { return bpack + ((j0 / kBlock) * steps + s0) * kTile * kPanelRow; };
  // Whole blocks of C: k in chunks, so that a B panel's chunk stays in L1 while every strip of A
  // passes it; C is read back between chunks.
  for (int64_t s0 = 0; s0 < steps; s0 += kChunkSteps) {
    const int64_t n_steps = std::min(kChunkSteps, steps - s0);
    const int accumulate = s0 > 0 || g.accumulate;
    for (int64_t j0 = 0; j0 < nfull; j0 += kBlock)
      for (int64_t i0 = 0; i0 < mfull; i0 += kBlock)
        block_32x32(n_steps, a_strip(i0, s0), b_panel(j0, s0), reinterpret_cast<char*>(g.c + i0 * g.ldc + j0), ldc,
                    accumulate);
  }
  // Ragged blocks (the last row strip, the last column panel) over all of k, computed aside.
  alignas(64) float aside[kBlock * kBlock];
  for (int64_t j0 = 0; j0 < np; j0 += kBlock)
    for (int64_t i0 = j0 < nfull ? mfull : 0; i0 < mp; i0 += kBlock) {
      const int rows = static_cast<int>(std::min<int64_t>(kBlock, g.m - i0));
      const int cols = static_cast<int>(std::min<int64_t>(kBlock, g.n - j0));
      block_32x32(steps, a_strip(i0, 0), b_panel(j0, 0), reinterpret_cast<char*>(aside), kBlock * 4, 0);
      compiler_fence();
      float* c = g.c + i0 * g.ldc + j0;
      for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j)
          c[i * g.ldc + j] = (g.accumulate ? c[i * g.ldc + j] : 0.0f) + aside[i * kBlock + j];
    }
  compiler_fence();
  release_tiles();
}

}  // namespace parhelion::runtime

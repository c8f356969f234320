// Block matrix multiply on Intel AMX tiles: C (+)= A · B for bf16 A and B, f32 accumulation.
//
// A TDPBF16PS multiplies a 16 x 32 bf16 tile by a 32 x 16 one (in k-pairs, "VNNI" order) into a
// 16 x 16 f32 tile: 16384 multiply-adds per instruction, about 16 times the AVX-512-BF16 rate
// per core. The kernel keeps a 32 x 32 block of C in four tiles and streams two A and two B
// tiles per 32-deep step of k. It is one of gemm.cpp's micro-kernels ("amx_32x32"), offered only
// where the CPU has AMX-BF16 and the operating system grants the process the tile state.
#pragma once

#include <cstdint>

#include "runtime/gemm/abi.h"

namespace parhelion::runtime {

// Whether this process can run AMX-BF16: CPUID says the core has it and Linux granted the
// XTILEDATA state (asked for once, on the first call).
bool amx_bf16_available();

// Workspace the AMX kernel needs for an m x n x k block: B in VNNI panels, and A's strips: all of
// them, or with `a_in_place` (amx_reads_a_in_place holds for every call) one, its ragged last.
int64_t amx_workspace_bytes(int64_t m, int64_t n, int64_t k, bool a_in_place = false);

// Whether the kernel reads A's whole 32-row strips in place, without packing them: row-major,
// k whole 32-deep steps, rows not 4 KiB apart (a tile's 16 rows would share one L1 set).
bool amx_reads_a_in_place(int64_t a_rs, int64_t a_cs, int64_t k);

// The tile products of the kernel's inner step (four TDPBF16PS on tiles that stay loaded), for
// `iterations` steps: a timing of it is the core's AMX bf16 peak (runtime/gemm/throughput.h).
// Requires amx_bf16_available().
float amx_tile_loop(int64_t iterations);
constexpr double kAmxTileFlops = 4.0 * 16 * 16 * 32 * 2;

// C (+)= A · B with g.a_dtype == g.b_dtype == PH_BF16, any strides, any m, n, k >= 1.
// Requires amx_bf16_available().
void gemm_amx_bf16(const ph_gemm_args& g);

}  // namespace parhelion::runtime

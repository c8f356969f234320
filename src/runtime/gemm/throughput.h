// Instruction throughput loops: independent chains of one multiply-add instruction on values
// that stay in registers, so that a timing of them is the core's peak for that instruction.
// The GEMM runtime times two of them to rank its micro-kernel families on the host
// (bf16_dot_speedup); `parhelion bench` times all of them as the peaks its rows are read against.
//
// Each runs `iterations` steps and returns a value that depends on every chain, so that nothing
// is elided; the constants are the multiply-adds x 2 (FLOP) of one step. Each requires its
// instruction set (the caller checks the host's features).
#pragma once

#include <cstdint>

namespace parhelion::runtime {

// AVX-512 f32 FMA (vfmadd231ps zmm), 16 chains.
float f32_fma_avx512_loop(int64_t iterations);
constexpr double kF32FmaAvx512Flops = 16 * 16 * 2;

// AVX2 f32 FMA (vfmadd231ps ymm), 12 chains.
float f32_fma_avx2_loop(int64_t iterations);
constexpr double kF32FmaAvx2Flops = 12 * 8 * 2;

// AVX-512-BF16 dot (vdpbf16ps zmm: 32 multiply-adds each), 16 chains.
float bf16_dot_avx512_loop(int64_t iterations);
constexpr double kBf16DotAvx512Flops = 16 * 32 * 2;

// The AMX tile loop is amx.h's amx_tile_loop: it shares the kernel's tile configuration.

}  // namespace parhelion::runtime

// Block matrix multiply for generated kernels: C (+)= A · B on one block, f32 accumulation.
//
// Generated code calls it through the runtime table (ph_runtime, passed to every launch), so
// the micro-kernels are compiled once, with intrinsics, into the library, and chosen at run
// time from the host's features: AVX-512 (f32 12x32), AVX-512-BF16 (vdpbf16ps, 12x32 over
// k-pairs), AVX2+FMA (f32 6x16), or portable C++. Operands are packed into the workspace (the
// Block IR's staged fast-memory buffers) in the micro-kernel's layout, zero-padded at ragged
// edges, so any M, N, K and any strides work.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/gemm/abi.h"

namespace parhelion::runtime {

const ph_runtime* runtime_table();

// Packing workspace for an m x n x k block by micro-kernel `kernel`, given whether both operands
// arrive as bf16 (a tile kernel's is then its own, with bf16 panels; otherwise gemm() hands its
// call to a vector kernel; a vector kernel that multiplies bf16 as it is, vdpbf16ps, packs them
// at 2 bytes, the others widen them to f32, 4 bytes), or by any kernel of this host (kernel "").
// The caller's bf16_operands must be what the call's dtypes are: sized for bf16, an f32 call
// would not fit. With `a_in_place`, every call's A is one the tile kernel reads in place
// (amx_reads_a_in_place: row-major bf16, k whole 32-deep steps) and its A strips take no room
// but a ragged one's (the call passes the size in ph_gemm_args::workspace_bytes). With `b_kept`,
// every call passes kept panels for B (ph_gemm_args::b_panels, sized by gemm_b_panels_bytes)
// and a vector kernel packs B there: its workspace holds A's strips alone.
int64_t gemm_workspace_bytes(int64_t m, int64_t n, int64_t k, const std::string& kernel = "",
                             bool bf16_operands = false, bool a_in_place = false, bool b_kept = false);

// The bytes of a kept B (ph_gemm_args::b_panels) of k x n for micro-kernel `kernel`: its key and
// its panels; 0 where that kernel packs B its own way (a tile kernel given bf16 operands) and
// keeps nothing.
int64_t gemm_b_panels_bytes(int64_t n, int64_t k, const std::string& kernel, bool bf16_operands);

// Whether micro-kernel `kernel` multiplies bf16 operands as they are (vdpbf16ps, AMX tiles);
// the others widen them to f32 while packing, element by element, so that an f32 copy of the
// same values would reach them for less (an f32 A is read in place, unpacked).
bool gemm_kernel_takes_bf16(const std::string& kernel);

// The micro-kernels this host can run (e.g. "avx512_8x32", "avx512_12x32", "avx2_6x16",
// "generic_4x4"). The bf16 path (vdpbf16ps) is taken when both operands are bf16 and the host has
// AVX-512-BF16, except by the "_widened" kernels, which widen them to f32 while packing.
const std::vector<std::string>& gemm_kernel_names();
// The micro-kernels worth trying for one dot, best first for this host. A dot of two bf16
// operands on a host with AVX-512-BF16 gets both the vdpbf16ps kernels and the "_widened" ones
// (the f32 kernels on operands widened while packing), the family whose instruction does more
// multiply-adds per second first; other dots get the list without the widened duplicates.
std::vector<std::string> gemm_kernel_choices(bool bf16_operands);
// Multiply-adds per second of vdpbf16ps over the zmm f32 FMA on this core, measured once per
// process (a few milliseconds); 0 without AVX-512-BF16.
double bf16_dot_speedup();
// The block of C (m x n) and depth (k) one call of micro-kernel `name` runs best on: what the
// cpu backend's default config starts a dot's blocks from. The AMX tiles want twice the vector
// kernels' M and N: their packing and C traffic per multiply-add is that much larger.
struct GemmBlock {
  int64_t m, n, k;
};
GemmBlock gemm_preferred_block(const std::string& name);
// The index of micro-kernel `name` in gemm_kernel_names() (what ph_gemm_args.kernel takes).
int gemm_kernel_index(const std::string& name);

void gemm(const ph_gemm_args& g);

}  // namespace parhelion::runtime

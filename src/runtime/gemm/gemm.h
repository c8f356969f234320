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

// Packing workspace for an m x n x k block (any available micro-kernel).
int64_t gemm_workspace_bytes(int64_t m, int64_t n, int64_t k);

// The micro-kernels this host can run, best first (e.g. "avx512_12x32", "avx2_6x16",
// "generic_4x4"); the bf16 path is used automatically when both operands are bf16 and the host
// has AVX-512-BF16, whichever f32 kernel is chosen.
const std::vector<std::string>& gemm_kernel_names();
// The index of micro-kernel `name` in gemm_kernel_names() (what ph_gemm_args.kernel takes).
int gemm_kernel_index(const std::string& name);

void gemm(const ph_gemm_args& g);

}  // namespace parhelion::runtime

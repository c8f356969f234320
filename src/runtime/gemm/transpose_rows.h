// Rows of a row-major matrix of 32-bit elements into strips [ceil(m/mr)][k][mr] (element (i, p) of
// a strip at p * mr + i), zero-padded past m, with 8x8 and 4x8 register transposes (a scalar
// transposing copy cost about a tenth of a GEMM's time at 256-column blocks). Two packers use it:
// A's panels for the f32 micro-kernels, and (a bf16 k-pair being one 32-bit element) the VNNI
// panels of a column-major bf16 B for the AMX kernel, attention's K^T. Only moves bits.
#pragma once

#include <cstdint>

namespace parhelion::runtime {

// Requires AVX2.
void transpose_rows_into_strips(const float* a, int64_t rs, int64_t m, int64_t k, int mr, float* out);

}  // namespace parhelion::runtime

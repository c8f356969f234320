// TPU generations as compilation targets for the pallas backend: what the compiler needs to
// choose legal blocks and to check that a config fits VMEM. (The timing model's figures live
// with the model.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace parhelion::backend::pallas {

struct TpuGeneration {
  std::string name;         // "v5e", "v6e", "v5p", "v7x"
  int64_t vmem_bytes = 0;   // per TensorCore
  int mxu = 128;            // MXU tile edge: matmul dims are padded to it
  const char* source = "";  // where the figures come from
  // JAX's device_kind of the chip (jax._src.pallas.mosaic.tpu_info, chip_version_from_device_kind):
  // the modules trace and lower for it on a machine without a TPU (DMA tiling, block checks).
  const char* device_kind = "";
};

const std::vector<TpuGeneration>& tpu_generations();
// Throws UserError naming the known generations.
const TpuGeneration& tpu_generation(const std::string& name);

// Elements of a dtype per 32-bit word (i64 is int32 on a TPU): 1, 2 or 4.
int64_t tpu_packing(int64_t dtype_bytes);
// The rows of a VMEM tile of the dtype: 8 x the packing (8 rows of 32 bits, 16 of 16, 32 of 8).
int64_t tpu_sublane_tile(int64_t dtype_bytes);

// TPU block legality (jax/_src/pallas/mosaic/lowering.py, _check_block_mappings): a block's
// last dim must be a multiple of 128 or the whole dim, its second-to-last a multiple of the
// sublane count (8 for 32-bit, 16 for 16-bit types; Mosaic's check asks 8, the packed layouts
// 16) or the whole dim. A rank-1 block is the whole dim, a multiple of 1024 (8 x 128), or a
// power of two of at least 128 x the packing (128 f32, 256 bf16, 512 8-bit). `rank_pos`
// counts from the end: 0 = last dim.
bool tpu_block_legal(int64_t block, int64_t dim, int rank_pos, int rank, int64_t dtype_bytes);

}  // namespace parhelion::backend::pallas

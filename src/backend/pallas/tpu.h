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
};

const std::vector<TpuGeneration>& tpu_generations();
// Throws UserError naming the known generations.
const TpuGeneration& tpu_generation(const std::string& name);

// TPU block legality: a block's last dim must be a multiple of 128 or the whole dim, its
// second-to-last a multiple of the sublane count (8 for 32-bit, 16 for 16-bit types) or the
// whole dim. `rank_pos` counts from the end: 0 = last dim.
bool tpu_block_legal(int64_t block, int64_t dim, int rank_pos, int64_t dtype_bytes);

}  // namespace parhelion::backend::pallas

#include "backend/pallas/tpu.h"

#include <algorithm>

#include "parhelion/error.h"

namespace parhelion::backend::pallas {

const std::vector<TpuGeneration>& tpu_generations() {
  static const std::vector<TpuGeneration> g = {
      {"v5e", 128ll << 20, 128, "Google Cloud TPU v5e docs: 128 MiB VMEM per core (Pallas TPU docs, memory spaces)",
       "TPU v5 lite"},
      {"v6e", 128ll << 20, 256, "Google Cloud TPU v6e (Trillium) docs: 128 MiB VMEM, 256x256 MXU", "TPU v6 lite"},
      {"v5p", 64ll << 20, 128, "Google Cloud TPU v5p docs: 64 MiB VMEM per core", "TPU v5p"},
      {"v7x", 64ll << 20, 256, "Google Cloud TPU7x (Ironwood) docs: 64 MiB VMEM per TensorCore, 256x256 MXU", "TPU7x"},
  };
  return g;
}

const TpuGeneration& tpu_generation(const std::string& name) {
  std::string known;
  for (const TpuGeneration& g : tpu_generations()) {
    if (g.name == name) return g;
    known += (known.empty() ? "" : ", ") + g.name;
  }
  throw UserError("unknown TPU generation '" + name + "' (known: " + known + ")");
}

int64_t tpu_packing(int64_t dtype_bytes) { return std::max<int64_t>(1, 4 / std::max<int64_t>(1, dtype_bytes)); }
int64_t tpu_sublane_tile(int64_t dtype_bytes) { return 8 * tpu_packing(dtype_bytes); }

bool tpu_block_legal(int64_t block, int64_t dim, int rank_pos, int rank, int64_t dtype_bytes) {
  if (block >= dim) return true;  // the whole dimension
  if (rank == 1) {
    return block % 1024 == 0 || (block >= 128 * tpu_packing(dtype_bytes) && (block & (block - 1)) == 0);
  }
  if (rank_pos == 0) return block % 128 == 0;
  if (rank_pos == 1) return block % tpu_sublane_tile(dtype_bytes) == 0;
  return true;
}

}  // namespace parhelion::backend::pallas

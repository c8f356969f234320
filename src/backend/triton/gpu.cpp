#include "backend/triton/gpu.h"

#include "parhelion/error.h"

namespace parhelion::backend::triton {

const std::vector<GpuModel>& gpu_models() {
  // Shared memory: 228 KiB per SM on Hopper and Blackwell, of which a thread block may take
  // 227 KiB (232448 bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin); registers: 64 Ki 32-bit
  // registers per SM, at most 255 per thread (CUDA C Programming Guide, compute capabilities).
  static const std::vector<GpuModel> all = {
      {"h100", 90, 132, 232448, 255, 65536, "NVIDIA H100 SXM: sm_90, 132 SMs, 228 KiB shared memory per SM"},
      {"h200", 90, 132, 232448, 255, 65536, "NVIDIA H200: sm_90 (H100's SM with 141 GB of HBM3e), 132 SMs"},
      {"b200", 100, 148, 232448, 255, 65536, "NVIDIA B200: sm_100, 148 SMs, 228 KiB shared memory per SM"},
  };
  return all;
}

const GpuModel& gpu_model(const std::string& name) {
  for (const GpuModel& g : gpu_models())
    if (g.name == name) return g;
  std::string known;
  for (const GpuModel& g : gpu_models()) known += (known.empty() ? "" : ", ") + g.name;
  throw UserError("unknown GPU '" + name + "' (known: " + known + ")");
}

}  // namespace parhelion::backend::triton

// GPU models as compilation targets for the triton backend: what the compiler needs to choose
// legal blocks and to check that a program fits one streaming multiprocessor (SM).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace parhelion::backend::triton {

struct GpuModel {
  std::string name;                     // "h100", "h200", "b200"
  int arch = 90;                        // compute capability x 10: sm_90, sm_100
  int sms = 0;                          // streaming multiprocessors
  int64_t shared_memory_per_block = 0;  // the most one program (a thread block) may allocate
  int registers_per_thread = 255;       // the most one thread may hold (32-bit registers)
  int64_t registers_per_sm = 65536;
  const char* source = "";  // where the figures come from
};

const std::vector<GpuModel>& gpu_models();
// Throws UserError naming the known models.
const GpuModel& gpu_model(const std::string& name);

}  // namespace parhelion::backend::triton

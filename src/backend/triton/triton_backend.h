// The triton backend: Python modules of @triton.jit kernels and a host launcher, for one NVIDIA
// GPU model (see docs/triton.md).
//
// A grid step is a program (a thread block); fast memory is the SM's shared memory, which
// Triton manages itself, so lowering plans no copies: an inner loop is `pipeline`, a
// `tl.range` whose num_stages is the config's buffers. Block sizes are powers of two, and a
// dot's are at least 16 (tensor-core tiles). The module does not run here: run it on a GPU,
// or on this CPU in Triton's interpreter (run.h).
#pragma once

#include "backend/backend.h"
#include "backend/triton/gpu.h"

namespace parhelion::backend::triton {

class TritonBackend final : public Backend {
 public:
  explicit TritonBackend(const GpuModel& gpu);

  std::string name() const override { return "triton"; }
  const Machine& machine() const override { return machine_; }
  const Capabilities& capabilities() const override { return caps_; }
  std::string identity() const override { return "triton|" + gpu_.name; }
  const GpuModel& gpu() const { return gpu_; }

  bool block_size_legal(const ir::Function& fn, int block_id, int64_t block) const override;
  std::vector<std::string> micro_kernels(const ir::Function& fn, const ir::Op& dot) const override;
  Config default_config(const ir::Function& fn, const ConfigSpec& spec) const override;
  void check(const lower::BlockProgram& program) const override;
  int64_t footprint_bytes(const lower::BlockProgram& program) const override;
  Artifact generate(const lower::BlockProgram& program) const override;

 private:
  GpuModel gpu_;
  Machine machine_;
  Capabilities caps_;
};

}  // namespace parhelion::backend::triton

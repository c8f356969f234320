// The pallas backend: JAX Pallas modules for one TPU generation (see docs/pallas.md).
//
// Fast memory is VMEM; a TensorCore runs one grid step at a time (megacore sharding comes
// from "parallel" grid dimensions), so a launch has one thread. Inner loops are `pipeline`
// (emit_pipeline) or `resident` (the whole extent in VMEM); every block a loop touches moves
// through VMEM, and this backend's own plan (plan.h) places them. Block sizes must follow the
// TPU's layout rules (tpu.h). The generated module does not run here: run it with JAX (on a
// TPU, or in interpret mode: interpret.h).
#pragma once

#include "backend/backend.h"
#include "backend/pallas/tpu.h"

namespace parhelion::backend::pallas {

class PallasBackend final : public Backend {
 public:
  explicit PallasBackend(const TpuGeneration& generation);

  std::string name() const override { return "pallas"; }
  const Machine& machine() const override { return machine_; }
  const Capabilities& capabilities() const override { return caps_; }
  std::string identity() const override { return "pallas|TPU " + generation_.name; }
  const TpuGeneration& generation() const { return generation_; }

  bool block_size_legal(const ir::Function& fn, int block_id, int64_t block) const override;
  std::vector<std::string> micro_kernels(const ir::Function& fn, const ir::Op& dot) const override;
  std::vector<std::string> gather_strategies(const ir::Function& fn, const ir::Op& load) const override;
  Config default_config(const ir::Function& fn, const ConfigSpec& spec) const override;
  void check(const lower::BlockProgram& program) const override;
  int64_t footprint_bytes(const lower::BlockProgram& program) const override;
  Artifact generate(const lower::BlockProgram& program) const override;

 private:
  TpuGeneration generation_;
  Machine machine_;
  Capabilities caps_;
};

}  // namespace parhelion::backend::pallas

// The cpu backend: one C++ translation unit per kernel, compiled by the system compiler and
// loaded into this process (codegen.h, jit.h), for this host (host.h).
//
// Fast memory is the L2 cache per core; a launch splits its grid steps over threads. Inner
// loops may also `stream` (read blocks in place through the caches); lowering plans the
// copies of pipelined and resident loops, and blocks of tensors the launch writes are never
// staged. Dots run the host's register-blocked GEMM micro-kernels (runtime/gemm).
#pragma once

#include "backend/backend.h"
#include "backend/cpu/host.h"

namespace parhelion::backend::cpu {

// The vector widths, in bits, that code can be compiled for on a host with these features
// (Host::features), the widest first: the choices of the config knob vector_bits.
std::vector<int> vector_widths(const std::string& features);

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const Host& host);

  std::string name() const override { return "cpu"; }
  const Machine& machine() const override { return machine_; }
  const Capabilities& capabilities() const override { return caps_; }
  std::string identity() const override;
  const Host& host() const { return host_; }

  std::vector<std::string> micro_kernels(const ir::Function& fn, const ir::Op& dot) const override;
  int64_t dot_kept_b_bytes(int64_t n, int64_t k, const std::string& micro_kernel, bool bf16_operands) const override;
  bool dot_takes_16bit_operands(const std::string& micro_kernel, DType dtype) const override;
  int64_t dot_workspace_bytes(int64_t m, int64_t n, int64_t k, const std::string& micro_kernel, bool bf16_operands,
                              int64_t a_row_stride, int64_t k_multiple, bool b_kept) const override;
  Config default_config(const ir::Function& fn, const ConfigSpec& spec) const override;
  void check(const lower::BlockProgram& program) const override;
  Artifact generate(const lower::BlockProgram& program) const override;
  std::shared_ptr<Executable> load(const Artifact& artifact, const lower::BlockProgram& program) const override;
  // Every device on a thread of this process, one at a time (mesh_runner.cpp).
  void run_on_mesh(const ir::Function& fn, const std::vector<std::vector<void*>>& tensors,
                   const MeshDeviceFn& device) const override;

 private:
  Host host_;
  Machine machine_;
  Capabilities caps_;
};

}  // namespace parhelion::backend::cpu

// KernelBase::emit_pallas: trace (shared with the cpu path), lower for a TPU target, generate.
#include "backend/pallas/codegen.h"
#include "lower/lower.h"
#include "lower/pallas_plan.h"
#include "lower/tpu.h"
#include "parhelion/kernel.h"
#include "runtime/compiled_kernel_impl.h"

namespace parhelion {

PallasModule KernelBase::emit_pallas(const std::vector<Arg>& args, const std::string& tpu, const Config* config) {
  std::shared_ptr<CompiledKernel::Impl> traced = trace(args);
  lower::Target target = lower::pallas_target(tpu);
  PallasModule m;
  m.tpu = tpu;
  ConfigSpec spec = lower::derive_config_spec(traced->fn, target);
  m.config = config ? *config : lower::default_config(traced->fn, spec, target);
  m.config_spec = spec.describe();
  lower::BlockProgram program = lower::lower(traced->fn, m.config, target);
  m.config = program.config;
  m.block_ir = lower::print(program);
  for (const lower::PallasLaunch& pl : lower::plan_pallas(program)) m.vmem_bytes = std::max(m.vmem_bytes, pl.vmem_bytes);
  m.source = backend::pallas::generate_module(program);
  return m;
}

}  // namespace parhelion

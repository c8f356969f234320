// What a CompiledKernel holds: every stage of one specialization, for the runtime, the tests
// and tools that look inside (the public header keeps it opaque).
#pragma once

#include <string>
#include <vector>

#include "backend/cpu/jit.h"
#include "frontend/tracer.h"
#include "ir/ir.h"
#include "lower/block_ir.h"
#include "parhelion/kernel.h"
#include "runtime/gemm/gemm.h"

namespace parhelion {

using LaunchFn = void (*)(void* const*, const double*, char*, int64_t, int64_t, const ph_runtime*, ph_status*);

struct CompiledKernel::Impl {
  std::string name;
  std::vector<frontend::ArgSpec> signature;
  std::vector<bool> arg_is_tensor;
  ir::Function fn;
  lower::Target target;
  std::vector<int> written_params;  // tensor parameters the kernel stores to
  ConfigSpec spec;
  Config config;
  lower::BlockProgram program;
  std::string source;
  backend::cpu::JitResult jit;
  std::vector<LaunchFn> launches;
};

// The stages after tracing, for callers that compile many configs of one trace (the tuner):
// lower and generate code for `config` (throws UserError if it is invalid or does not fit)...
std::shared_ptr<CompiledKernel::Impl> specialize(const CompiledKernel::Impl& traced, const Config& config);
// ...then compile (or find in the disk cache) and load it.
void load(CompiledKernel::Impl& k);

}  // namespace parhelion

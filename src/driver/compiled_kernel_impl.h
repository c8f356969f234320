// What a CompiledKernel holds: every stage of one specialization, for the driver, the tuners
// and the tools that look inside (the public header keeps it opaque).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "frontend/tracer.h"
#include "ir/ir.h"
#include "lower/block_ir.h"
#include "parhelion/kernel.h"

namespace parhelion {

struct CompiledKernel::Impl {
  // Traced: the kernel for one signature.
  std::string name;
  std::vector<frontend::ArgSpec> signature;
  std::vector<bool> arg_is_tensor;
  ir::Function fn;
  std::vector<int> written_params;  // tensor parameters the kernel stores to
  std::vector<int> integer_params;  // scalar parameters read as integers (ph::Int)
  // Configured: for one backend, its config space and the chosen point (the default until
  // specialized).
  const backend::Backend* backend = nullptr;
  ConfigSpec spec;
  Config config;
  // Specialized: the Block IR, the generated program and, where it runs here, its executable.
  lower::BlockProgram program;
  backend::Artifact artifact;
  std::shared_ptr<backend::Executable> executable;
};

}  // namespace parhelion

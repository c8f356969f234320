// The cpu backend's executor: a compiled kernel's launches, run on this host's threads.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "lower/block_ir.h"

namespace parhelion::backend::cpu {

// Compiles `source` (or finds it in the object cache), loads it and binds one entry point
// per launch of `program`. Throws CompileError if the compiler fails.
std::shared_ptr<Executable> load_executable(const std::string& source, const lower::BlockProgram& program);

}  // namespace parhelion::backend::cpu

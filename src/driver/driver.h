// The driver: the compilation pipeline, top to bottom, in one place.
//
//   trace      the user's C++ function on symbolic arguments -> Tile IR      (frontend/)
//   verify     the Tile IR's rules, each error at the user's line             (ir/verifier.h)
//   configure  the config space on a backend, and its default point          (lower/config_space.h)
//   lower      Tile IR + config -> Block IR, then the backend's fit check     (lower/lower.h)
//   generate   Block IR -> the backend's program text                        (Backend::generate)
//   load       compile (or find in the cache) and load it, where it runs here (Backend::load)
//
// The call path (KernelBase), the CPU tuner, the model-driven TPU tuner, emit and the CLI all
// go through these functions; none of them calls a stage directly.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "driver/compiled_kernel_impl.h"
#include "parhelion/kernel.h"

namespace parhelion::driver {

using Impl = CompiledKernel::Impl;

// trace + verify: the kernel's Tile IR for the signature of `args` (not yet configured); the
// arguments `arg_is_constant` marks are traced with their values (compile-time integers). On a
// mesh, `args` are one device's (every device's have the same signature).
std::shared_ptr<Impl> trace(const std::string& name, const std::vector<bool>& arg_is_tensor,
                            const std::vector<bool>& arg_is_constant, const KernelBase::TraceFn& trace_fn,
                            const std::vector<Arg>& args, const Mesh& mesh = {});

// configure: a copy of `traced` for `backend`, with its config space and default config.
std::shared_ptr<Impl> configure(const Impl& traced, const backend::Backend& backend);

// lower + generate for `config` (completed with the defaults of knobs it leaves out); throws
// UserError when it is invalid, illegal or does not fit.
std::shared_ptr<Impl> specialize(const Impl& configured, const Config& config);

// lower without the backend's check: for tuners that score a candidate themselves.
lower::BlockProgram plan(const Impl& configured, const Config& config);

// load: compile and load the generated program (the backend must run on this host).
void load(Impl& specialized);

// Runs a loaded kernel on `args` (of the signature it was traced for); returns its outputs.
std::vector<Array> run(const Impl& loaded, const std::vector<Arg>& args);
// Runs a loaded kernel traced on a mesh on every device (args[d]: device d's), through its
// backend's Backend::run_on_mesh; returns each device's outputs.
std::vector<std::vector<Array>> run_on_mesh(const Impl& loaded, const std::vector<std::vector<Arg>>& args);

}  // namespace parhelion::driver

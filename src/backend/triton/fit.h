// What one program (one grid step, a thread block) of a triton launch needs of an SM, estimated
// from the Block IR before any compile: the fit check refuses a config with the numbers.
//
// Shared memory: the operand tiles of every dot, times the num_stages of the loop it is in
// (Triton's software pipeline keeps that many copies in flight; a dot outside a loop keeps
// one). Registers: the loop-carried state (Vars) and the two largest values live at once,
// spread over the program's 32 x num_warps threads, in 32-bit registers. Both are estimates
// (Triton's layouts and spills decide the real figures); docs/triton.md says so.
#pragma once

#include <cstdint>
#include <string>

#include "backend/triton/gpu.h"
#include "lower/block_ir.h"

namespace parhelion::backend::triton {

struct ProgramResources {
  int64_t shared_bytes = 0;
  int64_t registers_per_thread = 0;
  std::string detail;  // what the figures count, for messages
};

ProgramResources estimate_resources(const lower::BlockProgram& program, const lower::LaunchPlan& launch);

// Throws UserError (the launch's line, the numbers, and what to change) when a launch does not
// fit the GPU's shared memory per block or register limit per thread.
void check_fit(const lower::BlockProgram& program, const GpuModel& gpu);

}  // namespace parhelion::backend::triton

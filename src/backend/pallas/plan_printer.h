// The pallas plan (plan.h) as text, for `parhelion opt --stage pallas-plan` and golden
// tests: per launch, its VMEM and every pallas_call operand ("slot") with how it reaches VMEM.
//
//   pallas_plan matmul for TPU v7x (VMEM 64.0 MiB)
//   launch 0: VMEM 1.5 MiB (arg0 blocks 2 x 128.0 KiB, ...)
//     slot 0 arg0 in  pipeline in t2 x2 block [128, 256] 128.0 KiB
//     slot 2 buf0 out grid block [128, 256] 128.0 KiB
//
// A block dim of `None` is squeezed (indexed by a unit tile: a grid index or a fixed block 1).
#pragma once

#include <string>
#include <vector>

#include "backend/pallas/plan.h"

namespace parhelion::backend::pallas {

std::string print(const lower::BlockProgram& p, const std::vector<PallasLaunch>& launches);

}  // namespace parhelion::backend::pallas

// A timing model of one TPU TensorCore running the pallas backend's kernels: it replays the
// Block IR's schedule for a config, without a TPU.
//
// Per launch, the model walks the grid in order and, per step:
//   - computes: MXU time of the dots (dims padded to the MXU tile, bf16 or multi-pass f32, at
//     the generation's sustained rate) and the vector work (VPU ops, EUP transcendentals); the
//     three units run side by side, so a region takes its slowest unit's time;
//   - an inner `pipeline` loop restarts its nested pipeline at every step: a bubble (the first
//     blocks' DMA, not overlapped), then per trip max(trip compute, next blocks' DMA) plus the
//     trip's fixed cost; a `resident` loop is its trips' computes; a `grid` loop is one trip
//     per grid step; a causal loop (ir/trip_guard.h) runs only the trips its bound lets through;
//   - copies: a block is fetched only when its block index changes between consecutive steps
//     (a resident K/V, indexed by batch and head, once per head); each DMA at the achieved rate
//     for its size;
//   - step time = max(compute, next step's copy-in, previous step's write-back) + a fixed cost.
// Plus the prologue (step 0's copy-in) and the epilogue (the last write-back). A config whose
// VMEM footprint exceeds the core's VMEM does not fit (as on hardware).
#pragma once

#include <string>

#include "lower/block_ir.h"
#include "parhelion/tpu.h"
#include "tpu_model/hardware.h"

namespace parhelion::tpu_model {

using Prediction = TpuPrediction;

Prediction predict(const lower::BlockProgram& program, const TpuHardware& hw);

}  // namespace parhelion::tpu_model

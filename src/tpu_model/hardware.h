// Per-generation figures of one TPU TensorCore, for the timing model. Every figure names its
// source; the few that no public source gives are marked "calibrated" and fitted to the
// published measurements kept as tests (tests/test_tpu_model.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace parhelion::tpu_model {

struct TpuHardware {
  std::string name;
  double bf16_flops = 0;        // peak MXU FLOP/s per TensorCore, bf16 inputs
  double f32_matmul_ratio = 0;  // f32 x f32 matmul rate / bf16 rate (multi-pass on the MXU)
  double mxu_sustained = 1;     // the fraction of bf16_flops that long matmuls sustain
  double hbm_bytes_per_s = 0;   // HBM bandwidth available to one TensorCore
  int64_t vmem_bytes = 0;       // per TensorCore
  int mxu = 128;                // MXU tile edge: matmul N and K are padded to it
  // The vector core, per cycle of `clock_hz`: a vreg is 8 x 128 x 32 bit (4 KiB).
  double clock_hz = 0;           // derived from the MXU peak (hardware.cpp says how)
  double vpu_ops_per_s = 0;      // f32 elementwise ops/s: 4 ALUs x 1024 lanes per cycle
  double eup_ops_per_s = 0;      // transcendental ops/s (exp, log, tanh, rsqrt: the EUP), a vreg per cycle
  double vld_per_s = 0;          // vregs loaded from VMEM per second (3 load slots)
  double vst_per_s = 0;          // vregs stored to VMEM per second (1 store slot)
  double mxu_pop_per_s = 0;      // result vregs drained from the MXUs per second
  int64_t vreg_file_bytes = 0;   // 64 vregs: a value larger than this lives in VMEM
  double grid_step_s = 0;        // fixed cost of one pallas_call grid step
  double pipeline_trip_s = 0;    // fixed cost of one emit_pipeline trip (DMA issue and wait)
  double dma_latency_s = 0;      // a DMA that nothing overlaps (pipeline prologues)
  double dma_half_bytes = 0;     // transfer size at which a DMA reaches half its peak rate
  double dma_peak_fraction = 0;  // the fraction of HBM bandwidth large DMAs reach
  // A host call's dispatch and synchronization through the framework (not the chip's: the
  // stack's), added to device time where a call is timed from the host as users time it.
  double dispatch_s = 0;
  // Inter-chip links (ICI), for kernels on a mesh: a remote copy to a neighbour crosses one link,
  // at one direction's bandwidth, after `ici_latency_s` (DMA issue and one hop); a signal or a
  // barrier's round takes that latency.
  int ici_links = 0;                // per chip (a 2-D torus has 4, a 3-D torus 6)
  double ici_link_bytes_per_s = 0;  // one direction of one link
  double ici_latency_s = 0;
  std::vector<std::string> sources;

  // The bf16 rate long matmuls reach.
  double sustained_bf16_flops() const { return bf16_flops * mxu_sustained; }
  // Achieved HBM rate for one transfer of `bytes`.
  double dma_rate(double bytes) const { return hbm_bytes_per_s * dma_peak_fraction * bytes / (bytes + dma_half_bytes); }
};

const std::vector<TpuHardware>& tpu_hardware();
// Throws UserError naming the known generations.
const TpuHardware& tpu_hardware(const std::string& name);

}  // namespace parhelion::tpu_model

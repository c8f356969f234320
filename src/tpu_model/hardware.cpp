#include "tpu_model/hardware.h"

#include "backend/pallas/tpu.h"
#include "parhelion/error.h"

#include <cmath>

namespace parhelion::tpu_model {

namespace {

// Shared across generations (see the sources list of each entry).
constexpr double kGridStep = 0.35e-6;      // v5e Pallas matmul at 128^3 blocks: 0.0918 s / 64^3 steps
constexpr double kPipelineTrip = 0.09e-6;  // calibrated: seed attention, emit_pipeline at S=8k/32k
constexpr double kDmaLatency = 0.5e-6;     // calibrated: v5e matmul at 128^3 blocks
constexpr double kDmaHalf = 96.0 * 1024;   // calibrated: v5e matmul at 128^3 blocks
constexpr double kDmaPeak = 0.92;          // Ironwood HBM microbenchmark: large copies near peak
constexpr double kF32Ratio = 1.0 / 3;      // f32 matmul as 3 bf16 passes (XLA precision HIGH)
// No public figure for a remote DMA's latency over one ICI hop: an assumption of the order of a
// local DMA's fixed cost plus a hop, to be replaced by a measurement.
constexpr double kIciLatency = 2e-6;
// pytorch/helion benchmarks/run_tpu.py: "~180 us torch_tpu sync overhead floor" per timed call
// (each sample: synchronize, call, synchronize; the median).
constexpr double kDispatch = 180e-6;

// `ici_bidi`: the chip's published ICI bandwidth, both directions of all its links together.
TpuHardware make(const std::string& name, double bf16, double hbm, int mxu, int links, double ici_bidi,
                 std::vector<std::string> sources) {
  TpuHardware h;
  h.ici_links = links;
  h.ici_link_bytes_per_s = ici_bidi / (2.0 * links);
  h.ici_latency_s = kIciLatency;
  h.name = name;
  h.bf16_flops = bf16;
  h.f32_matmul_ratio = kF32Ratio;
  h.hbm_bytes_per_s = hbm;
  h.vmem_bytes = backend::pallas::tpu_generation(name).vmem_bytes;
  h.mxu = mxu;
  // The vector core's clock is unpublished past v5p. Every generation has 4 MXUs per
  // TensorCore (v5e: 197 TFLOP/s = 4 x 128^2 x 2 x 1.5 GHz, its published clock); with 4 MXUs
  // of 256^2, v6e's peak gives 1.75 GHz and v7x's 2.2 GHz, where 2 MXUs would need 3.5 and
  // 4.4 GHz (implausible). The vector unit kept its (8, 128) vreg and 4 ALUs when the MXU grew
  // to 256^2, so its rate follows the clock, not the MXU peak: peak/32 ops/s on v5e, peak/128
  // on v6e and v7x.
  constexpr double kMxus = 4, kLanes = 8 * 128;
  h.clock_hz = bf16 / (kMxus * 2.0 * mxu * mxu);
  h.vpu_ops_per_s = 4 * kLanes * h.clock_hz;  // 4 VALUs per cycle (jax tpu_info, scaling book)
  h.eup_ops_per_s = kLanes * h.clock_hz;      // one transcendental vreg per cycle
  h.vld_per_s = 3 * h.clock_hz;               // 3 vector loads and 1 store per cycle (v5p, scaling book)
  h.vst_per_s = h.clock_hz;
  h.mxu_pop_per_s = h.clock_hz;   // one result vreg per cycle: an assumption, no public figure
  h.vreg_file_bytes = 64 * 4096;  // 64 vregs of 4 KiB (v5p, jax tpu_info)
  h.grid_step_s = kGridStep;
  h.pipeline_trip_s = kPipelineTrip;
  h.dma_latency_s = kDmaLatency;
  h.dma_half_bytes = kDmaHalf;
  h.dma_peak_fraction = kDmaPeak;
  h.dispatch_s = kDispatch;
  sources.push_back("VMEM: backend/pallas/tpu.cpp (Cloud TPU docs; jax tpu_info)");
  sources.push_back("grid step 0.35 us: jax docs/pallas/tpu/matmul.ipynb, v5e 128^3 blocks (0.0918 s / 64^3 steps)");
  sources.push_back(
      "vector core: 4 ALUs, 1 EUP, 3 vld, 1 vst per cycle on (8,128) vregs, 64 vregs (jax tpu_info, "
      "scaling book); clock " +
      std::to_string(std::lround(h.clock_hz / 1e6)) +
      " MHz from the MXU peak with 4 MXUs per TensorCore (v5e: its published 1.5 GHz)");
  sources.push_back("f32 matmul at 1/3 of bf16: three bf16 passes (XLA precision HIGH)");
  sources.push_back("dispatch 180 us per call: the torch_tpu sync floor in pytorch/helion benchmarks/run_tpu.py");
  sources.push_back("DMA size curve, latency, emit_pipeline trip cost: calibrated (tests/test_tpu_model.cpp)");
  sources.push_back("ICI " + std::to_string(std::lround(ici_bidi / 1e9)) + " GB/s per chip, both directions of " +
                    std::to_string(links) + " links (" + (links == 6 ? "3-D" : "2-D") +
                    " torus): cloud.google.com/tpu/docs; " + std::to_string(std::lround(h.ici_link_bytes_per_s / 1e9)) +
                    " GB/s one way per link; the 2 us latency of a remote copy or signal is an assumption "
                    "(no public figure)");
  h.sources = std::move(sources);
  return h;
}

}  // namespace

// v7x sustains about 80% of its nominal MXU rate in the published compute-bound figures: Helion's
// attention at 892 and 838 TFLOP/s ("~79% MFU of one tensor core", the seed article), and the
// seed table's matmul, bmm and broadcast_matmul (torch's own matmul 8192^3 runs at 70%). Fitted
// to those four kernels and the three attention calibrations together (docs/tpu-model.md), with
// the vector core's costs in place, not to one kernel. v5e's published Pallas matmul
// runs at 91.5% of its nominal rate with the model's other costs: 1 there; v6e and v5p have no
// published figure: 1, an assumption.
constexpr double kV7xMxuSustained = 0.80;

TpuHardware with_sustained_mxu(TpuHardware h, double fraction) {
  h.mxu_sustained = fraction;
  h.sources.push_back("sustained MXU rate " + std::to_string(std::lround(fraction * 100)) +
                      "% of nominal: fitted to the published v7x attention, matmul, bmm and broadcast_matmul");
  return h;
}

const std::vector<TpuHardware>& tpu_hardware() {
  static const std::vector<TpuHardware> all = {
      make("v5e", 197e12, 819e9, 128, 4, 400e9,
           {"197 TFLOP/s bf16, 819 GB/s HBM, 4 MXUs of 128x128, 1 TensorCore: cloud.google.com/tpu/docs/v5e"}),
      make("v6e", 918e12, 1640e9, 256, 4, 800e9,
           {"918 TFLOP/s bf16, 1640 GB/s HBM, 256x256 MXUs, 1 TensorCore: cloud.google.com/tpu/docs/v6e"}),
      make("v5p", 459e12 / 2, 2765e9 / 2, 128, 6, 1200e9,
           {"459 TFLOP/s bf16 and 2765 GB/s per chip over 2 megacore TensorCores: cloud.google.com/tpu/docs/v5p"}),
      with_sustained_mxu(
          make("v7x", 2307e12 / 2, 7380e9 / 2, 256, 6, 1200e9,
               {"2307 TFLOP/s bf16 and 7.38 TB/s per chip over 2 TensorCores (one device each), 256x256 MXUs: "
                "cloud.google.com/tpu/docs/tpu7x; jax tpu_info 1.155e15 per core"}),
          kV7xMxuSustained),
  };
  return all;
}

const TpuHardware& tpu_hardware(const std::string& name) {
  for (const TpuHardware& h : tpu_hardware())
    if (h.name == name) return h;
  backend::pallas::tpu_generation(name);  // throws with the known names
  throw UserError("no timing model for TPU " + name);
}

}  // namespace parhelion::tpu_model

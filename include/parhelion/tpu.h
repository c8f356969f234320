// TPUs without a TPU: a timing model of one TensorCore running a kernel's Pallas lowering, and a
// tuner that chooses TPU configs against it (see docs/tpu-model.md).
//
//   ph::TpuPrediction p = ph::predict_tpu(kernel, args, "v7x", &config);  // time, TFLOP/s, bound
//   ph::TpuTuneReport r = ph::tune_tpu(kernel, args, "v7x");             // the model's best config
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parhelion/array.h"
#include "parhelion/config.h"
#include "parhelion/kernel.h"

namespace parhelion {

struct TpuPrediction {
  bool fits = true;  // false: the config needs more VMEM than the core has (time is infinite)
  double seconds = 0;
  double flops = 0;  // useful (unpadded) dot FLOPs
  double tflops = 0;
  std::string bound;     // "compute", "HBM", "per-step overhead", or "VMEM" when it does not fit
  std::string strategy;  // the inner loops' strategies ("pipelinex2", "resident") and the gathers'
                         // ("gathers:dma"), or "none"
  int64_t vmem_bytes = 0, vmem_capacity = 0;
  double compute_s = 0, dma_s = 0, overhead_s = 0;  // summed over steps, before overlap
  // On a mesh (docs/distributed.md): the ICI time of one device's copies, barriers and signals,
  // and the part of it that no compute hides (the time its waits stall: in `seconds`).
  double comm_s = 0, exposed_comm_s = 0;
  // `seconds` is device time. A call from a framework adds its host's dispatch and sync, which
  // the model takes from a published figure (the hardware table's dispatch_s): `call_seconds`.
  double dispatch_s = 0;
  double call_seconds() const { return seconds + dispatch_s; }
  std::string basis;            // what the figure rests on, and that no TPU has confirmed it
  std::string to_json() const;  // predicted_ms (device), dispatch_ms, call_ms, tflops, bound, ...
};

// The model's time for `config` (default: the pallas default) of the kernel at these arguments'
// shapes on TPU `tpu` (v5e, v6e, v5p, v7x). Throws UserError for an invalid config.
TpuPrediction predict_tpu(KernelBase& kernel, const std::vector<Arg>& args, const std::string& tpu,
                          const Config* config = nullptr);
// predict_tpu() for a kernel on `mesh` (args: one device's; docs/distributed.md): one device's
// time, its copies over the inter-chip links (comm_s), and what no compute hides (exposed_comm_s).
TpuPrediction predict_tpu_on(KernelBase& kernel, const Mesh& mesh, const std::vector<Arg>& args, const std::string& tpu,
                             const Config* config = nullptr);

struct TpuTuneReport {
  std::string kernel, tpu;
  Config best_config;
  TpuPrediction best;
  int evaluated = 0, rejected = 0;  // configs modelled; of them, those that do not fit VMEM
  // Per inner-loop strategy: its best config and prediction (fits = false when none fits, with
  // the smallest footprint seen).
  struct PerStrategy {
    std::string strategy;
    Config config;
    TpuPrediction best;
  };
  std::vector<PerStrategy> per_strategy;
  std::string why;  // one line: the choice and its reason
  std::string to_json() const;
};

// Searches the pallas config space against the model (every point when there are at most
// `max_points`, else a seeded differential evolution then pattern search).
TpuTuneReport tune_tpu(KernelBase& kernel, const std::vector<Arg>& args, const std::string& tpu,
                       int max_points = 20000);

}  // namespace parhelion

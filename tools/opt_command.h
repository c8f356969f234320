// `parhelion opt FILE.tir --stage STAGE`: one compiler stage on a Tile IR text file (the form
// `parhelion emit --stage ir` prints), so that each pass can be looked at, and tested, alone.
//
//   ir           parse, verify and print again (the round trip)
//   fusion       which values each launch fuses and which it materializes
//   spec         the config space, and the target's default config
//   block        the Block IR for the config
//   pallas-plan  the pallas_call operands, their strategies and the VMEM per launch (pallas)
//   code         the generated C++ (cpu) or Pallas module (pallas)
//
// The cpu target is a fixed, made-up machine (1 MiB of fast memory, 2 threads; --fast-memory
// and --threads change it), never the host: the output is the same on every machine, so golden
// tests can check it. (The micro-kernels a dot may use are still the host's.)
#pragma once

#include <cstdint>
#include <string>

#include "tools/cli_options.h"

namespace parhelion::tools {

struct OptRequest {
  std::string stage = "ir";
  std::string target = "cpu";                    // or "pallas", "triton"
  std::string tpu = "v7x";                       // pallas: the TPU generation
  std::string gpu = "h100";                      // triton: the GPU model
  std::string config_json;                       // empty: the target's default config
  int64_t fast_memory_bytes = int64_t{1} << 20;  // cpu
  int threads = 2;                               // cpu
};

// The request that `parhelion opt`'s flags describe; UserError for a bad stage or value.
OptRequest opt_request(const Options& o);

// Runs the request's stage on Tile IR text (`file_name` for messages and source locations)
// and returns what it prints.
std::string run_opt_stage(const std::string& tir, const std::string& file_name, const OptRequest& request);

// The command: reads the file named by the first argument, prints the stage on stdout.
int run_opt(const Options& o);

}  // namespace parhelion::tools

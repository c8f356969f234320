// Backend: everything target-specific, behind one interface.
//
// The shared pipeline (src/driver/driver.h) traces, verifies, derives the config space, lowers
// Tile IR to Block IR and then hands the Block IR to a backend. Shared passes never ask which
// backend they serve; they ask what it can do (Capabilities) and let it decide what only it
// knows: which block sizes its hardware accepts, its micro-kernels, its heuristic default
// config, whether a planned program fits its fast memory, and how to turn the Block IR into
// code. A backend lives in its own folder (src/backend/<name>/) and is listed once in
// registry.cpp; adding one touches no other backend and no shared pass (docs/backends.md).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "lower/strategy.h"
#include "parhelion/config.h"
#include "runtime/gemm/abi.h"

namespace parhelion::lower {
struct BlockProgram;
}

namespace parhelion::backend {

// The numbers of the machine a backend compiles for that the shared passes read.
struct Machine {
  int64_t fast_memory_bytes = 1 << 20;  // per core: what one grid step's blocks must fit in
  // Per core: the data cache nearest the compute, inside the fast memory (a CPU's L1d), where a
  // block read twice in a step is best kept; 0: none. (Not in the identity: it follows from the
  // described model, and the fast memory already sizes what a tuned config's blocks may take.)
  int64_t first_cache_bytes = 0;
  int threads = 1;          // hardware threads a launch may split its grid over
  std::string description;  // e.g. "Intel Xeon ... (avx512f avx2)", "TPU v7x"
  // What a tuned config depends on: the description, the threads and the fast memory (the
  // tuner's cache key and the config tables' hardware field).
  std::string identity() const {
    return description + "|" + std::to_string(threads) + " threads|" + std::to_string(fast_memory_bytes) + " B";
  }
};

// What a backend can do, asked by lowering and the config space instead of its name.
struct Capabilities {
  // How inner tile loops may move their blocks (config knob inner_loops[i].strategy); the
  // first is the default.
  std::vector<lower::Strategy> inner_loop_strategies;
  // How an inner loop nested in another inner loop moves its blocks (a K loop in a jagged
  // loop's trip); empty: as any inner loop.
  std::vector<lower::Strategy> nested_inner_loop_strategies;
  // How a launch's sole inner loop (no other loop in the launch, and a direct child of its
  // body: not in a ph::when) moves its blocks; empty: as any inner loop. Strategy::Grid turns
  // the launch's body around that one loop, so it is offered only there.
  std::vector<lower::Strategy> sole_inner_loop_strategies;
  // How an inner loop in a launch with collectives (src/ir/collectives.h) moves its blocks; empty:
  // as any inner loop. (Pallas: copies and waits run at trace time, in the loop's own order.)
  std::vector<lower::Strategy> collective_inner_loop_strategies;
  int max_pipeline_buffers = 3;
  // Every block an inner loop touches moves through fast memory, stores and blocks of
  // tensors the launch writes included (a TPU computes only on VMEM). Otherwise only blocks of
  // tensors the launch only reads are staged (a staged copy of a written tensor goes stale).
  bool inner_loops_move_every_block = false;
  // Lowering plans the copies of pipelined and resident inner loops (StagedBlocks in scratch)
  // and the backend emits them; otherwise the backend's own machinery moves the blocks
  // (Pallas: BlockSpecs and emit_pipeline) and plans its buffers itself.
  bool lowering_plans_staged_copies = false;
  // A dot whose Var goes, whole and unchanged, to a block of an output after the loop that
  // computes it (AccumulatingDot::stored_whole) writes that block directly: the Var gets no
  // buffer and the store is left out (DotPlan::writes_output). Otherwise the Var is computed in
  // scratch and stored.
  bool dots_write_output_blocks = false;
  // A gather load has strategies (config knob gathers[i], the legal ones asked of
  // Backend::gather_strategies); otherwise it has no knob.
  bool gathers_have_strategies = false;
  // A tensor a launch updates atomically has strategies (config knob atomics[i]: "atomic"
  // instructions, or per-thread "partials" combined when the launch ends); otherwise it has no
  // knob and the backend's one way applies (pallas: ordered read-modify-writes).
  bool atomics_have_strategies = false;
  // Stores may write whole cache lines past the caches and loads prefetch the next grid step's
  // blocks (config knob cache_hints[i], per launch with such accesses: lower/cache_hints.h).
  bool cache_hints = false;
  // The generated code can be compiled and run in this process (load() works).
  bool runs_on_host = false;
  // The choices of the config knob num_warps (a GPU's warps per program), the default first;
  // empty: no such knob.
  std::vector<int> num_warps;
  // The choices of the config knob launch_groups (a grouped order of a launch's programs), the
  // default first, offered to each launch with a dot and a grid of two dims or more; empty: no
  // such knob.
  std::vector<int> launch_groups;
  // The vector widths, in bits, the generated code can be compiled for, the widest first (the
  // config knob vector_bits where there are two or more); empty: no such knob.
  std::vector<int> vector_bits;
  // The backend generates kernels that run on a mesh (src/ir/collectives.h): remote copies,
  // barriers, semaphores. Otherwise configure() refuses them, naming the backend.
  bool collectives = false;

  // The strategies offered to an inner loop: in a launch with collectives, nested in another,
  // its launch's sole loop, or none of these.
  const std::vector<lower::Strategy>& loop_strategies(bool nested, bool sole, bool collective) const {
    if (collective && !collective_inner_loop_strategies.empty()) return collective_inner_loop_strategies;
    if (nested && !nested_inner_loop_strategies.empty()) return nested_inner_loop_strategies;
    if (sole && !sole_inner_loop_strategies.empty()) return sole_inner_loop_strategies;
    return inner_loop_strategies;
  }
};

// What code generation produces: the text of one self-contained program.
struct Artifact {
  std::string language;  // "c++", "python"
  std::string source;
};

// A loaded artifact: runs the program's launches on this host.
class Executable {
 public:
  virtual ~Executable() = default;
  // Runs launch `index` on the kernel's tensors (by Tile IR tensor id) and scalar arguments,
  // its code calling `runtime` (null: the process's table; a mesh device's on a mesh). Throws
  // UserError for a failure the user can fix (an out-of-bounds computed index).
  virtual void run_launch(int index, void* const* tensors, const double* scalars, const ph_runtime* runtime) const = 0;
  // Where the compiled program came from, for `CompiledKernel`'s accessors.
  std::string source_path;
  bool cache_hit = false;
  double compile_seconds = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // The backend's name as users write it ("cpu", "pallas") and the machine it compiles for.
  virtual std::string name() const = 0;
  virtual const Machine& machine() const = 0;
  virtual const Capabilities& capabilities() const = 0;
  // Everything besides the Block IR that the generated code depends on (the compiler and its
  // flags, the host's ISA, the TPU generation): part of every cache key.
  virtual std::string identity() const = 0;

  // --- the config space -------------------------------------------------------------------
  // Whether block size `block` of block-size symbol `block_id` is legal on this hardware for
  // every block it shapes (TPU blocks have layout rules). The config space offers legal ones.
  virtual bool block_size_legal(const ir::Function& fn, int block_id, int64_t block) const;
  // The register-blocked micro-kernels of a dot, best first.
  virtual std::vector<std::string> micro_kernels(const ir::Function& fn, const ir::Op& dot) const = 0;
  // The strategies of a gather load that are legal on this hardware, the default for this
  // shape first (asked only when Capabilities::gathers_have_strategies).
  virtual std::vector<std::string> gather_strategies(const ir::Function& fn, const ir::Op& load) const;
  // The fast-memory workspace a dot of an m x n result over k packs its operands into with
  // micro-kernel `micro_kernel` (one of micro_kernels()), its operands reaching it as bf16 or
  // not (LaunchPlan::gemm_operand_dtype), its A row-major with rows `a_row_stride` elements apart
  // in every call and k always `k_multiple`'s multiple, or (a_row_stride 0) not known to be;
  // `b_kept`: its B is packed into kept panels (dot_kept_b_bytes), not the workspace
  // (0: no workspace).
  virtual int64_t dot_workspace_bytes(int64_t m, int64_t n, int64_t k, const std::string& micro_kernel,
                                      bool bf16_operands, int64_t a_row_stride, int64_t k_multiple, bool b_kept) const;
  // The slow-memory bytes in which a dot's packed B of k x n (micro-kernel `micro_kernel`,
  // operands bf16 or not) can be kept from one call to the next, where a later call reads the
  // same B (ph_gemm_args::b_panels); 0: the backend keeps none.
  virtual int64_t dot_kept_b_bytes(int64_t n, int64_t k, const std::string& micro_kernel, bool bf16_operands) const;
  // Whether micro-kernel `micro_kernel` multiplies operands of 16-bit float dtype `dtype` as they
  // are (true by default: the MXU, tensor cores). Where it widens them to f32 itself, lowering
  // keeps a 16-bit value that only such dots read in f32 scratch (the same values, rounded once).
  virtual bool dot_takes_16bit_operands(const std::string& micro_kernel, DType dtype) const;
  // The heuristic default point of `spec`.
  virtual Config default_config(const ir::Function& fn, const ConfigSpec& spec) const = 0;

  // --- after lowering -------------------------------------------------------------------
  // Throws UserError, with the numbers and the user's line, when a planned program is not
  // legal on this hardware or does not fit its fast memory.
  virtual void check(const lower::BlockProgram& program) const = 0;
  // The fast memory the largest launch of a planned program needs on this hardware (by
  // default the Block IR's footprint: its scratch).
  virtual int64_t footprint_bytes(const lower::BlockProgram& program) const;
  virtual Artifact generate(const lower::BlockProgram& program) const = 0;
  // Compiles (or finds in a cache) and loads an artifact. The default throws: the backend's
  // code runs on other hardware.
  virtual std::shared_ptr<Executable> load(const Artifact& artifact, const lower::BlockProgram& program) const;
  // Runs `device(d, runtime)` for every device of the mesh of `fn` (loaded with this backend,
  // Capabilities::collectives), `runtime` being the table device d's launches call: its
  // collectives reach the other devices' tensors (`tensors[d][t]`: device d's tensor t).
  // Rethrows a device's error; the default throws (the backend runs no mesh here).
  using MeshDeviceFn = std::function<void(int device, const ph_runtime* runtime)>;
  virtual void run_on_mesh(const ir::Function& fn, const std::vector<std::vector<void*>>& tensors,
                           const MeshDeviceFn& device) const;
};

}  // namespace parhelion::backend

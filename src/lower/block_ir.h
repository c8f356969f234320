// Block IR: the explicit-memory program for one Config on one backend.
//
// Lowering binds every block-size symbol and decides, per launch:
//   - the grid: one dimension per top-level tile (steps = ceil(extent / block)), walked in the
//     config's loop order (last = fastest), its steps split over threads;
//   - a block spec per operand: the block a grid step touches (shape and index map), and how
//     it reaches the compute: `direct` (read/written in place in slow memory, streamed through
//     the caches) or `staged` (copied into a fast-memory buffer first: dot operands);
//   - scratch in fast memory: loop-carried Vars and the intermediate blocks that are
//     materialized rather than fused into their consumers (see fusion.h);
//   - every dot: its micro-kernel, its packing workspace, whether it accumulates in place, and
//     whether its packed B is kept from one call to the next (across grid steps, or across the
//     trips of an inner loop B does not depend on);
//   - inner (device) loops and their strategy (strategy.h): `stream` reads each trip's blocks
//     in place; `pipeline` copies them into `buffers` fast-memory slots; `resident` copies the
//     loop's whole extent once per outer block and slices it per trip. Where the backend asks
//     lowering to plan these copies, they are StagedBlocks, their buffers scratch;
//   - cache hints, where the launch's cache_hints knob asks for them (cache_hints.h): stores
//     that write whole cache lines past the caches, and the next grid step's input blocks
//     prefetched while this one computes;
//   - the footprint: the fast memory one grid step needs, which the backend checks.
// The Block IR keeps a pointer to the Tile IR; backends walk the Tile IR ops with these
// decisions in hand, and print them: no backend re-derives a decision made here.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "lower/knobs.h"
#include "lower/strategy.h"
#include "parhelion/config.h"

namespace parhelion::backend {
class Backend;
}

namespace parhelion::lower {

struct GridDim {
  int tile = 0;
  int64_t begin = 0, extent = 0, block = 1, steps = 0;
};

// One dimension of an operand block.
struct BlockDim {
  enum Kind { Tile, Whole, Unit } kind = Unit;
  int tile = -1;     // Tile: the tile that indexes it
  int64_t size = 1;  // the block's extent along it (Unit: 1)
};

// An offset along one tensor dimension, as a grid step (or inner-loop trip) forms it.
struct IndexExpr {
  enum Kind { Zero, TileOffset, Value, Gather } kind = Zero;
  int tile = -1;      // TileOffset: tile index * scale (the tile's offset, scale = its block)
  int64_t scale = 1;  //   (a grid tile indexes single elements: scale 1)
  int value = -1;     // Value: a scalar index computed in the kernel (Tile IR value id)
                      // Gather: the i64 index block (per element positions; the offset is 0)
  bool operator==(const IndexExpr&) const = default;
};

struct BlockSpec {
  int tensor = 0;
  bool written = false;
  enum Mode { Direct, Staged } mode = Direct;
  std::vector<BlockDim> block;   // per tensor dim
  std::vector<IndexExpr> index;  // per tensor dim: the block's offset
  int64_t block_bytes = 0;
};

struct Scratch {
  enum Kind { VarBuffer, Materialized, DotWorkspace, StagingBuffer } kind = VarBuffer;
  int var = -1;                   // VarBuffer: the Var
  int value = -1;                 // Materialized: the value; DotWorkspace: the dot's result
  int staged = -1;                // StagingBuffer: the StagedBlock (dtype is then the storage dtype)
  DType dtype = DType::f32;       // element dtype in the buffer
  std::vector<int64_t> capacity;  // per dim
  int64_t bytes = 0;
  int64_t offset = 0;  // within the step's scratch area, 64-byte aligned
};

// A tensor block that an inner loop copies into fast memory (pipeline or resident strategy).
// The buffer holds the load's block dims (tiles and `all` dims; grid and scalar indices drop)
// in the tensor's storage dtype, row-major; the loop's own dim has capacity `block` per slot
// (pipeline) or the whole extent (resident).
struct StagedBlock {
  int tensor = 0;
  int loop_tile = 0;
  std::vector<int> loads;         // the load ops (result ids) that read through it
  int inner_dim = 0;              // which block dim the loop's tile indexes
  std::vector<int64_t> capacity;  // per block dim, one slot
  int slots = 1;                  // pipeline: buffer count; resident: 1
  int64_t slot_elems = 0;
  int scratch = -1;
  // Resident: the outer offsets the block depends on (refilled when one changes): tile
  // offsets of the other tiles and computed scalar indices.
  std::vector<IndexExpr> refill_key;
};

struct InnerLoop {
  int tile = 0;
  int64_t begin = 0, extent = 0, block = 1, trips = 0;
  int knob = -1;  // its inner_loops knob, -1 if it moves no blocks
  Strategy strategy = Strategy::Stream;
  int buffers = 1;          // pipeline: fast-memory slots per staged block
  std::vector<int> staged;  // StagedBlock indices
};

// A dot product: what lowering decided for it.
struct DotPlan {
  int result = -1;           // the dot's value id
  int knob = -1;             // its micro_kernels knob
  std::string micro_kernel;  // the backend's micro-kernel, e.g. "avx512_12x32", "mxu"
  int workspace = -1;        // scratch index of its packing workspace, -1: none
  int accumulate_into = -1;  // a Var the dot adds into in place (acc = acc + dot), or -1
  // acc = acc * s + dot: the value acc * s, which the Var is set to in place just before the dot
  // adds into it, both at the Var's assignment (lower/fusion.h); -1: the dot runs where it is.
  int rescaled = -1;
  // The loop tile on whose first trip the dot writes the Var instead of adding into it (the
  // Var's zero init is then not stored: AccumulatingDot::first_trip_writes); -1: it always adds.
  int first_trip_writes = -1;
  // The read of the Var whose store is the Var's only use after its loop, where the dot writes
  // that store's block of the output directly (Capabilities::dots_write_output_blocks): the Var
  // has no buffer and the store is left out. -1: the Var is a buffer in scratch.
  int writes_output = -1;
  // B's packed panels kept from one call to the next in the thread's slow memory (ph_gemm_args::
  // b_panels), where B is a block of a tensor the launch does not write and the grid's fastest
  // dim does not index it (consecutive steps read the same B), or an inner loop around the dot
  // does not (its trips read the same B); the workspace then has no room for B's panels. One
  // slot of `kept_b_slot_bytes` per trip of the inner loop over `kept_b_tile` (-1: one slot),
  // `kept_b_offset` bytes into the thread's kept-panels area. kept_b_slots 0: B is packed on
  // every call.
  int kept_b_tile = -1;
  int64_t kept_b_slots = 0, kept_b_slot_bytes = 0, kept_b_offset = 0;
};

// How the value a pointwise op computes reaches its consumers (see fusion.h): fused (the
// default: evaluated inside each consumer's loop nest), or computed once into scratch.
struct ValuePlan {
  int materialized = -1;  // scratch index when materialized
  int staged = -1;        // a load that reads through a StagedBlock: its index
  // A materialized value computed inside the loop of the reduction that first consumes it
  // (one pass: each element is stored and accumulated), and that reduction's side of it
  // (lower/fusion.h: the loop may store a cast of the value it computes instead).
  int in_reduction = -1;  // the stored value: the reduction's result id
  int computes = -1;      // the reduction: the value its loop computes per element
  int stores = -1;        // the reduction: the value its loop stores (`computes` or a cast of it)
  // A sum of `acc = acc + sum(x)` that may add into Var `adds_into` where it is, the assignment
  // then left out (lower/fusion.h, accumulating_dots' sums; not where its loop computes a producer).
  // The sum keeps its buffer: a backend that does not add in place computes the assignment as
  // written.
  int adds_into = -1;
};

// A tensor the launch updates atomically, and how its updates reach memory: with `Atomic`
// atomic instructions on the tensor; with `Partials` each thread updates its own copy of the
// tensor (filled with the update's identity when the launch starts: 0, -inf, +inf; f32 for
// every float dtype) and the copies are combined into the tensor when the launch ends;
// `InPlace` (one thread) plainly.
// The choice is the config's atomics knob where the backend has one.
struct AtomicTarget {
  int tensor = 0;  // the root tensor
  ir::AtomicFn fn = ir::AtomicFn::add;
  int knob = -1;
  enum Strategy { Atomic, Partials, InPlace } strategy = Atomic;
  int64_t elements = 0;  // the tensor's
  int64_t offset = 0;    // Partials: bytes into each thread's partials area (64-byte aligned)
};

// The next grid step's block of a load, prefetched into fast memory by the loop nest of `host`:
// the last statement of the step that reads the load, whose rows are the load's (cache_hints.h).
struct Prefetch {
  const ir::Op* load = nullptr;
  const ir::Op* host = nullptr;
  // -1: the next grid step's block. Else the tile of a streamed inner loop whose next trip's
  // block `host` prefetches (same step), and the dim of the load's block that tile indexes.
  int trip_tile = -1;
  int trip_dim = -1;
};

struct LaunchPlan {
  const ir::Op* op = nullptr;
  int index = 0;
  int loop_order_knob = -1;   // -1: a one-dimensional grid
  std::vector<GridDim> grid;  // in the launch's loop order, outermost first
  // Its programs' grouped order (Config::launch_groups): the grid's last two dims taken in
  // groups of `group` blocks of the second-to-last, that one fastest within a group; 1: plain.
  int group = 1;
  int64_t total_steps = 1;
  // A launch with collectives (ir::has_collectives) runs its grid steps in order on one thread:
  // its waits may wait for what an earlier step of another device does.
  bool collectives = false;
  int num_threads = 1;
  std::vector<BlockSpec> operands;
  std::vector<Scratch> scratch;
  std::vector<InnerLoop> inner_loops;
  std::vector<StagedBlock> staged;
  std::vector<DotPlan> dots;
  std::map<int, ValuePlan> values;  // value id -> its plan, for values that are not simply fused
  std::map<int, int> var_scratch;   // var id -> scratch index
  std::vector<AtomicTarget> atomics;
  std::vector<const ir::Op*> streamed_stores;  // stores writing whole cache lines past the caches
  std::vector<Prefetch> prefetches;
  int64_t scratch_bytes = 0;
  int64_t partials_bytes = 0;     // per thread, in slow memory (AtomicTarget::Partials)
  int64_t kept_panels_bytes = 0;  // per thread, in slow memory after the partials (DotPlan::kept_b_slots)
  int64_t working_set_bytes = 0;  // operand blocks + scratch touched by one grid step
  // Output blocks that dots write directly, in place of a Var's buffer (DotPlan::writes_output).
  int64_t output_accumulator_bytes = 0;
  // Fast memory one step needs: staged blocks + scratch + the output blocks dots accumulate in.
  int64_t footprint_bytes = 0;

  // Lookups for the emitters (nullptr / -1 when the value has no such decision).
  const DotPlan* dot(int result) const;
  // The dot that writes in place the block a store of `value` would write (DotPlan::writes_output).
  const DotPlan* dot_writing_output(int value) const;
  int materialized(int value) const;
  int staged_load(int value) const;
  // Records that reduction `reduction`'s loop computes `producer` per element and stores
  // `stored` (the producer or a cast of it: lower/fusion.h, ReductionProducer).
  void compute_in_reduction(int reduction, int producer, int stored);
  const InnerLoop* inner_loop(int tile) const;
  const AtomicTarget* atomic_target(int root_tensor) const;
  bool streamed(const ir::Op& store) const;
  // The dtype in which a dot's operand `value` reaches the GEMM: its scratch's when materialized
  // (a bf16 load that other ops read too is materialized in f32), a Var's buffer's, its tensor's when loaded in
  // place or staged; an unmaterialized transpose passes its operand's. The emitter passes this
  // dtype and the dot's workspace is sized for it.
  DType gemm_operand_dtype(const ir::Function& fn, int value) const;
};

struct BlockProgram {
  const ir::Function* fn = nullptr;
  const backend::Backend* backend = nullptr;
  Config config;
  KnobTable knobs;
  std::vector<int64_t> block_size;  // by block-size id
  std::vector<LaunchPlan> launches;
  int64_t footprint_bytes = 0;  // max over launches

  int64_t block_of_tile(int tile) const { return block_size.at(fn->tiles.at(tile).block); }
  // The gathers knob's choice for a gather load, "" when it has none (a backend without gather
  // strategies, or a config that leaves the knob out).
  std::string gather_strategy(const ir::Op& load) const {
    const int k = knobs.gather_knob(load);
    return k >= 0 && k < static_cast<int>(config.gathers.size()) ? config.gathers[k] : "";
  }
};

// The Block IR as text (the stage `block` of `parhelion emit` and `parhelion opt`).
std::string print(const BlockProgram& p);
std::string scratch_name(const BlockProgram& p, const LaunchPlan& L, const Scratch& s);

// What to try when a launch does not fit: stream a resident loop, or smaller blocks.
std::string fit_hint(const BlockProgram& p, const LaunchPlan& L);

}  // namespace parhelion::lower

// Block IR: the explicit-memory program for one Config.
//
// Lowering binds every block-size symbol and decides, per launch:
//   - the grid: one dimension per top-level tile (steps = ceil(extent / block)), walked in the
//     config's loop order (last = fastest), its steps split over threads;
//   - a block spec per operand: the block a grid step touches (shape and index map), and how
//     it reaches the compute: `direct` (read/written in place in slow memory, streamed through
//     the caches) or `staged` (copied into a fast-memory buffer first; dot operands, later);
//   - scratch in fast memory: loop-carried Vars and the intermediate blocks that are
//     materialized rather than fused into their consumers (see fusion.h);
//   - inner (device) loops and their strategy: `stream` reads each trip's blocks in place;
//     `pipeline` copies them into `buffers` fast-memory slots, fetching the next block(s) while
//     the current one is computed; `resident` copies the loop's whole extent once per outer
//     block (kept while consecutive grid steps touch the same block) and slices it per trip.
//     The copies are StagedBlocks, their buffers scratch;
//   - the footprint: the fast memory one grid step needs, checked against the target.
// The Block IR keeps a pointer to the Tile IR; backends walk the Tile IR ops with these
// decisions in hand.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "lower/target.h"
#include "parhelion/config.h"

namespace parhelion::lower {

struct GridDim {
  int tile = 0;
  int64_t begin = 0, extent = 0, block = 1, steps = 0;
};

struct BlockSpec {
  int tensor = 0;
  bool written = false;
  enum Mode { Direct, Staged } mode = Direct;
  std::vector<std::string> block_shape;  // per tensor dim: block size, full size, or "1"
  std::vector<std::string> index_map;    // per tensor dim: how a grid step's offset is formed
  int64_t block_bytes = 0;
};

struct Scratch {
  std::string name;  // "v3" for Var 3, "%12" for value 12
  int var = -1, value = -1;
  int workspace_of = -1;          // a dot's packing workspace: the dot's result id
  int staged = -1;                // a StagedBlock's buffer: its index (dtype is then the storage dtype)
  DType dtype = DType::f32;       // compute dtype
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
  std::vector<std::string> key;   // resident: the outer indices the block depends on
};

struct InnerLoop {
  int tile = 0;
  int64_t begin = 0, extent = 0, block = 1, trips = 0;
  std::string strategy = "stream";
  int buffers = 1;           // pipeline: fast-memory slots per staged block
  std::vector<int> staged;   // StagedBlock indices
};

struct LaunchPlan {
  const ir::Op* op = nullptr;
  int index = 0;
  std::vector<GridDim> grid;  // in the launch's loop order, outermost first
  int64_t total_steps = 1;
  int num_threads = 1;
  std::vector<BlockSpec> operands;
  std::vector<Scratch> scratch;
  std::vector<InnerLoop> inner_loops;
  std::vector<StagedBlock> staged;
  std::map<int, int> staged_load;    // load result id -> StagedBlock index
  std::map<int, int> materialized;   // value id -> scratch index
  std::map<int, int> var_scratch;    // var id -> scratch index
  std::map<int, int> dot_workspace;  // dot result id -> scratch index of its packing workspace
  std::map<int, int> dot_into_var;   // dot result id -> the Var it accumulates into, in place
  int64_t scratch_bytes = 0;
  int64_t working_set_bytes = 0;  // operand blocks + scratch touched by one grid step
  int64_t footprint_bytes = 0;    // fast memory one step needs: staged blocks + scratch
};

struct BlockProgram {
  const ir::Function* fn = nullptr;
  Config config;
  Target target;
  std::vector<int64_t> block_size;  // by block-size id
  std::vector<LaunchPlan> launches;
  int64_t footprint_bytes = 0;  // max over launches

  int64_t block_of_tile(int tile) const { return block_size.at(fn->tiles.at(tile).block); }
};

std::string print(const BlockProgram& p);

}  // namespace parhelion::lower

// The pallas target's view of a launch: which pallas_call operands it has, how each reaches
// VMEM, and the VMEM it needs. Shared by the lowering (the fit check), the Pallas emitter and
// the TPU timing model.
//
// Every block a TensorCore computes on must be in VMEM. A launch's loads and stores become
// operands ("slots"), one per (tensor, index, inner loop):
//   - grid level: a BlockSpec over the grid, double-buffered by pallas_call's pipeline;
//   - in an inner loop with strategy `resident`: a BlockSpec whose block spans the loop's whole
//     extent (copied again only when its block index changes between grid steps), sliced by
//     a trace-time loop;
//   - in an inner loop with strategy `pipeline`: the array stays in HBM (memory space ANY) and
//     `pltpu.emit_pipeline` streams its blocks through `buffers` VMEM buffers.
//   - a gather with the dma strategy (gather.h): the table stays in HBM (memory space ANY) and
//     per-row DMAs copy the indexed rows into a VMEM buffer (a DmaRows).
//   - a scalar read at indices computed in the kernel (offsets[g + 1], a jagged loop's bounds):
//     the whole tensor in SMEM, read by the scalar core at those indices.
//   - in a launch with collectives, a tensor copies land in (src/ir/collectives.h), or in a
//     launch of several steps one copies send in place from: the tensor stays in HBM (memory
//     space ANY; a peer's copy writes it there), and each load or store of it is a DMA through a
//     VMEM buffer of its own (an HbmAccess), waited for at once.
//   - in a jagged loop (a range computed in the kernel): like `resident`, the whole dim the
//     jagged tile indexes is in VMEM; each trip reads a block of the loop's block size at a
//     start clamped inside it, whose rows from the trip's offset on are the trip's.
// Tiles of block size 1 (grid loops, fixed 1) index squeezed dimensions (None in a BlockSpec).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "backend/pallas/row_stats.h"
#include "lower/block_ir.h"

namespace parhelion::backend::pallas {

struct PallasSlot {
  int tensor = 0;
  bool read = false, written = false;
  const ir::Op* first = nullptr;  // the first load/store through it (its index)
  int loop_tile = -1;             // -1: grid level; else the inner loop's tile
  // The tiles of inner loops enclosing that loop which the access also indexes (the rows of a
  // jagged loop around a K loop): the block holds their whole extent, and each trip cuts its
  // rows (a jagged trip at its clamped start, a resident one at its offset).
  std::vector<int> trip_tiles;
  // How the block reaches VMEM: a grid-level BlockSpec, an inner loop's strategy, or by the
  // row DMAs of a dma gather (the tensor stays in HBM; block_bytes is 0). Stream: a jagged
  // loop's rows, read only, DMAed from HBM a trip at a time into two VMEM buffers (the next
  // trip's copy in flight while this one computes), instead of the whole dim held resident;
  // the block is one trip's.
  enum Mode { Grid, Resident, Pipeline, Dma, Smem, Hbm, Stream } mode = Grid;
  int buffers = 2;
  std::vector<int64_t> block;  // per tensor dim: block extent, or -1 for a squeezed dim
  int64_t block_bytes = 0;     // one buffer
  // Written by a store that leaves some of the block's elements as they were (a masked store,
  // a store into a ph::slice): an output block is written back whole, so the block's prior
  // contents are read in too and the stores update that copy (a read-modify-write).
  bool keeps_prior = false;
  // An atomic update's slot (ir::atomic_fn of its stores; none for plain slots). A TPU core has
  // no atomics across cores: the grid steps that update one block run one after another on one
  // core and read-modify-write it in VMEM (keeps_prior brings its contents in).
  ir::AtomicFn atomic = ir::AtomicFn::none;
  // The block is the whole tensor at block index 0 at every step: it stays in VMEM across the
  // launch, takes its prior contents at the very first step and is written back once, at the
  // end (stores through a jagged tile, atomic updates at indices computed from data).
  bool whole_tensor = false;
  // Grid positions (in grid order) over whose steps the block index stays the same: the
  // block's prior contents come in at the first step of each run of them (all of them 0).
  // Empty: every step has its own block, whose prior contents come in at every step.
  std::vector<int> revisit_dims;
  // A read-only resident block that an earlier slot of the launch (this index) already brings
  // into VMEM: the same tensor, block and block index at every grid step (softmax_two_pass's
  // two loops over x's row). It is no pallas_call operand of its own: its ref is that slot's,
  // fetched and counted once. -1: the slot has its own operand.
  int shares = -1;
};

// Rows moved one DMA each (gather.h): a dma gather copies the indexed rows of a table left in
// HBM into a VMEM buffer that is the gathered block; a scatter stores the value block into that
// buffer and copies each of its rows to the row its index names, in the output left in HBM
// (aliased to its prior value, so unindexed rows keep it). The index tensor is passed a second
// time, as a BlockSpec in SMEM with the blocks of its VMEM slot, to read the rows as scalars.
struct DmaRows {
  const ir::Op* op = nullptr;  // the gather load, or the scatter store
  bool scatter = false;
  int table_slot = -1;          // the gathered tensor's (or the scatter's output's) slot, in HBM
  int index_slot = -1;          // the index load's VMEM slot (its BlockSpec, repeated in SMEM)
  int64_t rows = 0;             // the index block's length: one DMA per valid row
  std::vector<int64_t> buffer;  // the block's dims: rows, then the row's width block
  int64_t buffer_bytes = 0;
};

// A load or store of a tensor left in HBM (mode Hbm): its region is DMAed into (or out of) a VMEM
// buffer of the region's shape, in the tensor's storage dtype.
struct HbmAccess {
  const ir::Op* op = nullptr;
  int64_t bytes = 0;  // the region (whole blocks: the plan refuses ragged ones)
};

// Where a copy (CopyStart) takes its block from. A block loaded unmasked from a tensor is copied
// from that memory directly (the language lets a backend: the sender may not write the region
// before its wait_send), from HBM for a tensor in HBM, from the VMEM block otherwise; any other
// block is first stored into a VMEM staging buffer of its own (one per copy statement, so the
// same statement must not start again before its previous copy's wait_send).
struct CopySource {
  const ir::Op* op = nullptr;
  const ir::Op* load = nullptr;  // the block's load when copied directly, else nullptr (staged)
  int64_t bytes = 0;             // the staging buffer (0 when direct)
};

// The communication of a launch with collectives: its grid runs in order, its inner loops are
// resident (trace-time loops, or fori_loops past kMaxUnrolledTrips), and the pallas_call takes these scratch operands
// besides its blocks: one DMA semaphore per copy channel for sends and one for receives (a remote copy increments the
// receiver's; channels are the function's), one REGULAR semaphore per ph::semaphore and per
// group of barrier axes, one DMA semaphore for its own HBM accesses, and the barrier semaphore
// (collective_id) for the handshake that every device has entered the kernel before any copy
// or signal reaches it.
struct LaunchCollectives {
  bool any = false;
  std::set<int> landing;  // tensors (roots) copies land in during this launch
  // Tensors left in HBM (Hbm slots): the landing ones, and in a launch of several grid steps
  // those copies send in place from (plan.cpp, find_landing).
  std::set<int> in_hbm;
  std::vector<HbmAccess> hbm;  // one VMEM buffer per access of a landing tensor
  std::map<const ir::Op*, int> hbm_of;
  std::vector<CopySource> copies;  // per CopyStart op
  std::map<const ir::Op*, int> copy_of;
  std::vector<std::vector<int64_t>> barrier_groups;  // the distinct axes sets of the barriers (mesh axis indices)
  int64_t vmem_bytes = 0;
};

struct PallasLaunch {
  int index = 0;
  const lower::LaunchPlan* plan = nullptr;
  // The pallas_call's grid: the launch's tile dims in loop order (plan->grid), then, when its
  // sole inner loop has the strategy `grid`, that loop's trips as the last, fastest dim. Its
  // slots are then grid-level BlockSpecs indexed by that dim too (mode Grid, loop_tile set), so
  // the launch's own pipeline fetches the next trip's blocks, across outer blocks as well.
  std::vector<lower::GridDim> grid;
  int64_t total_steps = 1;
  // That loop (nullptr: none), and how the launch's body runs around it: the ops before the loop
  // run at every step (loads, arithmetic the trips read), except these, which run at the first
  // trip only (the state's initial values, stores, what reads the state); the loop's body is
  // each step's; the ops after it run at the last trip. Vars live in VMEM scratch across steps.
  const ir::Op* grid_loop = nullptr;
  std::set<const ir::Op*> first_trip_ops;
  std::vector<PallasSlot> slots;
  std::map<const ir::Op*, int> slot_of;  // load/store -> slot
  std::vector<DmaRows> dma_rows;
  std::map<const ir::Op*, int> dma_rows_of;  // dma gather load or scatter store -> its DmaRows
  int64_t vmem_bytes = 0;
  std::string vmem_detail;
  // Computed ph::slice starts (value ids) that take one value at every grid step and trip: the
  // emitter cuts them statically. The others are cut with pl.ds (checked in range when planned).
  std::map<int, int64_t> static_starts;  // "q blocks 2 x 256.0 KiB, k resident 2 x 8.0 MiB, ..."
  // Per grid position (grid order): whether its steps must run in order on one core
  // ("arbitrary" in dimension_semantics) rather than be split over cores ("parallel"), and
  // why (one line per reason, printed at the kernel).
  std::vector<bool> arbitrary;
  std::vector<std::string> order_notes;
  // Per-row values kept lane-dense (row_stats.h): the Vars held as [..., rows, 128] in scratch
  // and the values held with a trailing lane dim.
  RowStats row_stats;
  // The tiles of trace-time loops (resident, or without blocks of their own) that run as a
  // jax.lax.fori_loop over their whole trips rather than unrolled: those of more than
  // kMaxUnrolledTrips trips whose offsets may be dynamic (plan.cpp, plan_rolled_loops).
  std::set<int> rolled_loops;
  LaunchCollectives comm;
};

// The longest trace-time loop emitted unrolled (a Python loop at trace time; each trip its own
// code, which the scheduler may interleave); longer ones run as a fori_loop.
constexpr int64_t kMaxUnrolledTrips = 8;

// True for a tile whose blocks are single elements (grid loops, fixed block 1): its dims are
// squeezed out of pallas blocks and values.
bool pallas_unit_tile(const lower::BlockProgram& p, int tile);

// Whether a launch writes back every block of a written slot's tensor, so that no element keeps
// a value from before the launch except through a block read in (a masked store's prior
// contents): each dim is `all`, a slice (cut from a whole-dim block), or a tile over the whole
// dim (a launch tile, the slot's loop's or an enclosing loop's); or the block is the whole
// tensor (jagged stores, updates at indices from data, SMEM scalar stores, which cover their
// tensor by construction). Otherwise the output must be aliased to its prior value.
bool writes_every_block(const lower::BlockProgram& p, const PallasLaunch& pl, const PallasSlot& s);

// The BlockSpec index map expression (over the grid indices g_<tile>) of a scalar index
// defined by `def`: a constant, a launch tile's block number (t.id()) or first element
// (t.begin()); "" for any other (a value computed in the kernel, which no index map can name).
std::string scalar_index_map(const lower::BlockProgram& p, const ir::Op& launch, const ir::Op* def);

// Throws UserError (naming the user's line) for what the pallas backend cannot express yet.
std::vector<PallasLaunch> plan_pallas(const lower::BlockProgram& p);

const char* mode_name(PallasSlot::Mode m);  // "grid", "resident", "pipeline", "dma", "smem", "hbm"

// The launch tiles whose grid index an atomic update's block index depends on (a tile of its
// subscript, the launch tile a ph::tile(outer) slices, a launch tile's t.id() as a scalar).
// Returns false when the update's indices depend on data (a gather index block, a scalar
// computed from loaded data, a jagged tile): its block is then the whole tensor.
bool atomic_block_tiles(const ir::Function& fn, const ir::Op& launch, const ir::Op& update, std::set<int>* tiles);

// `order` (indices into launch.loop_tiles, outer first) with the tiles every atomic update's
// block depends on moved first (stably): the order in which the steps that update one block
// are consecutive, which the pallas backend needs (plan_pallas refuses any other).
std::vector<int> atomic_legal_order(const ir::Function& fn, const ir::Op& launch, const std::vector<int>& order);

}  // namespace parhelion::backend::pallas

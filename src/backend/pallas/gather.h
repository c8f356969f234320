// How the pallas backend fetches a gather's rows (config knob gathers[i]):
//   onehot  the gathered dim is resident whole in VMEM (a BlockSpec spanning it) and the rows
//           are picked by a one-hot matmul on the MXU (precision HIGHEST; exact for floating
//           tables). Cost: index rows x table rows x width MXU work, the table in VMEM.
//   dma     the table stays in HBM (memory space ANY); the indices are read as scalars from
//           SMEM and each index issues one DMA of one table row into a VMEM buffer that is the
//           gathered block. Cost: a DMA per row, no VMEM for the table; any dtype.
// An out-of-range index cannot raise in a TPU kernel: its row is NaN for floating tables (both
// strategies; dma clamps the copy's source row into range and overwrites the row), 0 for integer
// and boolean ones (dma only: a one-hot matmul is not exact for integers).
#pragma once

#include <string>
#include <vector>

#include "ir/ir.h"

namespace parhelion::backend::pallas {

// The config's spellings.
inline constexpr const char* kGatherOneHot = "onehot";
inline constexpr const char* kGatherDma = "dma";

// Why the dma strategy cannot fetch this gather load's rows ("" when it can): it must gather
// the leading dim of a table of rank 1 or 2 whose other dim is indexed by a launch tile, `all`,
// or the tile of the inner loop it is in (each trip then moves its columns); its index block
// must be loaded directly from an i32/i64 tensor the launch does not write, indexed by launch
// tiles only (its scalars are then a grid-level BlockSpec of that tensor in SMEM). One-hot
// gathers read a grid-level block (the whole table resident in VMEM; onehot_in_loop_refusal).
std::string dma_gather_refusal(const ir::Function& fn, const ir::Op& load);

// Scatters (a store through an index block) are always per-row DMAs: the value block is stored
// into a VMEM buffer and each of its rows copied to the row its index names in the output, left
// in HBM and aliased to its prior value (unindexed rows keep it). A row whose index is out of
// range writes nothing. Why a scatter store cannot be emitted so ("" when it can): the
// gather's conditions, unmasked, and no other access to its tensor in the launch.
std::string scatter_refusal(const ir::Function& fn, const ir::Op& store);

// Why a one-hot gather cannot fetch this gather load's rows from a table block at grid level
// ("" when it can): outside inner loops it always can; inside one, only when no index of the
// table is the loop's tile (its other dims `all` or launch tiles), so the table block is the grid
// step's, in VMEM once for all the trips, and each trip picks its rows from it (a jagged loop's
// x[tokens, ph::all]). A table block that changes per trip would be resident for every trip.
std::string onehot_in_loop_refusal(const ir::Function& fn, const ir::Op& load);

// The load of the index tensor whose block a dma gather or a scatter reads as scalars (legal).
const ir::Op* dma_gather_index_load(const ir::Function& fn, const ir::Op& op);

// The legal strategies of a gather load, the default for its shape first: one-hot while the
// table is small (at most kOneHotMaxRows rows and an eighth of VMEM double-buffered), else dma.
std::vector<std::string> gather_strategies(const ir::Function& fn, const ir::Op& load, int64_t vmem_bytes);
inline constexpr int64_t kOneHotMaxRows = 1024;

}  // namespace parhelion::backend::pallas

#include "backend/pallas/pallas_backend.h"

#include <algorithm>
#include <map>
#include <set>

#include "backend/pallas/codegen.h"
#include "backend/pallas/default_config.h"
#include "backend/pallas/gather.h"
#include "backend/pallas/plan.h"
#include "ir/printer.h"
#include "lower/block_ir.h"
#include "parhelion/error.h"
#include "runtime/format_bytes.h"

namespace parhelion::backend::pallas {
namespace {

using ir::Op;
using ir::OpKind;

// JAX's tiling of an HBM buffer's dim (tpu_info.infer_tiling, TPU generations from 4 on): the
// lanes of 128 (128 x the packing for rank 1), the rows of 8 (fewer for a dim under 8), 1 on
// leading dims. A TPU and interpret mode's padded bounds pad each dim to a multiple of it.
int64_t tile_padded(int64_t dim, int rank_pos, int rank, int64_t dtype_bytes) {
  const int64_t packing = tpu_packing(dtype_bytes);
  int64_t tiling = 1;
  if (rank == 1) {
    tiling = 128 * packing;
  } else if (rank_pos == 0) {
    tiling = 128;
  } else if (rank_pos == 1) {
    for (tiling = packing; tiling < std::min<int64_t>(dim, 8);) tiling *= 2;
  }
  return (dim + tiling - 1) / tiling * tiling;
}

// An output aliased to its prior value (a tensor with a value before the launch, some of whose
// blocks the launch does not write back: writes_every_block) is passed in unblocked (ANY), and
// JAX's TPU interpret mode, which verifies the modules here, pads such a buffer only to whole
// tiles, not to whole blocks: a ragged last block that runs past the tile padding is out of
// bounds there. A TPU clips the edge block's copy, so this is a limit of the verification, and
// only for the blocks past the padding (33 rows in blocks of 32: padded to 40).
void check_aliased_overhang(const lower::BlockProgram& p, const PallasLaunch& pl, const std::set<int>& valued) {
  const ir::Function& fn = *p.fn;
  for (const PallasSlot& s : pl.slots) {
    const ir::TensorInfo& t = fn.tensors[s.tensor];
    const bool has_value =
        t.origin == ir::TensorInfo::Param || t.origin == ir::TensorInfo::View || valued.count(s.tensor);
    if (!s.written || !has_value || s.mode != PallasSlot::Grid || writes_every_block(p, pl, s)) continue;
    const int rank = static_cast<int>(t.shape.size());
    for (int d = 0; d < rank; ++d) {
      const int64_t e = t.shape[d], b = s.block[d];
      if (b <= 0 || e % b == 0) continue;
      const int64_t end = (e + b - 1) / b * b, padded = tile_padded(e, rank - 1 - d, rank, dtype_size(t.dtype));
      if (end <= padded) continue;
      throw UserError("config " + p.config.to_json() + " cannot update " + t.name + " in place (at " +
                      s.first->loc.str() + "): its last block along dimension " + std::to_string(d) + " ends at " +
                      std::to_string(end) + ", past the buffer's tile padding (" + std::to_string(e) + " -> " +
                      std::to_string(padded) +
                      "). A TPU clips that block's copy, but JAX's TPU interpret mode, which verifies this module, "
                      "pads a buffer updated in place only to whole tiles. Use a block size that divides " +
                      std::to_string(e) + ", or whose last block ends within " + std::to_string(padded) + ".");
    }
  }
}

}  // namespace

PallasBackend::PallasBackend(const TpuGeneration& generation) : generation_(generation) {
  machine_.fast_memory_bytes = generation.vmem_bytes;
  machine_.threads = 1;
  machine_.description = "TPU " + generation.name;
  caps_.inner_loop_strategies = {lower::Strategy::Pipeline, lower::Strategy::Resident};
  // A loop inside another's trip (a K loop in a jagged loop) slices blocks already in VMEM at
  // trace time: the enclosing trip's blocks are resident (an emit_pipeline inside a fori_loop
  // trip would restart its copies at every trip).
  caps_.nested_inner_loop_strategies = {lower::Strategy::Resident};
  // A launch's sole loop may also run on the grid: its trips as the last grid dim ("arbitrary"),
  // the state in VMEM scratch across them (plan.h, PallasLaunch::grid_loop).
  caps_.sole_inner_loop_strategies = {lower::Strategy::Pipeline, lower::Strategy::Resident, lower::Strategy::Grid};
  // In a launch with collectives a loop runs at trace time (resident), each trip's copies,
  // waits and signals in the order the kernel wrote them (plan.h, the collective launch).
  caps_.collective_inner_loop_strategies = {lower::Strategy::Resident};
  caps_.collectives = true;
  caps_.inner_loops_move_every_block = true;
  caps_.lowering_plans_staged_copies = false;
  caps_.runs_on_host = false;
  caps_.gathers_have_strategies = true;  // onehot and dma (gather.h)
}

std::vector<std::string> PallasBackend::gather_strategies(const ir::Function& fn, const ir::Op& load) const {
  return pallas::gather_strategies(fn, load, machine_.fast_memory_bytes);
}

// A block size is legal when every block it shapes is (see tpu_block_legal), and divides the
// range of each tile that indexes a tensor copies land in (plan.h: its regions are DMAed whole).
bool PallasBackend::block_size_legal(const ir::Function& fn, int block_id, int64_t block) const {
  bool ok = true;
  for (const Op& launch : fn.body) {
    if (launch.kind != OpKind::Launch) continue;
    std::set<int> landing;
    ir::walk(launch.body, [&](const Op& op) {
      if (op.kind == OpKind::CopyStart) landing.insert(op.tensor);
    });
    ir::walk(launch.body, [&](const Op& op) {
      const bool lands = op.kind == OpKind::CopyStart ||
                         ((op.kind == OpKind::Load || op.kind == OpKind::Store) && landing.count(op.tensor));
      if (!lands) return;
      for (const ir::IndexItem& ix : op.index) {
        if (ix.kind != ir::IndexItem::Tile || fn.tiles[ix.tile].block != block_id) continue;
        const int64_t extent = fn.tiles[ix.tile].extent();
        if (block > 1 && extent % std::min(block, extent) != 0) ok = false;
      }
    });
  }
  ir::walk(fn.body, [&](const Op& op) {
    if (op.kind != OpKind::Load && op.kind != OpKind::Store) return;
    const ir::TensorInfo& t = fn.tensors[op.tensor];
    const int rank = static_cast<int>(op.index.size());
    for (int d = 0; d < rank; ++d) {
      const ir::IndexItem& ix = op.index[d];
      if (ix.kind != ir::IndexItem::Tile || fn.tiles[ix.tile].block != block_id || fn.tiles[ix.tile].is_grid) continue;
      if (!tpu_block_legal(block, t.shape[d], rank - 1 - d, rank, dtype_size(t.dtype))) ok = false;
    }
  });
  return ok;
}

std::vector<std::string> PallasBackend::micro_kernels(const ir::Function&, const ir::Op&) const { return {"mxu"}; }

Config PallasBackend::default_config(const ir::Function& fn, const ConfigSpec& spec) const {
  return pallas::default_config(fn, spec, *this);
}

void PallasBackend::check(const lower::BlockProgram& p) const {
  const ir::Function& fn = *p.fn;
  // (A block the kernel fixes is checked per BlockSpec by the plan: check_block_shape.)
  // fp8 data needs a TPU with fp8 support (v7x); older generations have no fp8 types in their
  // vector units, so refuse rather than hope the Mosaic compiler emulates them.
  if (generation_.name != "v7x")
    ir::walk(fn.body, [&](const ir::Op& op) {
      if ((op.kind == ir::OpKind::Load || op.kind == ir::OpKind::Store) && is_fp8(fn.tensors[op.tensor].dtype))
        throw UserError(op.loc.str() + ": the pallas backend for TPU " + generation_.name + " cannot " +
                        (op.kind == ir::OpKind::Load ? "load" : "store") + " " + fn.tensors[op.tensor].name +
                        " of dtype " + std::string(dtype_name(fn.tensors[op.tensor].dtype)) +
                        ": fp8 tensors need a TPU with fp8 support (pallas:v7x)");
    });
  // (Ragged last blocks are legal: a TPU's HBM buffers are padded to whole tiles of their
  // layout, so a ragged grid block, and emit_pipeline's copy of one rounded up to the tiling,
  // stay inside the buffer; docs/pallas.md, "Ragged blocks". One case is refused for the
  // verification's sake: check_aliased_overhang.)
  // A pallas_call's semaphores are its scratch: a copy channel or a semaphore is used within one
  // launch (its copies started and waited for there, its signals and waits there).
  std::map<std::pair<bool, int>, const Op*> used_in;  // (semaphore?, channel) -> the launch
  for (const Op& launch : fn.body) {
    if (launch.kind != OpKind::Launch) continue;
    ir::walk(launch.body, [&](const Op& op) {
      const bool copy = op.kind == OpKind::CopyStart || op.kind == OpKind::CopyWait;
      const bool sem = op.kind == OpKind::Signal || op.kind == OpKind::SemWait;
      if (!copy && !sem) return;
      auto [it, fresh] = used_in.insert({{sem, op.channel}, &launch});
      if (!fresh && it->second != &launch)
        throw UserError(op.loc.str() + ": the pallas backend runs each launch as its own pallas_call, whose " +
                        (sem ? "semaphores" : "copies' semaphores") +
                        " are its own: " + (sem ? "semaphore s" : "copy c") + std::to_string(op.channel) +
                        " is used here and in the launch at " + it->second->loc.str() + "; use one " +
                        (sem ? "semaphore" : "copy") + " per launch (kernel " + fn.name + ")");
    });
  }
  const std::vector<PallasLaunch> launches = plan_pallas(p);
  std::set<int> valued;  // tensors with a value before each launch
  size_t launch = 0;
  for (const Op& op : fn.body) {
    if (op.kind == OpKind::Alloc && op.has_fill) valued.insert(op.tensor);
    if (op.kind != OpKind::Launch || launch >= launches.size()) continue;
    check_aliased_overhang(p, launches[launch], valued);
    for (const PallasSlot& s : launches[launch++].slots)
      if (s.written) valued.insert(s.tensor);
  }
  // An atomic update at indices computed from data keeps the whole tensor in VMEM (plan.h):
  // no block size shrinks it, so say so at its line rather than with the config's fit.
  for (const PallasLaunch& pl : launches)
    for (const PallasSlot& s : pl.slots) {
      if (!s.whole_tensor || s.atomic == ir::AtomicFn::none) continue;
      const int64_t need = 4 * s.block_bytes;  // its prior contents and the output, 2 buffers each
      if (need > machine_.fast_memory_bytes)
        throw UserError(s.first->loc.str() + ": the pallas backend keeps " + fn.tensors[s.tensor].name +
                        " whole in VMEM for " + std::string(ir::atomic_name(s.atomic)) +
                        " at indices computed from data (no block index map can name the rows they update): " +
                        "its prior contents and the output block, 2 buffers each, need 4 x " +
                        format_bytes(s.block_bytes) + " = " + format_bytes(need) + ", and TPU " + generation_.name +
                        " has " + format_bytes(machine_.fast_memory_bytes) + " of VMEM per core (kernel " + fn.name +
                        ")");
    }
  for (const PallasLaunch& pl : launches)
    if (pl.vmem_bytes > machine_.fast_memory_bytes) {
      // Blocks that span their whole tensor (a whole-tensor update, a one-hot gather's table, all
      // dims whole) are what no block size shrinks: name them, so the hint is not a dead end.
      std::string whole;
      for (const PallasSlot& s : pl.slots) {
        const ir::TensorInfo& t = fn.tensors[s.tensor];
        // (a resident loop's blocks shrink with the pipeline strategy: the fit hint says so; a
        // jagged loop's rows stay whole)
        const bool streamable = s.mode == PallasSlot::Resident && s.loop_tile >= 0 && s.trip_tiles.empty() &&
                                !fn.tiles[s.loop_tile].is_jagged();
        bool spans =
            s.mode != PallasSlot::Dma && s.mode != PallasSlot::Smem && !streamable && s.block.size() == t.shape.size();
        for (size_t d = 0; spans && d < t.shape.size(); ++d)
          spans = s.block[d] == t.shape[d] || (s.block[d] == -1 && t.shape[d] == 1);
        // (rows a jagged loop holds resident are whole even where the block cuts its other dims:
        // grouped_gemm's x, read in the K loop inside its jagged loop, holds all M rows whatever
        // the jagged block; streamed rows, mode Stream, hold two trips' blocks)
        bool jagged_rows = s.mode == PallasSlot::Resident && s.loop_tile >= 0 && fn.tiles[s.loop_tile].is_jagged();
        for (int tile : s.trip_tiles) jagged_rows |= fn.tiles[tile].is_jagged();
        if ((spans || s.whole_tensor || jagged_rows) && s.block_bytes >= (int64_t{1} << 20) &&
            whole.find(t.name + " ") == std::string::npos)
          whole += (whole.empty() ? "" : ", ") + t.name + " (" + format_bytes(s.block_bytes) + ")";
      }
      throw UserError("config " + p.config.to_json() + " does not fit: launch " + std::to_string(pl.index) +
                      " of kernel " + fn.name + " needs " + format_bytes(pl.vmem_bytes) + " of VMEM (" +
                      pl.vmem_detail + "); TPU " + generation_.name + " has " +
                      format_bytes(machine_.fast_memory_bytes) + " per core. " +
                      (whole.empty() ? lower::fit_hint(p, p.launches[pl.index])
                                     : "Its blocks of " + whole +
                                           " span their whole tensors whatever the block sizes (a tensor updated "
                                           "at indices computed from data, the rows a jagged loop reads or "
                                           "writes, a one-hot gather's table, whole dims): "
                                           "smaller blocks do not shrink them; smaller inputs, or a dma gather where "
                                           "its index block is loaded directly, do."));
    }
}

int64_t PallasBackend::footprint_bytes(const lower::BlockProgram& p) const {
  int64_t most = 0;
  for (const PallasLaunch& pl : plan_pallas(p)) most = std::max(most, pl.vmem_bytes);
  return most;
}

Artifact PallasBackend::generate(const lower::BlockProgram& p) const {
  return {"python", generate_module(p, generation_)};
}

}  // namespace parhelion::backend::pallas

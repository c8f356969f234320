#include "backend/pallas/plan_printer.h"

#include <sstream>

#include "backend/backend.h"
#include "ir/printer.h"
#include "runtime/format_bytes.h"

namespace parhelion::backend::pallas {

std::string print(const lower::BlockProgram& p, const std::vector<PallasLaunch>& launches) {
  const ir::Function& fn = *p.fn;
  std::ostringstream os;
  os << "pallas_plan " << fn.name << " for " << p.backend->machine().description << " (VMEM "
     << format_bytes(p.backend->machine().fast_memory_bytes) << ")\n";
  os << "  config " << p.config.to_json() << "\n";
  for (const PallasLaunch& pl : launches) {
    os << "  launch " << pl.index << ": VMEM " << format_bytes(pl.vmem_bytes) << " (" << pl.vmem_detail << ")\n";
    for (size_t i = 0; i < pl.slots.size(); ++i) {
      const PallasSlot& s = pl.slots[i];
      os << "    slot " << i << " " << fn.tensors[s.tensor].name << " "
         << (s.read && s.written ? "inout"
             : s.written         ? "out"
                                 : "in")
         << " " << mode_name(s.mode);
      if (s.loop_tile >= 0) os << " in " << ir::tile_name(fn, s.loop_tile);
      if (s.mode == PallasSlot::Pipeline) os << " x" << s.buffers;
      os << " block [";
      for (size_t d = 0; d < s.block.size(); ++d)
        os << (d ? ", " : "") << (s.block[d] < 0 ? "None" : std::to_string(s.block[d]));
      os << "] " << format_bytes(s.block_bytes);
      if (s.shares >= 0) os << " (slot " << s.shares << "'s copy)";
      os << "\n";
    }
    for (size_t i = 0; i < pl.dma_rows.size(); ++i) {
      const DmaRows& g = pl.dma_rows[i];
      os << "    dma rows " << i << ": " << (g.scatter ? "scatter into " : "gather from ")
         << fn.tensors[g.op->tensor].name << " (slot " << g.table_slot << ", in HBM), row numbers from slot "
         << g.index_slot << " in SMEM, " << g.rows << " DMAs into buffer [";
      for (size_t d = 0; d < g.buffer.size(); ++d) os << (d ? ", " : "") << g.buffer[d];
      os << "] " << format_bytes(g.buffer_bytes) << "\n";
    }
    // The pallas_call's grid (a loop on the grid last), its steps and dimension semantics.
    os << "    grid [";
    for (size_t i = 0; i < pl.grid.size(); ++i)
      os << (i ? ", " : "") << ir::tile_name(fn, pl.grid[i].tile) << " " << pl.grid[i].steps << " "
         << (pl.arbitrary[i] ? "arbitrary" : "parallel");
    os << "]";
    if (pl.grid_loop) os << " (the loop over " << ir::tile_name(fn, pl.grid.back().tile) << " on the grid)";
    os << "\n";
    for (int t : pl.rolled_loops) os << "    loop over " << ir::tile_name(fn, t) << ": a fori_loop\n";
  }
  return os.str();
}

}  // namespace parhelion::backend::pallas

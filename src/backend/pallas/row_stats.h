// Row statistics kept lane-dense: the layout of per-row values (a row's max, sum, mean) in the
// pallas backend's code.
//
// A TPU vector register is 8 sublanes x 128 lanes. A reduction over a block's last (lane) dim
// leaves one value per row, one per sublane; a 1-D array holds its elements along the lanes, so
// keeping such a value 1-D moves every row from its sublane to a lane, and broadcasting it back
// over the row (x - max[:, None]) moves it back: two relayouts per use, per trip of a flash loop.
// Expert kernels (JAX's flash attention, Tokamax) keep these values 2-D instead: [rows, 1]
// right after the reduction (keepdims), and the running statistics in VMEM as [rows, 128] with
// every lane equal, broadcast over a row by repeating whole registers.
//
// This pass picks, per launch, the values held so ("columns": their value has a trailing lane
// dim of 1 or 128 beyond their Tile IR shape) and the Vars kept lane-dense in scratch. A column
// is a reduction over the last dim of a block of rank 2 or more, a read of such a Var, or an
// elementwise op over columns and scalars.
// A Var is lane-dense when every value set into it after its declaration is a column (decided
// as a fixpoint, the Var's own reads assumed columns). Every other use reads a column back in
// its Tile IR shape; the emitter does the conversions (codegen.cpp).
#pragma once

#include <set>

#include "lower/block_ir.h"

namespace parhelion::backend::pallas {

struct RowStats {
  std::set<int> vars;     // Vars held as [..., rows, 128] in VMEM scratch, every lane equal
  std::set<int> columns;  // value ids held with a trailing lane dim (1 or 128)
};

RowStats plan_row_stats(const lower::BlockProgram& p, const ir::Op& launch);

}  // namespace parhelion::backend::pallas

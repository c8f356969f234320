// How the triton backend shapes Tile IR values as Triton blocks: a tile of block size 1 (a
// grid dim) is a scalar index and its dim is squeezed out; every other dim is a power of two
// (Triton's tl.arange needs one): a tile's block, or a constant dim rounded up. A dim whose
// block runs past its valid length (a ragged last block, a constant dim rounded up) is masked.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/ir.h"
#include "lower/block_ir.h"

namespace parhelion::backend::triton {

int64_t next_pow2(int64_t n);

// A tile that is a scalar index in the generated code (its block is 1).
bool unit_tile(const lower::BlockProgram& p, int tile);

// One dim of a value as Triton holds it.
struct KeptDim {
  ir::Dim dim;
  int64_t size = 1;     // the block's extent: a power of two
  bool masked = false;  // elements past the valid length (padding) may hold anything
};

// The dims of an IR shape that exist in the generated value, in order.
std::vector<KeptDim> kept_dims(const lower::BlockProgram& p, const std::vector<ir::Dim>& shape);
// Elements of a value of this shape, padded as Triton holds it.
int64_t padded_elements(const lower::BlockProgram& p, const std::vector<ir::Dim>& shape);
// Whether a tile's blocks can run past its range (its extent is not a multiple of its block).
bool tile_masked(const lower::BlockProgram& p, int tile);

}  // namespace parhelion::backend::triton

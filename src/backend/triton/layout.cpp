#include "backend/triton/layout.h"

#include <bit>

namespace parhelion::backend::triton {

int64_t next_pow2(int64_t n) { return n <= 1 ? 1 : static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(n))); }

bool unit_tile(const lower::BlockProgram& p, int tile) { return p.block_of_tile(tile) == 1; }

bool tile_masked(const lower::BlockProgram& p, int tile) {
  const ir::TileInfo& t = p.fn->tiles[tile];
  const int64_t b = p.block_of_tile(tile);
  // (a jagged range ends anywhere; a tile over an enclosing block cuts blocks of that one's
  // length, whole or ragged, which its own blocks divide only if they divide both)
  if (t.parent >= 0) return tile_masked(p, t.parent) || p.block_of_tile(t.parent) % b != 0 || t.extent() % b != 0;
  return t.is_jagged() || t.extent() % b != 0;
}

std::vector<KeptDim> kept_dims(const lower::BlockProgram& p, const std::vector<ir::Dim>& shape) {
  std::vector<KeptDim> out;
  for (const ir::Dim& d : shape) {
    if (d.kind == ir::Dim::Tile) {
      if (unit_tile(p, d.tile)) continue;
      out.push_back({d, p.block_of_tile(d.tile), tile_masked(p, d.tile)});
    } else {
      const int64_t size = next_pow2(d.size);
      out.push_back({d, size, size != d.size});
    }
  }
  return out;
}

int64_t padded_elements(const lower::BlockProgram& p, const std::vector<ir::Dim>& shape) {
  int64_t n = 1;
  for (const KeptDim& k : kept_dims(p, shape)) n *= k.size;
  return n;
}

}  // namespace parhelion::backend::triton

// The tiles a launch's values are computed from: a value reads a tile's position where it is a
// tile_begin / tile_end / tile_index / tile_id of that tile or of a tile within it, or is
// computed from such a value (through operands and loads' indices). Lowering asks it whether a
// dot's B moves with a loop; the cpu default, which grid dims a jagged loop's range follows.
#pragma once

#include <map>
#include <set>
#include <vector>

#include "ir/ir.h"

namespace parhelion::ir {

class ValueTiles {
 public:
  ValueTiles(const Function& fn, const std::vector<Op>& launch_body);

  // The tiles value `v` reads, each with its enclosing tiles. A value defined outside the launch
  // body, or read from a Var, reads none.
  const std::set<int>& of(int v) const;

 private:
  const Function& fn_;
  std::map<int, const Op*> defs_;
  mutable std::map<int, std::set<int>> memo_;
};

}  // namespace parhelion::ir

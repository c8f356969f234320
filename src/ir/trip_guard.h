// A loop whose trips past a bound do nothing: its body is one ph::when on `t.begin() < e`
// (t the loop's tile), the ops before it only compute that condition, and e takes one value
// for the whole loop (made of the launch tiles' offsets and ends and constants). Causal
// attention's key loop is one: the key blocks above the diagonal are skipped. A backend
// bounds such a loop's trips at e, so the skipped trips move no data either.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace parhelion::ir {

// How a backend writes the scalars of a bound: a launch tile's first element and end, and the
// min and max functions of its language.
struct ScalarSyntax {
  std::function<std::string(int tile)> begin, end;
  std::string min, max;
};

// e of a loop's guard, found once, then written in a backend's syntax or evaluated at given
// launch-tile offsets (the TPU model, at every outer block).
class TripBound {
 public:
  // None when the loop has no such guard, or e reads anything but the launch tiles
  // `launch_tiles`, integer constants, + - * min max.
  static std::optional<TripBound> of(const Function& fn, const Op& loop, const std::vector<int>& launch_tiles);

  // Evaluable before the loop, where the launch tiles' offsets are known.
  std::string write(const ScalarSyntax& syntax) const;
  int64_t evaluate(const std::function<int64_t(int tile, bool end)>& tile_at) const;
  std::set<int> tiles() const;  // the launch tiles e reads

  struct Node {
    enum Kind { Constant, Begin, End, Binary } kind = Constant;
    int64_t value = 0;            // Constant
    int tile = -1;                // Begin, End
    BinaryFn fn = BinaryFn::add;  // Binary: add, sub, mul, minimum or maximum
    std::vector<Node> args;       // Binary
  };

 private:
  explicit TripBound(Node root) : root_(std::move(root)) {}
  Node root_;
};

// TripBound::of(...)->write(syntax), or "" when the loop has no such guard.
std::string trip_guard_bound(const Function& fn, const Op& loop, const std::vector<int>& launch_tiles,
                             const ScalarSyntax& syntax);

}  // namespace parhelion::ir

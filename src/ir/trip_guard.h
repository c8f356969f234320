// A loop whose trips past a bound do nothing: its body is one ph::when on `t.begin() < e`
// (t the loop's tile), the ops before it only compute that condition, and e takes one value
// for the whole loop (made of the launch tiles' offsets and ends and constants). Causal
// attention's key loop is one: the key blocks above the diagonal are skipped. A backend
// bounds such a loop's trips at e, so the skipped trips move no data either.
#pragma once

#include <functional>
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

// e of `loop`'s guard written in `syntax`, evaluable before the loop where the launch tiles'
// offsets are known; "" when the loop has no such guard, or e reads anything but the launch
// tiles `launch_tiles`, constants, + - * min max.
std::string trip_guard_bound(const Function& fn, const Op& loop, const std::vector<int>& launch_tiles,
                             const ScalarSyntax& syntax);

// e of `loop`'s guard evaluated with the launch tiles' offsets and ends that `tile_at(tile,
// end)` gives (the TPU model averages the trips that run over the outer blocks); false when the
// loop has no such guard.
bool trip_guard_value(const Function& fn, const Op& loop, const std::vector<int>& launch_tiles,
                      const std::function<int64_t(int tile, bool end)>& tile_at, int64_t* value);

}  // namespace parhelion::ir

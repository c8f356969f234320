// Host views in the pallas module's wrapper. A JAX array has no memory to alias, so the
// wrapper keeps the value of each root tensor (argument or allocation) and derives a view's
// value from it with jnp ops before a launch that uses the view (reshape, transpose,
// broadcast_to, a slice); after a launch that writes a view, it maps the view's new value back
// into the root (the inverse reshape or permutation, `.at[...].set` for a narrow). Stores
// through an expand never reach here (the verifier refuses them on every backend).
#pragma once

#include <string>
#include <vector>

#include "ir/ir.h"

namespace parhelion::backend::pallas {

// The jnp expression of view tensor `t`'s value from its root's variable `t<root>`.
std::string view_value(const ir::Function& fn, int t);
// Python statements that write the value in `t<view>` back into its root's variable.
std::vector<std::string> write_back_view(const ir::Function& fn, int view);

}  // namespace parhelion::backend::pallas

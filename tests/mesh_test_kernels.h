// Test kernels on a mesh that more than one test file runs (the interpreter's and the backends').
#pragma once

#include "parhelion/parhelion.h"

namespace parhelion::testing {

// On a 2-D mesh (x, y): a ring all-gather along y within each x row, then a barrier over the whole
// mesh: out[y m + i, j] = x of device (x, y) at [i, j] + 1000 x. (Barriers over two groups, device
// coordinates along both axes.)
inline Tensor gather_along_y(Tensor x) {
  const int64_t ny = mesh_size("y");
  auto [m, k] = x.sizes<2>();
  auto out = empty({ny * m, k});
  for (auto g : grid(1)) {
    (void)g;
    auto y = device_index("y");
    out[slice(y * m, length(m)), all] = x[all, all] + cast(device_index("x"), DType::f32) * 1000.0f;
    for (auto step : grid(ny - 1)) {
      auto rows = slice(remainder(y - step.begin(), ny) * m, length(m));
      auto send = remote_copy(out, {rows, all}, out[rows, all], ring_next("y"));
      send.start();
      send.wait();
      barrier("y");  // one copy in flight towards a device: the next starts after every receive
    }
    barrier({"x", "y"});
  }
  return out;
}

}  // namespace parhelion::testing

// Rotary position embedding with interleaved pairs (GPT-J, and llama's complex formulation):
// x [B, S, H, D] is viewed as [B, S, H, D/2, 2], pairs (x0, x1) = (x[..., 2j], x[..., 2j+1]);
// pair j at position s is rotated by the angle whose cosine and sine are cos[s, j], sin[s, j]
// ([S, D/2]): (x0 c - x1 s, x0 s + x1 c), i.e. (x0 + i x1) * (c + i s). The backward rotates
// the gradient back (the rotation's transpose): (g0 c + g1 s, -g0 s + g1 c).
//
// Written as the algorithm reads: a host view with a trailing pair dim, a five-index
// subscript that loads whole pairs, ph::split into the two halves and ph::join back.
#include "kernels/kernels.h"

namespace parhelion::kernels {
namespace {

Tensor rotary_body(Tensor x, Tensor cos, Tensor sin, bool inverse, Loc loc) {
  expect(x.rank() == 4, "rotary: x must be [B, S, H, D]", loc);
  auto [B, S, H, D] = x.sizes<4>();
  expect(D % 2 == 0, "rotary: the head dim D must be even (pairs), got " + std::to_string(D), loc);
  expect(cos.sizes() == Shape{S, D / 2} && sin.sizes() == Shape{S, D / 2}, "rotary: cos and sin must be [S, D/2]", loc);
  auto out = empty_like(x);
  auto xv = x.view({B, S, H, D / 2, 2});
  auto ov = out.view({B, S, H, D / 2, 2});
  for (auto t : tile(Shape{B, S, H, D / 2})) {
    auto [x0, x1] = split(xv[t[0], t[1], t[2], t[3], all]);  // [tb, ts, th, tj] each
    auto c = unsqueeze(cos[t[1], t[3]], 1);                  // [ts, 1, tj]: broadcast over heads
    auto s = unsqueeze(sin[t[1], t[3]], 1);
    if (inverse)
      ov[t[0], t[1], t[2], t[3], all] = join(x0 * c + x1 * s, x1 * c - x0 * s);
    else
      ov[t[0], t[1], t[2], t[3], all] = join(x0 * c - x1 * s, x0 * s + x1 * c);
  }
  return out;
}

Tensor rotary_forward(Tensor x, Tensor cos, Tensor sin) { return rotary_body(x, cos, sin, false, Loc::current()); }
Tensor rotary_backward(Tensor grad, Tensor cos, Tensor sin) {
  return rotary_body(grad, cos, sin, true, Loc::current());
}

}  // namespace

Kernel<Tensor(Tensor, Tensor, Tensor)> rotary("rotary", rotary_forward);
Kernel<Tensor(Tensor, Tensor, Tensor)> rotary_backward_kernel("rotary_backward", rotary_backward);

}  // namespace parhelion::kernels

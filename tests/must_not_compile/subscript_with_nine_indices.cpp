// expect: a Parhelion subscript takes one to eight indices
// More than eight indices is an error here, not a comma expression.
#include <parhelion/parhelion.h>
namespace ph = parhelion;
ph::Tensor k(ph::Tensor x) {
  auto out = ph::empty_like(x);
  for (auto t : ph::tile(x.sizes())) out[t] = x[t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8]];
  return out;
}

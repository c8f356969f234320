// expect: a Parhelion subscript takes one to eight indices
// A float is not an index; without the check, x[tm, 1.5f] would be the comma operator's x[1.5f].
#include <parhelion/parhelion.h>
namespace ph = parhelion;
ph::Tensor k(ph::Tensor x) {
  auto out = ph::empty_like(x);
  for (auto [tm, tn] : ph::tile(x.size(0), x.size(1))) out[tm, tn] = x[tm, 1.5f];
  return out;
}

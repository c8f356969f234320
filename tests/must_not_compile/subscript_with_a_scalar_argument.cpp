// expect: a Parhelion subscript takes one to eight indices
// A ph::Scalar argument is a float value, not an index.
#include <parhelion/parhelion.h>
namespace ph = parhelion;
ph::Tensor k(ph::Tensor x, ph::Scalar s) {
  auto out = ph::empty_like(x);
  for (auto [tm, tn] : ph::tile(x.size(0), x.size(1))) out[tm, tn] = x[s, tn];
  return out;
}

#include "tune/accuracy.h"

#include <cmath>

#include "parhelion/error.h"

namespace parhelion::tune {

Closeness compare(const Array& out, const Array& want, DType dtype, double scale) {
  if (out.shape() != want.shape())
    throw UserError("output shape " + shape_to_string(out.shape()) + " differs from the expected " +
                    shape_to_string(want.shape()));
  double atol = 2e-5, rtol = 2e-5;
  if (dtype == DType::bf16) atol = rtol = 1.6e-2;
  if (dtype == DType::f16) atol = rtol = 2e-3;
  // fp8: one ulp (2^-3 relative for e4m3, 2^-2 for e5m2): a product rounded either side of a tie.
  if (dtype == DType::f8e4m3) atol = rtol = 0.125;
  if (dtype == DType::f8e5m2) atol = rtol = 0.25;
  atol *= scale;
  rtol *= scale;
  Closeness c;
  for (int64_t i = 0; i < out.numel(); ++i) {
    double o = out.get(i), r = want.get(i);
    double err = std::abs(o - r);
    if (std::isnan(o) != std::isnan(r) || (std::isinf(r) && o != r)) err = INFINITY;
    if (std::isnan(err)) err = 0;  // both NaN (or the same inf)
    c.max_abs_err = std::max(c.max_abs_err, err);
    // An infinite error fails outright: against an expected NaN the bound below is NaN, and
    // `err > NaN` is false, which would accept a number where NaN is expected.
    if (std::isinf(err) || err > atol + rtol * std::abs(r)) c.ok = false;
  }
  return c;
}

}  // namespace parhelion::tune

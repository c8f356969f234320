// Whether a candidate's outputs match the expected ones, with a tolerance per dtype:
// |out - want| <= atol + rtol * |want| elementwise (f32 2e-5, f16 2e-3, bf16 1.6e-2, f8e4m3 0.125, f8e5m2 0.25), and
// NaN or inf where and only where expected.
#pragma once

#include "parhelion/array.h"

namespace parhelion::tune {

struct Closeness {
  double max_abs_err = 0;
  bool ok = true;
};

// `scale` widens both tolerances: a dot over K terms accumulates rounding ~ sqrt(K) times.
Closeness compare(const Array& out, const Array& want, DType dtype, double scale = 1.0);

}  // namespace parhelion::tune

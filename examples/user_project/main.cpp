// A user's kernel: a fused scale-shift-relu, compiled and checked.
#include <parhelion/parhelion.h>

#include <cstdio>

namespace ph = parhelion;

ph::Tensor scale_shift_relu(ph::Tensor x, ph::Scalar scale, ph::Scalar shift) {
  auto out = ph::empty_like(x);
  for (auto tile : ph::tile(out.sizes())) out[tile] = ph::maximum(x[tile] * scale + shift, 0.0f);
  return out;
}

int main() {
  ph::Kernel k("scale_shift_relu", scale_shift_relu);
  ph::Array x = ph::Array::random({300, 77}, ph::DType::f32, 1);
  ph::Array y = k(x, 2.0, -0.5);
  for (int64_t i = 0; i < x.numel(); ++i) {
    double want = std::max(0.0, double(float(x.get(i)) * 2.0f - 0.5f));
    if (std::abs(y.get(i) - want) > 1e-6) {
      std::printf("mismatch at %lld\n", static_cast<long long>(i));
      return 1;
    }
  }
  std::printf("user_app: ok\n");
  return 0;
}

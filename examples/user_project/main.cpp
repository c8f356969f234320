// A user's kernel: a fused scale-shift-relu, compiled and checked.
#include <parhelion/parhelion.h>

#include <cstdio>

namespace ph = parhelion;

// x[tm, tn] is C++23's multidimensional subscript: this project must build as C++23 although
// it asks for no standard itself (parhelion::parhelion carries it).
ph::Tensor scale_shift_relu(ph::Tensor x, ph::Scalar scale, ph::Scalar shift) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m, n});
  for (auto [tm, tn] : ph::tile(m, n)) out[tm, tn] = ph::maximum(x[tm, tn] * scale + shift, 0.0f);
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

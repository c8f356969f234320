// The smallest Parhelion program: elementwise add over any rank, checked and printed.
#include <parhelion/parhelion.h>

#include <cstdio>

namespace ph = parhelion;

ph::Tensor add(ph::Tensor x, ph::Tensor y) {
  auto out = ph::empty_like(x);
  for (auto tile : ph::tile(out.sizes()))  // one launch; its grid covers out
    out[tile] = x[tile] + y[tile];
  return out;
}

int main() {
  ph::Kernel add_kernel("add", add);
  ph::Array x = ph::Array::random({1000, 1003}, ph::DType::f32, 1);
  ph::Array y = ph::Array::random({1000, 1003}, ph::DType::f32, 2);
  ph::Array out = add_kernel(x, y);
  double err = 0;
  for (int64_t i = 0; i < out.numel(); ++i)
    err = std::max(err, std::abs(out.get(i) - double(float(x.get(i)) + float(y.get(i)))));
  auto compiled = add_kernel.compile({x, y});
  std::printf("%s\n%s\nmax abs error %g\n", compiled.ir().c_str(), compiled.block_ir().c_str(), err);
  return err == 0 ? 0 : 1;
}

// Row softmax in two forms: the whole row in one block, and a looped two-pass form for rows
// too long for one block (an inner tile loop with loop-carried max and sum).
#include <parhelion/parhelion.h>

#include <cmath>
#include <cstdio>

namespace ph = parhelion;

ph::Tensor softmax(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty_like(x);
  for (auto rows : ph::tile(m)) {
    auto v = x[rows, ph::all];
    auto e = ph::exp(v - ph::amax(v, -1, true));
    out[rows, ph::all] = e / ph::sum(e, -1, true);
  }
  return out;
}

ph::Tensor softmax_two_pass(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty_like(x);
  for (auto rows : ph::tile(m)) {
    ph::Var mx = ph::full({rows}, -INFINITY);
    ph::Var den = ph::zeros({rows});
    for (auto cols : ph::tile(n)) {  // pass 1: running max and rescaled sum
      auto v = x[rows, cols];
      auto new_mx = ph::maximum(mx, ph::amax(v, -1));
      den = den * ph::exp(mx - new_mx) + ph::sum(ph::exp(v - new_mx.unsqueeze(-1)), -1);
      mx = new_mx;
    }
    for (auto cols : ph::tile(n))  // pass 2: normalize
      out[rows, cols] = ph::exp(x[rows, cols] - mx.unsqueeze(-1)) / den.unsqueeze(-1);
  }
  return out;
}

int main() {
  ph::Kernel k1("softmax", softmax), k2("softmax_two_pass", softmax_two_pass);
  ph::Array x = ph::Array::random({513, 3001}, ph::DType::f32, 7, -4, 4);
  ph::Array a = k1(x), b = k2(x);
  double err = 0;
  for (int64_t r = 0; r < 513; ++r) {
    double mx = -INFINITY, s = 0;
    for (int64_t c = 0; c < 3001; ++c) mx = std::max(mx, x.get(r * 3001 + c));
    for (int64_t c = 0; c < 3001; ++c) s += std::exp(x.get(r * 3001 + c) - mx);
    for (int64_t c = 0; c < 3001; ++c) {
      double want = std::exp(x.get(r * 3001 + c) - mx) / s;
      err = std::max({err, std::abs(a.get(r * 3001 + c) - want), std::abs(b.get(r * 3001 + c) - want)});
    }
  }
  std::printf("%s\n%s\nmax abs error %g\n", k2.compile({x}).ir().c_str(), k2.compile({x}).block_ir().c_str(), err);
  return err < 1e-6 ? 0 : 1;
}

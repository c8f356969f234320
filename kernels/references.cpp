// Naive reference implementations of the kernel library (see references.h).
#include "kernels/references.h"

#include "parhelion/error.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <string>
#include <vector>

namespace parhelion::ref {
namespace {

[[noreturn]] void fail(const char* fn, const std::string& msg) {
  throw std::invalid_argument(std::string("ref::") + fn + ": " + msg);
}

// Checks that `a` is a defined, contiguous floating array.
void check_float(const char* fn, const char* name, const Array& a) {
  if (!a.defined()) fail(fn, std::string(name) + " is undefined");
  if (!is_floating(a.dtype()))
    fail(fn, std::string(name) + " must be f32/bf16/f16, got " + std::string(dtype_name(a.dtype())));
  if (!a.is_contiguous()) fail(fn, std::string(name) + " must be contiguous");
}

void check_rank(const char* fn, const char* name, const Array& a, int rank) {
  if (a.rank() != rank)
    fail(fn,
         std::string(name) + " must have rank " + std::to_string(rank) + ", got shape " + shape_to_string(a.shape()));
}

void check_same_shape(const char* fn, const char* na, const Array& a, const char* nb, const Array& b) {
  if (a.shape() != b.shape())
    fail(fn, std::string(na) + " and " + nb + " shapes differ: " + shape_to_string(a.shape()) + " vs " +
                 shape_to_string(b.shape()));
}

// A [N] vector whose length must equal the last dim of a [M,N] input.
void check_row_vector(const char* fn, const char* name, const Array& v, int64_t n) {
  check_float(fn, name, v);
  if (v.rank() != 1 || v.dim(0) != n)
    fail(fn, std::string(name) + " must have shape [" + std::to_string(n) + "], got " + shape_to_string(v.shape()));
}

// Applies f(x, y) elementwise over two same-shape float arrays.
template <class F>
Array binary(const char* fn, const Array& a, const Array& b, F f) {
  check_float(fn, "a", a);
  check_float(fn, "b", b);
  check_same_shape(fn, "a", a, "b", b);
  Array out = Array::empty(a.shape(), DType::f32);
  for (int64_t i = 0; i < a.numel(); ++i) out.set(i, f(a.get(i), b.get(i)));
  return out;
}

}  // namespace

// out = x + y
Array add(const Array& x, const Array& y) {
  return binary("add", x, y, [](double a, double b) { return a + b; });
}

// out = e^x
Array exp(const Array& x) {
  check_float("exp", "x", x);
  Array out = Array::empty(x.shape(), DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) out.set(i, std::exp(x.get(i)));
  return out;
}

// out[r, j] = e^(x[r, j] - m_r) / sum_k e^(x[r, k] - m_r), m_r = max_k x[r, k]; rows = last dim.
Array softmax(const Array& x) {
  check_float("softmax", "x", x);
  if (x.rank() < 1) fail("softmax", "x must have rank >= 1");
  Array out = Array::empty(x.shape(), DType::f32);
  const int64_t n = x.dim(-1);
  if (n == 0) return out;
  const int64_t rows = x.numel() / n;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * n;
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < n; ++j) m = std::max(m, x.get(base + j));
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += std::exp(x.get(base + j) - m);
    for (int64_t j = 0; j < n; ++j) out.set(base + j, std::exp(x.get(base + j) - m) / sum);
  }
  return out;
}

// out[i, j] = (x[i, j] - mu_i) / sqrt(var_i + eps) * w[j] + b[j], var_i = mean_j (x - mu_i)^2
Array rotary(const Array& x, const Array& cos, const Array& sin, bool inverse) {
  check_float("rotary", "x", x);
  check_rank("rotary", "x", x, 4);
  const int64_t B = x.dim(0), S = x.dim(1), H = x.dim(2), D = x.dim(3), P = D / 2;
  if (D % 2 != 0 || cos.shape() != Shape{S, P} || sin.shape() != Shape{S, P})
    throw parhelion::UserError("rotary reference: x [B,S,H,D] with D even, cos and sin [S,D/2]");
  Array out = Array::empty(x.shape(), DType::f32);
  const double sign = inverse ? -1.0 : 1.0;  // the inverse rotates by the negated angle
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t j = 0; j < P; ++j) {
          const int64_t i = ((b * S + s) * H + h) * D + 2 * j;
          const double re = x.get(i), im = x.get(i + 1);
          const double c = cos.get(s * P + j), sn = sign * sin.get(s * P + j);
          out.set(i, re * c - im * sn);
          out.set(i + 1, re * sn + im * c);
        }
  return out;
}

Array layer_norm(const Array& x, const Array& w, const Array& b, double eps) {
  check_float("layer_norm", "x", x);
  check_rank("layer_norm", "x", x, 2);
  const int64_t m = x.dim(0), n = x.dim(1);
  check_row_vector("layer_norm", "w", w, n);
  check_row_vector("layer_norm", "b", b, n);
  Array out = Array::empty(x.shape(), DType::f32);
  for (int64_t i = 0; i < m; ++i) {
    double mu = 0, var = 0;
    for (int64_t j = 0; j < n; ++j) mu += x.get(i * n + j);
    mu /= static_cast<double>(n);
    for (int64_t j = 0; j < n; ++j) var += (x.get(i * n + j) - mu) * (x.get(i * n + j) - mu);
    var /= static_cast<double>(n);
    const double rstd = 1.0 / std::sqrt(var + eps);
    for (int64_t j = 0; j < n; ++j) out.set(i * n + j, (x.get(i * n + j) - mu) * rstd * w.get(j) + b.get(j));
  }
  return out;
}

namespace {
// rstd_i = 1 / sqrt(mean_j x[i, j]^2 + eps) for row i of x [M,N].
double row_rstd(const Array& x, int64_t i, int64_t n, double eps) {
  double ss = 0;
  for (int64_t j = 0; j < n; ++j) ss += x.get(i * n + j) * x.get(i * n + j);
  return 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
}
}  // namespace

// out[i, j] = x[i, j] * rstd_i * w[j]
Array rms_norm(const Array& x, const Array& w, double eps) {
  check_float("rms_norm", "x", x);
  check_rank("rms_norm", "x", x, 2);
  const int64_t m = x.dim(0), n = x.dim(1);
  check_row_vector("rms_norm", "w", w, n);
  Array out = Array::empty(x.shape(), DType::f32);
  for (int64_t i = 0; i < m; ++i) {
    const double r = row_rstd(x, i, n, eps);
    for (int64_t j = 0; j < n; ++j) out.set(i * n + j, x.get(i * n + j) * r * w.get(j));
  }
  return out;
}

// With g = grad_out, r = rstd_i (dr/dx[i, j] = -r^3 x[i, j] / N):
//   dw[j]    = sum_i g[i, j] x[i, j] r_i
//   dx[i, j] = r_i w[j] g[i, j] - r_i^3 x[i, j] / N * sum_k g[i, k] w[k] x[i, k]
std::pair<Array, Array> rms_norm_backward(const Array& grad_out, const Array& x, const Array& w, double eps) {
  const char* fn = "rms_norm_backward";
  check_float(fn, "x", x);
  check_rank(fn, "x", x, 2);
  check_float(fn, "grad_out", grad_out);
  check_same_shape(fn, "grad_out", grad_out, "x", x);
  const int64_t m = x.dim(0), n = x.dim(1);
  check_row_vector(fn, "w", w, n);
  Array dx = Array::empty(x.shape(), DType::f32);
  std::vector<double> dw(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    const double r = row_rstd(x, i, n, eps);
    double dot = 0;  // sum_k g w x over the row
    for (int64_t k = 0; k < n; ++k) dot += grad_out.get(i * n + k) * w.get(k) * x.get(i * n + k);
    const double c = r * r * r * dot / static_cast<double>(n);
    for (int64_t j = 0; j < n; ++j) {
      const double g = grad_out.get(i * n + j), xv = x.get(i * n + j);
      dx.set(i * n + j, r * w.get(j) * g - c * xv);
      dw[static_cast<size_t>(j)] += g * xv * r;
    }
  }
  Array dw_out = Array::empty({n}, DType::f32);
  for (int64_t j = 0; j < n; ++j) dw_out.set(j, dw[static_cast<size_t>(j)]);
  return {std::move(dx), std::move(dw_out)};
}

// Differentiating y = x_hat w + b with x_hat = (x - mu) r, r = (var + eps)^-1/2, per row of N:
//   dL/dx_hat = g w;  dx = r (g w - mean_k(g w) - x_hat mean_k(g w x_hat))
//   dw = sum_i g x_hat;  db = sum_i g
std::vector<Array> layer_norm_backward(const Array& grad_out, const Array& x, const Array& mean, const Array& rstd,
                                       const Array& w) {
  const char* fn = "layer_norm_backward";
  check_float(fn, "x", x);
  check_rank(fn, "x", x, 2);
  check_same_shape(fn, "grad_out", grad_out, "x", x);
  const int64_t m = x.dim(0), n = x.dim(1);
  check_row_vector(fn, "w", w, n);
  check_row_vector(fn, "mean", mean, m);
  check_row_vector(fn, "rstd", rstd, m);
  Array dx = Array::empty(x.shape(), DType::f32);
  std::vector<double> dw(static_cast<size_t>(n), 0.0), db(static_cast<size_t>(n), 0.0), xh(static_cast<size_t>(n));
  for (int64_t i = 0; i < m; ++i) {
    const double mu = mean.get(i), r = rstd.get(i);
    double mean_gw = 0, mean_gwx = 0;
    for (int64_t k = 0; k < n; ++k) {
      const double g = grad_out.get(i * n + k);
      xh[static_cast<size_t>(k)] = (x.get(i * n + k) - mu) * r;
      mean_gw += g * w.get(k);
      mean_gwx += g * w.get(k) * xh[static_cast<size_t>(k)];
      dw[static_cast<size_t>(k)] += g * xh[static_cast<size_t>(k)];
      db[static_cast<size_t>(k)] += g;
    }
    mean_gw /= static_cast<double>(n);
    mean_gwx /= static_cast<double>(n);
    for (int64_t k = 0; k < n; ++k) {
      const double g = grad_out.get(i * n + k);
      dx.set(i * n + k, r * (g * w.get(k) - mean_gw - xh[static_cast<size_t>(k)] * mean_gwx));
    }
  }
  Array dw_out = Array::empty({n}, DType::f32), db_out = Array::empty({n}, DType::f32);
  for (int64_t k = 0; k < n; ++k) {
    dw_out.set(k, dw[static_cast<size_t>(k)]);
    db_out.set(k, db[static_cast<size_t>(k)]);
  }
  return {std::move(dx), std::move(dw_out), std::move(db_out)};
}

std::pair<Array, Array> layer_norm_stats(const Array& x, double eps) {
  check_rank("layer_norm_stats", "x", x, 2);
  const int64_t m = x.dim(0), n = x.dim(1);
  Array mean = Array::empty({m}, DType::f32), rstd = Array::empty({m}, DType::f32);
  for (int64_t i = 0; i < m; ++i) {
    double s = 0, ss = 0;
    for (int64_t k = 0; k < n; ++k) s += x.get(i * n + k);
    const double mu = s / static_cast<double>(n);
    for (int64_t k = 0; k < n; ++k) ss += (x.get(i * n + k) - mu) * (x.get(i * n + k) - mu);
    mean.set(i, mu);
    rstd.set(i, 1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  }
  return {std::move(mean), std::move(rstd)};
}

// out = a / (1 + e^-a) * b
Array swiglu(const Array& a, const Array& b) {
  return binary("swiglu", a, b, [](double u, double v) { return u / (1.0 + std::exp(-u)) * v; });
}

// out = 0.5 a (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3))) * b
Array geglu(const Array& a, const Array& b) {
  return binary("geglu", a, b, [](double u, double v) {
    const double k = std::sqrt(2.0 / std::numbers::pi);
    return 0.5 * u * (1.0 + std::tanh(k * (u + 0.044715 * u * u * u))) * v;
  });
}

// loss[n] = m_n + log sum_v e^(logits[n, v] - m_n) - logits[n, labels[n]], m_n = max_v logits[n, v]
Array cross_entropy(const Array& logits, const Array& labels) {
  const char* fn = "cross_entropy";
  check_float(fn, "logits", logits);
  check_rank(fn, "logits", logits, 2);
  if (!labels.defined()) fail(fn, "labels is undefined");
  if (!is_integer(labels.dtype())) fail(fn, "labels must be i32/i64, got " + std::string(dtype_name(labels.dtype())));
  if (!labels.is_contiguous()) fail(fn, "labels must be contiguous");
  const int64_t rows = logits.dim(0), v = logits.dim(1);
  if (labels.rank() != 1 || labels.dim(0) != rows)
    fail(fn, "labels must have shape [" + std::to_string(rows) + "], got " + shape_to_string(labels.shape()));
  Array out = Array::empty({rows}, DType::f32);
  for (int64_t i = 0; i < rows; ++i) {
    const double lab = labels.get(i);
    if (!(lab >= 0 && lab < static_cast<double>(v)))
      fail(fn, "label " + std::to_string(static_cast<int64_t>(lab)) + " at row " + std::to_string(i) +
                   " is out of range [0, " + std::to_string(v) + ")");
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < v; ++j) mx = std::max(mx, logits.get(i * v + j));
    double sum = 0;
    for (int64_t j = 0; j < v; ++j) sum += std::exp(logits.get(i * v + j) - mx);
    out.set(i, mx + std::log(sum) - logits.get(i * v + static_cast<int64_t>(lab)));
  }
  return out;
}

// mean[i] = sum_j x[i, j] / N; var[i] = sum_j (x[i, j] - mean[i])^2 / N (two passes)
std::pair<Array, Array> welford(const Array& x) {
  check_float("welford", "x", x);
  check_rank("welford", "x", x, 2);
  const int64_t m = x.dim(0), n = x.dim(1);
  if (n == 0) fail("welford", "x must have at least one column");
  Array mean = Array::empty({m}, DType::f32), var = Array::empty({m}, DType::f32);
  for (int64_t i = 0; i < m; ++i) {
    double mu = 0, ss = 0;
    for (int64_t j = 0; j < n; ++j) mu += x.get(i * n + j);
    mu /= static_cast<double>(n);
    for (int64_t j = 0; j < n; ++j) ss += (x.get(i * n + j) - mu) * (x.get(i * n + j) - mu);
    mean.set(i, mu);
    var.set(i, ss / static_cast<double>(n));
  }
  return {std::move(mean), std::move(var)};
}

Array attention(const Array& q, const Array& k, const Array& v, double scale, bool causal) {
  const char* fn = "attention";
  check_float(fn, "q", q);
  if (q.rank() < 2 || k.rank() != q.rank() || k.shape() != v.shape() || k.dim(-1) != q.dim(-1))
    throw std::invalid_argument("ref::attention: q " + shape_to_string(q.shape()) + ", k " +
                                shape_to_string(k.shape()) + ", v " + shape_to_string(v.shape()) + " do not match");
  const int64_t s = q.dim(-2), skv = k.dim(-2), d = q.dim(-1);
  const int64_t heads = q.numel() / std::max<int64_t>(1, s * d);
  std::vector<float> qf = q.to_floats(), kf = k.to_floats(), vf = v.to_floats();
  Array out = Array::empty(q.shape(), DType::f32);
  std::vector<double> p(static_cast<size_t>(skv)), o(static_cast<size_t>(d));
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < s; ++i) {
      const float* qi = qf.data() + (h * s + i) * d;
      double mx = -INFINITY;
      for (int64_t j = 0; j < skv; ++j) {
        double dot = 0;
        const float* kj = kf.data() + (h * skv + j) * d;
        for (int64_t c = 0; c < d; ++c) dot += static_cast<double>(qi[c]) * kj[c];
        p[j] = causal && j > i ? -INFINITY : dot * scale;
        mx = std::max(mx, p[j]);
      }
      double den = 0;
      for (int64_t j = 0; j < skv; ++j) den += p[j] = std::exp(p[j] - mx);
      std::fill(o.begin(), o.end(), 0.0);
      for (int64_t j = 0; j < skv; ++j) {
        const float* vj = vf.data() + (h * skv + j) * d;
        for (int64_t c = 0; c < d; ++c) o[c] += p[j] * vj[c];
      }
      for (int64_t c = 0; c < d; ++c) out.set((h * s + i) * d + c, o[c] / den);
    }
  return out;
}

// --- the matmul family ---------------------------------------------------------------------------

Array matmul(const Array& x, const Array& y) {
  if (x.rank() < 2 || y.rank() < 2 || x.dim(-1) != y.dim(-2) || (y.rank() > 2 && y.rank() != x.rank()))
    throw std::invalid_argument("ref::matmul: shapes " + shape_to_string(x.shape()) + " and " +
                                shape_to_string(y.shape()) + " do not multiply");
  const int64_t m = x.dim(-2), k = x.dim(-1), n = y.dim(-1);
  const int64_t batch = x.numel() / std::max<int64_t>(1, m * k);
  Shape out_shape = x.shape();
  out_shape.back() = n;
  // Widen once, then an i-p-j loop in double over contiguous rows (fast enough for 4096^3).
  std::vector<float> xf = x.to_floats(), yf = y.to_floats();
  std::vector<double> acc(static_cast<size_t>(n));
  Array out = Array::empty(out_shape, DType::f32);
  float* o = out.data_as<float>();
  for (int64_t b = 0; b < batch; ++b) {
    const float* yb = yf.data() + (y.rank() > 2 ? b * k * n : 0);
    for (int64_t i = 0; i < m; ++i) {
      std::fill(acc.begin(), acc.end(), 0.0);
      const float* xr = xf.data() + (b * m + i) * k;
      for (int64_t p = 0; p < k; ++p) {
        const double a = xr[p];
        const float* yr = yb + p * n;
        for (int64_t j = 0; j < n; ++j) acc[j] += a * yr[j];
      }
      for (int64_t j = 0; j < n; ++j) o[(b * m + i) * n + j] = static_cast<float>(acc[j]);
    }
  }
  return out;
}

Array epilogue_subtiling(const Array& x, const Array& w, const Array& bias, const Array& residual) {
  Array out = matmul(x, w);
  const int64_t n = out.dim(-1);
  for (int64_t i = 0; i < out.numel(); ++i) out.set(i, std::max(0.0, out.get(i) + bias.get(i % n)) + residual.get(i));
  return out;
}

Array int4_matmul(const Array& a, const Array& w, const Array& scales) {
  if (a.rank() != 2 || w.rank() != 2 || scales.rank() != 2 || a.dim(1) != 2 * w.dim(0) || w.dim(1) != scales.dim(1) ||
      scales.dim(0) == 0 || a.dim(1) % scales.dim(0) != 0)
    throw std::invalid_argument("ref::int4_matmul: shapes " + shape_to_string(a.shape()) + ", " +
                                shape_to_string(w.shape()) + ", " + shape_to_string(scales.shape()));
  const int64_t m = a.dim(0), k = a.dim(1), n = w.dim(1), group = k / scales.dim(0);
  // Unpack once: weight (kk, j) = nibble * scale, in double.
  std::vector<double> deq(static_cast<size_t>(k * n));
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < n; ++j) {
      const auto byte = static_cast<uint8_t>(static_cast<int8_t>(w.get((kk / 2) * n + j)));
      int nibble = (kk % 2 == 0) ? (byte & 0xF) : (byte >> 4);
      if (nibble >= 8) nibble -= 16;  // two's complement int4
      deq[kk * n + j] = nibble * scales.get((kk / group) * n + j);
    }
  Array out = Array::empty({m, n}, DType::f32);
  std::vector<double> acc(static_cast<size_t>(n));
  for (int64_t i = 0; i < m; ++i) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t kk = 0; kk < k; ++kk) {
      const double x = a.get(i * k + kk);
      for (int64_t j = 0; j < n; ++j) acc[j] += x * deq[kk * n + j];
    }
    for (int64_t j = 0; j < n; ++j) out.set(i * n + j, acc[j]);
  }
  return out;
}

Array fp8_matmul(const Array& a, const Array& b, double scale_a, double scale_b) {
  if (a.rank() != 2 || b.rank() != 2 || a.dim(1) != b.dim(0))
    throw std::invalid_argument("ref::fp8_matmul: shapes " + shape_to_string(a.shape()) + " and " +
                                shape_to_string(b.shape()) + " do not multiply");
  const int64_t m = a.dim(0), k = a.dim(1), n = b.dim(1);
  Array out = Array::empty({m, n}, DType::bf16);
  std::vector<double> acc(static_cast<size_t>(n));
  for (int64_t i = 0; i < m; ++i) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t p = 0; p < k; ++p) {
      const double x = a.get(i * k + p);  // the fp8 code's exact value
      for (int64_t j = 0; j < n; ++j) acc[j] += x * b.get(p * n + j);
    }
    for (int64_t j = 0; j < n; ++j) out.set(i * n + j, scale_a * scale_b * acc[j]);  // rounds to bf16
  }
  return out;
}

Array matmul_layernorm(const Array& x, const Array& w, const Array& gamma, const Array& beta) {
  Array prod = matmul(x, w);
  const int64_t m = prod.dim(0), n = prod.dim(1);
  Array out = Array::empty({m, n}, DType::f32);
  for (int64_t i = 0; i < m; ++i) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < n; ++j) mean += prod.get(i * n + j);
    mean /= static_cast<double>(n);
    for (int64_t j = 0; j < n; ++j) var += (prod.get(i * n + j) - mean) * (prod.get(i * n + j) - mean);
    var /= static_cast<double>(n);
    for (int64_t j = 0; j < n; ++j)
      out.set(i * n + j, (prod.get(i * n + j) - mean) / std::sqrt(var + 1e-5) * gamma.get(j) + beta.get(j));
  }
  return out;
}

Array embedding(const Array& ids, const Array& weight) {
  const char* fn = "embedding";
  check_float(fn, "weight", weight);
  check_rank(fn, "weight", weight, 2);
  if (!ids.defined() || !is_integer(ids.dtype()) || !ids.is_contiguous()) fail(fn, "ids must be contiguous i32/i64");
  const int64_t n = ids.numel(), v = weight.dim(0), e = weight.dim(1);
  Array out = Array::empty({n, e}, DType::f32);
  for (int64_t i = 0; i < n; ++i) {
    const double id = ids.get(i);
    if (!(id >= 0 && id < static_cast<double>(v))) fail(fn, "id " + std::to_string(id) + " out of range");
    for (int64_t j = 0; j < e; ++j) out.set(i * e + j, weight.get(static_cast<int64_t>(id) * e + j));
  }
  return out;
}

Array concat(const Array& x, const Array& y) {
  const char* fn = "concat";
  check_float(fn, "x", x);
  check_float(fn, "y", y);
  check_rank(fn, "x", x, 2);
  check_rank(fn, "y", y, 2);
  if (x.dim(0) != y.dim(0)) fail(fn, "x and y must have the same number of rows");
  const int64_t m = x.dim(0), a = x.dim(1), b = y.dim(1);
  Array out = Array::empty({m, a + b}, DType::f32);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < a; ++j) out.set(i * (a + b) + j, x.get(i * a + j));
    for (int64_t j = 0; j < b; ++j) out.set(i * (a + b) + a + j, y.get(i * b + j));
  }
  return out;
}

Array grouped_gemm(const Array& x, const Array& w, const Array& offsets) {
  const char* fn = "grouped_gemm";
  check_float(fn, "x", x);
  check_float(fn, "w", w);
  check_rank(fn, "x", x, 2);
  check_rank(fn, "w", w, 3);
  const int64_t m = x.dim(0), k = x.dim(1), g = w.dim(0), n = w.dim(2);
  if (w.dim(1) != k) fail(fn, "w must be [G, K, N] with x's K");
  if (!offsets.defined() || !is_integer(offsets.dtype()) || offsets.numel() != g + 1)
    fail(fn, "offsets must be G + 1 integers");
  Array out = Array::zeros({m, n}, DType::f32);
  for (int64_t grp = 0; grp < g; ++grp) {
    const auto lo = static_cast<int64_t>(offsets.get(grp)), hi = static_cast<int64_t>(offsets.get(grp + 1));
    if (lo < 0 || hi < lo || hi > m) fail(fn, "offsets must be non-decreasing within [0, M]");
    for (int64_t r = lo; r < hi; ++r)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += x.get(r * k + p) * w.get((grp * k + p) * n + j);
        out.set(r * n + j, s);
      }
  }
  return out;
}

Array segment_sum(const Array& x, const Array& ids, int64_t num_segments) {
  const char* fn = "segment_sum";
  check_float(fn, "x", x);
  check_rank(fn, "x", x, 2);
  const int64_t n = x.dim(0), d = x.dim(1);
  if (!ids.defined() || !is_integer(ids.dtype()) || ids.numel() != n) fail(fn, "ids must be N integers");
  // Accumulated in double, by id (a histogram), not by any scan.
  std::vector<double> acc(static_cast<size_t>(num_segments * d), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const auto s = static_cast<int64_t>(ids.get(i));
    if (s < 0 || s >= num_segments) fail(fn, "an id is outside [0, num_segments)");
    for (int64_t j = 0; j < d; ++j) acc[static_cast<size_t>(s * d + j)] += x.get(i * d + j);
  }
  Array out = Array::zeros({num_segments, d}, DType::f32);
  for (int64_t k = 0; k < num_segments * d; ++k) out.set(k, acc[static_cast<size_t>(k)]);
  return out;
}

Array segment_cumsum(const Array& x, const Array& ids) {
  const char* fn = "segment_cumsum";
  check_float(fn, "x", x);
  check_rank(fn, "x", x, 2);
  const int64_t n = x.dim(0), d = x.dim(1);
  if (!ids.defined() || !is_integer(ids.dtype()) || ids.numel() != n) fail(fn, "ids must be N integers");
  // Accumulated in double, row by row, restarting where the id changes.
  std::vector<double> run(static_cast<size_t>(d), 0.0);
  Array out = Array::zeros({n, d}, DType::f32);
  for (int64_t i = 0; i < n; ++i) {
    const bool restart = i == 0 || ids.get(i) != ids.get(i - 1);
    for (int64_t j = 0; j < d; ++j) {
      auto& r = run[static_cast<size_t>(j)];
      r = (restart ? 0.0 : r) + x.get(i * d + j);
      out.set(i * d + j, r);
    }
  }
  return out;
}

Array cross_entropy_ignore_index(const Array& logits, const Array& labels, int64_t ignore_index) {
  const char* fn = "cross_entropy_ignore_index";
  check_float(fn, "logits", logits);
  check_rank(fn, "logits", logits, 2);
  if (!labels.defined() || !is_integer(labels.dtype())) fail(fn, "labels must be i32/i64");
  const int64_t rows = logits.dim(0), v = logits.dim(1);
  if (labels.rank() != 1 || labels.dim(0) != rows) fail(fn, "labels must have shape [" + std::to_string(rows) + "]");
  Array out = Array::empty({rows}, DType::f32);
  for (int64_t i = 0; i < rows; ++i) {
    const auto lab = static_cast<int64_t>(labels.get(i));
    if (lab == ignore_index) {
      out.set(i, 0.0);
      continue;
    }
    if (lab < 0 || lab >= v)
      fail(fn, "label " + std::to_string(lab) + " at row " + std::to_string(i) + " is out of range [0, " +
                   std::to_string(v) + ") and is not the ignored " + std::to_string(ignore_index));
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < v; ++j) mx = std::max(mx, logits.get(i * v + j));
    double sum = 0;
    for (int64_t j = 0; j < v; ++j) sum += std::exp(logits.get(i * v + j) - mx);
    out.set(i, mx + std::log(sum) - logits.get(i * v + lab));
  }
  return out;
}

namespace {
// Philox-4x32-10 (Salmon et al., Random123): counter (offset lo, offset hi, 0, 0), key (seed lo,
// seed hi); its first output word as Triton's uniform: a signed word, negatives folded to -w - 1,
// times 4.6566127342e-10 in f32.
float philox_uniform(int64_t seed, int64_t offset) {
  uint32_t ctr[4] = {static_cast<uint32_t>(offset), static_cast<uint32_t>(static_cast<uint64_t>(offset) >> 32), 0, 0};
  uint32_t key[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(static_cast<uint64_t>(seed) >> 32)};
  for (int round = 0; round < 10; ++round) {
    const uint64_t a = uint64_t{0xD2511F53} * ctr[0], b = uint64_t{0xCD9E8D57} * ctr[2];
    const uint32_t next[4] = {static_cast<uint32_t>(b >> 32) ^ ctr[1] ^ key[0], static_cast<uint32_t>(b),
                              static_cast<uint32_t>(a >> 32) ^ ctr[3] ^ key[1], static_cast<uint32_t>(a)};
    std::copy(next, next + 4, ctr);
    key[0] += 0x9E3779B9u;
    key[1] += 0xBB67AE85u;
  }
  int64_t w = static_cast<int32_t>(ctr[0]);
  if (w < 0) w = -w - 1;
  return static_cast<float>(w) * 4.6566127342e-10f;
}
}  // namespace

Array dropout(const Array& x, double p, int64_t seed) {
  const char* fn = "dropout";
  check_float(fn, "x", x);
  check_rank(fn, "x", x, 2);
  Array out = Array::empty(x.shape(), DType::f32);
  const float pf = static_cast<float>(p);
  for (int64_t i = 0; i < x.numel(); ++i)
    out.set(i, philox_uniform(seed, i) >= pf ? x.get(i) / (1.0 - static_cast<double>(pf)) : 0.0);
  return out;
}

Array jagged_mean(const Array& values, const Array& offsets) {
  const char* fn = "jagged_mean";
  check_float(fn, "values", values);
  check_rank(fn, "values", values, 2);
  if (!offsets.defined() || !is_integer(offsets.dtype()) || offsets.rank() != 1 || offsets.numel() < 1)
    fail(fn, "offsets must be B + 1 integers");
  const int64_t t = values.dim(0), m = values.dim(1), b = offsets.numel() - 1;
  Array out = Array::zeros({b, m}, DType::f32);
  for (int64_t g = 0; g < b; ++g) {
    const auto lo = static_cast<int64_t>(offsets.get(g)), hi = static_cast<int64_t>(offsets.get(g + 1));
    if (lo < 0 || hi < lo || hi > t) fail(fn, "offsets must be non-decreasing within [0, T]");
    for (int64_t j = 0; j < m; ++j) {
      double s = 0;
      for (int64_t r = lo; r < hi; ++r) s += values.get(r * m + j);
      out.set(g * m + j, hi > lo ? s / static_cast<double>(hi - lo) : 0.0);
    }
  }
  return out;
}

Array moe_matmul(const Array& x, const Array& w, const Array& ids, const Array& gates, const Array& offsets) {
  const char* fn = "moe_matmul";
  check_float(fn, "x", x);
  check_float(fn, "w", w);
  check_rank(fn, "x", x, 2);
  check_rank(fn, "w", w, 3);
  const int64_t t = x.dim(0), k = x.dim(1), e = w.dim(0), n = w.dim(2), slots = ids.numel();
  if (w.dim(1) != k) fail(fn, "w must be [E, K, N] with x's K");
  if (!is_integer(ids.dtype()) || !is_integer(offsets.dtype()) || offsets.numel() != e + 1 || gates.numel() != slots)
    fail(fn, "ids [S] and offsets [E + 1] are integers, gates [S]");
  const std::vector<float> xf = x.to_floats(), wf = w.to_floats();
  std::vector<double> acc(static_cast<size_t>(t * n), 0.0);
  for (int64_t ex = 0; ex < e; ++ex) {
    const auto lo = static_cast<int64_t>(offsets.get(ex)), hi = static_cast<int64_t>(offsets.get(ex + 1));
    if (lo < 0 || hi < lo || hi > slots) fail(fn, "offsets must be non-decreasing within [0, S]");
    for (int64_t s = lo; s < hi; ++s) {
      const auto tok = static_cast<int64_t>(ids.get(s));
      if (tok < 0 || tok >= t) fail(fn, "token id " + std::to_string(tok) + " out of range");
      const double g = gates.get(s);
      for (int64_t p = 0; p < k; ++p) {
        const double a = g * xf[static_cast<size_t>(tok * k + p)];
        const float* wr = wf.data() + (ex * k + p) * n;
        for (int64_t j = 0; j < n; ++j) acc[static_cast<size_t>(tok * n + j)] += a * wr[j];
      }
    }
  }
  Array out = Array::empty({t, n}, DType::f32);
  for (int64_t i = 0; i < t * n; ++i) out.set(i, acc[static_cast<size_t>(i)]);
  return out;
}

namespace {
// Every shard floating, contiguous and of one shape; returns it.
const Shape& shard_shape(const char* fn, const std::vector<Array>& shards) {
  if (shards.empty()) fail(fn, "no shards");
  for (const Array& s : shards) {
    check_float(fn, "a shard", s);
    if (s.shape() != shards[0].shape())
      fail(fn, "shards differ in shape: " + shape_to_string(s.shape()) + " and " + shape_to_string(shards[0].shape()));
  }
  return shards[0].shape();
}
}  // namespace

Array all_gather(const std::vector<Array>& shards) {
  const Shape& s = shard_shape("all_gather", shards);
  if (s.size() != 2) fail("all_gather", "shards must be [m, k]");
  const int64_t per = s[0] * s[1], n = static_cast<int64_t>(shards.size());
  Array out = Array::empty({n * s[0], s[1]}, DType::f32);
  for (int64_t d = 0; d < n; ++d)
    for (int64_t i = 0; i < per; ++i) out.set(d * per + i, shards[static_cast<size_t>(d)].get(i));
  return out;
}

Array all_reduce(const std::vector<Array>& shards) {
  const Shape& s = shard_shape("all_reduce", shards);
  Array out = Array::empty(s, DType::f32);
  for (int64_t i = 0; i < out.numel(); ++i) {
    double acc = 0;
    for (const Array& x : shards) acc += x.get(i);
    out.set(i, acc);
  }
  return out;
}

}  // namespace parhelion::ref

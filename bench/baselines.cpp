#include "bench/baselines.h"

#include "parhelion/array.h"
#include "runtime/gemm/amx.h"
#include "runtime/gemm/throughput.h"
#include "runtime/thread_pool.h"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "baselines_missing.h"  // PH_OPENBLAS_MISSING, PH_ONEDNN_MISSING (CMakeLists.txt)
#ifdef PH_HAVE_OPENBLAS
#include <cblas.h>
#endif
#ifdef PH_HAVE_ONEDNN
#include <omp.h>

#include <dnnl.hpp>
#endif

namespace parhelion::bench {

bool have_openblas() {
#ifdef PH_HAVE_OPENBLAS
  return true;
#else
  return false;
#endif
}

bool have_onednn() {
#ifdef PH_HAVE_ONEDNN
  return true;
#else
  return false;
#endif
}

std::vector<MissingBaseline> missing_baselines() {
  std::vector<MissingBaseline> missing;
#ifdef PH_OPENBLAS_MISSING
  missing.push_back({"openblas", PH_OPENBLAS_MISSING});
#endif
#ifdef PH_ONEDNN_MISSING
  missing.push_back({"onednn", PH_ONEDNN_MISSING});
#endif
  return missing;
}

std::string openblas_config() {
#ifdef PH_HAVE_OPENBLAS
  return openblas_get_config();
#else
  return "absent";
#endif
}

std::string openblas_core() {
#ifdef PH_HAVE_OPENBLAS
  return openblas_get_corename();
#else
  return "absent";
#endif
}

std::string best_openblas_coretype(const std::string& host_features, const std::string& detected) {
  auto has = [&](const char* f) {
    return (" " + host_features + " ").find(std::string(" ") + f + " ") != std::string::npos;
  };
  auto one_of = [&](std::initializer_list<const char*> cores) {
    std::string d = detected;
    for (char& c : d) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (const char* c : cores)
      if (d == c) return true;
    return false;
  };
  if (detected == "absent") return "";
  // (every CPU with AVX-512 BW has DQ and VL too, which SkylakeX's kernels use; Knights Landing's
  // AVX-512 has neither BW nor them)
  if (has("avx512f") && has("avx512bw")) return one_of({"skylakex", "cooperlake", "sapphirerapids"}) ? "" : "SkylakeX";
  if (has("avx2") && has("fma"))
    return one_of({"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids"}) ? "" : "Haswell";
  return "";
}

std::string openblas_core_note() {
  const char* from = std::getenv("PH_OPENBLAS_DETECTED");
  return from ? std::string("set by parhelion: OpenBLAS detected ") + from + " on this CPU" : "";
}

void openblas_sgemm(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c, int threads) {
#ifdef PH_HAVE_OPENBLAS
  openblas_set_num_threads(threads);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
              1.0f, a, static_cast<int>(k), b, static_cast<int>(n), 0.0f, c, static_cast<int>(n));
#else
  (void)m, (void)n, (void)k, (void)a, (void)b, (void)c, (void)threads;
  throw std::runtime_error("built without OpenBLAS");
#endif
}

#ifdef PH_HAVE_ONEDNN
struct OneDnnMatmul::State {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  dnnl::matmul prim;
  dnnl::memory a, b, c;
  std::string impl;
};

OneDnnMatmul::OneDnnMatmul(int64_t m, int64_t n, int64_t k, bool bf16, const void* a, const void* b, float* c)
    : s_(new State) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  dt in = bf16 ? dt::bf16 : dt::f32;
  dnnl::memory::desc ad({m, k}, in, tag::ab), bd({k, n}, in, tag::ab), cd({m, n}, dt::f32, tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, cd), s_->engine);
  s_->impl = pd.impl_info_str();
  s_->prim = dnnl::matmul(pd);
  s_->a = dnnl::memory(ad, s_->engine, const_cast<void*>(a));
  s_->b = dnnl::memory(bd, s_->engine, const_cast<void*>(b));
  s_->c = dnnl::memory(cd, s_->engine, c);
}
OneDnnMatmul::~OneDnnMatmul() { delete s_; }
void OneDnnMatmul::run(int threads) {
  omp_set_num_threads(threads);
  s_->prim.execute(s_->stream, {{DNNL_ARG_SRC, s_->a}, {DNNL_ARG_WEIGHTS, s_->b}, {DNNL_ARG_DST, s_->c}});
  s_->stream.wait();
}
std::string OneDnnMatmul::impl() const { return s_->impl; }
bool OneDnnMatmul::available(bool bf16) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  const dt in = bf16 ? dt::bf16 : dt::f32;
  const dnnl::memory::dim n = 64;
  try {
    dnnl::engine engine{dnnl::engine::kind::cpu, 0};
    dnnl::memory::desc ad({n, n}, in, tag::ab), cd({n, n}, dt::f32, tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, ad, cd), engine);
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}
#else
struct OneDnnMatmul::State {};
OneDnnMatmul::OneDnnMatmul(int64_t, int64_t, int64_t, bool, const void*, const void*, float*) : s_(nullptr) {
  throw std::runtime_error("built without oneDNN");
}
OneDnnMatmul::~OneDnnMatmul() = default;
void OneDnnMatmul::run(int) {}
std::string OneDnnMatmul::impl() const { return "absent"; }
bool OneDnnMatmul::available(bool) { return false; }
#endif

namespace {

constexpr int64_t kIters = 20'000'000;     // vector loops: tens of milliseconds
constexpr int64_t kTileIters = 1'000'000;  // 4 million tile products: a few milliseconds

bool has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}

bool has_bf16() {
  unsigned a, b, c, d;
  return has_avx512() && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5));
}

double run_threads(int threads, float (*loop)(int64_t), double flops_per_iter, int64_t iters = kIters) {
  std::vector<std::thread> ts;
  auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([loop, iters] {
      volatile float s = loop(iters);
      (void)s;
    });
  for (auto& t : ts) t.join();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return flops_per_iter * iters * threads / s / 1e9;
}

}  // namespace

// The best of three runs: a peak is a ceiling, and a run can only lose to noise.
double fma_peak_f32(int threads) {
  double best = 0;
  for (int i = 0; i < 3; ++i)
    best = std::max(best, has_avx512() ? run_threads(threads, runtime::f32_fma_avx512_loop, runtime::kF32FmaAvx512Flops)
                                       : run_threads(threads, runtime::f32_fma_avx2_loop, runtime::kF32FmaAvx2Flops));
  return best;
}

double fma_peak_bf16(int threads) {
  double best = 0;
  for (int i = 0; has_bf16() && i < 3; ++i)
    best = std::max(best, run_threads(threads, runtime::bf16_dot_avx512_loop, runtime::kBf16DotAvx512Flops));
  return best;
}

double tile_peak_bf16(int threads) {
  double best = 0;
  for (int i = 0; runtime::amx_bf16_available() && i < 3; ++i)
    best = std::max(best, run_threads(threads, runtime::amx_tile_loop, runtime::kAmxTileFlops, kTileIters));
  return best;
}

double MemoryRoof::gbps() const { return std::max({copy, stream_copy, triad, read}); }
const char* MemoryRoof::kind() const {
  return gbps() == copy ? "copy" : gbps() == stream_copy ? "stream copy" : gbps() == triad ? "triad" : "read";
}

void MemoryRoof::keep_best(const MemoryRoof& other) {
  copy = std::max(copy, other.copy);
  stream_copy = std::max(stream_copy, other.stream_copy);
  triad = std::max(triad, other.triad);
  read = std::max(read, other.read);
}

namespace {

// A[lo, hi) = B[lo, hi) with non-temporal stores of 16 floats, B prefetched 4 KiB ahead: what a
// kernel's "stream+prefetch" cache hint does. On an AMD EPYC Zen 3 at 2 threads, 16-byte stores
// without the prefetch ran 26-28 GB/s, 32-byte stores with it 32-34, as rms_norm did (33-37).
template <class Store16>
__attribute__((always_inline)) inline void stream_copy_with(float* A, const float* B, int64_t lo, int64_t hi,
                                                            Store16 store16) {
  int64_t i = lo;
  for (; i < hi && reinterpret_cast<uintptr_t>(A + i) % 64 != 0; ++i) A[i] = B[i];
  for (; i + 16 <= hi; i += 16) {
    // (Past the range, the next thread's lines or past the array: a hint, which never faults.)
    _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(B + i) + 4096), _MM_HINT_T0);
    store16(A + i, B + i);
  }
  for (; i < hi; ++i) A[i] = B[i];
  _mm_sfence();
}

__attribute__((target("avx512f"))) void stream_copy_avx512(float* A, const float* B, int64_t lo, int64_t hi) {
  stream_copy_with(
      A, B, lo, hi,
      [](float* a, const float* b) __attribute__((target("avx512f"))) { _mm512_stream_ps(a, _mm512_loadu_ps(b)); });
}

__attribute__((target("avx"))) void stream_copy_avx(float* A, const float* B, int64_t lo, int64_t hi) {
  stream_copy_with(
      A, B, lo, hi, [](float* a, const float* b) __attribute__((target("avx"))) {
        _mm256_stream_ps(a, _mm256_loadu_ps(b));
        _mm256_stream_ps(a + 8, _mm256_loadu_ps(b + 8));
      });
}

void stream_copy(float* A, const float* B, int64_t lo, int64_t hi) {
  if (__builtin_cpu_supports("avx512f")) return stream_copy_avx512(A, B, lo, hi);
  if (__builtin_cpu_supports("avx")) return stream_copy_avx(A, B, lo, hi);
  stream_copy_with(A, B, lo, hi, [](float* a, const float* b) {
    for (int j = 0; j < 16; j += 4) _mm_stream_ps(a + j, _mm_loadu_ps(b + j));
  });
}

}  // namespace

MemoryRoof memory_roof(int threads) {
  const int64_t n = int64_t{16} << 20;  // 64 MiB per array
  Array a = Array::full({n}, 1.0, DType::f32), b = Array::full({n}, 2.0, DType::f32),
        c = Array::full({n}, 0.5, DType::f32);
  float *A = a.data_as<float>(), *B = b.data_as<float>(), *C = c.data_as<float>();
  // The best of 10 runs of `body(thread)` over the arrays, as GB/s of `arrays` arrays moved.
  auto best_gbps = [&](int arrays, const std::function<void(int64_t lo, int64_t hi, int t)>& body) {
    double best = 0;
    for (int rep = 0; rep < 10; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      runtime::parallel_run(threads, [&](int t) { body(n * t / threads, n * (t + 1) / threads, t); });
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::max(best, arrays * n * 4.0 / s / 1e9);
    }
    return best;
  };
  MemoryRoof r;
  r.copy = best_gbps(2, [&](int64_t lo, int64_t hi, int) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) A[i] = B[i];
  });
  r.stream_copy = best_gbps(2, [&](int64_t lo, int64_t hi, int) { stream_copy(A, B, lo, hi); });
  r.triad = best_gbps(3, [&](int64_t lo, int64_t hi, int) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) A[i] = B[i] + 3.0f * C[i];
  });
  std::vector<double> sums(static_cast<size_t>(threads));
  r.read = best_gbps(1, [&](int64_t lo, int64_t hi, int t) {
    // 64 partial sums: one running sum is bound by the add's latency (4 cycles a vector, about
    // 7 GB/s on two cores of an Intel Xeon), not by memory; 64 keep every vector register busy
    // whatever width this file is compiled for.
    float acc[64] = {};
    int64_t i = lo;
    for (; i + 64 <= hi; i += 64)
#pragma omp simd
      for (int j = 0; j < 64; ++j) acc[j] += B[i + j];
    for (; i < hi; ++i) acc[0] += B[i];
    float s = 0;
    for (float part : acc) s += part;
    sums[static_cast<size_t>(t)] = s;  // (kept: the sum is read below)
  });
  volatile double sink = sums[0];
  (void)sink;
  return r;
}

}  // namespace parhelion::bench

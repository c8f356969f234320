// Vendor-library baselines for the matmul benchmarks, measured in the same process as
// Parhelion: OpenBLAS sgemm and oneDNN matmul (f32 and bf16 -> f32), each at a chosen thread
// count; and the machine's FMA peak, from a register-only microbenchmark.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace parhelion::bench {

bool have_openblas();
bool have_onednn();
// The baselines this build lacks, each with why (from configure), for `parhelion bench` to say.
struct MissingBaseline {
  std::string name, why;
};
std::vector<MissingBaseline> missing_baselines();
// What OpenBLAS says it is (openblas_get_config: version, core, threading), or "absent".
std::string openblas_config();
std::string openblas_core();  // the kernel set OpenBLAS picked, e.g. "Cooperlake"
// The kernel set to make OpenBLAS run on this host (OPENBLAS_CORETYPE), or "" to keep `detected`:
// OpenBLAS's own detection misses CPUs newer than its release (0.3.21 runs its generic Prescott
// kernels on a Xeon with AVX-512), so a generic set on a host with AVX-512 (F and BW) becomes
// SkylakeX, and on one with AVX2 and FMA, Haswell. `host_features` as Host::detect() gives them.
std::string best_openblas_coretype(const std::string& host_features, const std::string& detected);
// What `parhelion bench` did about OpenBLAS's kernel set, for its output: "" when nothing, else
// e.g. "set by parhelion: OpenBLAS detected Prescott on this CPU".
std::string openblas_core_note();

// C[M,N] = A[M,K] . B[K,N], row-major f32.
void openblas_sgemm(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c, int threads);

// A oneDNN matmul primitive: src [M,K] and weights [K,N] in f32 or bf16, dst f32.
class OneDnnMatmul {
 public:
  OneDnnMatmul(int64_t m, int64_t n, int64_t k, bool bf16, const void* a, const void* b, float* c);
  ~OneDnnMatmul();
  void run(int threads);
  std::string impl() const;  // the implementation oneDNN chose, e.g. "brg:avx512_core"
  // Whether oneDNN has a matmul for these operands on this host: oneDNN 2.x has none for bf16
  // below AVX-512 (an AVX2-only Zen 1 refused it), and constructing one then throws.
  static bool available(bool bf16);

 private:
  struct State;
  State* s_;
};

// Whether a baseline's first round settles its ratio, so that later rounds skip it: a call over a
// second and 20 times Parhelion's (torch's scalar bf16 GEMM on a host without a bf16 dot
// instruction: a minute and more a call at 2048^3, where another round would cost minutes). One
// second is the call the torch server times once (SLOW_CALL_MS in bench/torch_server.py).
constexpr double kSlowCallMs = 1000.0;
inline bool settled_in_one_round(double baseline_first_ms, double ours_first_ms) {
  return baseline_first_ms > kSlowCallMs && baseline_first_ms > 20 * ours_first_ms;
}

// Peak FMA throughput in GFLOP/s on `threads` threads: f32 (AVX-512 or AVX2) and bf16
// (vdpbf16ps; 0 where absent).
double fma_peak_f32(int threads);
// The memory roof the benchmarks compare against, in GB/s at `threads` threads of the runtime's
// pool, over 64 MiB arrays: the best of copy (a = b, 2 arrays moved), stream copy (the same with
// non-temporal stores, 2), STREAM triad (a = b + s*c, 3) and read (a sum over one array, 1), each
// the best of 10 runs, measured together, since which one a host runs fastest differs (an Intel
// Xeon here: copy 51.5 GB/s, triad 28-40).
struct MemoryRoof {
  // stream_copy: a copy whose stores bypass the caches, as the kernels' stream hint stores: it
  // moves the bytes it counts, where a plain copy's stores first read each line they write (half
  // again the traffic it counts; a triad's, a third more).
  double copy = 0, stream_copy = 0, triad = 0, read = 0;
  double gbps() const;
  const char* kind() const;                 // "copy", "stream copy", "triad" or "read": the best
  void keep_best(const MemoryRoof& other);  // each bandwidth's best of the two (a re-measure)
};
MemoryRoof memory_roof(int threads);
double fma_peak_bf16(int threads);
// Peak bf16 throughput of the AMX tiles (TDPBF16PS) in GFLOP/s on `threads` threads; 0 where the
// process cannot use AMX.
double tile_peak_bf16(int threads);

}  // namespace parhelion::bench

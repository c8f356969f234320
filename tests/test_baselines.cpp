// The benchmarks' baselines: which OpenBLAS kernel set a host should run, and the memory roof
// as the best of three bandwidths measured together (docs/benchmarks.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/baselines.h"

namespace bench = parhelion::bench;

namespace {

// OpenBLAS's detection misses CPUs newer than its release and falls back to generic kernels:
// those become the best set the host's ISA supports; a set it detected itself is kept.
TEST(Baselines, OpenBlasRunsTheBestKernelSetTheHostSupports) {
  const std::string avx512 = "avx2 fma avx512f avx512bw avx512bf16", avx2 = "avx2 fma";
  EXPECT_EQ(bench::best_openblas_coretype(avx512, "Prescott"), "SkylakeX");
  EXPECT_EQ(bench::best_openblas_coretype(avx512, "Haswell"), "SkylakeX");
  EXPECT_EQ(bench::best_openblas_coretype(avx512, "Cooperlake"), "");
  EXPECT_EQ(bench::best_openblas_coretype(avx512, "SkylakeX"), "");
  EXPECT_EQ(bench::best_openblas_coretype(avx2, "Prescott"), "Haswell");
  EXPECT_EQ(bench::best_openblas_coretype(avx2, "Zen"), "");
  EXPECT_EQ(bench::best_openblas_coretype("", "Prescott"), "");  // nothing better to offer
  EXPECT_EQ(bench::best_openblas_coretype(avx512, "absent"), "");
  // (AVX-512 without BW, as on Knights Landing, cannot run SkylakeX's kernels)
  EXPECT_EQ(bench::best_openblas_coretype("avx2 fma avx512f", "Prescott"), "Haswell");
}

TEST(Baselines, MemoryRoofIsTheBestOfCopyTriadAndRead) {
  const bench::MemoryRoof r = bench::memory_roof(1);
  EXPECT_GT(r.copy, 0);
  EXPECT_GT(r.triad, 0);
  EXPECT_GT(r.read, 0);
  EXPECT_EQ(r.gbps(), std::max({r.copy, r.triad, r.read}));
  const std::string kind = r.kind();
  EXPECT_TRUE(kind == "copy" || kind == "triad" || kind == "read") << kind;
}

// A matmul oneDNN does not have on this host (bf16 below AVX-512, in oneDNN 2.x) is reported
// unavailable, not thrown from the constructor in the middle of a benchmark; one it has runs.
TEST(Baselines, OneDnnSaysWhetherItHasAMatmulForTheOperands) {
  if (!bench::have_onednn()) GTEST_SKIP() << "built without oneDNN";
  EXPECT_TRUE(bench::OneDnnMatmul::available(false));  // f32: every x86-64 host
  for (bool bf16 : {false, true}) {
    std::vector<uint16_t> a(8 * 4, 0x3f80), b(4 * 8, 0x3f80);  // bf16 ones
    std::vector<float> af(8 * 4, 1.0f), bf(4 * 8, 1.0f), c(8 * 8, 0.0f);
    const void* pa = bf16 ? static_cast<const void*>(a.data()) : af.data();
    const void* pb = bf16 ? static_cast<const void*>(b.data()) : bf.data();
    if (!bench::OneDnnMatmul::available(bf16)) {  // the probe and the constructor agree
      EXPECT_ANY_THROW(bench::OneDnnMatmul(8, 8, 4, bf16, pa, pb, c.data())) << "bf16";
      continue;
    }
    bench::OneDnnMatmul mm(8, 8, 4, bf16, pa, pb, c.data());
    mm.run(1);
    for (float x : c) EXPECT_EQ(x, 4.0f) << (bf16 ? "bf16" : "f32");
  }
}

}  // namespace

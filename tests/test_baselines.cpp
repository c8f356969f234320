// The benchmarks' baselines: which OpenBLAS kernel set a host should run, the memory roof as the
// best of three bandwidths measured together, and a memory-bound row's compute bound
// (docs/benchmarks.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/host.h"
#include "bench/baselines.h"
#include "bench/compute_bound.h"
#include "kernels/registry.h"

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

TEST(Baselines, MemoryRoofIsTheBestOfCopyStreamCopyTriadAndRead) {
  const bench::MemoryRoof r = bench::memory_roof(1);
  EXPECT_GT(r.copy, 0);
  EXPECT_GT(r.stream_copy, 0);
  EXPECT_GT(r.triad, 0);
  EXPECT_GT(r.read, 0);
  EXPECT_EQ(r.gbps(), std::max({r.copy, r.stream_copy, r.triad, r.read}));
  const std::string kind = r.kind();
  EXPECT_TRUE(kind == "copy" || kind == "stream copy" || kind == "triad" || kind == "read") << kind;
  // Each bandwidth sets the roof, and names it, where it is the best; a re-measure keeps each
  // one's best.
  const std::pair<double bench::MemoryRoof::*, const char*> bandwidths[] = {
      {&bench::MemoryRoof::copy, "copy"},
      {&bench::MemoryRoof::stream_copy, "stream copy"},
      {&bench::MemoryRoof::triad, "triad"},
      {&bench::MemoryRoof::read, "read"}};
  for (const auto& [best, name] : bandwidths) {
    bench::MemoryRoof one;
    one.copy = one.stream_copy = one.triad = one.read = 5;
    one.*best = 10;
    EXPECT_EQ(one.gbps(), 10);
    EXPECT_STREQ(one.kind(), name);
    bench::MemoryRoof kept = r;
    kept.keep_best(one);
    EXPECT_EQ(kept.*best, std::max(r.*best, 10.0)) << name;
    EXPECT_EQ(kept.gbps(), std::max(r.gbps(), 10.0)) << name;
  }
}

// The compute bound runs the kernel at a shape whose bytes fit half a core's L2 (this host's),
// shrunk from the first dim (a row kernel keeps its rows) or from a given starting shape, and
// scales its time by the bytes and threads; it refuses a kernel whose inputs do not shrink with
// what it moves (embedding's table).
TEST(Baselines, ComputeBoundsRunTheKernelAtACacheResidentShape) {
  namespace ph = parhelion;
  const double budget = static_cast<double>(ph::backend::cpu::Host::detect().fast_memory_bytes) / 2;
  std::string why;
  const ph::kernels::KernelEntry& rms = ph::kernels::find_kernel("rms_norm");
  const ph::Shape shape = {8192, 2048};
  const auto b = bench::measure_compute_bound(rms, shape, ph::DType::bf16, 2, std::nullopt, &why);
  ASSERT_TRUE(b.has_value()) << why;
  ASSERT_EQ(b->shape.size(), 2u);
  EXPECT_EQ(b->shape[1], 2048);  // whole rows
  EXPECT_LE(rms.bytes(b->shape, ph::DType::bf16), budget);
  EXPECT_GT(rms.bytes({b->shape[0] * 2, 2048}, ph::DType::bf16), budget);  // the largest such
  EXPECT_GT(b->ms, 0);
  const double scale = rms.bytes(shape, ph::DType::bf16) / rms.bytes(b->shape, ph::DType::bf16) / 2;
  EXPECT_NEAR(b->ms_scaled, b->ms * scale, 1e-9 * b->ms_scaled);
  EXPECT_TRUE(b->ipc == 0 || b->instructions_per_element > 0);  // counters, where the host has them

  const ph::kernels::KernelEntry& seg = ph::kernels::find_kernel("segment_sum");
  const auto s =
      bench::measure_compute_bound(seg, {131072, 256, 2048}, ph::DType::f32, 2, ph::Shape{1024, 256, 16}, &why);
  ASSERT_TRUE(s.has_value()) << why;
  EXPECT_EQ(s->shape[1], 256);
  EXPECT_EQ(s->shape[2], 16);
  EXPECT_LE(s->shape[0], 1024);

  const ph::kernels::KernelEntry& emb = ph::kernels::find_kernel("embedding");
  EXPECT_FALSE(bench::measure_compute_bound(emb, {16384, 32000, 1024}, ph::DType::f32, 2, std::nullopt, &why));
  EXPECT_NE(why.find("not cache-resident"), std::string::npos) << why;
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

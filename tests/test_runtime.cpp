// The runtime: arrays, dtype conversions, the recycling allocator and the thread pool.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <set>
#include <vector>

#include "parhelion/array.h"
#include "parhelion/error.h"
#include "runtime/allocator.h"
#include "runtime/step_queue.h"
#include "runtime/thread_pool.h"

namespace ph = parhelion;

TEST(Array, ShapesStridesAndConversions) {
  ph::Array a = ph::Array::from_floats({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  EXPECT_EQ(a.strides(), (ph::Shape{3, 1}));
  EXPECT_TRUE(a.is_contiguous());
  EXPECT_EQ(a.get(4), 5);
  ph::Array t = ph::Array::wrap(a.data(), {3, 2}, {1, 3}, ph::DType::f32);  // transposed view
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.get(1), 4);
  EXPECT_EQ(t.clone().get(1), 4);
  ph::Array b = a.to(ph::DType::bf16);
  EXPECT_EQ(b.dtype(), ph::DType::bf16);
  EXPECT_EQ(b.get(5), 6);
  EXPECT_THROW(ph::Array::empty({-1}, ph::DType::f32), ph::UserError);
  EXPECT_EQ(ph::max_abs_diff(a, a.to(ph::DType::f16)), 0);
}

TEST(DType, RoundToNearestEven) {
  EXPECT_EQ(ph::f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(ph::bf16_to_f32(ph::f32_to_bf16(1.00390625f)), 1.0f);       // tie -> even
  EXPECT_EQ(ph::bf16_to_f32(ph::f32_to_bf16(1.01171875f)), 1.015625f);  // tie -> even (up)
  EXPECT_EQ(ph::f16_to_f32(ph::f32_to_f16(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(ph::f16_to_f32(ph::f32_to_f16(70000.0f))));
  EXPECT_EQ(ph::f16_to_f32(ph::f32_to_f16(5.9604645e-08f)), 5.9604645e-08f);  // smallest subnormal
  EXPECT_TRUE(std::isnan(ph::bf16_to_f32(ph::f32_to_bf16(NAN))));
  EXPECT_EQ(ph::parse_dtype("bfloat16"), ph::DType::bf16);
  EXPECT_FALSE(ph::parse_dtype("f64").has_value());
}

TEST(Allocator, RecyclesBlocksAndAligns) {
  auto before = ph::runtime::allocator_stats();
  void* first;
  {
    auto p = ph::runtime::allocate(3 << 20);
    first = p.get();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p.get()) % (2 << 20), 0u);  // huge-page aligned
  }
  auto q = ph::runtime::allocate(3 << 20);
  EXPECT_EQ(q.get(), first);
  auto after = ph::runtime::allocator_stats();
  EXPECT_GE(after.blocks_reused, before.blocks_reused + 1);
  auto small = ph::runtime::allocate(100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.get()) % 64, 0u);
}

TEST(ThreadPool, RunsEveryWorkerOnceAndPropagatesExceptions) {
  for (int n : {1, 2, 3, 8}) {
    std::atomic<int> mask{0};
    ph::runtime::parallel_run(n, [&](int id) { mask.fetch_or(1 << id); });
    EXPECT_EQ(mask.load(), (1 << n) - 1);
  }
  EXPECT_THROW(ph::runtime::parallel_run(2,
                                         [](int id) {
                                           if (id == 1) throw std::runtime_error("boom");
                                         }),
               std::runtime_error);
  std::atomic<int> count{0};
  for (int i = 0; i < 1000; ++i) ph::runtime::parallel_run(2, [&](int) { count++; });
  EXPECT_EQ(count.load(), 2000);
}

TEST(StepQueue, HandsOutEveryStepOnceInShrinkingRuns) {
  for (int threads : {1, 2, 3, 8}) {
    for (int64_t steps : {0, 1, 5, 64, 1000}) {
      ph::runtime::StepQueue queue(steps, threads);
      std::vector<std::atomic<int>> seen(steps);
      std::atomic<int64_t> first_claim{-1};
      ph::runtime::parallel_run(threads, [&](int) {
        for (auto r = queue.claim(); r.first < r.second; r = queue.claim()) {
          if (r.first == 0) first_claim = r.second;
          for (int64_t s = r.first; s < r.second; ++s) seen[s].fetch_add(1);
        }
      });
      for (int64_t s = 0; s < steps; ++s) ASSERT_EQ(seen[s].load(), 1) << steps << " steps, " << threads << " threads";
      // The first claim is a long run (half an even split), not a single step.
      if (steps > 0) {
        EXPECT_EQ(first_claim.load(), std::max<int64_t>(1, steps / (2 * threads)));
      }
      EXPECT_EQ(queue.claim().first, steps);
    }
  }
}

// The runtime: arrays, dtype conversions, the recycling allocator and the thread pool.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <set>

#include "parhelion/array.h"
#include "parhelion/error.h"
#include "runtime/allocator.h"
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

// Cache hints (lower/cache_hints.h): stores streamed past the caches and the next grid step's
// blocks prefetched change no value. Library and user kernels, rows that are not whole cache
// lines (so that rows start mid-line), ragged grids, 16-bit dtypes, 1 and 2 threads: every
// choice of the knob gives the bits of "none", and the reference's values. Also: where the knob is
// offered, what the default picks, and the error for a value out of its domain.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "driver/compiled_kernel_impl.h"
#include "kernels/registry.h"
#include "parhelion/parhelion.h"

#include "tests/user_error.h"

namespace ph = parhelion;

namespace {

bool same_bits(const ph::Array& a, const ph::Array& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.get(i), y = b.get(i);
    if (!(x == y || (x != x && y != y))) return false;
  }
  return true;
}

// `k` on `args` at two block-size choices across each domain, on 1 and then 2 threads, with every choice
// of its cache_hints knobs (the j-th of each, or its last): the outputs must be the bits of
// "none". Returns how many configs had a streamed store and a prefetch in their Block IR (so
// that a test cannot pass without exercising them).
struct HintsSeen {
  int streamed_stores = 0, prefetches = 0, trip_prefetches = 0;
};
template <class K>
HintsSeen check_streamed_is_cached(K& k, const std::vector<ph::Arg>& args) {
  HintsSeen seen;
  ph::CompiledKernel def = k.compile(args);
  const ph::ConfigSpec& spec = def.config_spec();
  EXPECT_FALSE(spec.cache_hints.empty()) << spec.describe();
  for (int trial = 0; trial < 2; ++trial) {
    ph::Config c = def.config();
    for (size_t i = 0; i < spec.block_sizes.size(); ++i) {
      const auto& ch = spec.block_sizes[i].choices;
      c.block_sizes[i] = ch[ch.size() - 1 - (trial * 2 + i) % ch.size()];  // from the largest down
    }
    c.num_threads = std::min(1 + trial % 2, spec.max_threads);
    std::vector<ph::Array> plain;
    for (size_t choice = 0; choice < 4; ++choice) {
      for (size_t i = 0; i < spec.cache_hints.size(); ++i) {
        const auto& ch = spec.cache_hints[i].choices;
        c.cache_hints[i] = ch[std::min(choice, ch.size() - 1)];
      }
      SCOPED_TRACE(c.to_json());
      ph::CompiledKernel ck = k.compile(args, &c);
      const std::vector<ph::Array> out = ck.run(args);
      const std::string block = ck.block_ir();
      if (choice == 0) {
        plain = out;
        EXPECT_EQ(block.find("streamed past the caches"), std::string::npos);
        EXPECT_EQ(block.find("next-step block"), std::string::npos);
        continue;
      }
      seen.streamed_stores += block.find("streamed past the caches") != std::string::npos;
      seen.prefetches += block.find("next-step block") != std::string::npos;
      seen.trip_prefetches += block.find("next-trip block") != std::string::npos;
      for (size_t i = 0; i < out.size(); ++i) EXPECT_TRUE(same_bits(plain[i], out[i]));
    }
  }
  return seen;
}

// A library kernel at `shape`: streamed equals cached, and matches the reference.
void check_library(const std::string& name, const ph::Shape& shape, ph::DType dt) {
  SCOPED_TRACE(name + " " + ph::shape_to_string(shape) + " " + std::string(ph::dtype_name(dt)));
  const ph::kernels::KernelEntry& e = ph::kernels::find_kernel(name);
  ph::kernels::Inputs in = e.make_inputs(shape, dt, 7);
  const HintsSeen seen = check_streamed_is_cached(*e.kernel, in.args());
  EXPECT_GT(seen.streamed_stores, 0);
  EXPECT_GT(seen.prefetches, 0);
  ph::CompiledKernel def = e.kernel->compile(in.args());
  ph::Config c = def.config();
  for (size_t i = 0; i < c.cache_hints.size(); ++i) c.cache_hints[i] = def.config_spec().cache_hints[i].choices.back();
  const std::vector<ph::Array> out = e.kernel->compile(in.args(), &c).run(in.args());
  const std::vector<ph::Array> want = e.reference(in);
  for (size_t i = 0; i < out.size(); ++i) {
    const ph::kernels::Closeness r = ph::kernels::compare(out[i], want[i], dt, e.tolerance(shape));
    EXPECT_TRUE(r.ok) << "max abs error " << r.max_abs_err;
  }
}

TEST(CacheHints, RowKernelsGiveTheSameBitsUnderEveryHint) {
  // 100 f32 (400 B) and 100 bf16 (200 B) rows start mid-line; 37 rows make a ragged last step.
  for (ph::DType dt : {ph::DType::f32, ph::DType::bf16}) {
    check_library("softmax", {37, 100}, dt);
    check_library("rms_norm", {37, 100}, dt);
    check_library("layer_norm", {21, 333}, dt);
    check_library("swiglu", {19, 130}, dt);
  }
  check_library("softmax", {9, 4100}, ph::DType::f32);  // rows over one 4 KiB row buffer chunk
}

// Rows of pairs (lower::row_group): rotary stores its rotated halves joined, each block row one
// run of 2 x its pairs; 65 pairs (520 bytes) start rows mid-line. Streamed, every config (blocks
// across their domains, ragged ones included, 1 and 2 threads) gives the cached values, f32 and
// bf16, forward and backward. Not always their bits: x0 c - x1 s has two fma contractions, and
// g++ picks one per loop shape in a ragged block's scalar tail (1 ulp apart at 65 pairs).
TEST(CacheHints, RowsOfPairsAreStreamedWhole) {
  for (const char* name : {"rotary", "rotary_backward"})
    for (ph::DType dt : {ph::DType::f32, ph::DType::bf16}) {
      const ph::kernels::KernelEntry& e = ph::kernels::find_kernel(name);
      ph::kernels::Inputs in = e.make_inputs({2, 5, 3, 130}, dt, 3);
      ph::CompiledKernel def = e.kernel->compile(in.args());
      const ph::ConfigSpec& spec = def.config_spec();
      int streamed = 0;
      for (int trial = 0; trial < 4; ++trial) {
        ph::Config c = def.config();
        for (size_t i = 0; i < spec.block_sizes.size(); ++i) {
          const auto& ch = spec.block_sizes[i].choices;
          c.block_sizes[i] = ch[ch.size() - 1 - (trial + i) % ch.size()];
        }
        c.num_threads = std::min(1 + trial % 2, spec.max_threads);
        c.cache_hints = {"none"};
        const ph::Array plain = e.kernel->compile(in.args(), &c).run(in.args())[0];
        c.cache_hints = {"stream"};
        SCOPED_TRACE(std::string(name) + " " + c.to_json());
        ph::CompiledKernel ck = e.kernel->compile(in.args(), &c);
        streamed += ck.block_ir().find("streamed past the caches") != std::string::npos;
        const ph::Array out = ck.run(in.args())[0];
        EXPECT_LE(ph::max_abs_diff(plain, out), dt == ph::DType::f32 ? 1e-6 : 1e-2);
        const ph::kernels::Closeness r = ph::kernels::compare(out, e.reference(in)[0], dt, e.tolerance({2, 5, 3, 130}));
        EXPECT_TRUE(r.ok) << "max abs error " << r.max_abs_err;
      }
      EXPECT_GE(streamed, 1) << name;
    }
}

// A 2-D grid: the rows of a block are tiles of the last dim (ragged in the last column of
// blocks), read through a view whose rows are longer than the block's.
ph::Tensor scale_shift(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m, n});
  for (auto [tm, tn] : ph::tile(m, n)) out[tm, tn] = x[tm, tn] * 2.0f + 1.0f;
  return out;
}

TEST(CacheHints, TiledRowsThroughAStridedViewGiveTheSameBitsUnderEveryHint) {
  ph::Kernel k("scale_shift", scale_shift);
  ph::Array wide = ph::Array::random({45, 300}, ph::DType::f32, 3);
  // columns 3..259 of each row: rows start 12 bytes into a line, 1200 bytes apart
  ph::Array x = ph::Array::wrap(static_cast<float*>(wide.data()) + 3, {45, 257}, {300, 1}, ph::DType::f32,
                                std::shared_ptr<void>(wide.data(), [keep = wide](void*) {}));
  const HintsSeen seen = check_streamed_is_cached(k, {x});
  EXPECT_GT(seen.streamed_stores, 0);
  EXPECT_GT(seen.prefetches, 0);
  ph::Config c = k.compile({x}).config();
  c.cache_hints = {"stream+prefetch"};
  const ph::Array out = k.compile({x}, &c).run({x}).at(0);
  for (int64_t i = 0; i < 45; ++i)
    for (int64_t j = 0; j < 257; ++j) {
      const float v = static_cast<float>(x.get(i * 257 + j));
      ASSERT_EQ(static_cast<float>(out.get(i * 257 + j)), v * 2.0f + 1.0f);  // (x * 2 is exact: fused or not)
    }
}

// In place: the launch reads the tensor it writes, so its store is not streamed (a line written
// past the caches would be read back from memory).
ph::Tensor add_one_in_place(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  for (auto tm : ph::tile(m)) x[tm, ph::all] = x[tm, ph::all] + 1.0f;
  return x;
}

TEST(CacheHints, AStoreToATensorTheLaunchReadsIsNotStreamed) {
  ph::Kernel k("add_one_in_place", add_one_in_place);
  ph::Array x = ph::Array::random({64, 256}, ph::DType::f32, 5);
  ph::CompiledKernel def = k.compile({x});
  ASSERT_EQ(def.config_spec().cache_hints.size(), 1u);
  EXPECT_EQ(def.config_spec().cache_hints[0].choices, (std::vector<std::string>{"none", "prefetch"}));
  ph::Config c = def.config();
  c.cache_hints = {"prefetch"};
  const std::string block = k.compile({x}, &c).block_ir();
  EXPECT_EQ(block.find("streamed past the caches"), std::string::npos) << block;
  EXPECT_HAS(block, "prefetch arg0's next-step block");
}

// A streamed inner loop whose block is read twice, the second time computing an exp (cross
// entropy's max, then its exp and sum, over 16384-wide column blocks): that statement prefetches
// the loop's next trip of the block. Every hint gives the bits of "none", ragged last trips and
// rows that start mid-line included; the default hints it where the logits exceed the caches.
TEST(CacheHints, AStreamedLoopPrefetchesItsNextTripWhereAnExpRereadsItsBlock) {
  for (ph::DType dt : {ph::DType::f32, ph::DType::bf16}) {
    SCOPED_TRACE(std::string(ph::dtype_name(dt)));
    const ph::kernels::KernelEntry& e = ph::kernels::find_kernel("cross_entropy");
    ph::kernels::Inputs in = e.make_inputs({6, 1000}, dt, 3);
    ph::CompiledKernel def = e.kernel->compile(in.args());
    ph::Config c = def.config();
    c.block_sizes[1] = 128;  // 8 trips, the last ragged; 1000 columns: rows start mid-line
    c.cache_hints = {"prefetch"};
    ph::CompiledKernel ck = e.kernel->compile(in.args(), &c);
    EXPECT_HAS(ck.block_ir(), "prefetch arg0's next-trip block of t1, by the sum at");
    EXPECT_HAS(ck.source(), "if (off_t1 + 128 < 1000)  // the next trip's arg0");
    const HintsSeen seen = check_streamed_is_cached(*e.kernel, in.args());
    EXPECT_GT(seen.trip_prefetches, 0);
    const std::vector<ph::Array> out = ck.run(in.args()), want = e.reference(in);
    const ph::kernels::Closeness r = ph::kernels::compare(out[0], want[0], dt, e.tolerance({6, 1000}));
    EXPECT_TRUE(r.ok) << "max abs error " << r.max_abs_err;
  }
  const ph::kernels::KernelEntry& e = ph::kernels::find_kernel("cross_entropy");
  ph::kernels::Inputs small = e.make_inputs({8, 32000}, ph::DType::f32, 1);
  EXPECT_EQ(e.kernel->compile(small.args()).config().cache_hints, std::vector<std::string>{"none"});
  const ph::backend::Machine& m = e.kernel->compile(small.args()).impl().program.backend->machine();
  const int64_t rows = 4 * m.fast_memory_bytes * m.threads / (4 * 32000) * 2;
  ph::kernels::Inputs large = e.make_inputs({rows, 32000}, ph::DType::f32, 1);
  EXPECT_EQ(e.kernel->compile(large.args()).config().cache_hints, std::vector<std::string>{"prefetch"});
}

// The same over a ph::grid row (a grid tile gives the block no dim): the loop's tile is the
// block's first dim, not its second. (The dim was counted from the index items, and the prefetch
// indexed past the end of the row's index.)
ph::Tensor grid_row_lse(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m});
  for (auto row : ph::grid(m)) {
    ph::Var mx = ph::full({}, -INFINITY);
    ph::Var den = ph::zeros({});
    for (auto cols : ph::tile(n)) {
      auto v = x[row, cols];
      auto new_mx = ph::maximum(mx, ph::amax(v, 0));
      den = den * ph::exp(mx - new_mx) + ph::sum(ph::exp(v - new_mx), 0);
      mx = new_mx;
    }
    out[row] = ph::log(den) + mx;
  }
  return out;
}

TEST(CacheHints, AGridRowsLoopPrefetchesAlongItsOwnDim) {
  ph::Kernel k("grid_row_lse", grid_row_lse);
  ph::Array x = ph::Array::random({5, 1000}, ph::DType::f32, 11);
  ph::CompiledKernel def = k.compile({x});
  ph::Config c = def.config();
  c.block_sizes.back() = 128;
  c.cache_hints = {"prefetch"};
  ph::CompiledKernel ck = k.compile({x}, &c);
  EXPECT_HAS(ck.block_ir(), "prefetch arg0's next-trip block of t1");
  EXPECT_HAS(ck.source(), "(off_t1 + (128 + ph_pf))");
  c.cache_hints = {"none"};
  EXPECT_TRUE(same_bits(ck.run({x}).at(0), k.compile({x}, &c).run({x}).at(0)));
}

// The default keeps a block that each trip reads twice within half the first cache, and grows it
// that far: the second read comes from the nearest cache while the next trip is prefetched. Over
// a ph::grid row (its block is the loop's alone) and cross_entropy's [rows, columns] blocks, on
// whatever first cache this host has; and the rows that two statements of a grid step read
// (softmax's max, then its exp and sum).
TEST(CacheHints, TheDefaultKeepsABlockReadTwiceInHalfTheFirstCache) {
  ph::Kernel k("grid_row_lse", grid_row_lse);
  ph::Array x = ph::Array::random({4, 1 << 20}, ph::DType::f32, 11);
  ph::CompiledKernel def = k.compile({x});
  const ph::backend::Machine& m = def.impl().program.backend->machine();
  ASSERT_GT(m.first_cache_bytes, 0);
  ASSERT_LE(m.first_cache_bytes, m.fast_memory_bytes);
  const int64_t half = m.first_cache_bytes / 2;
  const int64_t bytes = def.config().block_sizes.back() * 4;
  EXPECT_LE(bytes, half);
  EXPECT_GT(2 * bytes, half);
  const ph::kernels::KernelEntry& e = ph::kernels::find_kernel("cross_entropy");
  for (ph::DType dt : {ph::DType::f32, ph::DType::bf16}) {
    SCOPED_TRACE(std::string(ph::dtype_name(dt)));
    ph::kernels::Inputs in = e.make_inputs({64, 32000}, dt, 1);
    const std::vector<int64_t> b = e.kernel->compile(in.args()).config().block_sizes;
    const int64_t logits = b[0] * b[1] * static_cast<int64_t>(ph::dtype_size(dt));
    EXPECT_LE(logits, half);
    EXPECT_GT(2 * logits, half);
  }
  const ph::kernels::KernelEntry& softmax = ph::kernels::find_kernel("softmax");
  ph::kernels::Inputs rows = softmax.make_inputs({4096, 1024}, ph::DType::f32, 1);
  const int64_t block = softmax.kernel->compile(rows.args()).config().block_sizes.at(0) * 1024 * 4;
  EXPECT_LE(block, std::max<int64_t>(half, 1024 * 4));  // (at least a row)
  EXPECT_GT(2 * block, half);
}

TEST(CacheHints, TheKnobIsOfferedPerLaunchAndItsDefaultHintsOnlyTensorsLargerThanTheCaches) {
  const ph::kernels::KernelEntry& e = ph::kernels::find_kernel("softmax");
  ph::kernels::Inputs small = e.make_inputs({64, 256}, ph::DType::f32, 1);
  ph::CompiledKernel def = e.kernel->compile(small.args());
  EXPECT_HAS(def.config_spec().describe(),
             "cache_hints[0]: none, stream, prefetch, stream+prefetch  (stores past the caches, the next step's "
             "blocks prefetched: launch 0 at");
  EXPECT_EQ(def.config().cache_hints, std::vector<std::string>{"none"});  // 64 KiB: the caches hold it
  // Larger than four times the fast memory of every core: its output streamed, and its input
  // prefetched, since the sum re-reads it computing an exp per element.
  const ph::backend::Machine& m = def.impl().program.backend->machine();
  const int64_t rows = 4 * m.fast_memory_bytes * m.threads / (4 * 256) * 2;
  ph::kernels::Inputs large = e.make_inputs({rows, 256}, ph::DType::f32, 1);
  EXPECT_EQ(e.kernel->compile(large.args()).config().cache_hints, std::vector<std::string>{"stream+prefetch"});
  // A single pass (swiglu reads each input once): its stores only; the hardware prefetcher
  // follows the reads.
  const ph::kernels::KernelEntry& swiglu = ph::kernels::find_kernel("swiglu");
  ph::kernels::Inputs pair = swiglu.make_inputs({rows, 256}, ph::DType::f32, 1);
  EXPECT_EQ(swiglu.kernel->compile(pair.args()).config().cache_hints, std::vector<std::string>{"stream"});
  // A re-read without a transcendental: rms_norm's store reads its rows again after their sum of
  // squares (the memory idles through that second pass unless the next step's rows come in).
  const ph::kernels::KernelEntry& rms = ph::kernels::find_kernel("rms_norm");
  ph::kernels::Inputs rows_in = rms.make_inputs({rows, 256}, ph::DType::f32, 1);
  EXPECT_EQ(rms.kernel->compile(rows_in.args()).config().cache_hints, std::vector<std::string>{"stream+prefetch"});

  ph::Config bad = def.config();
  bad.cache_hints = {"bypass"};
  EXPECT_HAS(user_error_of([&] { e.kernel->compile(small.args(), &bad); }),
             "cache_hints[0] = \"bypass\" is not one of none, stream, prefetch, stream+prefetch (the launch at");
  bad.cache_hints = {"none", "none"};
  EXPECT_HAS(user_error_of([&] { e.kernel->compile(small.args(), &bad); }), "cache_hints has 2 entries");
  EXPECT_EQ(ph::Config::from_json(R"({"cache_hints":["stream"]})").cache_hints, std::vector<std::string>{"stream"});
}

TEST(CacheHints, TheTpuHasNoCacheHintKnob) {
  const ph::kernels::KernelEntry& e = ph::kernels::find_kernel("softmax");
  ph::kernels::Inputs in = e.make_inputs({64, 256}, ph::DType::f32, 1);
  const ph::PallasModule mod = e.kernel->emit_pallas(in.args());
  EXPECT_EQ(mod.config_spec.find("cache_hints"), std::string::npos) << mod.config_spec;
}

}  // namespace

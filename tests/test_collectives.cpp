// Collectives (issue 21): kernels on a mesh, run by the reference interpreter on every device.
// The library's all-gather and all-reduces against their references on rings of 1 to 8
// devices and on a 2-D mesh; the text form; and every error the interpreter and the tracer
// report: races on a copy's regions, deadlocks, unwaited copies, unbalanced semaphores, peers
// outside the mesh, misuse while tracing, and backends that cannot generate collectives.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/registry.h"
#include "driver/compiled_kernel_impl.h"
#include "driver/driver.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "kernels/kernels.h"
#include "kernels/references.h"
#include "parhelion/parhelion.h"

#include "tests/mesh_test_kernels.h"
#include "tests/user_error.h"

namespace ph = parhelion;
namespace kernels = ph::kernels;

namespace {

std::vector<ph::Array> shards_of(int64_t n, const ph::Shape& shape, ph::DType dtype, uint64_t seed) {
  std::vector<ph::Array> s;
  for (int64_t d = 0; d < n; ++d) s.push_back(ph::Array::random(shape, dtype, seed + static_cast<uint64_t>(d)));
  return s;
}

// One argument list per device: its shard.
std::vector<std::vector<ph::Arg>> per_device(const std::vector<ph::Array>& shards) {
  std::vector<std::vector<ph::Arg>> args;
  for (const ph::Array& s : shards) args.push_back({s});
  return args;
}

ph::Mesh ring(int64_t n) { return ph::Mesh{{"x", n}}; }

TEST(Collectives, AllGatherOnRingsOf1To8Devices) {
  for (int64_t n : {1, 2, 3, 4, 8})
    for (ph::DType dt : {ph::DType::f32, ph::DType::bf16}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " " + std::string(ph::dtype_name(dt)));
      const std::vector<ph::Array> x = shards_of(n, {5, 7}, dt, 10);
      const std::vector<std::vector<ph::Array>> out = kernels::all_gather.interpret_on(ring(n), per_device(x));
      ASSERT_EQ(static_cast<int64_t>(out.size()), n);
      const ph::Array want = ph::ref::all_gather(x);
      for (const std::vector<ph::Array>& o : out) EXPECT_EQ(ph::max_abs_diff(o.at(0), want), 0);  // copies are exact
    }
}

TEST(Collectives, AllReduceOneShotAndRingMatchTheSum) {
  for (int64_t n : {1, 2, 3, 4, 5}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const std::vector<ph::Array> x = shards_of(n, {6, 9}, ph::DType::f32, 20);
    const ph::Array want = ph::ref::all_reduce(x);
    for (const std::vector<ph::Array>& o : kernels::all_reduce.interpret_on(ring(n), per_device(x)))
      EXPECT_LT(ph::max_abs_diff(o.at(0), want), 1e-5);
    const std::vector<ph::Array> chunks = shards_of(n, {3 * n, 4}, ph::DType::f32, 30);
    const ph::Array want_ring = ph::ref::all_reduce(chunks);
    for (const std::vector<ph::Array>& o : kernels::all_reduce_ring.interpret_on(ring(n), per_device(chunks)))
      EXPECT_LT(ph::max_abs_diff(o.at(0), want_ring), 1e-5);
  }
}

// The cpu backend runs the same kernels, every device a thread of this process.
TEST(Collectives, TheCpuBackendRunsTheLibrarysCollectivesAsTheInterpreterDoes) {
  for (int64_t n : {1, 2, 3, 4}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const std::vector<ph::Array> x = shards_of(n, {5, 7}, ph::DType::bf16, 60);
    const ph::Array gathered = ph::ref::all_gather(x);
    for (const std::vector<ph::Array>& o : kernels::all_gather.run_on(ring(n), per_device(x)))
      EXPECT_EQ(ph::max_abs_diff(o.at(0), gathered), 0);
    const std::vector<ph::Array> y = shards_of(n, {6, 9}, ph::DType::f32, 70);
    const ph::Array sum = ph::ref::all_reduce(y);
    for (const std::vector<ph::Array>& o : kernels::all_reduce.run_on(ring(n), per_device(y)))
      EXPECT_LT(ph::max_abs_diff(o.at(0), sum), 1e-5);
    const std::vector<ph::Array> chunks = shards_of(n, {2 * n, 33}, ph::DType::f32, 80);
    const ph::Array chunk_sum = ph::ref::all_reduce(chunks);
    for (const std::vector<ph::Array>& o : kernels::all_reduce_ring.run_on(ring(n), per_device(chunks)))
      EXPECT_LT(ph::max_abs_diff(o.at(0), chunk_sum), 1e-5);
  }
  // The generated code: the copy is a store into the peer's tensor, the rest calls the mesh.
  const std::vector<ph::Array> x = shards_of(2, {4, 4}, ph::DType::f32, 1);
  auto configured =
      ph::driver::configure(*kernels::all_gather.trace_on(ring(2), {x[0]}), ph::backend::for_target("cpu"));
  const std::string source = ph::driver::specialize(*configured, configured->config)->artifact.source;
  EXPECT_HAS(source, "ph_rt_table->mesh_tensor(");
  EXPECT_HAS(source, "ph_rt_table->mesh_sync(");
  EXPECT_HAS(source, "ph_rt_table->mesh_coord(");
}

// The fused kernels, in the interpreter and on the cpu backend, against the references.
TEST(Collectives, CollectivesFusedWithMatmulsAndANormMatchTheReferences) {
  for (int64_t n : {1, 2, 3, 4}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const std::vector<ph::Array> a = shards_of(n, {6, 40}, ph::DType::f32, 90);
    const ph::Array b = ph::Array::random({40, 24}, ph::DType::f32, 91);
    const ph::Array gathered = ph::ref::matmul(ph::ref::all_gather(a), b);
    std::vector<std::vector<ph::Arg>> args;
    for (const ph::Array& s : a) args.push_back({s, b});
    for (auto run : {&ph::KernelBase::interpret_on, static_cast<decltype(&ph::KernelBase::interpret_on)>(nullptr)}) {
      auto out =
          run ? (kernels::all_gather_matmul.*run)(ring(n), args) : kernels::all_gather_matmul.run_on(ring(n), args);
      for (const std::vector<ph::Array>& o : out) EXPECT_LT(ph::max_abs_diff(o.at(0), gathered), 1e-4);
    }

    const std::vector<ph::Array> ak = shards_of(n, {4 * n, 24}, ph::DType::f32, 92);
    const std::vector<ph::Array> bk = shards_of(n, {24, 40}, ph::DType::f32, 93);
    std::vector<ph::Array> products;
    for (int64_t d = 0; d < n; ++d) products.push_back(ph::ref::matmul(ak[d], bk[d]));
    const ph::Array total = ph::ref::all_reduce(products);
    std::vector<std::vector<ph::Arg>> kargs;
    for (int64_t d = 0; d < n; ++d) kargs.push_back({ak[d], bk[d]});
    for (bool cpu : {false, true}) {
      auto out = cpu ? kernels::matmul_reduce_scatter.run_on(ring(n), kargs)
                     : kernels::matmul_reduce_scatter.interpret_on(ring(n), kargs);
      for (int64_t d = 0; d < n; ++d)
        for (int64_t i = 0; i < 4 * 40; ++i)
          EXPECT_NEAR(out[d][0].get(i), total.get(d * 4 * 40 + i), 1e-4) << (cpu ? "cpu" : "interpreter");
    }

    const std::vector<ph::Array> x = shards_of(n, {5, 64}, ph::DType::f32, 94);
    const ph::Array bias = ph::Array::random({64}, ph::DType::f32, 95), w = ph::Array::random({64}, ph::DType::f32, 96);
    const ph::Array sum = ph::ref::all_reduce(x);
    ph::Array biased = ph::Array::empty({5, 64}, ph::DType::f32);
    for (int64_t i = 0; i < 5 * 64; ++i) biased.set(i, sum.get(i) + bias.get(i % 64));
    const ph::Array normed = ph::ref::rms_norm(biased, w, 1e-6);
    std::vector<std::vector<ph::Arg>> nargs;
    for (const ph::Array& s : x) nargs.push_back({s, bias, w, 1e-6});
    for (bool cpu : {false, true}) {
      auto out = cpu ? kernels::all_reduce_bias_rms_norm.run_on(ring(n), nargs)
                     : kernels::all_reduce_bias_rms_norm.interpret_on(ring(n), nargs);
      for (const std::vector<ph::Array>& o : out) EXPECT_LT(ph::max_abs_diff(o.at(0), normed), 1e-4);
    }
  }
}

TEST(Collectives, TheRingsTextFormReadsBack) {
  const std::vector<ph::Array> x = shards_of(4, {8, 4}, ph::DType::f32, 1);
  const std::string ir = ph::ir::print(kernels::all_reduce_ring.trace_on(ring(4), {x[0]})->fn);
  EXPECT_HAS(ir, "mesh x=4 copies=2 semaphores=2");
  for (const char* op :
       {"device_index x", "copy_start c0 ", "copy_wait_send c0", "copy_wait_recv c1", "signal s0, ", "wait s0, "})
    EXPECT_HAS(ir, op);
  EXPECT_EQ(ph::ir::print(ph::ir::parse(ir, "ring.tir")), ir);
}

TEST(Collectives, RingAlongOneAxisOfA2DMesh) {
  ph::Kernel k("gather_along_y", ph::testing::gather_along_y);
  const ph::Mesh mesh{{"x", 2}, {"y", 3}};
  const std::vector<ph::Array> x = shards_of(6, {2, 3}, ph::DType::f32, 40);
  const std::vector<std::vector<ph::Array>> out = k.interpret_on(mesh, per_device(x));
  for (int64_t d = 0; d < 6; ++d) {
    const std::vector<int64_t> c = mesh.coords(d);
    for (int64_t y = 0; y < 3; ++y)
      for (int64_t i = 0; i < 6; ++i)
        EXPECT_FLOAT_EQ(out[d][0].get(y * 6 + i),
                        x[static_cast<size_t>(mesh.device_at({c[0], y}))].get(i) + 1000.0f * static_cast<float>(c[0]));
  }
}

// --- errors --------------------------------------------------------------------------------------

// Each device copies its x into `buf` of the next one; `mistake` picks what goes wrong. (The
// allocations are named buf0 (buf), buf1 (src) and buf2 (out) in messages.)
enum class Mistake {
  land_on_written,
  read_before_recv,
  no_waits,
  only_device_0_sends,
  overwrite_source,
  one_slot_no_credit,
  unbalanced_signal,
  peer_outside,
  none
};

ph::Tensor ring_send(ph::Tensor x, Mistake mistake) {
  const int64_t n = ph::mesh_size("x");
  auto buf = ph::zeros({x.size(0), x.size(1)});
  auto src = ph::zeros({x.size(0), x.size(1)});
  auto out = ph::empty({x.size(0), x.size(1)});
  auto sem = ph::semaphore();
  for (auto g : ph::grid(1)) {
    (void)g;
    auto me = ph::device_index("x");
    src[ph::all, ph::all] = x[ph::all, ph::all];
    if (mistake == Mistake::one_slot_no_credit) {  // every step lands in the same buffer
      for (auto step : ph::grid(3)) {
        auto send = ph::remote_copy(buf, {ph::all, ph::all},
                                    src[ph::all, ph::all] + ph::cast(step.begin(), ph::DType::f32), ph::ring_next("x"));
        send.start();
        send.wait();
        out[ph::all, ph::all] = buf[ph::all, ph::all];
      }
      continue;
    }
    if (mistake == Mistake::land_on_written) {  // device 1 sends to device 0, which wrote there first
      buf[ph::all, ph::all] = x[ph::all, ph::all];
      auto send = ph::remote_copy(buf, {ph::all, ph::all}, src[ph::all, ph::all], ph::peer("x", 0));
      ph::when(me == 1, [&] {
        send.start();
        send.wait_send();
      });
      ph::when(me == 0, [&] { send.wait_recv(); });
      continue;
    }
    auto to = mistake == Mistake::peer_outside ? ph::peer("x", me + 1) : ph::ring_next("x");
    auto send = ph::remote_copy(buf, {ph::all, ph::all}, src[ph::all, ph::all], to);
    if (mistake == Mistake::only_device_0_sends)
      ph::when(me == 0, [&] { send.start(); });
    else
      send.start();
    if (mistake == Mistake::overwrite_source) src[ph::all, ph::all] = x[ph::all, ph::all] * 2.0f;
    if (mistake == Mistake::read_before_recv) out[ph::all, ph::all] = buf[ph::all, ph::all];
    if (mistake == Mistake::unbalanced_signal) ph::signal(sem, ph::ring_next("x"));
    if (mistake == Mistake::no_waits) continue;
    send.wait();
    out[ph::all, ph::all] = buf[ph::all, ph::all];
  }
  (void)n;
  return out;
}

template <Mistake M>
ph::Tensor ring_send_with(ph::Tensor x) {
  return ring_send(x, M);
}

// The interpreter's error; the cpu backend's, which must say the same where it finds it (its
// runs track no regions: races are the interpreter's to find).
template <Mistake M>
std::string error_of(bool on_cpu = false) {
  ph::Kernel k("ring_send", ring_send_with<M>);
  const std::vector<ph::Array> x = shards_of(4, {2, 3}, ph::DType::f32, 50);
  if (on_cpu) return user_error_of([&] { k.run_on(ring(4), per_device(x)); });
  return user_error_of([&] { k.interpret_on(ring(4), per_device(x)); });
}

TEST(Collectives, ACorrectRingSendPasses) {
  ph::Kernel k("ring_send", ring_send_with<Mistake::none>);
  const std::vector<ph::Array> x = shards_of(4, {2, 3}, ph::DType::f32, 50);
  const std::vector<std::vector<ph::Array>> out = k.interpret_on(ring(4), per_device(x));
  const std::vector<std::vector<ph::Array>> cpu = k.run_on(ring(4), per_device(x));
  for (int64_t d = 0; d < 4; ++d) {
    EXPECT_EQ(ph::max_abs_diff(out[d][0], x[(d + 3) % 4]), 0);
    EXPECT_EQ(ph::max_abs_diff(cpu[d][0], x[(d + 3) % 4]), 0);
  }
}

TEST(Collectives, ReadingALandingRegionBeforeItsReceiveIsARace) {
  const std::string e = error_of<Mistake::read_before_recv>();
  EXPECT_HAS(e, "test_collectives.cpp:");
  EXPECT_HAS(e, "race: device 1 (x=1) reads buf0");
  EXPECT_HAS(e, "may still be landing there: wait for it to land (wait_recv) first");
}

TEST(Collectives, WritingWhatACopySendsBeforeItsSendIsARace) {
  const std::string e = error_of<Mistake::overwrite_source>();
  EXPECT_HAS(e, "race: device 0 (x=0) writes buf1");
  EXPECT_HAS(e, "is still sending from: wait for the send (wait_send) before writing it");
}

TEST(Collectives, ACopyLandingWhereTheReceiverWroteUnorderedIsARace) {
  const std::string e = error_of<Mistake::land_on_written>();
  EXPECT_HAS(e, "race: device 1 (x=1)'s copy c0");
  EXPECT_HAS(
      e, "to device 0 (x=0) lands in buf0 (element [0, 0] among others), which device 0 (x=0) also reads or writes");
  EXPECT_HAS(e, "with nothing ordering that access before this copy");
}

TEST(Collectives, ReusingALandingBufferWithoutFlowControlIsARace) {
  const std::string e = error_of<Mistake::one_slot_no_credit>();
  EXPECT_HAS(e, "race: device ");
  EXPECT_HAS(e, "lands in buf0");
  EXPECT_HAS(e, "with nothing ordering its receive before this copy");
}

TEST(Collectives, ACopyNobodySendsIsADeadlock) {
  const std::string e = error_of<Mistake::only_device_0_sends>();
  EXPECT_HAS(e, "deadlock: every device that has not finished is waiting");
  EXPECT_HAS(e, "device 0 (x=0) waits for copy c0 (started at ");
  EXPECT_HAS(e, "device 2 (x=2) waits for the send of copy c0");
  EXPECT_EQ(error_of<Mistake::only_device_0_sends>(true), e);
}

TEST(Collectives, UnwaitedCopiesAndUnbalancedSemaphoresAreRefusedAtTheEnd) {
  EXPECT_HAS(error_of<Mistake::no_waits>(), "was never waited for (neither its send nor its receive)");
  const std::string e = error_of<Mistake::unbalanced_signal>();
  EXPECT_HAS(e, "semaphore s0 of device 0 (x=0) is 1 when the kernel ends");
  EXPECT_HAS(e, "test_collectives.cpp:");
  EXPECT_EQ(error_of<Mistake::unbalanced_signal>(true), e);
  EXPECT_EQ(error_of<Mistake::no_waits>(true), error_of<Mistake::no_waits>());
}

TEST(Collectives, APeerOutsideTheMeshIsRefused) {
  EXPECT_HAS(error_of<Mistake::peer_outside>(),
             "copy_start: the peer's coordinate along x is 4, outside the mesh's 0..3");
}

// A ring all-gather, with a barrier per step (one copy in flight towards a device) or, `paced`
// false, without: a device can then start its next copy before its neighbour has received the
// previous one, and a wait pairs with copies by count only, so the neighbour's first wait does not
// say which of the two landed: forwarding that shard is a race.
ph::Tensor ring_gather(ph::Tensor x, bool paced) {
  const int64_t n = ph::mesh_size("x");
  auto [m, k] = x.sizes<2>();
  auto gathered = ph::empty({n * m, k});
  for (auto g : ph::grid(1)) {
    (void)g;
    auto me = ph::device_index("x");
    gathered[ph::slice(me * m, ph::length(m)), ph::all] = x[ph::all, ph::all];
    for (auto step : ph::grid(n - 1)) {
      auto rows = ph::slice(ph::remainder(me - step.begin(), n) * m, ph::length(m));
      auto send = ph::remote_copy(gathered, {rows, ph::all}, gathered[rows, ph::all], ph::ring_next("x"));
      send.start();
      send.wait();
      if (paced) ph::barrier("x");
    }
  }
  return gathered;
}

// Two launches: the paced ring, then a plain (multi-threaded) launch over its result, which every
// device reads once the first launch's copies have all landed.
ph::Tensor gather_then_scale(ph::Tensor x) {
  auto gathered = ring_gather(x, true);
  auto out = ph::empty(gathered.sizes());
  for (auto [r, c] : ph::tile(gathered.size(0), gathered.size(1))) out[r, c] = gathered[r, c] * 3.0f;
  return out;
}

ph::Tensor unpaced_ring(ph::Tensor x) { return ring_gather(x, false); }

TEST(Collectives, ALaterLaunchReadsWhatCopiesLandedOnEveryBackendThatRunsThem) {
  ph::Kernel k("gather_then_scale", gather_then_scale);
  const std::vector<ph::Array> x = shards_of(3, {40, 24}, ph::DType::f32, 7);
  const ph::Array gathered = ph::ref::all_gather(x);
  for (bool cpu : {false, true}) {
    auto out = cpu ? k.run_on(ring(3), per_device(x)) : k.interpret_on(ring(3), per_device(x));
    for (const std::vector<ph::Array>& o : out)
      for (int64_t i = 0; i < gathered.numel(); ++i) ASSERT_FLOAT_EQ(o[0].get(i), 3.0f * gathered.get(i));
  }
}

// A copy landing in a kernel argument: each device must have its own array (the cpu backend's
// devices share this process's memory; the interpreter copies arguments per device).
ph::Tensor land_in_argument(ph::Tensor x, ph::Tensor y) {
  auto out = ph::empty_like(x);
  for (auto g : ph::grid(1)) {
    (void)g;
    auto send = ph::remote_copy(x, {ph::all}, y[ph::all] * 2.0f, ph::ring_next("x"));
    send.start();
    send.wait();
    out[ph::all] = x[ph::all];
  }
  return out;
}

TEST(Collectives, DevicesSharingAnArgumentThatCopiesLandInAreRefusedOnTheCpu) {
  ph::Kernel k("land_in_argument", land_in_argument);
  ph::Array x0 = ph::Array::zeros({8}, ph::DType::f32), x1 = ph::Array::zeros({8}, ph::DType::f32);
  ph::Array y0 = ph::Array::random({8}, ph::DType::f32, 1), y1 = ph::Array::random({8}, ph::DType::f32, 2);
  EXPECT_HAS(user_error_of([&] {
               k.run_on(ring(2), {{x0, y0}, {x0, y1}});
             }),
             "tensor argument 0 is written by the kernel (or copies land in it), and device 0's and device 1's "
             "overlap in memory; pass each device its own array");
  const auto out = k.run_on(ring(2), {{x0, y0}, {x1, y1}});
  const auto want = k.interpret_on(ring(2), {{x0, y0}, {x1, y1}});
  for (int64_t i = 0; i < 8; ++i) {
    EXPECT_FLOAT_EQ(out[0][0].get(i), 2.0f * y1.get(i));
    EXPECT_FLOAT_EQ(out[1][0].get(i), 2.0f * y0.get(i));
    EXPECT_FLOAT_EQ(want[0][0].get(i), 2.0f * y1.get(i));
  }
}

TEST(Collectives, TwoCopiesOfAStatementInFlightTowardsADeviceLeaveItsWaitsAmbiguous) {
  ph::Kernel k("unpaced_ring", unpaced_ring);
  const std::vector<ph::Array> x = shards_of(4, {2, 3}, ph::DType::f32, 3);
  const std::string e = user_error_of([&] { k.interpret_on(ring(4), per_device(x)); });
  EXPECT_HAS(e, "race: device ");
  EXPECT_HAS(e, "may still be landing there: wait for it to land (wait_recv) first");
}

// A barrier one device never reaches, and a semaphore wait nobody signals: deadlocks.
ph::Tensor skipped_barrier(ph::Tensor x, ph::Int which) {
  auto out = ph::empty_like(x);
  auto sem = ph::semaphore();
  for (auto g : ph::grid(1)) {
    (void)g;
    auto me = ph::device_index("x");
    ph::when(which == 0 && me != 1, [&] { ph::barrier("x"); });
    ph::when(which == 1, [&] { ph::wait(sem, 2); });
    out[ph::all] = x[ph::all];
  }
  return out;
}

// Two copies of a computed block from one statement in flight at once: a backend stages the block
// in one buffer per statement (pallas: VMEM), which the second start overwrites while the first
// copy may still read it.
ph::Tensor restage(ph::Tensor x) {
  auto landing = ph::empty({2, x.size(0), x.size(1)});
  for (auto g : ph::grid(1)) {
    (void)g;
    ph::RemoteCopy send;
    for (auto s : ph::grid(2)) {
      send = ph::remote_copy(landing, {s.begin(), ph::all, ph::all}, x[ph::all, ph::all] * 2.0f, ph::ring_next("x"));
      send.start();
    }
    for (auto s : ph::grid(2)) {
      (void)s;
      send.wait();
    }
  }
  return landing;
}

TEST(Collectives, StartingAStagedCopyAgainBeforeItsSendIsARace) {
  ph::Kernel k("restage", restage);
  const std::vector<ph::Array> x = shards_of(2, {2, 3}, ph::DType::f32, 5);
  const std::string e = user_error_of([&] { k.interpret_on(ring(2), per_device(x)); });
  EXPECT_HAS(e, "test_collectives.cpp:");
  EXPECT_HAS(e, "starts while its previous copy (started at ");
  EXPECT_HAS(e, "a backend stages it in a buffer of the copy statement's own");
}

// A block sent in place whose region is written between its load and the copy's start: a backend
// sends what the region holds at the start, not what was loaded.
ph::Tensor write_between_load_and_start(ph::Tensor x) {
  auto src = ph::empty({x.size(0), x.size(1)});
  auto landing = ph::empty({x.size(0), x.size(1)});
  for (auto g : ph::grid(1)) {
    (void)g;
    src[ph::all, ph::all] = x[ph::all, ph::all];
    auto block = src[ph::all, ph::all];
    src[ph::all, ph::all] = x[ph::all, ph::all] * 2.0f;
    auto send = ph::remote_copy(landing, {ph::all, ph::all}, block, ph::ring_next("x"));
    send.start();
    send.wait();
  }
  return landing;
}

TEST(Collectives, WritingASentInPlaceRegionBetweenItsLoadAndTheStartIsRefused) {
  ph::Kernel k("write_between_load_and_start", write_between_load_and_start);
  const std::vector<ph::Array> x = shards_of(2, {2, 3}, ph::DType::f32, 6);
  const std::string e = user_error_of([&] { k.interpret_on(ring(2), per_device(x)); });
  EXPECT_HAS(e, "test_collectives.cpp:");
  EXPECT_HAS(e, "copy c0 sends its block in place from buf0, loaded at ");
  EXPECT_HAS(e, "but that region was written between the load and this start");
}

// Device 0 sends two copies of one statement to device 1, the second after a signal that device 1
// makes before its first wait: in this schedule device 1's first wait finds one copy in flight
// and reads its slot, but had the second copy started before that wait, the wait could have seen
// it land instead (waits pair by count). The second start is the race.
ph::Tensor two_copies_one_wait_apart(ph::Tensor x) {
  auto slots = ph::empty({2, x.size(0), x.size(1)});
  auto out = ph::empty({x.size(0), x.size(1)});
  auto go = ph::semaphore();
  for (auto g : ph::grid(1)) {
    (void)g;
    auto me = ph::device_index("x");
    ph::when(me == 1, [&] { ph::signal(go, ph::peer("x", 0)); });
    for (auto s : ph::grid(2)) {
      auto send = ph::remote_copy(slots, {s.begin(), ph::all, ph::all}, x[ph::all, ph::all], ph::peer("x", 1));
      ph::when(me == 0, [&] {
        ph::when(s.begin() == 1, [&] { ph::wait(go); });
        send.start();
        send.wait_send();
      });
      ph::when(me == 1, [&] {
        send.wait_recv();
        out[ph::all, ph::all] = slots[s.begin(), ph::all, ph::all];
      });
    }
  }
  return out;
}

TEST(Collectives, ACopyStartingUnorderedWithTheReceiversEarlierWaitIsARace) {
  ph::Kernel k("two_copies_one_wait_apart", two_copies_one_wait_apart);
  const std::vector<ph::Array> x = shards_of(2, {2, 3}, ph::DType::f32, 7);
  const std::string e = user_error_of([&] { k.interpret_on(ring(2), per_device(x)); });
  EXPECT_HAS(e, "test_collectives.cpp:");
  EXPECT_HAS(e, "race: device 0 (x=0)'s copy c0");
  EXPECT_HAS(e, "starts unordered with device 1 (x=1)'s wait at ");
  EXPECT_HAS(e, "so that wait may have seen this copy land instead");
}

TEST(Collectives, ABarrierNotReachedAndASemaphoreNotSignalledAreDeadlocks) {
  ph::Kernel k("skipped_barrier", skipped_barrier);
  ph::Array x = ph::Array::random({8}, ph::DType::f32, 1);
  for (bool cpu : {false, true}) {
    auto call = [&](int64_t which) {
      std::vector<std::vector<ph::Arg>> args = {{x, which}, {x, which}, {x, which}};
      return user_error_of([&] { cpu ? k.run_on(ring(3), args) : k.interpret_on(ring(3), args); });
    };
    const std::string barrier = call(0);
    EXPECT_HAS(barrier, "deadlock: every device that has not finished is waiting");
    EXPECT_HAS(barrier, "device 0 (x=0) waits at a barrier for 1 more device(s) of its group, which never reach it");
    const std::string semaphore = call(1);
    EXPECT_HAS(semaphore,
               "device 0 (x=0) waits for semaphore s0 to reach 2 (it is 0), and no device signals it enough");
  }
}

ph::Tensor needs_mesh(ph::Tensor x) {
  auto out = ph::empty_like(x);
  for (auto t : ph::tile(x.size(0))) out[t] = x[t] + ph::cast(ph::device_index("x"), ph::DType::f32);
  return out;
}

TEST(Collectives, TracingErrorsNameTheLine) {
  ph::Kernel k("needs_mesh", needs_mesh);
  ph::Array x = ph::Array::random({8}, ph::DType::f32, 1);
  EXPECT_HAS(user_error_of([&] { k.interpret({x}); }), "ph::device_index needs a mesh");
  EXPECT_HAS(user_error_of([&] { k.run({x}); }), "test_collectives.cpp:");
  EXPECT_HAS(user_error_of([&] {
               k.interpret_on(ph::Mesh{{"y", 2}}, {{x}, {x}});
             }),
             "ph::device_index: 'x' is not an axis of the mesh (y=2)");
  EXPECT_HAS(user_error_of([&] { k.interpret_on(ring(2), {{x}}); }), "takes the arguments of 2 devices, got 1");
  ph::Array other = ph::Array::random({9}, ph::DType::f32, 1);
  EXPECT_HAS(user_error_of([&] {
               k.interpret_on(ring(2), {{x}, {other}});
             }),
             "device 1's arguments differ in shape, dtype or layout from device 0's");
  EXPECT_HAS(user_error_of([] { ph::Mesh{{"x", 2}, {"x", 3}}; }), "mesh axis x is named twice");
}

ph::Tensor bad_copy(ph::Tensor x) {
  auto out = ph::empty({4, 8});
  for (auto g : ph::grid(1)) {
    (void)g;
    ph::remote_copy(out, {ph::all, ph::all}, x[ph::all], ph::ring_next("x")).start();
  }
  return out;
}

TEST(Collectives, ACopyOfTheWrongShapeIsRefusedWhileTracing) {
  ph::Kernel k("bad_copy", bad_copy);
  ph::Array x = ph::Array::random({8}, ph::DType::f32, 1);
  const std::string e = user_error_of([&] { k.interpret_on(ring(2), {{x}, {x}}); });
  EXPECT_HAS(e, "test_collectives.cpp:");
  EXPECT_HAS(e,
             "ph::remote_copy: a remote copy of a block of shape [8] into buf0 indexed as [4, 8]: the shapes must be "
             "the same");
}

TEST(Collectives, BackendsThatCannotGenerateCollectivesSaySo) {
  const std::vector<ph::Array> x = shards_of(2, {4, 4}, ph::DType::f32, 1);
  auto traced = kernels::all_gather.trace_on(ring(2), {x[0]});
  EXPECT_HAS(user_error_of([&] { ph::driver::configure(*traced, ph::backend::for_target("triton")); }),
             "backend cannot generate kernel all_gather, which runs on a mesh (x=2), yet");
}

TEST(Collectives, TheTextFormRefusesCollectivesWithoutAMesh) {
  const std::string text =
      "kernel k(arg0: f32[4]) -> ()\n"
      "  $b0 = block_size(extent=1, fixed=1)\n"
      "  launch g0 in 0..1 by $b0 {\n"
      "    %0 = device_index x : i64[]\n"
      "  }\n"
      "  return\n";
  EXPECT_HAS(user_error_of([&] { ph::ir::parse(text, "k.tir"); }),
             "k.tir:4:23: 'x' names a mesh axis, but the kernel has no mesh line");
}

}  // namespace

// Collective kernels (docs/distributed.md): each runs on every device of a one-axis mesh "x"
// (KernelBase::interpret_on), its argument being that device's shard.
#include "kernels/kernels.h"

namespace parhelion::kernels {
namespace {
namespace ph = parhelion;

// x [m, k] per device -> out [n m, k] on every device, rows d m .. (d + 1) m - 1 being device d's
// x. A ring: each device keeps its shard in place, then n - 1 times sends the shard it holds
// newest (its own first, then the one that just arrived) to its next neighbour, which lands it
// in its own row block of out. Every row block lands once, so the landings need no flow control.
ph::Tensor all_gather_body(ph::Tensor x) {
  ph::expect(x.rank() == 2, "all_gather: x must be [m, k], this device's shard");
  const int64_t n = ph::mesh_size("x");
  auto [m, k] = x.sizes<2>();
  auto out = ph::empty({n * m, k}, x.dtype());
  for (auto g : ph::grid(1)) {
    (void)g;
    auto me = ph::device_index("x");
    out[ph::slice(me * m, ph::length(m)), ph::all] = x[ph::all, ph::all];
    if (n > 1) {
      for (auto step : ph::grid(n - 1)) {
        auto shard = ph::remainder(me - step.begin(), n);  // the shard this device sends now
        auto rows = ph::slice(shard * m, ph::length(m));
        auto send = ph::remote_copy(out, {rows, ph::all}, out[rows, ph::all], ph::ring_next("x"));
        send.start();
        send.wait();  // ours has left, and the previous device's (shard - 1) has landed
      }
    }
  }
  return out;
}

// x [m, k] per device -> out [m, k] = the sum of every device's x, on every device. One shot:
// each device copies its x to every device (itself included) into a landing buffer of one slot
// per sender, waits for all of them, then sums the slots in f32.
ph::Tensor all_reduce_body(ph::Tensor x) {
  ph::expect(x.rank() == 2, "all_reduce: x must be [m, k], this device's part");
  const int64_t n = ph::mesh_size("x");
  auto [m, k] = x.sizes<2>();
  auto landing = ph::empty({n, m, k});
  auto out = ph::empty({m, k}, x.dtype());
  for (auto g : ph::grid(1)) {
    (void)g;
    auto me = ph::device_index("x");
    ph::RemoteCopy send;
    for (auto peer : ph::grid(n)) {
      send = ph::remote_copy(landing, {me, ph::all, ph::all}, x[ph::all, ph::all], ph::peer("x", peer.begin()));
      send.start();
    }
    for (auto peer : ph::grid(n)) {
      (void)peer;
      send.wait();  // one send of ours, one landing from someone
    }
    for (auto rows : ph::tile(m)) out[rows, ph::all] = ph::sum(landing[ph::all, rows, ph::all], 0);
  }
  return out;
}

// x [n c, k] per device -> out [n c, k] = the sum of every device's x, on every device, moving
// 2 (n - 1) / n of x per device instead of one shot's n - 1 times x. A ring, in two phases:
// - reduce-scatter: at step s, a device adds its chunk (me - s - 1) mod n to the partial sum of
//   that chunk that arrived at step s - 1, and sends it on; after n - 1 steps it holds the whole
//   sum of chunk `me`. Partials land in two slots, used in turn; a device sends into a slot of
//   its next neighbour only after the neighbour has read what landed there two steps before (a
//   credit: the neighbour signals the semaphore once it has read the slot and will be sent into it
//   again).
// - all-gather of the summed chunks, as all_gather_body.
ph::Tensor all_reduce_ring_body(ph::Tensor x) {
  ph::expect(x.rank() == 2, "all_reduce_ring: x must be [n c, k], this device's part");
  const int64_t n = ph::mesh_size("x");
  auto [rows, k] = x.sizes<2>();
  ph::expect(rows % n == 0, "all_reduce_ring: x's rows must split into one chunk per device of the ring");
  const int64_t c = rows / n;
  auto slots = ph::empty({2, c, k});  // partial sums, in f32
  auto out = ph::empty({rows, k}, x.dtype());
  auto credit = ph::semaphore();
  for (auto g : ph::grid(1)) {
    (void)g;
    auto me = ph::device_index("x");
    auto chunk = [&](const ph::Tensor& i) { return ph::slice(i * c, ph::length(c)); };
    auto partial_of = [&](const ph::Tensor& received_slot, const ph::Tensor& valid) {
      return ph::load(slots, {received_slot, ph::all, ph::all}, valid, 0.0f);
    };
    if (n > 1) {
      for (auto step : ph::grid(n - 1)) {
        auto s = step.begin();
        auto sent = ph::remainder(me - s - 1, n);
        auto received = partial_of(ph::remainder(s + 1, 2), s > 0);  // step s - 1's slot (none at step 0)
        auto partial = received + x[chunk(sent), ph::all];
        ph::when(s >= 2, [&] { ph::wait(credit); });  // the next device has read this slot
        auto send = ph::remote_copy(slots, {ph::remainder(s, 2), ph::all, ph::all}, partial, ph::ring_next("x"));
        send.start();
        send.wait();
        // The slot read above is free again; the previous device sends into it at step s + 1.
        ph::when(s >= 1 && s + 1 <= n - 2, [&] { ph::signal(credit, ph::ring_prev("x")); });
      }
      // The last partial of chunk `me`, the sum this device ends with.
      out[chunk(me), ph::all] = slots[(n - 2) % 2, ph::all, ph::all] + x[chunk(me), ph::all];
      for (auto step : ph::grid(n - 1)) {
        auto shard = ph::remainder(me - step.begin(), n);
        auto send = ph::remote_copy(out, {chunk(shard), ph::all}, out[chunk(shard), ph::all], ph::ring_next("x"));
        send.start();
        send.wait();
      }
    } else {
      out[ph::all, ph::all] = x[ph::all, ph::all];
    }
  }
  return out;
}

}  // namespace

Kernel<Tensor(Tensor)> all_gather("all_gather", all_gather_body);
Kernel<Tensor(Tensor)> all_reduce("all_reduce", all_reduce_body);
Kernel<Tensor(Tensor)> all_reduce_ring("all_reduce_ring", all_reduce_ring_body);

}  // namespace parhelion::kernels

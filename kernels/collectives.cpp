// Collective kernels (docs/distributed.md): each runs on every device of a one-axis mesh "x"
// (KernelBase::interpret_on), its argument being that device's shard.
#include "kernels/kernels.h"

namespace parhelion::kernels {
namespace {
namespace ph = parhelion;

// Flow control of a ring's copies, one step at a time. Waits pair with the copies of a statement
// by count only (src/ir/collectives.h: which of two copies in flight a wait saw land is not
// defined), so a device starts its step-s copy to its next neighbour only once that neighbour
// has received its step s - 1 copy, which the neighbour signals.
struct RingCredit {
  ph::Semaphore ready = ph::semaphore();
  // Before step s's start: the next device has received step s - 1's copy.
  void before_start(const ph::Tensor& s) {
    ph::when(s > 0, [&] { ph::wait(ready); });
  }
  // After step s's receive, of `steps` copies: the previous device may start its next one.
  void after_receive(const ph::Tensor& s, int64_t steps) {
    ph::when(s < steps - 1, [&] { ph::signal(ready, ph::ring_prev("x")); });
  }
};

// The all-gather ring's steps (device code, n > 1): `out` holds one block of `m` rows per device,
// this device's (`me`) already in place; n - 1 times a device sends the block it holds newest
// (its own first, then the one that just arrived) to its next neighbour, which lands it in the
// same rows of its own `out`, one copy in flight at a time (`credit`).
void ring_all_gather(const ph::Tensor& out, const ph::Tensor& me, int64_t n, int64_t m, RingCredit& credit) {
  for (auto step : ph::grid(n - 1)) {
    auto s = step.begin();
    auto rows = ph::slice(ph::remainder(me - s, n) * m, ph::length(m));  // the block sent now
    auto send = ph::remote_copy(out, {rows, ph::all}, out[rows, ph::all], ph::ring_next("x"));
    credit.before_start(s);
    send.start();
    send.wait();  // ours has left, and the previous device's (one block back) has landed
    credit.after_receive(s, n - 1);
  }
}

// x [m, k] per device -> out [n m, k] on every device, rows d m .. (d + 1) m - 1 being device d's
// x: each device puts its shard in place, then the ring (ring_all_gather).
ph::Tensor all_gather_body(ph::Tensor x) {
  ph::expect(x.rank() == 2, "all_gather: x must be [m, k], this device's shard");
  const int64_t n = ph::mesh_size("x");
  auto [m, k] = x.sizes<2>();
  auto out = ph::empty({n * m, k}, x.dtype());
  RingCredit credit;
  for (auto g : ph::grid(1)) {
    (void)g;
    auto me = ph::device_index("x");
    out[ph::slice(me * m, ph::length(m)), ph::all] = x[ph::all, ph::all];
    if (n > 1) ring_all_gather(out, me, n, m, credit);
  }
  return out;
}

// x [m, k] per device -> out [m, k] = the sum of every device's x, on every device. One shot:
// each device copies its x to every device (itself included) into a landing buffer of one slot
// per sender, waits for all of them, then sums the slots in f32. The slots hold x's dtype, so the
// copies send x in place (all in flight at once: a computed block would be staged, one copy of
// the statement at a time, src/ir/collectives.h).
ph::Tensor all_reduce_body(ph::Tensor x) {
  ph::expect(x.rank() == 2, "all_reduce: x must be [m, k], this device's part");
  const int64_t n = ph::mesh_size("x");
  auto [m, k] = x.sizes<2>();
  auto landing = ph::empty({n, m, k}, x.dtype());
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
//   sum of chunk `me`. Partials land in two slots, used in turn, one copy in flight at a time
//   (RingCredit): a device signals its previous one after it has received, and read the slot
//   that copy's successor lands in.
// - all-gather of the summed chunks (ring_all_gather).
ph::Tensor all_reduce_ring_body(ph::Tensor x) {
  ph::expect(x.rank() == 2, "all_reduce_ring: x must be [n c, k], this device's part");
  const int64_t n = ph::mesh_size("x");
  auto [rows, k] = x.sizes<2>();
  ph::expect(rows % n == 0, "all_reduce_ring: x's rows must split into one chunk per device of the ring");
  const int64_t c = rows / n;
  auto slots = ph::empty({2, c, k});  // partial sums, in f32
  auto out = ph::empty({rows, k}, x.dtype());
  RingCredit reduce_credit, gather_credit;
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
        auto send = ph::remote_copy(slots, {ph::remainder(s, 2), ph::all, ph::all}, partial, ph::ring_next("x"));
        reduce_credit.before_start(s);
        send.start();
        send.wait();
        // (the slot read above is where the previous device's next copy lands)
        reduce_credit.after_receive(s, n - 1);
      }
      // The last partial of chunk `me`, the sum this device ends with.
      out[chunk(me), ph::all] = slots[(n - 2) % 2, ph::all, ph::all] + x[chunk(me), ph::all];
      ring_all_gather(out, me, n, c, gather_credit);
    } else {
      out[ph::all, ph::all] = x[ph::all, ph::all];
    }
  }
  return out;
}

// a [m, k] per device, b [k, n] the same on every device -> [n_dev m, n] = all_gather(a) . b, on
// every device. The ring of all_gather_body, with each step's product overlapping the copy:
// a device starts sending the shard it holds newest, multiplies that shard's rows by b while the
// copy is in flight, and only then waits for it (and for the previous device's next shard).
ph::Tensor all_gather_matmul_body(ph::Tensor a, ph::Tensor b) {
  ph::expect(a.rank() == 2 && b.rank() == 2, "all_gather_matmul: a is [m, k] (this device's rows), b [k, n]");
  const int64_t n_dev = ph::mesh_size("x");
  auto [m, k] = a.sizes<2>();
  auto [k2, n] = b.sizes<2>();
  ph::expect(k == k2,
             "all_gather_matmul: a has " + std::to_string(k) + " columns but b " + std::to_string(k2) + " rows");
  auto gathered = ph::empty({n_dev * m, k}, a.dtype());
  auto out = ph::empty({n_dev * m, n}, a.dtype());
  RingCredit credit;
  for (auto g : ph::grid(1)) {
    (void)g;
    auto me = ph::device_index("x");
    gathered[ph::slice(me * m, ph::length(m)), ph::all] = a[ph::all, ph::all];
    for (auto step : ph::grid(n_dev)) {
      auto s = step.begin();
      auto rows = ph::slice(ph::remainder(me - s, n_dev) * m, ph::length(m));
      auto send = ph::remote_copy(gathered, {rows, ph::all}, gathered[rows, ph::all], ph::ring_next("x"));
      auto sends = s < n_dev - 1;  // the last shard goes nowhere
      ph::when(sends, [&] {
        credit.before_start(s);
        send.start();
      });
      for (auto tn : ph::tile(n)) {
        ph::Var acc = ph::zeros({m, tn});
        for (auto tk : ph::tile(k)) acc = acc + ph::dot(gathered[rows, tk], b[tk, tn]);
        out[rows, tn] = acc;
      }
      ph::when(sends, [&] {
        send.wait();
        credit.after_receive(s, n_dev - 1);
      });
    }
  }
  return out;
}

// a [M, k] and b [k, n] per device (the contraction sharded: device d holds columns and rows d of
// it) -> [M / n_dev, n] on device d = rows chunk d of the sum over devices of a . b. A ring
// reduce-scatter fused with the product: at step s a device computes its product for chunk
// (me - s - 1) mod n_dev, adds the partial sum of that chunk that arrived at step s - 1, and
// sends it on, its next product overlapping the copy; the last step's sum is chunk `me`'s. The
// partials land in two slots, one copy in flight at a time, as in all_reduce_ring_body.
ph::Tensor matmul_reduce_scatter_body(ph::Tensor a, ph::Tensor b) {
  ph::expect(a.rank() == 2 && b.rank() == 2, "matmul_reduce_scatter: a is [M, k], b [k, n] (this device's k)");
  const int64_t n_dev = ph::mesh_size("x");
  auto [rows, k] = a.sizes<2>();
  auto [k2, n] = b.sizes<2>();
  ph::expect(k == k2,
             "matmul_reduce_scatter: a has " + std::to_string(k) + " columns but b " + std::to_string(k2) + " rows");
  ph::expect(rows % n_dev == 0, "matmul_reduce_scatter: a's rows must split into one chunk per device of the ring");
  const int64_t c = rows / n_dev;
  auto slots = ph::empty({2, c, n});
  auto out = ph::empty({c, n}, a.dtype());
  RingCredit credit;
  for (auto g : ph::grid(1)) {
    (void)g;
    auto me = ph::device_index("x");
    for (auto step : ph::grid(n_dev)) {
      auto s = step.begin();
      auto chunk = ph::slice(ph::remainder(me - s - 1, n_dev) * c, ph::length(c));
      ph::Var acc = ph::load(slots, {ph::remainder(s + 1, 2), ph::all, ph::all}, s > 0, 0.0f);  // step s - 1's
      for (auto tk : ph::tile(k)) acc = acc + ph::dot(a[chunk, tk], b[tk, ph::all]);
      ph::when(
          s < n_dev - 1,
          [&] {
            auto send = ph::remote_copy(slots, {ph::remainder(s, 2), ph::all, ph::all}, acc, ph::ring_next("x"));
            credit.before_start(s);
            send.start();
            send.wait();
            credit.after_receive(s, n_dev - 1);
          },
          [&] { out[ph::all, ph::all] = acc; });  // the last step: chunk me, summed
    }
  }
  return out;
}

// x [m, h] per device (a partial sum, as a row-parallel layer leaves it), bias and weight [h] ->
// rms_norm(the sum over devices of x, plus bias) * weight, on every device: the one-shot
// all-reduce of all_reduce_body (x sent in place), its sum never stored, normalized in the same
// pass.
ph::Tensor all_reduce_bias_rms_norm_body(ph::Tensor x, ph::Tensor bias, ph::Tensor weight, ph::Scalar eps) {
  ph::expect(x.rank() == 2, "all_reduce_bias_rms_norm: x must be [m, h], this device's partial sum");
  const int64_t n_dev = ph::mesh_size("x");
  auto [m, h] = x.sizes<2>();
  ph::expect(bias.sizes() == Shape{h} && weight.sizes() == Shape{h},
             "all_reduce_bias_rms_norm: bias and weight must be [" + std::to_string(h) + "]");
  auto landing = ph::empty({n_dev, m, h}, x.dtype());
  auto out = ph::empty({m, h}, x.dtype());
  for (auto g : ph::grid(1)) {
    (void)g;
    auto me = ph::device_index("x");
    ph::RemoteCopy send;
    for (auto peer : ph::grid(n_dev)) {
      send = ph::remote_copy(landing, {me, ph::all, ph::all}, x[ph::all, ph::all], ph::peer("x", peer.begin()));
      send.start();
    }
    for (auto peer : ph::grid(n_dev)) {
      (void)peer;
      send.wait();
    }
    for (auto r : ph::tile(m)) {
      auto v = ph::sum(landing[ph::all, r, ph::all], 0) + bias[ph::all];
      auto rstd = ph::rsqrt(ph::mean(v * v, -1, true) + eps);
      out[r, ph::all] = v * rstd * weight[ph::all];
    }
  }
  return out;
}

}  // namespace

Kernel<Tensor(Tensor)> all_gather("all_gather", all_gather_body);
Kernel<Tensor(Tensor)> all_reduce("all_reduce", all_reduce_body);
Kernel<Tensor(Tensor)> all_reduce_ring("all_reduce_ring", all_reduce_ring_body);
Kernel<Tensor(Tensor, Tensor)> all_gather_matmul("all_gather_matmul", all_gather_matmul_body);
Kernel<Tensor(Tensor, Tensor)> matmul_reduce_scatter("matmul_reduce_scatter", matmul_reduce_scatter_body);
Kernel<Tensor(Tensor, Tensor, Tensor, Scalar)> all_reduce_bias_rms_norm("all_reduce_bias_rms_norm",
                                                                        all_reduce_bias_rms_norm_body);

}  // namespace parhelion::kernels

// Collectives: kernels that run on every device of a mesh and move blocks between them.
//
// A kernel called on a mesh (parhelion/mesh.h; KernelBase::interpret_on, run_on) runs once on every
// device, each with its own arguments of the same shapes. Inside it, a device knows its
// coordinates and the mesh's size, copies blocks into the same tensor on a peer, and
// synchronizes. An all-gather over a ring:
//
//   ph::Tensor all_gather(ph::Tensor x) {                 // x: this device's [m, k] shard
//     const int64_t n = ph::mesh_size("x");
//     auto [m, k] = x.sizes<2>();
//     auto out = ph::empty({n * m, k}, x.dtype());
//     for (auto g : ph::grid(1)) {
//       auto me = ph::device_index("x");
//       out[ph::slice(me * m, ph::length(m)), ph::all] = x[ph::all, ph::all];
//       for (auto step : ph::grid(n - 1)) {
//         auto rows = ph::slice(ph::remainder(me - step.begin(), n) * m, ph::length(m));
//         auto send = ph::remote_copy(out, {rows, ph::all}, out[rows, ph::all], ph::ring_next("x"));
//         send.start();
//         send.wait();
//         ph::barrier("x");  // one copy in flight towards a device at a time (see below)
//       }
//     }
//     return out;
//   }
//
// (With n = 1 there is no step: kernels/collectives.cpp guards the loop.) docs/distributed.md is
// the user's account. The rules (src/ir/collectives.h states them exactly):
// - remote_copy(dst, index, block, peer).start() begins copying `block` into dst[index] on
//   `peer`; wait_send() returns once the block has left (the sender may then overwrite the memory
//   it was loaded from), wait_recv() once a copy of this statement has landed on this device (the
//   landing region may then be read); wait() is both. Until its wait_recv, a device must not touch
//   a region a copy lands in. Every copy started is waited for, both ends, before the kernel ends.
//   Waits pair with copies by count only: with two copies of a statement in flight towards a
//   device, its region counts as landed once the device has waited for both (so a ring that
//   forwards what it receives paces its copies: a semaphore, a barrier per step); and a copy that
//   starts unordered with the receiver's earlier wait for the statement could have been the one
//   that wait saw.
// - A block loaded unmasked from a tensor of the destination's dtype is sent in place: the region
//   must hold it from the load until wait_send (no write in between). Any other block is staged
//   in a buffer of the statement's own: the statement must not start again before the previous
//   copy's wait_send.
// - barrier(axes): no device of the group passes it before all of them have reached it.
// - signal(sem, peer, n) adds n to the peer's semaphore; wait(sem, n) waits until this device's
//   is at least n and takes n. Semaphores start at 0 and must end at 0.
// - A launch with collectives runs its grid steps in order.
// The reference interpreter runs every device and reports races, deadlocks, unwaited copies and
// unbalanced semaphores at the user's line; that is the oracle for every backend.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "parhelion/lang.h"
#include "parhelion/mesh.h"

namespace parhelion {

// This device's coordinate along mesh axis `axis`: an i64 scalar (device code).
Tensor device_index(const std::string& axis, Loc loc = Loc::current());
// The number of devices along `axis`: a host integer, for shapes and loop bounds.
int64_t mesh_size(const std::string& axis, Loc loc = Loc::current());

// A device of the mesh, named by its coordinates (i64 scalars, one per axis). Built from this
// device's own coordinates, with some replaced:
//   ph::peer("x", 0)                 device 0 along x, the same along the other axes
//   ph::ring_next("x")               (my x + 1) mod size
//   ph::peer("x", i).along("y", j)   several coordinates
class Peer {
 public:
  Peer along(const std::string& axis, const Operand& index, Loc loc = Loc::current()) const;
  const std::vector<int>& coords() const { return coords_; }

 private:
  friend Peer self_peer(const Loc& loc);
  std::vector<int> coords_;  // value ids, one per mesh axis
};
Peer peer(const std::string& axis, const Operand& index, Loc loc = Loc::current());
Peer ring_next(const std::string& axis, Loc loc = Loc::current());
Peer ring_prev(const std::string& axis, Loc loc = Loc::current());

// An asynchronous copy of a block into a tensor of a peer (device code). Making one records
// what it copies where; start() begins it (each call is one copy), and the waits pair with
// starts by count: wait_send() with this device's starts, wait_recv() with the copies of this
// statement that other devices (or this one) sent here.
class RemoteCopy {
 public:
  void start(Loc loc = Loc::current()) const;
  void wait_send(Loc loc = Loc::current()) const;
  void wait_recv(Loc loc = Loc::current()) const;
  void wait(Loc loc = Loc::current()) const;  // wait_send, then wait_recv
  int id() const { return id_; }

 private:
  friend RemoteCopy remote_copy(const Tensor&, const std::vector<Index>&, const Operand&, const Peer&, Loc);
  int id_ = -1;
};
// dst[index] on `to` = block (the same shape as dst[index]; stored in dst's dtype). The index
// has tiles, ph::all, scalars and slices (one rectangular region: no index blocks).
RemoteCopy remote_copy(const Tensor& dst, std::initializer_list<Index> index, const Operand& block, const Peer& to,
                       Loc loc = Loc::current());
RemoteCopy remote_copy(const Tensor& dst, const std::vector<Index>& index, const Operand& block, const Peer& to,
                       Loc loc = Loc::current());

// Waits until every device of the group (those whose coordinates differ only along `axes`) has
// reached this barrier (device code).
// (ph::barrier("x"), ph::barrier({"x", "y"}))
void barrier(const char* axis, Loc loc = Loc::current());
void barrier(const std::vector<std::string>& axes, Loc loc = Loc::current());

// A counting semaphore on every device, 0 when the kernel starts.
class Semaphore {
 public:
  int id() const { return id_; }

 private:
  friend Semaphore semaphore(Loc);
  int id_ = -1;
};
Semaphore semaphore(Loc loc = Loc::current());
// Adds `count` (an i64 scalar or integer, at least 0) to `to`'s semaphore `s` (device code).
void signal(const Semaphore& s, const Peer& to, Loc loc = Loc::current());
void signal(const Semaphore& s, const Peer& to, const Operand& count, Loc loc = Loc::current());
// Waits until this device's semaphore `s` is at least `count`, then subtracts it (device code).
void wait(const Semaphore& s, Loc loc = Loc::current());
void wait(const Semaphore& s, const Operand& count, Loc loc = Loc::current());

}  // namespace parhelion

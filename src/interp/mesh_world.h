// The devices of a collective kernel in the reference interpreter, and what they share
// (src/ir/collectives.h states the semantics this checks). The cpu backend's simulated mesh
// runs its devices under the same scheduler (backend/cpu/mesh_runner.cpp), with regions it
// does not track (Region::root -1).
//
// Each device runs on a thread of its own, but only one runs at a time: a device runs until it
// finishes or must wait (for a copy, a semaphore, a barrier), then hands over to the next device
// in turn that can go on. A run is therefore deterministic, and when no device that has not
// finished can go on, that is a deadlock, reported with what each device waits for.
//
// Copies land when they start (the data is the block's value then). Whether that is a result
// every schedule would give is what the race checks decide, with vector clocks: each device
// counts its synchronizing events (a copy's start and receive, a signal, a barrier) and learns the
// others' counts through the edges the semantics give (a start before the receive's wait, the
// signals before a semaphore wait, every arrival before a barrier's passing). For the tensors
// copies land in, every element remembers its owner's last access and the last copy that landed
// there: the owner touching it before the copy's receive, or a copy landing where the owner's
// last access or the receive of an earlier copy is not ordered before its start, is a race. The region a copied block
// was loaded from may not be written, and no copy may land there, until its sender's wait on the send.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "parhelion/mesh.h"

namespace parhelion::interp {

class MeshWorld {
 public:
  using Clock = std::vector<int64_t>;
  // Positions (a root tensor's logical element indices; -1: not accessed) of one access.
  struct Region {
    int root = -1;
    std::vector<int64_t> positions;
  };

  explicit MeshWorld(const ir::Function& fn);
  const Mesh& mesh() const { return mesh_; }
  int devices() const { return static_cast<int>(mesh_.devices()); }
  std::string device_name(int d) const;  // "device 2 (x=0, y=2)"

  // Runs `device_body(d)` for every device, one at a time (above); rethrows the first error, or
  // the deadlock; then checks the end state (copies waited for, semaphores at 0).
  void run(const std::function<void(int)>& device_body);

  // --- copies ---
  // Device `sender` starts copy `channel` to `receiver` at `loc` (the start op's, which must
  // outlive the run: reports point to it): its block lands in `landing`
  // (checked: ordered after the receiver's accesses and the earlier landings there, and not on a
  // region being sent from; root -1: not tracked); `source` (root -1: none) is the region the
  // block was loaded from, which the sender may not write until its wait on the send. A staged
  // block (src/ir/collectives.h) may not start while the statement's previous copy may still be
  // sending: `staged_by` names the statement whose buffer holds it (nullptr: sent in place).
  void start_copy(int sender, int receiver, int channel, const Region& landing, const Region& source,
                  const void* staged_by, const ir::SourceLoc& loc);
  void wait_send(int device, int channel, const ir::SourceLoc& loc);
  void wait_recv(int device, int channel, const ir::SourceLoc& loc);
  // Device `device` reads or writes `region` of a tensor: checked against the copies that land
  // there and, for a write, against the copies sending from it.
  void access(int device, const Region& region, bool write, const ir::SourceLoc& loc);
  // Whether copies ever land in root tensor `root` (its accesses are tracked).
  bool tracked(int root) const { return landing_roots_.count(root) != 0; }

  // --- synchronization ---
  void barrier(int device, std::vector<int64_t> axes, const ir::SourceLoc& loc);
  void signal(int device, int peer, int semaphore, int64_t count, const ir::SourceLoc& loc);
  void wait(int device, int semaphore, int64_t count, const ir::SourceLoc& loc);

 private:
  struct Flight {
    int sender, receiver, channel;
    Region landing, source;
    std::vector<int64_t> source_sorted;  // source's positions, sorted (overlap checks)
    Clock clock;                         // the sender's, at the start
    bool sent = false, received = false;
    ir::SourceLoc loc;
    const void* staged_by = nullptr;
    // Regions an earlier wait released that this copy may have been the one to land instead
    // (start_copy): they count as landed again only when this copy is received.
    std::vector<Region> relanding = {};
  };
  // An element of a tracked tensor on one device: the owner's epoch and line at its last access,
  // and the last copy that landed there: its sender, and the owner's epoch at the wait that
  // received it (-1: still in flight).
  struct Element {
    int64_t owner_epoch = -1;
    const ir::SourceLoc* owner_loc = nullptr;
    int landing_sender = -1;
    int64_t landing_received = -1;
    const ir::SourceLoc* landing_loc = nullptr;
  };

  // Blocks `device` until `ready()` holds, letting the others run; `what()` says why, for a
  // deadlock's report (when it is made). Throws Aborted when another device failed.
  void block_until(int device, const std::function<bool()>& ready, const std::function<std::string()>& what);
  void pass_baton(int from);  // with mu_ held
  // A wait on copies (`pending` says which it can be for; `owed` counts the waits not yet
  // matched): blocks until one is in flight, and says whether the waits now match every copy in
  // flight; complete_copies then applies `done` to each, forgetting those done at both ends.
  bool await_copies(int device, const std::function<bool(const Flight&)>& pending, int64_t& owed,
                    const std::function<std::string()>& what);
  void complete_copies(const std::function<bool(const Flight&)>& pending, const std::function<void(Flight&)>& done);
  void join(Clock& into, const Clock& from) const;
  std::string copy_name(int channel) const;
  std::string region_name(const Region& r) const;
  [[noreturn]] void race(const ir::SourceLoc& loc, const std::string& msg) const;
  std::vector<Element>& elements(int device, int root);
  void check_end() const;

  const ir::Function& fn_;
  Mesh mesh_;
  std::vector<ir::SourceLoc> copy_locs_;                     // where each copy was made (ph::remote_copy)
  std::map<int, int64_t> landing_roots_;                     // root tensor -> elements
  std::vector<std::map<int, std::vector<Element>>> memory_;  // per device, per tracked root
  std::vector<Clock> clocks_;
  std::list<Flight> flights_;
  // Waits made on (device, channel) not yet known to be for which copies (wait_send, wait_recv).
  std::map<std::pair<int, int>, int64_t> sends_owed_, receives_owed_;
  // Per (receiver, channel): its last wait_recv that found every copy in flight landed (its epoch
  // then, and where): a copy of the channel that starts towards it unordered with that wait
  // could have been the one the wait saw (waits pair by count), see start_copy.
  struct Release {
    int64_t epoch;
    ir::SourceLoc loc;
    std::vector<Region> regions;  // the landing regions it released
  };
  std::map<std::pair<int, int>, Release> last_release_;
  std::vector<std::vector<int64_t>> semaphores_;  // per device, per semaphore
  std::vector<std::vector<Clock>> semaphore_clocks_;
  std::vector<std::vector<ir::SourceLoc>> semaphore_locs_;  // per device: the last signal to it, for the end report
  // Barriers: per group (its axes and the coordinates off them) and generation, the arrivals
  // and the join of their clocks.
  struct Generation {
    int arrived = 0;
    Clock clock;
  };
  std::map<std::vector<int64_t>, std::map<int64_t, Generation>> barriers_;
  std::map<std::vector<int64_t>, std::vector<int64_t>> barrier_counts_;  // per group key, per device

  // The scheduler.
  enum class State { ready, blocked, done };
  std::mutex mu_;
  std::condition_variable cv_;
  int running_ = -1;
  std::vector<State> state_;
  std::vector<std::function<bool()>> ready_;
  std::vector<std::function<std::string()>> waiting_for_;
  bool aborted_ = false;
  std::exception_ptr error_;
};

}  // namespace parhelion::interp

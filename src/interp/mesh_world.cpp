#include "interp/mesh_world.h"

#include <algorithm>
#include <thread>

#include "ir/collectives.h"
#include "ir/views.h"
#include "parhelion/error.h"

namespace parhelion::interp {
namespace {

// A region's accessed positions, sorted (for overlaps, once per copy rather than per access).
std::vector<int64_t> sorted_positions(const MeshWorld::Region& r) {
  std::vector<int64_t> s;
  for (int64_t p : r.positions)
    if (p >= 0) s.push_back(p);
  std::sort(s.begin(), s.end());
  return s;
}

// Whether region `r` accesses one of the `sorted` positions (of the same root).
bool overlaps(const std::vector<int64_t>& sorted, const MeshWorld::Region& r) {
  for (int64_t p : r.positions)
    if (p >= 0 && std::binary_search(sorted.begin(), sorted.end(), p)) return true;
  return false;
}

// Ends a device's thread when another device failed (not an std::exception: nothing in the
// interpreter catches it on the way out).
struct Aborted {};

}  // namespace

MeshWorld::MeshWorld(const ir::Function& fn)
    : fn_(fn),
      mesh_(fn.mesh),
      copy_locs_(static_cast<size_t>(fn.num_copies)),
      memory_(static_cast<size_t>(mesh_.devices())),
      clocks_(static_cast<size_t>(mesh_.devices()), Clock(static_cast<size_t>(mesh_.devices()), 0)),
      semaphores_(static_cast<size_t>(mesh_.devices()),
                  std::vector<int64_t>(static_cast<size_t>(fn.num_semaphores), 0)),
      semaphore_clocks_(
          static_cast<size_t>(mesh_.devices()),
          std::vector<Clock>(static_cast<size_t>(fn.num_semaphores), Clock(static_cast<size_t>(mesh_.devices()), 0))),
      semaphore_locs_(static_cast<size_t>(mesh_.devices()),
                      std::vector<ir::SourceLoc>(static_cast<size_t>(fn.num_semaphores))) {
  ir::walk(fn.body, [&](const ir::Op& op) {
    if (op.kind != ir::OpKind::CopyStart) return;
    if (copy_locs_.at(static_cast<size_t>(op.channel)).line == 0)
      copy_locs_.at(static_cast<size_t>(op.channel)) = op.loc;
    const int root = ir::root_of(fn, op.tensor);
    landing_roots_[root] = shape_numel(fn.tensors.at(root).shape);
  });
}

std::string MeshWorld::device_name(int d) const {
  std::string s = "device " + std::to_string(d) + " (";
  const std::vector<int64_t> c = mesh_.coords(d);
  for (size_t i = 0; i < c.size(); ++i) s += (i ? ", " : "") + mesh_.axes()[i].name + "=" + std::to_string(c[i]);
  return s + ")";
}

std::string MeshWorld::copy_name(int channel) const {
  const ir::SourceLoc& at = copy_locs_.at(channel);
  return "copy c" + std::to_string(channel) + (at.line > 0 ? " (started at " + at.str() + ")" : "");
}

std::string MeshWorld::region_name(const Region& r) const {
  const ir::TensorInfo& t = fn_.tensors.at(r.root);
  for (int64_t p : r.positions) {
    if (p < 0) continue;
    std::string at;
    for (size_t k = t.shape.size(); k-- > 0;) {
      at = std::to_string(p % t.shape[k]) + (at.empty() ? "" : ", ") + at;
      p /= t.shape[k];
    }
    return t.name + " (element [" + at + "] among others)";
  }
  return t.name;
}

void MeshWorld::race(const ir::SourceLoc& loc, const std::string& msg) const {
  throw UserError(loc.str() + ": race: " + msg);
}

void MeshWorld::join(Clock& into, const Clock& from) const {
  for (size_t i = 0; i < into.size(); ++i) into[i] = std::max(into[i], from[i]);
}

std::vector<MeshWorld::Element>& MeshWorld::elements(int device, int root) {
  std::vector<Element>& e = memory_.at(device)[root];
  if (e.empty()) e.resize(static_cast<size_t>(landing_roots_.at(root)));
  return e;
}

// --- the scheduler ------------------------------------------------------------------------------

void MeshWorld::run(const std::function<void(int)>& device_body) {
  const int n = devices();
  state_.assign(n, State::ready);
  ready_.assign(n, nullptr);
  waiting_for_.assign(n, nullptr);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int d = 0; d < n; ++d) {
    threads.emplace_back([this, d, &device_body] {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return running_ == d || aborted_; });
        if (aborted_) return;
      }
      try {
        device_body(d);
      } catch (const Aborted&) {
        return;
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
        aborted_ = true;
        cv_.notify_all();
        return;
      }
      std::lock_guard<std::mutex> lock(mu_);
      state_[d] = State::done;
      pass_baton(d);
    });
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = 0;
    cv_.notify_all();
  }
  for (std::thread& t : threads) t.join();
  if (error_) std::rethrow_exception(error_);
  check_end();
}

void MeshWorld::pass_baton(int from) {
  const int n = devices();
  for (int k = 1; k <= n; ++k) {
    const int g = (from + k) % n;
    if (state_[g] == State::blocked && ready_[g]()) state_[g] = State::ready;
    if (state_[g] == State::ready) {
      running_ = g;
      cv_.notify_all();
      return;
    }
  }
  if (std::all_of(state_.begin(), state_.end(), [](State s) { return s == State::done; })) {
    running_ = -1;
    return;
  }
  std::string msg = "deadlock: every device that has not finished is waiting, and nothing it waits for can come:";
  for (int g = 0; g < n; ++g)
    if (state_[g] == State::blocked) msg += "\n  " + waiting_for_[g]();
  error_ = std::make_exception_ptr(UserError(msg));
  aborted_ = true;
  cv_.notify_all();
}

void MeshWorld::block_until(int device, const std::function<bool()>& ready, const std::function<std::string()>& what) {
  if (ready()) return;
  std::unique_lock<std::mutex> lock(mu_);
  state_[device] = State::blocked;
  ready_[device] = ready;
  waiting_for_[device] = what;
  pass_baton(device);
  cv_.wait(lock, [&] { return running_ == device || aborted_; });
  if (aborted_) throw Aborted{};
}

// --- copies -------------------------------------------------------------------------------------

void MeshWorld::start_copy(int sender, int receiver, int channel, const Region& landing, const Region& source,
                           const void* staged_by, const ir::SourceLoc& loc) {
  Clock& c = clocks_.at(sender);
  ++c[sender];
  const std::string what = device_name(sender) + "'s " + copy_name(channel) + " to " + device_name(receiver);
  if (staged_by)
    for (const Flight& f : flights_)
      if (f.sender == sender && f.staged_by == staged_by && !f.sent)
        race(loc, what + " starts while its previous copy (started at " + f.loc.str() +
                      ") may still be sending: its block is computed, so a backend stages it in a buffer of "
                      "the copy statement's own, which that copy may still be reading; wait for its send "
                      "(wait_send) first, or copy a block loaded from a tensor of the destination's dtype (sent "
                      "in place)");
  for (const Flight& f : flights_)
    if (f.sender == receiver && !f.sent && f.source.root == landing.root && overlaps(f.source_sorted, landing))
      race(loc, what + " lands in " + region_name(landing) + ", which " + device_name(receiver) + "'s " +
                    copy_name(f.channel) + " (started at " + f.loc.str() +
                    ") is still sending from: the sender waits for its send (wait_send) before that region "
                    "may be written");
  // A wait pairs with copies by count: had this copy started before the receiver's last wait for
  // the channel (nothing orders it after), that wait could have seen it land instead of a copy it
  // released. So those regions were not known landed: an access the receiver made to them since
  // is a race, and they count as landed again only when this copy is received.
  std::vector<Region> relanding;
  if (auto r = last_release_.find({receiver, channel}); r != last_release_.end() && r->second.epoch > c[receiver]) {
    for (const Region& released : r->second.regions) {
      std::vector<Element>& mem = elements(receiver, released.root);
      for (int64_t p : released.positions) {
        if (p < 0) continue;
        Element& e = mem.at(static_cast<size_t>(p));
        if (e.owner_loc && e.owner_epoch >= r->second.epoch)
          race(loc, what + " starts unordered with " + device_name(receiver) + "'s wait at " + r->second.loc.str() +
                        " for an earlier copy of it, after which " + device_name(receiver) + " accessed " +
                        region_name(released) + " (at " + e.owner_loc->str() +
                        "): waits pair with copies by count, so that wait may have seen this copy land instead, "
                        "and the access come before the copy it waited for; order this start after that wait "
                        "(the receiver signals the sender after it, or a barrier between them)");
        e.landing_received = -1;
        e.landing_loc = &loc;
        e.landing_sender = sender;
      }
      relanding.push_back(released);
    }
    last_release_.erase(r);
  }
  Flight flight{sender, receiver, channel, landing, source,    sorted_positions(source),
                c,      false,    false,   loc,     staged_by, std::move(relanding)};
  if (landing.root < 0) {  // (untracked: the cpu backend's copies)
    flights_.push_back(std::move(flight));
    return;
  }
  std::vector<Element>& mem = elements(receiver, landing.root);
  const int64_t seen = c[receiver];  // how far the sender knows the receiver's events
  for (int64_t p : landing.positions) {
    if (p < 0) continue;
    Element& e = mem.at(static_cast<size_t>(p));
    if (e.owner_loc && e.owner_epoch >= seen)
      race(loc, what + " lands in " + region_name(landing) + ", which " + device_name(receiver) +
                    " also reads or writes (at " + e.owner_loc->str() +
                    ") with nothing ordering that access before this copy (a barrier, a signal and wait, or a "
                    "copy's wait between them)");
    if (e.landing_loc && (e.landing_received < 0 || e.landing_received >= seen))
      race(loc, what + " lands in " + region_name(landing) + ", where a copy from " + device_name(e.landing_sender) +
                    " (started at " + e.landing_loc->str() + ") " +
                    (e.landing_received < 0 ? "is still landing" : "landed") +
                    ", with nothing ordering its receive before this copy");
    e.landing_sender = sender;
    e.landing_received = -1;
    e.landing_loc = &loc;  // (the start's op: it outlives the run)
  }
  if (sender == receiver && source.root == landing.root && overlaps(flight.source_sorted, landing))
    race(loc, what + " lands in " + region_name(landing) + ", which it is sending from itself");
  flights_.push_back(std::move(flight));
}

// A wait pairs with the copies of its channel by count only: on a TPU it waits on a semaphore
// that every such copy adds to, so while two are in flight, which one a wait saw complete is not
// defined. A wait is therefore owed to the copies in flight until as many waits as copies have
// been made; only then are they all known complete (their regions released, their clocks
// learnt). A kernel that reads a landing region while another copy of the same statement may
// still be landing on the device is reported as a race there (flow control, a barrier or a
// copy statement per buffer avoid it).
bool MeshWorld::await_copies(int device, const std::function<bool(const Flight&)>& pending, int64_t& owed,
                             const std::function<std::string()>& what) {
  auto in_flight = [&] { return std::count_if(flights_.begin(), flights_.end(), pending); };
  block_until(
      device, [&] { return in_flight() > owed; }, what);
  if (++owed < in_flight()) return false;
  owed = 0;
  return true;
}

void MeshWorld::complete_copies(const std::function<bool(const Flight&)>& pending,
                                const std::function<void(Flight&)>& done) {
  for (auto f = flights_.begin(); f != flights_.end();) {
    if (pending(*f)) done(*f);
    if (f->sent && f->received)
      f = flights_.erase(f);
    else
      ++f;
  }
}

void MeshWorld::wait_send(int device, int channel, const ir::SourceLoc& loc) {
  auto pending = [&](const Flight& f) { return f.sender == device && f.channel == channel && !f.sent; };
  if (!await_copies(device, pending, sends_owed_[{device, channel}], [&] {
        return loc.str() + ": " + device_name(device) + " waits for the send of " + copy_name(channel) +
               ", which it has not started";
      }))
    return;
  complete_copies(pending, [](Flight& f) { f.sent = true; });
}

void MeshWorld::wait_recv(int device, int channel, const ir::SourceLoc& loc) {
  auto pending = [&](const Flight& f) { return f.receiver == device && f.channel == channel && !f.received; };
  const bool all_landed = await_copies(device, pending, receives_owed_[{device, channel}], [&] {
    return loc.str() + ": " + device_name(device) + " waits for " + copy_name(channel) +
           " to land, and no device sends it";
  });
  Clock& c = clocks_.at(device);
  ++c[device];
  if (!all_landed) return;
  Release& release = last_release_[{device, channel}] = {c[device], loc, {}};
  complete_copies(pending, [&](Flight& f) {
    f.received = true;
    join(c, f.clock);
    if (f.landing.root < 0) return;
    f.relanding.push_back(f.landing);
    for (const Region& region : f.relanding) {
      std::vector<Element>& mem = elements(device, region.root);
      for (int64_t p : region.positions)
        if (p >= 0) mem.at(static_cast<size_t>(p)).landing_received = c[device];
      release.regions.push_back(region);
    }
  });
}

void MeshWorld::access(int device, const Region& region, bool write, const ir::SourceLoc& loc) {
  if (write)
    for (const Flight& f : flights_)
      if (f.sender == device && !f.sent && f.source.root == region.root && overlaps(f.source_sorted, region))
        race(loc, device_name(device) + " writes " + region_name(region) + ", which its " + copy_name(f.channel) +
                      " (started at " + f.loc.str() +
                      ") is still sending from: wait for the send (wait_send) before writing it");
  if (!tracked(region.root)) return;
  std::vector<Element>& mem = elements(device, region.root);
  const Clock& c = clocks_.at(device);
  for (int64_t p : region.positions) {
    if (p < 0) continue;
    Element& e = mem.at(static_cast<size_t>(p));
    if (e.landing_loc && e.landing_received < 0)
      race(loc, device_name(device) + (write ? " writes " : " reads ") + region_name(region) + " while a copy from " +
                    device_name(e.landing_sender) + " (started at " + e.landing_loc->str() +
                    ") may still be landing there: wait for it to land (wait_recv) first");
    e.owner_epoch = c[device];
    e.owner_loc = &loc;
  }
}

// --- synchronization ----------------------------------------------------------------------------

void MeshWorld::barrier(int device, std::vector<int64_t> axes, const ir::SourceLoc& loc) {
  std::sort(axes.begin(), axes.end());  // (a group is a set of axes)
  const std::vector<int64_t> me = mesh_.coords(device);
  std::vector<int64_t> group = axes;  // the axes, then the coordinates off them
  group.push_back(-1);
  for (size_t a = 0; a < me.size(); ++a)
    if (std::find(axes.begin(), axes.end(), static_cast<int64_t>(a)) == axes.end()) group.push_back(me[a]);
  int64_t members = 1;
  for (int64_t a : axes) members *= mesh_.axes().at(a).size;
  std::vector<int64_t>& counts = barrier_counts_[axes];
  counts.resize(static_cast<size_t>(devices()), 0);
  const int64_t generation = counts[device]++;
  Clock& c = clocks_.at(device);
  ++c[device];
  Generation& g = barriers_[group][generation];
  if (g.clock.empty()) g.clock.assign(c.size(), 0);
  join(g.clock, c);
  ++g.arrived;
  block_until(
      device, [&g, members] { return g.arrived == members; },
      [&] {
        return loc.str() + ": " + device_name(device) + " waits at a barrier for " +
               std::to_string(members - g.arrived) + " more device(s) of its group, which never reach it";
      });
  join(c, g.clock);
}

void MeshWorld::signal(int device, int peer, int semaphore, int64_t count, const ir::SourceLoc& loc) {
  if (count < 0) throw UserError(loc.str() + ": ph::signal with a negative count (" + std::to_string(count) + ")");
  Clock& c = clocks_.at(device);
  ++c[device];
  semaphores_.at(peer).at(semaphore) += count;
  join(semaphore_clocks_.at(peer).at(semaphore), c);
  semaphore_locs_.at(peer).at(semaphore) = loc;
}

void MeshWorld::wait(int device, int semaphore, int64_t count, const ir::SourceLoc& loc) {
  if (count < 0) throw UserError(loc.str() + ": ph::wait with a negative count (" + std::to_string(count) + ")");
  int64_t& s = semaphores_.at(device).at(semaphore);
  block_until(
      device, [&s, count] { return s >= count; },
      [&] {
        return loc.str() + ": " + device_name(device) + " waits for semaphore s" + std::to_string(semaphore) +
               " to reach " + std::to_string(count) + " (it is " + std::to_string(s) +
               "), and no device signals it enough";
      });
  s -= count;
  // Which signals a wait took is not defined while others are outstanding: their clocks are
  // learnt once the semaphore is drained, every signal made to it then taken.
  ++clocks_.at(device)[device];
  if (s == 0) {
    Clock& signalled = semaphore_clocks_.at(device).at(semaphore);
    join(clocks_.at(device), signalled);
    std::fill(signalled.begin(), signalled.end(), 0);
  }
}

void MeshWorld::check_end() const {
  for (const Flight& f : flights_)
    throw UserError(f.loc.str() + ": " + device_name(f.sender) + "'s " + copy_name(f.channel) + " to " +
                    device_name(f.receiver) + " was never waited for " +
                    (!f.sent && !f.received ? "(neither its send nor its receive)"
                     : !f.sent              ? "on its send (wait_send)"
                                            : "on its receive (wait_recv)") +
                    " before the kernel ended; every copy must be");
  for (int d = 0; d < devices(); ++d)
    for (size_t s = 0; s < semaphores_[d].size(); ++s)
      if (semaphores_[d][s] != 0)
        throw UserError(semaphore_locs_[d][s].str() + ": semaphore s" + std::to_string(s) + " of " + device_name(d) +
                        " is " + std::to_string(semaphores_[d][s]) +
                        " when the kernel ends; every signal must be waited for (it must end at 0)");
}

}  // namespace parhelion::interp

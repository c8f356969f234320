#include "lower/cache_hints.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "backend/backend.h"
#include "ir/type_rules.h"
#include "ir/views.h"
#include "lower/fusion.h"

namespace parhelion::lower {
namespace {

using ir::IndexItem;
using ir::Op;
using ir::OpKind;

// The index item that gives an access's block its innermost dim: the last item that spans a
// block dim (a tile of the launch's own, a whole dim, a gather, a slice); -1: none.
int innermost_item(const ir::Function& fn, const Op& op) {
  int last = -1;
  for (size_t d = 0; d < op.index.size(); ++d) {
    const IndexItem& ix = op.index[d];
    const bool spans = ix.kind == IndexItem::Tile
                           ? !fn.tiles[ix.tile].is_grid
                           : ix.kind == IndexItem::All || ix.kind == IndexItem::Gather || ix.kind == IndexItem::Slice;
    if (spans) last = static_cast<int>(d);
  }
  return last;
}

// With the blocks bound: the access's innermost block dim (a store's: its row of groups) holds
// at least one cache line.
bool row_holds_a_line(const BlockProgram& p, const Op& op) {
  const ir::Function& fn = *p.fn;
  ir::Type region;
  ir::load_type(fn, op.tensor, op.index, &region);
  if (region.shape.empty() || region.shape.back().is_one()) return false;
  const int64_t g = op.kind == OpKind::Store ? row_group(fn, op) : 1;
  const ir::Dim& d = region.shape[region.shape.size() - (g > 1 ? 2 : 1)];
  const int64_t n = (d.kind == ir::Dim::Const ? d.size : p.block_of_tile(d.tile)) * g;
  return n * dtype_size(fn.tensors[op.tensor].dtype) >= kCacheLineBytes;
}

}  // namespace

bool contiguous_rows(const ir::Function& fn, const Op& op) {
  const int d = innermost_item(fn, op);
  return d >= 0 && op.index[d].kind != IndexItem::Gather && fn.tensors[op.tensor].strides[d] == 1;
}

int64_t row_group(const ir::Function& fn, const Op& op) {
  const size_t n = op.index.size();
  if (n < 2) return 1;
  const ir::TensorInfo& t = fn.tensors[op.tensor];
  const IndexItem &last = op.index[n - 1], &before = op.index[n - 2];
  const int64_t g = t.shape[n - 1];
  if (last.kind != IndexItem::All || g < 2 || g > 4 || t.strides[n - 1] != 1) return 1;
  if (before.kind != IndexItem::Tile || fn.tiles[before.tile].is_grid || t.strides[n - 2] != g) return 1;
  return g;
}

bool streamable_store(const ir::Function& fn, const Op& launch, const Op& store) {
  if (store.kind != OpKind::Store || ir::is_atomic(store) || ir::is_masked(store)) return false;
  if (!contiguous_rows(fn, store)) return false;
  // A line written past the caches and read back in the same launch would come from memory.
  const int root = ir::root_of(fn, store.tensor);
  bool loaded = false;
  ir::walk(launch.body, [&](const Op& op) { loaded |= op.kind == OpKind::Load && ir::root_of(fn, op.tensor) == root; });
  return !loaded;
}

bool prefetchable_load(const ir::Function& fn, const Op& launch, const Op& load) {
  if (load.kind != OpKind::Load || ir::is_masked(load)) return false;
  const bool top_level =
      std::any_of(launch.body.begin(), launch.body.end(), [&](const Op& op) { return &op == &load; });
  if (!top_level) return false;
  bool moves = false;
  for (const IndexItem& ix : load.index) {
    if (ix.kind == IndexItem::All) continue;
    if (ix.kind != IndexItem::Tile) return false;
    if (std::find(launch.loop_tiles.begin(), launch.loop_tiles.end(), ix.tile) == launch.loop_tiles.end()) return false;
    moves = true;
  }
  return moves && contiguous_rows(fn, load);
}

namespace {

// A load a streamed inner loop's next trip can prefetch: at the top level of a loop at the
// launch's top level (one tile, not jagged, not over an enclosing block), unmasked, indexed by
// the launch's tiles, the loop's tile and whole dims only (the loop's tile among them), its
// innermost block dim a contiguous row. Returns the loop's tile, or -1.
int trip_prefetchable_load(const ir::Function& fn, const Op& launch, const Op& loop, const Op& load) {
  if (loop.kind != OpKind::Loop || loop.loop_tiles.size() != 1 || load.kind != OpKind::Load || ir::is_masked(load))
    return -1;
  const int tile = loop.loop_tiles[0];
  const ir::TileInfo& t = fn.tiles[tile];
  if (t.parent >= 0 || t.is_jagged() || t.is_grid) return -1;
  bool moves = false;
  for (const IndexItem& ix : load.index) {
    if (ix.kind == IndexItem::All) continue;
    if (ix.kind != IndexItem::Tile) return -1;
    moves |= ix.tile == tile;
    if (ix.tile != tile &&
        std::find(launch.loop_tiles.begin(), launch.loop_tiles.end(), ix.tile) == launch.loop_tiles.end())
      return -1;
  }
  return moves && contiguous_rows(fn, load) ? tile : -1;
}

bool has_trip_prefetches(const ir::Function& fn, const Op& launch);  // (defined below)

// The loads of a launch's top-level loops whose next trip can be prefetched.
struct TripSite {
  const Op* loop;
  const Op* load;
  int tile;  // the loop's
};
std::vector<TripSite> trip_sites(const ir::Function& fn, const Op& launch) {
  std::vector<TripSite> out;
  for (const Op& loop : launch.body)
    if (loop.kind == OpKind::Loop)
      for (const Op& load : loop.body)
        if (const int tile = trip_prefetchable_load(fn, launch, loop, load); tile >= 0)
          out.push_back({&loop, &load, tile});
  return out;
}
}  // namespace

bool has_cache_hint_sites(const ir::Function& fn, const Op& launch) {
  return cache_hint_choices(fn, launch).size() > 1;
}

std::vector<std::string> cache_hint_choices(const ir::Function& fn, const Op& launch) {
  bool stores = false, loads = false;
  ir::walk(launch.body, [&](const Op& op) { stores |= streamable_store(fn, launch, op); });
  for (const Op& op : launch.body) loads |= prefetchable_load(fn, launch, op);
  loads |= has_trip_prefetches(fn, launch);
  std::vector<std::string> choices = {"none"};
  if (stores) choices.push_back("stream");
  if (loads) choices.push_back("prefetch");
  if (stores && loads) choices.push_back("stream+prefetch");
  return choices;
}

bool exceeds_caches(int64_t bytes, const backend::Machine& m) {
  return bytes > 4 * m.fast_memory_bytes * std::max(1, m.threads);
}

namespace {

// Which tensor loads each top-level statement of a launch reads in its own loop nest, and the
// statements that can issue prefetches: a store, a reduction along the innermost axis, a
// pointwise value computed into scratch.
class Readers {
 public:
  Readers(const ir::Function& fn, const LaunchPlan& L) : fn_(fn), L_(L) {
    ir::walk(L.op->body, [&](const Op& op) {
      if (op.result >= 0) defs_[op.result] = &op;
    });
  }

  // What statement `s` computes in its own loop nest: the loads it reads from their tensors
  // (not from scratch), and whether it evaluates a transcendental function per element.
  struct Reach {
    std::set<const Op*> loads;
    bool transcendental = false;
  };
  // (Memoized: the default's block growth asks for a launch's statements for both plans of every
  // candidate, the loads read twice and the trips' hosts.)
  const Reach& reach(const Op& s) {
    auto it = reached_.find(&s);
    return it != reached_.end() ? it->second : reached_.emplace(&s, walk_reach(s)).first->second;
  }

 private:
  Reach walk_reach(const Op& s) {
    Reach out;
    std::set<int> seen;  // (a value read twice in the chain is walked once: y*y + y nested is a DAG)
    std::function<void(int)> chain = [&](int v) {
      auto it = defs_.find(v);
      if (v < 0 || it == defs_.end() || fn_.type_of(v).rank() == 0 || !seen.insert(v).second) return;
      const Op& d = *it->second;
      if (L_.materialized(v) >= 0 && &d != &s) return;  // read from its scratch
      if (d.kind == OpKind::Load) {
        out.loads.insert(&d);
        return;
      }
      if (d.kind == OpKind::Unary) out.transcendental |= transcendental(static_cast<ir::UnaryFn>(d.fn));
      for (int u : d.operands) chain(u);
    };
    if (s.kind == OpKind::Store || s.kind == OpKind::Reduce || materialized_pointwise(s)) {
      for (int u : s.operands) chain(u);
      if (s.kind == OpKind::Load) out.loads.insert(&s);
      if (s.kind == OpKind::Unary) out.transcendental |= transcendental(static_cast<ir::UnaryFn>(s.fn));
      if (s.kind == OpKind::Reduce) {
        auto it = L_.values.find(s.result);
        if (it != L_.values.end() && it->second.computes >= 0) {  // the producer it computes in its loop
          const Op& producer = *defs_.at(it->second.computes);
          if (producer.kind == OpKind::Unary)
            out.transcendental |= transcendental(static_cast<ir::UnaryFn>(producer.fn));
          for (int u : producer.operands) chain(u);
        }
      }
      return out;
    }
    if (s.kind == OpKind::Loop || s.kind == OpKind::If || s.kind == OpKind::Dot || s.kind == OpKind::Scan ||
        s.kind == OpKind::VarDecl || s.kind == OpKind::VarSet) {
      for (int u : s.operands) chain(u);  // (conservative: none of these issues prefetches)
      ir::walk(s.body, [&](const Op& op) {
        if (op.kind == OpKind::Load) out.loads.insert(&op);
        for (int u : op.operands) chain(u);
      });
    }
    return out;  // a fused value: read where its consumers are
  }

 public:
  // The shape of the loop nest a statement runs its rows in, if it can issue prefetches.
  bool host_shape(const Op& s, std::vector<ir::Dim>* shape) const {
    if (s.kind == OpKind::Store) {
      ir::Type region;
      ir::load_type(fn_, s.tensor, s.index, &region);
      *shape = region.shape;
      return true;
    }
    if (s.kind == OpKind::Reduce) {
      const ir::Type& in = fn_.type_of(s.operands[0]);
      if (s.axis != in.rank() - 1) return false;
      *shape = in.shape;
      return true;
    }
    if (materialized_pointwise(s)) {
      *shape = fn_.type_of(s.result).shape;
      return true;
    }
    return false;
  }

 private:
  static bool transcendental(ir::UnaryFn f) {
    using ir::UnaryFn;
    return f == UnaryFn::exp || f == UnaryFn::log || f == UnaryFn::tanh || f == UnaryFn::sigmoid ||
           f == UnaryFn::silu || f == UnaryFn::gelu;
  }

  // A pointwise value computed into scratch by a loop nest of its own at its position (not by
  // the reduction that consumes it).
  bool materialized_pointwise(const Op& s) const {
    if (s.result < 0 || L_.materialized(s.result) < 0 || fn_.type_of(s.result).rank() == 0) return false;
    auto it = L_.values.find(s.result);
    if (it != L_.values.end() && it->second.in_reduction >= 0) return false;
    return s.kind == OpKind::Load || s.kind == OpKind::Unary || s.kind == OpKind::Binary || s.kind == OpKind::Where ||
           s.kind == OpKind::Cast;
  }

  const ir::Function& fn_;
  const LaunchPlan& L_;
  std::map<int, const Op*> defs_;
  std::map<const Op*, Reach> reached_;
};

// The first and the last top-level statement of a launch that read each load in their loop nests.
struct LoadReaders {
  std::map<const Op*, const Op*> first, last;
};
LoadReaders load_readers(const Op& launch, Readers& readers) {
  LoadReaders out;
  for (const Op& s : launch.body)
    for (const Op* load : readers.reach(s).loads) {
      out.first.emplace(load, &s);
      out.last[load] = &s;
    }
  return out;
}

// Each prefetchable load of `L`'s launch and the statement that would prefetch it: the last
// that reads it, if that one can issue prefetches and its rows are the load's rows (a row of its
// nest prefetches the same row of the next step's block).
std::vector<std::pair<const Op*, const Op*>> prefetch_hosts(const ir::Function& fn, const LaunchPlan& L,
                                                            const Readers& readers, const LoadReaders& by) {
  std::vector<std::pair<const Op*, const Op*>> out;
  for (const Op& load : L.op->body) {
    if (!prefetchable_load(fn, *L.op, load)) continue;
    auto it = by.last.find(&load);
    std::vector<ir::Dim> shape;
    if (it == by.last.end() || !readers.host_shape(*it->second, &shape)) continue;
    if (shape == fn.type_of(load.result).shape) out.push_back({&load, it->second});
  }
  return out;
}

// The dim of a load's block that index item `item` spans: the items before it that give the
// block a dim (a grid tile and a scalar index give none: ir/type_rules.cpp).
int block_dim_of_item(const ir::Function& fn, const Op& load, size_t item) {
  int d = 0;
  for (size_t i = 0; i < item; ++i) {
    const IndexItem& ix = load.index[i];
    d += ix.kind != IndexItem::Scalar && !(ix.kind == IndexItem::Tile && fn.tiles[ix.tile].is_grid);
  }
  return d;
}

// Each trip-prefetchable load of `L`'s launch's top-level loops, the loop's tile, and the
// statement of the loop's body that prefetches the next trip's block: the last one that reads
// the block in a loop nest of its rows computing a transcendental (a softmax's or a cross
// entropy's exp and sum), which is where the memory would otherwise idle. (Not merely the last
// reader: cross_entropy's last is its one-hot pick of the target logit, which reads one element.)
// `rereads`: another statement read the block before it (the first read, from memory, is the
// one the prefetch saves).
struct TripHost {
  const Op* load;
  const Op* host;
  int tile;
  int dim;  // the dim of the load's block the loop's tile indexes
  bool rereads;
};
std::vector<TripHost> trip_hosts(const ir::Function& fn, const LaunchPlan& L, Readers& readers) {
  std::vector<TripHost> out;
  for (const auto& [loop, load, tile] : trip_sites(fn, *L.op)) {
    const Op* host = nullptr;
    const Op* first = nullptr;
    for (const Op& s : loop->body) {
      const Readers::Reach& r = readers.reach(s);
      if (r.loads.count(load) == 0) continue;
      if (first == nullptr) first = &s;
      std::vector<ir::Dim> shape;
      if (r.transcendental && readers.host_shape(s, &shape) && shape == fn.type_of(load->result).shape) host = &s;
    }
    if (host == nullptr) continue;
    size_t item = 0;
    while (load->index[item].kind != IndexItem::Tile || load->index[item].tile != tile) ++item;
    out.push_back({load, host, tile, block_dim_of_item(fn, *load, item), host != first});
  }
  return out;
}

// The fusion decisions of a launch (what Readers needs), without the rest of its plan.
LaunchPlan fusion_plan(const ir::Function& fn, const Op& launch) {
  LaunchPlan L;
  L.op = &launch;
  std::set<int> materialized = choose_materialized(fn, launch, accumulating_dots(fn, launch));
  const std::vector<ReductionProducer> computed = producers_computed_by_reductions(fn, launch, &materialized);
  for (int v : materialized) L.values[v].materialized = 0;  // (which scratch does not matter here)
  for (const ReductionProducer& r : computed) L.compute_in_reduction(r.reduction, r.producer, r.stored);
  return L;
}

// Whether some streamed loop of `launch` has a block worth prefetching a trip ahead (TripHost).
bool has_trip_prefetches(const ir::Function& fn, const Op& launch) {
  if (trip_sites(fn, launch).empty()) return false;  // (no fusion plan needed)
  const LaunchPlan L = fusion_plan(fn, launch);
  Readers readers(fn, L);
  for (const TripHost& h : trip_hosts(fn, L, readers))
    if (h.rereads) return true;
  return false;
}

}  // namespace

std::vector<int64_t> reread_block_bytes(const BlockProgram& p, const LaunchPlan& L) {
  const ir::Function& fn = *p.fn;
  auto bytes_of = [&](const Op& load) {
    int64_t bytes = dtype_size(fn.tensors[load.tensor].dtype);
    for (const ir::Dim& d : fn.type_of(load.result).shape)
      bytes *= d.kind == ir::Dim::Const ? d.size : p.block_of_tile(d.tile);
    return bytes;
  };
  Readers readers(fn, L);
  std::vector<int64_t> out;
  const LoadReaders by = load_readers(*L.op, readers);
  for (const Op& load : L.op->body)  // (in the body's order: the same for every config)
    if (auto first = by.first.find(&load); first != by.first.end() && by.last.at(&load) != first->second)
      out.push_back(bytes_of(load));
  for (const TripHost& h : trip_hosts(fn, L, readers))
    if (h.rereads) out.push_back(bytes_of(*h.load));
  return out;
}

void plan_cache_hints(const BlockProgram& p, LaunchPlan& L, const std::string& choice) {
  const ir::Function& fn = *p.fn;
  const Op& launch = *L.op;
  const bool stream = choice == "stream" || choice == "stream+prefetch";
  const bool prefetch = choice == "prefetch" || choice == "stream+prefetch";
  // (a store whose block a dot writes in place is left out: DotPlan::writes_output)
  ir::walk(launch.body, [&](const Op& op) {
    if (stream && streamable_store(fn, launch, op) && !L.dot_writing_output(op.operands[0]) && row_holds_a_line(p, op))
      L.streamed_stores.push_back(&op);
  });
  if (!prefetch) return;
  Readers readers(fn, L);
  for (const auto& [load, host] : prefetch_hosts(fn, L, readers, load_readers(launch, readers)))
    if (row_holds_a_line(p, *load)) L.prefetches.push_back({load, host});
  // A streamed inner loop's next trip, where its block is read again (a single pass over it
  // streams with the hardware prefetcher; a staged loop prefetches its own: emit/staging.cpp).
  for (const TripHost& h : trip_hosts(fn, L, readers)) {
    const InnerLoop* il = L.inner_loop(h.tile);
    if (il != nullptr && il->strategy == Strategy::Stream && h.rereads && row_holds_a_line(p, *h.load))
      L.prefetches.push_back({h.load, h.host, h.tile, h.dim});
  }
}

std::string default_cache_hint(const ir::Function& fn, const Op& launch, const backend::Machine& m) {
  const std::vector<std::string> choices = cache_hint_choices(fn, launch);
  auto large = [&](const Op& op) {
    const ir::TensorInfo& t = fn.tensors[op.tensor];
    return exceeds_caches(shape_numel(t.shape) * dtype_size(t.dtype), m);
  };
  bool stream = false, prefetch = false;
  ir::walk(launch.body, [&](const Op& op) { stream |= streamable_store(fn, launch, op) && large(op); });
  const LaunchPlan L = fusion_plan(fn, launch);
  Readers readers(fn, L);
  const LoadReaders by = load_readers(launch, readers);
  for (const auto& [load, host] : prefetch_hosts(fn, L, readers, by))
    prefetch |= large(*load) && host != by.first.at(load);
  for (const TripHost& h : trip_hosts(fn, L, readers)) prefetch |= large(*h.load) && h.rereads;
  const std::string want = stream && prefetch ? "stream+prefetch" : stream ? "stream" : prefetch ? "prefetch" : "none";
  return std::find(choices.begin(), choices.end(), want) != choices.end() ? want : "none";
}

}  // namespace parhelion::lower

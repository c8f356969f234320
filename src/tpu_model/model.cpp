#include "tpu_model/model.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "backend/pallas/plan.h"
#include "ir/trip_guard.h"
#include "ir/type_rules.h"

namespace parhelion::tpu_model {

using ir::Dim;
using ir::Op;
using ir::OpKind;

namespace {

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Work of a region (a grid step's own ops, or one trip of an inner loop).
struct Work {
  double mxu_s = 0, vpu_s = 0, eup_s = 0, flops = 0;
  // The vector core's VMEM traffic (vector_memory below) and the MXU result drains.
  double vld_s = 0, vst_s = 0, pop_s = 0;
  double gather_dma_s = 0;  // dma gathers' row copies, issued and waited for within the step
  // The MXU and the vector core's slots (ALUs, EUP, loads, stores, drains) run side by side:
  // the scheduler interleaves one block's vector work (attention's softmax, an accumulator's
  // adds) with the next block's matmul, so a region takes its busiest unit's time.
  double seconds() const { return std::max({mxu_s, vpu_s, eup_s, vld_s, vst_s, pop_s}); }
};

class LaunchModel {
 public:
  LaunchModel(const lower::BlockProgram& p, const backend::pallas::PallasLaunch& pl, const TpuHardware& hw)
      : p_(p), fn_(*p.fn), pl_(pl), L_(*pl.plan), hw_(hw) {}

  Prediction run() {
    Prediction r;
    ir::walk(L_.op->body, [&](const Op& o) {
      if (o.result >= 0) defs_[o.result] = &o;
    });
    // Regions: the step's own ops, and one trip of each inner loop.
    ir::walk(L_.op->body, [&](const Op& o) {
      for (int v : o.operands) consumers_[v].push_back(&o);
    });
    std::vector<const Op*> step_ops;
    for (const Op& op : L_.op->body) {
      if (op.kind == OpKind::Loop) {
        Work w;
        std::vector<const Op*> trip;
        for (const Op& inner : op.body) trip.push_back(&inner);
        account_region(trip, w);
        loops_.push_back({op.loop_tiles[0], w, runs_fraction(op)});
      } else {
        step_ops.push_back(&op);
      }
    }
    account_region(step_ops, step_);
    if (pl_.comm.any)
      timeline(r);
    else
      simulate(r);
    return r;
  }

 private:
  struct LoopWork {
    int tile;
    Work trip;
    double runs = 1;  // the fraction of its trips whose body runs (causal loops: ir/trip_guard.h)
  };

  // A jagged loop's ranges come from data (row offsets) the model does not see. It takes them as
  // a partition of the bound among the entries they are read for (the steps of the launch tiles
  // that index the loads behind the range's ends: a segment, a batch, an expert), as offsets
  // are: each step runs its share of the trips and one ragged trip. Without such tiles, every
  // step runs the whole bound.
  double jagged_runs(const ir::TileInfo& t, int64_t trips) const {
    std::set<int> tiles, seen;
    std::function<void(int)> visit = [&](int v) {
      auto it = defs_.find(v);
      if (it == defs_.end() || !seen.insert(v).second) return;
      const Op& o = *it->second;
      if (o.tile >= 0) tiles.insert(o.tile);  // (TileBegin, TileEnd, TileIndex, TileId)
      for (int u : o.operands) visit(u);
      for (const ir::IndexItem& ix : o.index)
        if (ix.kind == ir::IndexItem::Tile)
          tiles.insert(ix.tile);
        else if (ix.kind != ir::IndexItem::All)
          visit(ix.value);
    };
    visit(t.begin_value);
    visit(t.end_value);
    double entries = 1;
    for (const lower::GridDim& g : pl_.grid)
      if (tiles.count(g.tile)) entries *= static_cast<double>(g.steps);
    return std::min(1.0, (static_cast<double>(trips) / entries + 1) / static_cast<double>(trips));
  }

  // A loop whose trips past a bound e do nothing (causal attention's key blocks above the
  // diagonal): the fraction of its trips that run, averaged over the outer blocks. Every
  // backend bounds such a loop at e: the skipped trips compute nothing and copy nothing (a
  // pipeline's or a grid loop's index maps stop at the last trip that runs).
  double runs_fraction(const Op& loop) const {
    const ir::TileInfo& t = fn_.tiles[loop.loop_tiles[0]];
    const int64_t b = block(t.id), trips = this->trips(t.id);
    if (t.is_jagged()) return jagged_runs(t, trips);
    const std::optional<ir::TripBound> bound = ir::TripBound::of(fn_, loop, L_.op->loop_tiles);
    if (!bound) return 1;
    // Every combination of the blocks of the launch tiles e reads (at most kMaxCombinations;
    // more are sampled evenly).
    const std::set<int> read = bound->tiles();
    const std::vector<int> dims(read.begin(), read.end());
    std::vector<int64_t> at(fn_.tiles.size(), 0), steps;
    auto tile_at = [&](int tile, bool end) {
      const ir::TileInfo& g = fn_.tiles[tile];
      const int64_t gb = unit(tile) ? 1 : block(tile), off = g.begin + at[tile] * gb;
      return end ? std::min(off + gb, g.end) : off;
    };
    int64_t combinations = 1;
    for (int d : dims) {
      const ir::TileInfo& g = fn_.tiles[d];
      const int64_t gb = unit(d) ? 1 : block(d);
      steps.push_back((g.extent() + gb - 1) / gb);
      combinations *= steps.back();
    }
    constexpr int64_t kMaxCombinations = 1 << 16;
    const int64_t stride = std::max<int64_t>(1, combinations / kMaxCombinations);
    double runs = 0, counted = 0;
    for (int64_t c = 0; c < combinations; c += stride) {
      int64_t rest = c;
      for (size_t i = 0; i < dims.size(); ++i) {
        at[dims[i]] = rest % steps[i];
        rest /= steps[i];
      }
      const int64_t e = bound->evaluate(tile_at);
      runs += static_cast<double>(std::clamp<int64_t>((e - t.begin + b - 1) / b, 0, trips));
      counted += 1;
    }
    return runs / counted / static_cast<double>(trips);
  }

  void account_region(const std::vector<const Op*>& ops, Work& w) {
    for (const Op* op : ops) account(*op, w);
    vector_memory(ops, w);
  }

  // Vregs a value of type t takes at `bytes` per element: (8, 128) tiles of 32-bit data,
  // (16, 128) of 16-bit.
  double vregs(const ir::Type& t, int64_t bytes) const {
    std::vector<int64_t> d = dims(t);
    const int64_t b = std::clamp<int64_t>(bytes, 1, 4);
    double n = 1;
    for (size_t i = 0; i < d.size(); ++i) {
      int64_t x = d[i];
      if (i + 1 == d.size()) x = round_up(x, 128);
      if (i + 2 == d.size()) x = round_up(x, 8 * 4 / b);
      n *= static_cast<double>(x);
    }
    return n * static_cast<double>(b) / 4096;
  }

  // The vector core's VMEM traffic in a region (a step's own ops, or one trip of a loop).
  // Blocks are read from and written to VMEM refs (vld, vst). A value small enough for the
  // register file stays there. A larger one streams through the registers vreg by vreg where
  // its consumers allow (an elementwise chain, a reduction that accumulates as it goes), and
  // is written to VMEM and read back by each consumer where they do not:
  //   - a consumer needs a reduction over the value first (softmax's s - max(s), a norm's
  //     x * rsqrt(mean(x^2))): the whole tile must be kept until the reduction is done;
  //   - it is a computed operand of a dot (the MXU takes whole operand tiles);
  //   - it is read outside the region (a step's value that a loop's trips read), or carried
  //     from trip to trip (a Var: attention's accumulator is read and written every trip).
  // This is what keeps the seed's attention MXU-bound at 512 x 512 blocks (published 892
  // TFLOP/s): materializing every intermediate, as an op-by-op schedule would, makes it
  // store-bound at about half that rate.
  void vector_memory(const std::vector<const Op*>& ops, Work& w) {
    std::vector<const Op*> flat;
    std::function<void(const Op*)> add = [&](const Op* o) {
      flat.push_back(o);
      if (o->kind == OpKind::If)
        for (const Op& inner : o->body) add(&inner);
    };
    for (const Op* o : ops) add(o);
    std::map<const Op*, size_t> position;  // op -> its index in the region
    for (size_t i = 0; i < flat.size(); ++i) position[flat[i]] = i;
    std::map<int, size_t> producer;
    for (size_t i = 0; i < flat.size(); ++i)
      if (flat[i]->result >= 0) producer[flat[i]->result] = i;
    // Per op: the region's values it depends on, and those some reduction it depends on reads.
    std::vector<std::set<int>> ancestors(flat.size()), after_reduction(flat.size());
    for (size_t i = 0; i < flat.size(); ++i)
      for (int o : flat[i]->operands) {
        auto p = producer.find(o);
        if (p == producer.end()) continue;
        ancestors[i].insert(o);
        ancestors[i].insert(ancestors[p->second].begin(), ancestors[p->second].end());
        after_reduction[i].insert(after_reduction[p->second].begin(), after_reduction[p->second].end());
        if (flat[p->second]->kind == OpKind::Reduce)
          after_reduction[i].insert(ancestors[p->second].begin(), ancestors[p->second].end());
      }
    const double file = static_cast<double>(hw_.vreg_file_bytes) / 4096;
    auto bf16_dot = [&](const Op* c) {
      return c->kind == OpKind::Dot && (low_precision_load(c->operands[0]) || low_precision_load(c->operands[1]));
    };
    // Where a value lives: registers (streamed), or VMEM at `bytes` per element.
    double vld = 0, vst = 0, pops = 0;
    std::map<int, double> in_vmem;  // value -> its vregs in VMEM (each consumer loads them)
    for (size_t i = 0; i < flat.size(); ++i) {
      const Op& op = *flat[i];
      if (op.kind == OpKind::Dot) pops += vregs(fn_.type_of(op.result), 4);
      if (op.kind == OpKind::Store && !ir::has_gather(op) && !op.operands.empty()) {
        const ir::Type& t = fn_.type_of(op.operands[0]);
        if (t.rank() > 0) vst += vregs(t, dtype_size(fn_.tensors[op.tensor].dtype));
      }
      if ((op.kind == OpKind::VarSet || op.kind == OpKind::VarDecl) && !op.operands.empty() &&
          fn_.type_of(op.operands[0]).rank() > 0) {
        const double n = vregs(fn_.type_of(op.operands[0]), 4);
        if (n > file) vst += n;
      }
      if (op.result < 0) continue;
      const ir::Type& t = fn_.type_of(op.result);
      if (t.rank() == 0) continue;
      if (op.kind == OpKind::Load && !ir::has_gather(op)) {
        const double n = vregs(t, dtype_size(fn_.tensors[op.tensor].dtype));
        if (n > file)
          in_vmem[op.result] = n;  // read from its ref by each consumer
        else
          vld += n;
        continue;
      }
      if (vregs(t, 4) <= file) continue;
      if (op.kind == OpKind::VarGet) {
        in_vmem[op.result] = vregs(t, 4);
        continue;
      }
      bool kept = false, only_bf16_dots = true;
      for (const Op* c : consumers_[op.result]) {
        only_bf16_dots &= bf16_dot(c);
        auto ci = position.find(c);
        if (ci == position.end()) {  // (read outside the region)
          kept = true;
          continue;
        }
        kept |= after_reduction[ci->second].count(op.result) > 0 || c->kind == OpKind::Dot;
      }
      if (!kept) continue;
      const double n = vregs(t, only_bf16_dots && !consumers_[op.result].empty() ? 2 : 4);
      vst += n;
      in_vmem[op.result] = n;
    }
    // Each consumer reads a VMEM value once; so does a region reading a value from outside it
    // (a step's value, kept there, that the trips read).
    for (const Op* c : flat) {
      std::set<int> read(c->operands.begin(), c->operands.end());
      for (int o : read) {
        if (auto v = in_vmem.find(o); v != in_vmem.end()) {
          vld += v->second;
        } else if (!producer.count(o) && defs_.count(o) && fn_.type_of(o).rank() > 0) {
          const double n = vregs(fn_.type_of(o), bf16_dot(c) ? 2 : 4);
          if (n > file) vld += n;
        }
      }
    }
    w.vld_s += vld / hw_.vld_per_s;
    w.vst_s += vst / hw_.vst_per_s;
    w.pop_s += pops / hw_.mxu_pop_per_s;
  }

  bool unit(int tile) const { return backend::pallas::pallas_unit_tile(p_, tile); }
  int64_t block(int tile) const { return std::min(p_.block_of_tile(tile), fn_.tiles[tile].extent()); }
  // Whether a block indexed by `tile` moves with grid tile `grid_tile`: it is that tile, or a tile
  // over its block (ph::tile(outer), whose slot holds the parent's whole block), or over such a one.
  bool within(int tile, int grid_tile) const {
    for (int t = tile; t >= 0; t = fn_.tiles[t].parent)
      if (t == grid_tile) return true;
    return false;
  }
  // A loop's trips per entry: over its range, or over the enclosing tile's block for a tile over
  // it (ph::tile(outer): its range spans every block of the parent, one of which each entry walks).
  int64_t trips(int tile) const {
    const ir::TileInfo& t = fn_.tiles[tile];
    const int64_t range = t.parent >= 0 ? block(t.parent) : t.extent(), b = block(tile);
    return (range + b - 1) / b;
  }

  // Kept dims (unit tiles squeezed), as sizes.
  std::vector<int64_t> dims(const ir::Type& t) const {
    std::vector<int64_t> d;
    for (const Dim& x : t.shape) {
      if (x.kind == Dim::Tile && unit(x.tile)) continue;
      d.push_back(x.kind == Dim::Const ? x.size : block(x.tile));
    }
    return d;
  }
  // Elements as the vector unit sees them: (8, 128) tiles.
  double vector_elems(const ir::Type& t) const {
    std::vector<int64_t> d = dims(t);
    double n = 1;
    for (size_t i = 0; i < d.size(); ++i) {
      int64_t x = d[i];
      if (i + 1 == d.size()) x = round_up(x, 128);
      if (i + 2 == d.size()) x = round_up(x, 8);
      n *= static_cast<double>(x);
    }
    return n;
  }
  bool low_precision_load(int v) const {
    const Op* d = def(v);
    while (d && d->kind == OpKind::Transpose) d = def(d->operands[0]);
    return d && d->kind == OpKind::Load && dtype_size(fn_.tensors[d->tensor].dtype) == 2;
  }
  const Op* def(int v) const {
    auto it = defs_.find(v);
    return it == defs_.end() ? nullptr : it->second;
  }

  // A gather (gather.h). dma: one DMA per index row, each a transfer of one row at the size
  // curve's rate (its fixed cost is the curve's: dma_half_bytes at the peak rate), issued one by
  // one by the scalar unit: their sum, not overlapped. onehot: the one-hot matrix (index rows x
  // table rows: a compare and a convert on the VPU) times the table on the MXU at precision
  // HIGHEST (six bf16 passes: half the rate of the model's three-pass f32); the table's copy
  // into VMEM is its slot's, like any block.
  // A scatter is a dma row copy per index too, out of VMEM.
  void account_gather(const Op& op, Work& w) {
    const ir::TensorInfo& t = fn_.tensors[op.tensor];
    ir::Type moved;
    if (op.kind == OpKind::Store)
      ir::load_type(fn_, op.tensor, op.index, &moved);
    else
      moved = fn_.type_of(op.result);
    const std::vector<int64_t> out = dims(moved);
    double rows = 1, width = 1;
    int gd = 0;
    for (size_t d = 0; d < op.index.size(); ++d)
      if (op.index[d].kind == ir::IndexItem::Gather) gd = static_cast<int>(d);
    const Dim& id = fn_.type_of(op.index[gd].value).shape[0];
    rows = static_cast<double>(id.kind == Dim::Const ? id.size : block(id.tile));
    for (int64_t x : out) width *= static_cast<double>(x);
    width /= rows;
    if (auto g = pl_.dma_rows_of.find(&op); g != pl_.dma_rows_of.end()) {
      const double row_bytes = width * static_cast<double>(dtype_size(t.dtype));
      w.gather_dma_s += rows * dma_s(row_bytes);
      w.vpu_s += vector_elems(moved) / hw_.vpu_ops_per_s;  // the fill select, the buffer's store
      return;
    }
    // An atomic update through an index block (codegen.cpp, _atomic_rows): compares, selects
    // and a reduction over the whole table in VMEM, at once for a rank-1 table, per row else.
    if (ir::is_atomic(op)) {
      const double n = static_cast<double>(t.shape[gd]);
      w.vpu_s += (op.index.size() == 1
                      ? 4 * rows * static_cast<double>(round_up(static_cast<int64_t>(n), 128))
                      : 4 * rows * (rows + n) * static_cast<double>(round_up(static_cast<int64_t>(width), 128))) /
                 hw_.vpu_ops_per_s;
      return;
    }
    if (op.kind == OpKind::Store) return;  // (every pallas scatter is a dma one)
    const double table_rows = static_cast<double>(t.shape[gd]);
    w.flops += 2.0 * rows * table_rows * width;
    const double padded = 2.0 * round_up(static_cast<int64_t>(rows), 8) *
                          round_up(static_cast<int64_t>(table_rows), hw_.mxu) *
                          round_up(static_cast<int64_t>(width), hw_.mxu);
    w.mxu_s += padded / (hw_.sustained_bf16_flops() * hw_.f32_matmul_ratio / 2);
    const double onehot = round_up(static_cast<int64_t>(rows), 8) * round_up(static_cast<int64_t>(table_rows), 128);
    w.vpu_s += (2 * onehot + vector_elems(fn_.type_of(op.result))) / hw_.vpu_ops_per_s;
  }

  void account(const Op& op, Work& w) {
    if (op.kind == OpKind::If) {  // costed as taken: the condition is data
      for (const Op& inner : op.body) account(inner, w);
      return;
    }
    if ((op.kind == OpKind::Load || op.kind == OpKind::Store) && ir::has_gather(op)) return account_gather(op, w);
    if (op.kind == OpKind::Dot) {
      const ir::Type& r = fn_.type_of(op.result);
      const ir::Type& a = fn_.type_of(op.operands[0]);
      std::vector<int64_t> rd = dims(r), ad = dims(a);
      double batch = 1;
      for (size_t i = 0; i + 2 < rd.size(); ++i) batch *= static_cast<double>(rd[i]);
      int64_t m = rd[rd.size() - 2], n = rd.back(), k = ad.back();
      w.flops += 2.0 * batch * m * n * k;
      double padded = 2.0 * batch * round_up(m, 8) * round_up(n, hw_.mxu) * round_up(k, hw_.mxu);
      bool bf16 = low_precision_load(op.operands[0]) || low_precision_load(op.operands[1]);
      w.mxu_s += padded / (hw_.sustained_bf16_flops() * (bf16 ? 1.0 : hw_.f32_matmul_ratio));
      if (op.operands.size() > 2) w.vpu_s += vector_elems(r) / hw_.vpu_ops_per_s;
      return;
    }
    if (op.result < 0 && op.kind != OpKind::Store && op.kind != OpKind::VarDecl && op.kind != OpKind::VarSet) return;
    int v = op.result >= 0 ? op.result : op.operands.empty() ? -1 : op.operands[0];
    if (v < 0) return;
    const ir::Type& t = fn_.type_of(v);
    if (t.rank() == 0) return;  // scalar unit
    double e = vector_elems(op.kind == OpKind::Reduce ? fn_.type_of(op.operands[0]) : t);
    if (ir::is_atomic(op)) w.vpu_s += 2 * e / hw_.vpu_ops_per_s;  // the block's read and the combine
    switch (op.kind) {
      case OpKind::Load:  // VMEM traffic (vector_memory); a masked load selects
        if (!op.operands.empty()) w.vpu_s += e / hw_.vpu_ops_per_s;
        return;
      case OpKind::Store:
        if (op.operands.size() > 1) w.vpu_s += e / hw_.vpu_ops_per_s;
        return;
      case OpKind::VarDecl:  // a register move, or VMEM traffic (vector_memory)
      case OpKind::VarSet:
      case OpKind::VarGet:
        return;
      case OpKind::Unary: {
        auto f = static_cast<ir::UnaryFn>(op.fn);
        bool transcendental = !ir::is_cheap_unary(f);
        if (transcendental) w.eup_s += e / hw_.eup_ops_per_s;
        w.vpu_s += (f == ir::UnaryFn::gelu || f == ir::UnaryFn::silu ? 4 : 1) * e / hw_.vpu_ops_per_s;
        return;
      }
      case OpKind::Transpose:
      case OpKind::Unsqueeze:
      case OpKind::Constant:
      case OpKind::ScalarParam:
        return;
      default:  // arithmetic, compares, selects, casts, reductions, views
        w.vpu_s += e / hw_.vpu_ops_per_s;
    }
  }

  double dma_s(double bytes) const { return bytes > 0 ? bytes / hw_.dma_rate(bytes) : 0; }

  void simulate(Prediction& r) {
    const std::vector<lower::GridDim>& grid = pl_.grid;  // (with a loop on the grid: its trips last)
    const size_t nd = grid.size();
    // Per grid-level and resident slot: the grid positions its block index depends on.
    struct Move {
      std::vector<int> deps;
      double bytes;
      bool in;
      bool exposed = false;  // one buffer: the copy cannot overlap the previous step's compute
      bool trips = false;    // a block of the loop on the grid, read only (a causal loop's stop moving)
    };
    std::vector<Move> moves;
    std::vector<std::pair<int, double>> piped;  // pipeline slots: loop tile, bytes per trip
    for (const backend::pallas::PallasSlot& s : pl_.slots) {
      // (a jagged loop's streamed rows move a trip's block per trip, double-buffered, as a
      // pipeline's do; one nested in other control flow, which the model does not walk, moves
      // its whole bound every step)
      const bool top_loop =
          std::any_of(loops_.begin(), loops_.end(), [&](const LoopWork& l) { return l.tile == s.loop_tile; });
      if (s.mode == backend::pallas::PallasSlot::Pipeline ||
          (s.mode == backend::pallas::PallasSlot::Stream && top_loop)) {
        piped.push_back({s.loop_tile, static_cast<double>(s.block_bytes)});
        continue;
      }
      const double whole =
          s.mode == backend::pallas::PallasSlot::Stream ? static_cast<double>(trips(s.loop_tile)) : 1.0;
      if (s.shares >= 0) continue;                               // (another slot's resident copy: moved once)
      if (s.mode == backend::pallas::PallasSlot::Hbm) continue;  // (a landing tensor: its accesses' DMAs)
      // (an atomic update's block comes in too: its prior contents, read-modify-written)
      Move m{{},
             static_cast<double>(s.block_bytes) * whole,
             s.read || s.atomic != ir::AtomicFn::none,
             s.buffers == 1 && !s.written,
             s.mode == backend::pallas::PallasSlot::Grid && s.loop_tile >= 0 && !s.written};
      // (a slot of a loop on the grid moves with that grid dim; a resident one spans its loop)
      for (const ir::IndexItem& ix : s.first->index)
        if (ix.kind == ir::IndexItem::Tile && (ix.tile != s.loop_tile || s.mode == backend::pallas::PallasSlot::Grid))
          for (size_t g = 0; g < nd; ++g)
            if (within(ix.tile, grid[g].tile)) m.deps.push_back(static_cast<int>(g));
      moves.push_back(m);
      if (m.in && s.written) moves.push_back({m.deps, m.bytes, false});
    }
    // One step's compute: its own ops and its inner loops.
    // `compute` is the step's critical path (with the inner pipelines' bubbles and trip costs);
    // `pure` only its arithmetic, for the bound.
    double compute = step_.seconds() + step_.gather_dma_s, pure = step_.seconds(), flops = step_.flops;
    double overhead_inner = 0, dma_inner = 0;
    double grid_loop_runs = 1;  // a causal loop on the grid: the share of its steps that copy
    for (const LoopWork& lw : loops_) {
      const ir::TileInfo& t = fn_.tiles[lw.tile];
      // A loop on the grid: each step is one of its trips, its copies the grid's (moves). The
      // step's own ops are charged at every step: those the trips read run there, and the
      // first and last trips' few are taken as the same.
      const bool on_grid = pl_.grid_loop && pl_.grid.back().tile == lw.tile;
      const int64_t trips = on_grid ? 1 : this->trips(lw.tile);
      // (the trips that run: all, or a causal loop's share; on the grid, each step runs one
      // trip with that probability)
      const double runs = trips * lw.runs;
      // DMAs issued together overlap their latencies: one transfer of their total size.
      double trip_bytes = 0;
      for (auto& [tile, bytes] : piped)
        if (tile == lw.tile) trip_bytes += bytes;
      double trip_bytes_s = dma_s(trip_bytes);
      const lower::InnerLoop* il = L_.inner_loop(lw.tile);
      flops += lw.trip.flops * runs;
      compute += runs * lw.trip.gather_dma_s;  // a dma gather's or scatter's rows, every trip
      dma_inner += runs * lw.trip.gather_dma_s;
      if (((il && il->strategy == lower::Strategy::Pipeline) || t.is_jagged()) && trip_bytes_s > 0) {
        // (emit_pipeline still walks a causal loop's skipped trips: their fixed cost, no copy; a
        // jagged loop's fori_loop runs only its entry's trips)
        const double walked = t.is_jagged() ? runs : static_cast<double>(trips);
        double bubble = hw_.dma_latency_s + trip_bytes_s;
        compute += bubble + runs * std::max(lw.trip.seconds(), trip_bytes_s) + walked * hw_.pipeline_trip_s -
                   trip_bytes_s;  // the last trip fetches nothing ahead
        overhead_inner += walked * hw_.pipeline_trip_s;
        dma_inner += bubble + std::max(0.0, runs - 1) * trip_bytes_s;
      } else {
        compute += runs * lw.trip.seconds();
      }
      if (on_grid) grid_loop_runs = lw.runs;
      pure += runs * lw.trip.seconds();
    }
    for (Move& m : moves)
      if (m.trips) m.bytes *= grid_loop_runs;
    // Walk the grid by "level": between consecutive steps, the slowest grid dim that changes
    // is dim l and every faster dim wraps; a block is copied in (and the previous one written
    // back) when one of the dims its index depends on changes. Steps at the same level cost the
    // same: per level, max(compute, copy-in, write-back) + the step's fixed cost.
    const int64_t steps = pl_.total_steps;
    // (exposed: only the single-buffered copies, which wait for the step before them)
    auto moves_at = [&](int level, bool in, bool exposed = false) {  // level -1: the first step
      double bytes = 0;
      for (const Move& m : moves) {
        if (m.in != in || (exposed && !m.exposed)) continue;
        bool moved = level < 0;
        for (int g : m.deps) moved |= g == level || (g > level && grid[g].steps > 1);
        if (m.deps.empty() && level >= 0) moved = false;
        if (moved) bytes += m.bytes;
      }
      return dma_s(bytes);  // issued together: one transfer of the total size
    };
    double first_in = moves_at(-1, true);
    double total = hw_.dma_latency_s + first_in;  // prologue
    double dma_sum = first_in;
    int64_t before = 1;  // steps of the dims slower than the current level
    for (size_t l = 0; l < nd; ++l) {
      int64_t upto = before * grid[l].steps;
      int64_t count = upto - before;  // steps (after the first) where dim l is the slowest to change
      before = upto;
      if (count <= 0) continue;
      double in = moves_at(static_cast<int>(l), true), wb = moves_at(static_cast<int>(l), false);
      double exposed = moves_at(static_cast<int>(l), true, true);
      // in and out share HBM; a single-buffered block's copy runs after the step before it
      total += count * (std::max(compute, in - exposed + wb) + exposed + hw_.grid_step_s);
      dma_sum += count * (in + wb);
    }
    double last_wb = moves_at(-1, false);
    total += compute + hw_.grid_step_s + last_wb;  // the last step, then its write-back
    dma_sum += last_wb;
    r.seconds = total;
    r.flops = flops * steps;
    r.compute_s = pure * steps;
    r.dma_s = dma_sum + (dma_inner + step_.gather_dma_s) * steps;
    r.overhead_s = steps * hw_.grid_step_s + overhead_inner * steps;
  }

  // --- a launch with collectives (docs/distributed.md) ---
  // One device's timeline through the launch body, op by op in program order: its grid steps in
  // order and its loops' trips (trace-time loops: every trip's copies and waits are its own),
  // ph::when regions whose condition the model can evaluate (tile offsets, constants, device 0's
  // coordinates) taken or skipped by it, the others taken.
  //   - compute accumulates as regions do (Work: the busiest unit) until the next communication;
  //   - a landing tensor's access is a DMA waited for at once;
  //   - a copy leaves on one ICI link (the device's copies queue for it) and lands one latency
  //     after its last byte leaves; every device runs the same timeline, so the copy a device
  //     receives lands when its own lands at its peer;
  //   - a wait stalls until its copy has left (send) or landed (receive): the stall is exposed
  //     communication; a barrier takes one latency; a semaphore wait until a signal sent when
  //     this device sent its own last one has arrived.
  // One ICI link per device for all its copies, and one hop each: a ring's copies exactly; a
  // one-shot collective's copies to far peers cross more hops over more links (not modelled).
  void timeline(Prediction& r) {
    std::map<int, std::deque<double>> sent, landed;  // per copy channel: completion times, oldest first
    Work pending;
    double t = 0, link_free = 0, exposed = 0, comm = 0, last_signal = -1, dma = 0, pure = 0, flops = 0;
    auto flush = [&] {
      t += pending.seconds();
      pure += pending.seconds();
      flops += pending.flops;
      pending = Work{};
    };
    auto stall_until = [&](double when) {
      if (when <= t) return;
      exposed += when - t;
      t = when;
    };
    // The blocks moved in (and written back): those indexed by a grid dim of several steps move
    // at every step (charged together here), the others once.
    double in_bytes = 0, out_bytes = 0;
    for (const backend::pallas::PallasSlot& s : pl_.slots) {
      if (s.mode == backend::pallas::PallasSlot::Hbm || s.shares >= 0) continue;
      bool per_step = false;
      for (const ir::IndexItem& ix : s.first->index)
        for (const lower::GridDim& g : pl_.grid)
          per_step |= ix.kind == ir::IndexItem::Tile && within(ix.tile, g.tile) && g.steps > 1;
      const double bytes = static_cast<double>(s.block_bytes) * (per_step ? static_cast<double>(pl_.total_steps) : 1.0);
      if (s.read) in_bytes += bytes;
      if (s.written) out_bytes += bytes;
    }
    std::map<int, int64_t> at;  // tile -> the current block's offset
    std::function<void(const std::vector<Op>&)> run = [&](const std::vector<Op>& ops) {
      for (const Op& op : ops) {
        switch (op.kind) {
          case OpKind::Loop: {
            const ir::TileInfo& ti = fn_.tiles[op.loop_tiles[0]];
            const int64_t b = std::max<int64_t>(1, block(ti.id));
            // (a tile over an enclosing block walks that block: trips())
            int64_t lo = ti.begin, hi = ti.end;
            if (const auto p = at.find(ti.parent); ti.parent >= 0 && p != at.end()) {
              lo = p->second;
              hi = std::min(hi, lo + block(ti.parent));
            }
            for (int64_t off = lo; off < hi; off += b) {
              at[ti.id] = off;
              run(op.body);
            }
            at.erase(ti.id);
            continue;
          }
          case OpKind::If:
            if (std::optional<int64_t> c = evaluate(op.operands[0], at); c && *c == 0) continue;
            run(op.body);
            continue;
          case OpKind::Load:
          case OpKind::Store:
            if (!pl_.comm.hbm_of.count(&op)) break;
            flush();
            dma += hw_.dma_latency_s + dma_s(static_cast<double>(pl_.comm.hbm[pl_.comm.hbm_of.at(&op)].bytes));
            t += hw_.dma_latency_s + dma_s(static_cast<double>(pl_.comm.hbm[pl_.comm.hbm_of.at(&op)].bytes));
            continue;
          case OpKind::CopyStart: {
            flush();
            ir::Type region;
            ir::load_type(fn_, op.tensor, op.index, &region);
            const double bytes = vector_elems(region) * static_cast<double>(dtype_size(fn_.tensors[op.tensor].dtype));
            const double start = std::max(t, link_free), wire = bytes / hw_.ici_link_bytes_per_s;
            link_free = start + wire;
            sent[op.channel].push_back(link_free);
            landed[op.channel].push_back(link_free + hw_.ici_latency_s);
            comm += wire + hw_.ici_latency_s;
            continue;
          }
          case OpKind::CopyWait: {
            flush();
            std::deque<double>& q =
                static_cast<ir::CopyEnd>(op.fn) == ir::CopyEnd::send ? sent[op.channel] : landed[op.channel];
            if (!q.empty()) {
              stall_until(q.front());
              q.pop_front();
            }
            continue;
          }
          case OpKind::Barrier:
            flush();
            comm += hw_.ici_latency_s;
            stall_until(t + hw_.ici_latency_s);
            continue;
          case OpKind::Signal:
            flush();
            last_signal = t;
            continue;
          case OpKind::SemWait:
            flush();
            comm += hw_.ici_latency_s;
            stall_until(std::max(last_signal, 0.0) + hw_.ici_latency_s);
            continue;
          default:
            break;
        }
        account(op, pending);
      }
    };
    // The grid's steps in order (a launch with collectives runs them so), its blocks moved in at
    // the first and written back after the last (the launches of the library: one step).
    t = hw_.dma_latency_s + dma_s(in_bytes);
    dma += t;
    std::function<void(size_t)> steps = [&](size_t g) {
      if (g == pl_.grid.size()) {
        run(L_.op->body);
        flush();
        t += hw_.grid_step_s;
        return;
      }
      const lower::GridDim& d = pl_.grid[g];
      for (int64_t k = 0; k < d.steps; ++k) {
        at[d.tile] = d.begin + k * (unit(d.tile) ? 1 : d.block);
        steps(g + 1);
      }
    };
    steps(0);
    t += dma_s(out_bytes);
    dma += dma_s(out_bytes);
    r.seconds = t;
    r.flops = flops;
    r.compute_s = pure;
    r.dma_s = dma;
    r.overhead_s = static_cast<double>(pl_.total_steps) * hw_.grid_step_s;
    r.comm_s = comm;
    r.exposed_comm_s = exposed;
  }

  // A scalar the model can compute at these tile offsets (device 0's coordinates), else nullopt.
  std::optional<int64_t> evaluate(int v, const std::map<int, int64_t>& at) const {
    auto d = defs_.find(v);
    if (d == defs_.end()) return std::nullopt;
    const Op& op = *d->second;
    auto tile_at = [&](int tile) -> std::optional<int64_t> {
      auto it = at.find(tile);
      return it == at.end() ? std::nullopt : std::optional<int64_t>(it->second);
    };
    switch (op.kind) {
      case OpKind::Constant:
        return static_cast<int64_t>(op.number);
      case OpKind::DeviceIndex:
        return 0;
      case OpKind::TileBegin:
        return tile_at(op.tile);
      case OpKind::TileEnd: {
        std::optional<int64_t> b = tile_at(op.tile);
        if (!b) return b;
        return std::min(*b + (unit(op.tile) ? 1 : block(op.tile)), fn_.tiles[op.tile].end);
      }
      case OpKind::TileId: {
        std::optional<int64_t> b = tile_at(op.tile);
        const ir::TileInfo& ti = fn_.tiles[op.tile];
        if (!b || ti.parent >= 0) return std::nullopt;
        return (*b - ti.begin) / (unit(op.tile) ? 1 : block(op.tile));
      }
      case OpKind::Cast:
        return evaluate(op.operands[0], at);
      case OpKind::Unary:
        if (static_cast<ir::UnaryFn>(op.fn) == ir::UnaryFn::logical_not) {
          std::optional<int64_t> a = evaluate(op.operands[0], at);
          return a ? std::optional<int64_t>(*a == 0) : a;
        }
        return std::nullopt;
      case OpKind::Binary: {
        std::optional<int64_t> a = evaluate(op.operands[0], at), b = evaluate(op.operands[1], at);
        if (!a || !b) return std::nullopt;
        switch (static_cast<ir::BinaryFn>(op.fn)) {
          case ir::BinaryFn::add:
            return *a + *b;
          case ir::BinaryFn::sub:
            return *a - *b;
          case ir::BinaryFn::mul:
            return *a * *b;
          case ir::BinaryFn::maximum:
            return std::max(*a, *b);
          case ir::BinaryFn::minimum:
            return std::min(*a, *b);
          case ir::BinaryFn::lt:
            return *a < *b;
          case ir::BinaryFn::le:
            return *a <= *b;
          case ir::BinaryFn::gt:
            return *a > *b;
          case ir::BinaryFn::ge:
            return *a >= *b;
          case ir::BinaryFn::eq:
            return *a == *b;
          case ir::BinaryFn::ne:
            return *a != *b;
          case ir::BinaryFn::logical_and:
            return *a && *b;
          case ir::BinaryFn::logical_or:
            return *a || *b;
          case ir::BinaryFn::floordiv:
            return *b == 0 ? 0 : (*a / *b - ((*a % *b != 0) && ((*a < 0) != (*b < 0))));
          case ir::BinaryFn::mod:
            return *b == 0 ? 0 : ((*a % *b) + *b) % *b;
          default:
            return std::nullopt;
        }
      }
      default:
        return std::nullopt;
    }
  }

  const lower::BlockProgram& p_;
  const ir::Function& fn_;
  const backend::pallas::PallasLaunch& pl_;
  const lower::LaunchPlan& L_;
  const TpuHardware& hw_;
  Work step_;
  std::vector<LoopWork> loops_;
  std::map<int, const Op*> defs_;                    // value -> its op in this launch
  std::map<int, std::vector<const Op*>> consumers_;  // value -> the ops that read it
};

}  // namespace

Prediction predict(const lower::BlockProgram& p, const TpuHardware& hw) {
  Prediction r;
  r.vmem_capacity = hw.vmem_bytes;
  r.basis = "the timing model of one TPU " + hw.name +
            " TensorCore replaying the pallas lowering's schedule (docs/tpu-model.md), with published and "
            "calibrated figures; no TPU has confirmed this prediction";
  // The inner loops' strategies in knob order: "pipelinex2,resident".
  std::vector<std::string> by_knob(p.knobs.inner_loops.size());
  for (const lower::LaunchPlan& L : p.launches)
    for (const lower::InnerLoop& il : L.inner_loops)
      if (il.knob >= 0)
        by_knob[il.knob] = std::string(lower::strategy_name(il.strategy)) +
                           (il.strategy == lower::Strategy::Pipeline ? "x" + std::to_string(il.buffers) : "");
  std::string strategies;
  for (const std::string& s : by_knob) strategies += (strategies.empty() ? "" : ",") + s;
  // And the gathers' (knob order): "pipelinex2,gathers:dma".
  std::string gathers;
  for (size_t i = 0; i < p.knobs.gathers.size(); ++i)
    gathers += (gathers.empty() ? "" : "/") + p.gather_strategy(*p.knobs.gathers[i]);
  if (!gathers.empty()) strategies += (strategies.empty() ? "" : ",") + std::string("gathers:") + gathers;
  r.strategy = strategies.empty() ? "none" : strategies;
  std::vector<backend::pallas::PallasLaunch> launches = backend::pallas::plan_pallas(p);
  for (const backend::pallas::PallasLaunch& pl : launches) r.vmem_bytes = std::max(r.vmem_bytes, pl.vmem_bytes);
  if (r.vmem_bytes > hw.vmem_bytes) {
    r.fits = false;
    r.seconds = INFINITY;
    r.bound = "VMEM";
    return r;
  }
  for (const backend::pallas::PallasLaunch& pl : launches) {
    Prediction one = LaunchModel(p, pl, hw).run();
    r.seconds += one.seconds;
    r.flops += one.flops;
    r.compute_s += one.compute_s;
    r.dma_s += one.dma_s;
    r.overhead_s += one.overhead_s;
    r.comm_s += one.comm_s;
    r.exposed_comm_s += one.exposed_comm_s;
  }
  r.tflops = r.seconds > 0 ? r.flops / r.seconds / 1e12 : 0;
  r.dispatch_s = hw.dispatch_s;
  double most = std::max({r.compute_s, r.dma_s, r.overhead_s, r.exposed_comm_s});
  r.bound = most == r.compute_s    ? "compute"
            : most == r.dma_s      ? "HBM"
            : most == r.overhead_s ? "per-step overhead"
                                   : "ICI";  // (exposed communication: docs/distributed.md)
  return r;
}

}  // namespace parhelion::tpu_model

namespace parhelion {

std::string TpuPrediction::to_json() const {
  nlohmann::json j{{"predicted_ms", fits ? seconds * 1e3 : -1.0},
                   {"dispatch_ms", dispatch_s * 1e3},
                   {"call_ms", fits ? call_seconds() * 1e3 : -1.0},
                   {"measured", false},
                   {"basis", basis},
                   {"tflops", tflops},
                   {"strategy", strategy},
                   {"fits", fits},
                   {"bound", bound},
                   {"vmem_bytes", vmem_bytes},
                   {"vmem_capacity", vmem_capacity},
                   {"compute_ms", compute_s * 1e3},
                   {"dma_ms", dma_s * 1e3},
                   {"overhead_ms", overhead_s * 1e3},
                   {"comm_ms", comm_s * 1e3},
                   {"exposed_comm_ms", exposed_comm_s * 1e3}};
  return j.dump();
}

}  // namespace parhelion

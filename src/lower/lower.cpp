#include "lower/lower.h"

#include "ir/collectives.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <set>

#include "backend/backend.h"
#include "ir/collectives.h"
#include "ir/printer.h"
#include "ir/value_tiles.h"
#include "ir/views.h"
#include "lower/cache_hints.h"
#include "lower/config_space.h"
#include "lower/fusion.h"
#include "lower/verify_block_ir.h"
#include "parhelion/error.h"

namespace parhelion::lower {
namespace {

using ir::Op;
using ir::OpKind;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Bytes per element of a value in scratch: compute dtypes (16-bit floats compute in f32).
int64_t compute_bytes(DType d) { return d == DType::f32 ? 4 : d == DType::i64 ? 8 : 1; }

int64_t aligned(int64_t bytes) { return (bytes + 63) / 64 * 64; }

}  // namespace

std::vector<int64_t> bind_block_sizes(const ir::Function& fn, const KnobTable& knobs, const Config& config) {
  std::vector<int64_t> b(fn.block_sizes.size());
  for (const ir::BlockSize& s : fn.block_sizes) b[s.id] = s.fixed;
  for (size_t i = 0; i < knobs.block_sizes.size(); ++i) b[knobs.block_sizes[i]] = config.block_sizes.at(i);
  // A tile over an enclosing tile's block cuts at most that block (tiles are numbered outer
  // first, and such a tile has a block-size symbol of its own).
  for (const ir::TileInfo& t : fn.tiles)
    if (t.parent >= 0) b[t.block] = std::min(b[t.block], b[fn.tiles[t.parent].block]);
  return b;
}

ir::Function bind_config(const ir::Function& fn, const Config& config, const backend::Backend& backend) {
  ir::Function bound = fn;
  if (!ir::has_block_counts(fn)) return bound;
  const KnobTable knobs = derive_knobs(fn, backend.capabilities());
  const ConfigSpec spec = derive_config_spec(fn, knobs, backend);
  const Config full = spec.complete(config);
  spec.validate(full);  // (a user's config: a wrong one is told as such, before its block sizes are read)
  ir::resolve_block_counts(bound, bind_block_sizes(fn, knobs, full));
  return bound;
}

namespace {

class Planner {
 public:
  Planner(const ir::Function& fn, const Config& config, const backend::Backend& backend, KnobTable knobs)
      : backend_(backend) {
    p_.fn = &fn;
    p_.backend = &backend;
    p_.config = config;
    p_.knobs = std::move(knobs);
  }

  BlockProgram run() {
    const ir::Function& fn = *p_.fn;
    p_.block_size.resize(fn.block_sizes.size());
    for (const ir::BlockSize& b : fn.block_sizes) p_.block_size[b.id] = b.fixed;
    p_.block_size = bind_block_sizes(fn, p_.knobs, p_.config);
    int launch_index = 0;
    for (const Op& op : fn.body) {
      if (op.kind != OpKind::Launch) continue;
      LaunchPlan L;
      L.op = &op;
      L.index = launch_index++;
      std::vector<int> order(op.loop_tiles.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
      L.loop_order_knob = p_.knobs.loop_order_knob(op);
      if (L.loop_order_knob >= 0) order = p_.config.loop_orders.at(L.loop_order_knob);
      if (const int g = p_.knobs.launch_group_knob(op); g >= 0) L.group = p_.config.launch_groups.at(g);
      for (int d : order) {
        const ir::TileInfo& t = fn.tiles[op.loop_tiles[d]];
        GridDim g{t.id, t.begin, t.extent(), p_.block_of_tile(t.id), 0};
        g.steps = ceil_div(g.extent, g.block);
        L.total_steps *= g.steps;
        L.grid.push_back(g);
      }
      L.collectives = ir::has_collectives(op.body);
      L.num_threads =
          L.collectives
              ? 1
              : static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(p_.config.num_threads, L.total_steps)));
      plan_operands(L, op.body);
      plan_scratch(L, op);
      plan_dots(L, op);
      plan_inner_loops(L, op);
      plan_kept_panels(L, op);
      plan_atomics(L, op);
      if (const int k = p_.knobs.cache_hint_knob(op); k >= 0) plan_cache_hints(p_, L, p_.config.cache_hints.at(k));
      // Staged operand blocks live in the dots' packing workspaces and the inner loops'
      // staging buffers, which are scratch already. (A kept B's panels are in slow memory: the
      // micro-kernels stream them a panel at a time, while A's strips stay in the workspace.)
      L.footprint_bytes = L.scratch_bytes + L.output_accumulator_bytes;
      L.working_set_bytes += L.scratch_bytes;  // (the output blocks are operand blocks already)
      p_.footprint_bytes = std::max(p_.footprint_bytes, L.footprint_bytes);
      p_.launches.push_back(std::move(L));
    }
    return std::move(p_);
  }

 private:
  // Each tensor the launch updates atomically: its knob's strategy (atomic where the backend has
  // no knob); a launch on one thread updates in place, with nothing to contend.
  void plan_atomics(LaunchPlan& L, const Op& launch) {
    const ir::Function& fn = *p_.fn;
    for (const AtomicSite& site : atomic_sites(fn, launch)) {
      AtomicTarget a;
      a.tensor = site.tensor;
      a.fn = ir::atomic_fn(*site.first);
      a.knob = p_.knobs.atomic_knob(launch, site.tensor);
      a.elements = ir::element_span(fn.tensors[site.tensor]).second + 1;  // its strides' span
      const bool partials = a.knob >= 0 && p_.config.atomics.at(a.knob) == "partials";
      a.strategy = L.num_threads == 1 ? AtomicTarget::InPlace
                   : partials         ? AtomicTarget::Partials
                                      : AtomicTarget::Atomic;
      if (a.strategy == AtomicTarget::Partials) {
        a.offset = L.partials_bytes;
        // (float copies are f32 whatever the tensor's dtype: a 16-bit sum rounds once, at the end)
        const DType dt = fn.tensors[site.tensor].dtype;
        L.partials_bytes += aligned(a.elements * (compute_dtype(dt) == DType::f32 ? 4 : dtype_size(dt)));
      }
      L.atomics.push_back(a);
    }
  }

  void plan_operands(LaunchPlan& L, const std::vector<Op>& body) {
    const ir::Function& fn = *p_.fn;
    // Loads that feed a dot (directly or transposed) are packed: staged in fast memory.
    std::set<int> dot_inputs;
    std::map<int, const Op*> defs;
    ir::walk(body, [&](const Op& op) {
      if (op.result >= 0) defs[op.result] = &op;
      if (op.kind != OpKind::Dot) return;
      for (int k = 0; k < 2; ++k) {
        int v = op.operands[k];
        while (defs.count(v) && defs[v]->kind == OpKind::Transpose) v = defs[v]->operands[0];
        dot_inputs.insert(v);
      }
    });
    ir::walk(body, [&](const Op& op) {
      if (op.kind != OpKind::Load && op.kind != OpKind::Store) return;
      const ir::TensorInfo& t = fn.tensors[op.tensor];
      BlockSpec s;
      s.tensor = op.tensor;
      s.written = op.kind == OpKind::Store;
      int64_t elems = 1;
      for (size_t d = 0; d < op.index.size(); ++d) {
        const ir::IndexItem& ix = op.index[d];
        if (ix.kind == ir::IndexItem::Tile) {
          const bool grid = fn.tiles[ix.tile].is_grid;
          const int64_t b = grid ? 1 : p_.block_of_tile(ix.tile);
          s.block.push_back({grid ? BlockDim::Unit : BlockDim::Tile, ix.tile, b});
          s.index.push_back({IndexExpr::TileOffset, ix.tile, b, -1});
          elems *= b;
        } else if (ix.kind == ir::IndexItem::All) {
          s.block.push_back({BlockDim::Whole, -1, t.shape[d]});
          s.index.push_back({});
          elems *= t.shape[d];
        } else if (ix.kind == ir::IndexItem::Gather) {
          // Scattered positions anywhere in the dim: the whole dim is the block's span (what
          // a grid step may touch), its offset zero; the addresses are the index block's.
          const ir::Dim& g = fn.type_of(ix.value).shape[0];
          const int64_t n = capacity(g);
          s.block.push_back({BlockDim::Whole, -1, t.shape[d]});
          s.index.push_back({IndexExpr::Gather, -1, 1, ix.value});
          elems *= n;
        } else if (ix.kind == ir::IndexItem::Slice) {
          s.block.push_back({BlockDim::Whole, -1, ix.length});
          s.index.push_back({IndexExpr::Value, -1, 1, ix.value});
          elems *= ix.length;
        } else {
          s.block.push_back({BlockDim::Unit, -1, 1});
          s.index.push_back({IndexExpr::Value, -1, 1, ix.value});
        }
      }
      s.block_bytes = elems * dtype_size(t.dtype);
      if (op.kind == OpKind::Load && dot_inputs.count(op.result)) s.mode = BlockSpec::Staged;
      for (BlockSpec& o : L.operands)
        if (o.tensor == s.tensor && o.index == s.index) {
          o.written |= s.written;
          return;
        }
      L.working_set_bytes += s.block_bytes;
      L.operands.push_back(std::move(s));
    });
  }

  int64_t capacity(const ir::Dim& d) const { return d.kind == ir::Dim::Const ? d.size : p_.block_of_tile(d.tile); }

  int add_scratch(LaunchPlan& L, Scratch s) {
    s.offset = L.scratch_bytes;
    L.scratch_bytes += aligned(s.bytes);
    L.scratch.push_back(std::move(s));
    return static_cast<int>(L.scratch.size()) - 1;
  }

  // A buffer for a value of type `t`, `element_bytes` per element.
  int add_value_scratch(LaunchPlan& L, Scratch s, const ir::Type& t, int64_t element_bytes) {
    int64_t n = 1;
    for (const ir::Dim& d : t.shape) {
      s.capacity.push_back(capacity(d));
      n *= s.capacity.back();
    }
    s.bytes = std::max<int64_t>(1, n) * element_bytes;
    return add_scratch(L, std::move(s));
  }

  void plan_scratch(LaunchPlan& L, const Op& launch) {
    const ir::Function& fn = *p_.fn;
    std::map<int, int> sums_into_vars;  // (the same walk: sum result -> the Var it adds into)
    in_place_dots_ = accumulating_dots(fn, launch, &sums_into_vars);
    // A Var whose dot writes an output block directly has no buffer: the block is where its sums
    // stay between the loop's trips, and counts in the fast memory a step needs as the buffer did.
    std::set<int> in_outputs;
    if (backend_.capabilities().dots_write_output_blocks)
      for (const auto& [dot, how] : in_place_dots_)
        if (how.stored_whole >= 0) in_outputs.insert(how.var);
    ir::walk(launch.body, [&](const Op& op) {
      if (op.kind != OpKind::VarDecl) return;
      if (in_outputs.count(op.var)) {
        int64_t n = 1;
        for (const ir::Dim& d : fn.vars[op.var].type.shape) n *= capacity(d);
        L.output_accumulator_bytes += n * static_cast<int64_t>(dtype_size(fn.vars[op.var].type.dtype));
        return;
      }
      Scratch s;
      s.kind = Scratch::VarBuffer;
      s.var = op.var;
      s.dtype = fn.vars[op.var].type.dtype;
      L.var_scratch[op.var] = add_value_scratch(L, s, fn.vars[op.var].type, compute_bytes(s.dtype));
    });
    // A value cast to bf16/f16 that only dots read is materialized in that dtype: it is exact
    // (the value is representable), half the bytes, and the dot can take its 16-bit path; but in
    // f32 (the same values) where none of those dots' micro-kernels takes 16-bit operands: such a
    // kernel would widen every element again while packing, and reads an f32 A in place (f16
    // attention on an AVX2 host: 1.39x, its p and q no longer through the converting packer).
    // (Asked of the kernel alone: a 16-bit-capable kernel whose other operand is f32 still gets
    // 16 bits, and widens them.)
    std::map<int, const Op*> defs;
    std::map<int, std::vector<const Op*>> uses;
    ir::walk(launch.body, [&](const Op& op) {
      if (op.result >= 0) defs[op.result] = &op;
      for (int u : op.operands) uses[u].push_back(&op);
    });
    auto only_dots_read = [&](int v) {
      for (const Op* u : uses[v]) {
        if (u->kind == OpKind::Dot && (u->operands[0] == v || u->operands[1] == v)) continue;
        return false;
      }
      return !uses[v].empty();
    };
    // Whether a load's fill (its `other`, if masked) is a constant that bf16 holds exactly (0, -inf).
    auto fill_is_bf16 = [&](const Op& load) {
      if (load.operands.size() < 2) return true;
      const Op* fill = defs.count(load.operands[1]) ? defs[load.operands[1]] : nullptr;
      return fill && fill->kind == OpKind::Constant &&
             static_cast<double>(bf16_to_f32(f32_to_bf16(static_cast<float>(fill->number)))) == fill->number;
    };
    auto a_dot_takes_16bit = [&](int v, DType dtype) {
      return std::any_of(uses[v].begin(), uses[v].end(), [&](const Op* u) {
        return backend_.dot_takes_16bit_operands(chosen_micro_kernel(*u), dtype);
      });
    };
    std::set<int> materialized = choose_materialized(fn, launch, in_place_dots_);
    for (const ReductionProducer& r : producers_computed_by_reductions(fn, launch, &materialized))
      L.compute_in_reduction(r.reduction, r.producer, r.stored);
    for (const auto& [sum, var] : sums_into_vars)
      if (const auto v = L.values.find(sum); v == L.values.end() || v->second.computes < 0)
        L.values[sum].adds_into = var;
    for (int v : materialized) {
      Scratch s;
      s.kind = Scratch::Materialized;
      s.value = v;
      const ir::Type t = fn.type_of(v);
      s.dtype = t.dtype;
      int64_t element_bytes = compute_bytes(t.dtype);
      const Op* d = defs.count(v) ? defs[v] : nullptr;
      if (d && d->kind == OpKind::Cast && (d->dtype == DType::bf16 || d->dtype == DType::f16) && only_dots_read(v) &&
          a_dot_takes_16bit(v, d->dtype)) {
        s.dtype = d->dtype;
        element_bytes = 2;  // 16-bit storage
      }
      // A bf16 or fp8 load that dots read (materialized: a gathered block of rows, say) is kept in
      // bf16, exactly: every fp8 value (e4m3 and e5m2: <= 3 mantissa bits, exponents within
      // bf16's) is a bf16 value. The dot then takes the bf16 path (AMX tiles included) at no cost
      // in accuracy, from half the bytes. (In f32, as above, where no such dot would.)
      // A masked load's fill (`other`, an f32 value) must be a bf16 value too, or the buffer would
      // round it where the program does not (fill_is_bf16 above).
      // So is a view of such a load (a block view of one operand, a transpose or an unsqueeze:
      // the same elements): int4_matmul's even and odd columns of a, materialized in f32, had
      // made both its GEMMs widen to the f32 kernels.
      auto one_operand_view = [](const Op& o) {
        return (ir::is_block_view(o.kind) && o.operands.size() == 1) || o.kind == OpKind::Transpose ||
               o.kind == OpKind::Unsqueeze;
      };
      const Op* source = d;
      while (source && one_operand_view(*source))
        source = defs.count(source->operands[0]) ? defs[source->operands[0]] : nullptr;
      const DType loaded = source && source->kind == OpKind::Load ? fn.tensors[source->tensor].dtype : DType::f32;
      if ((is_fp8(loaded) || loaded == DType::bf16) && only_dots_read(v) && fill_is_bf16(*source) &&
          a_dot_takes_16bit(v, DType::bf16)) {
        s.dtype = DType::bf16;
        element_bytes = 2;
      }
      L.values[v].materialized = add_value_scratch(L, s, t, element_bytes);
    }
  }

  // Each dot: its micro-kernel (the config's choice among the backend's), the workspace the
  // backend packs its operand blocks into (the staged buffers), and whether it adds into a Var.
  // A number every count along dim `d` is a multiple of: its size; for a tile, the gcd of its
  // block and its extent (a block's count is min(block, end - offset), offsets a block apart from
  // the range's start; a loop stopped at a bound of the launch's tiles stops before a trip, it
  // does not cut one); 1 where the range is computed in the kernel (a jagged tile, a tile within a
  // parent's block).
  int64_t count_multiple(const ir::Dim& d) const {
    if (d.kind == ir::Dim::Const) return d.size;
    const ir::TileInfo& t = p_.fn->tiles[d.tile];
    if (t.is_jagged() || t.parent >= 0) return 1;
    return std::gcd(p_.block_of_tile(d.tile), t.extent());
  }

  // The config's micro-kernel for `dot` among the backend's.
  std::string chosen_micro_kernel(const Op& dot) const {
    return backend_.micro_kernels(*p_.fn, dot).at(p_.config.micro_kernels.at(p_.knobs.micro_kernel_knob(dot)));
  }

  // The workspace the backend packs `dot`'s operand blocks into, B's included unless `b_kept`.
  int64_t workspace_bytes(const LaunchPlan& L, const Op& dot, const DotPlan& d, bool b_kept) const {
    const ir::Function& fn = *p_.fn;
    const ir::Type& a = fn.type_of(dot.operands[0]);
    const ir::Type& r = fn.type_of(dot.result);
    const int64_t m = capacity(r.shape[r.rank() - 2]), n = capacity(r.shape[r.rank() - 1]),
                  k = capacity(a.shape[a.rank() - 1]);
    const bool bf16_operands = L.gemm_operand_dtype(fn, dot.operands[0]) == DType::bf16 &&
                               L.gemm_operand_dtype(fn, dot.operands[1]) == DType::bf16;
    // A materialized A is read from its buffer, rows a capacity apart (emit/dots.cpp).
    const int a_buffer = L.materialized(dot.operands[0]);
    const int64_t a_row_stride = a_buffer >= 0 ? L.scratch[a_buffer].capacity.back() : 0;
    return backend_.dot_workspace_bytes(m, n, k, d.micro_kernel, bf16_operands, a_row_stride,
                                        count_multiple(a.shape.back()), b_kept);
  }

  void plan_dots(LaunchPlan& L, const Op& launch) {
    ir::walk(launch.body, [&](const Op& op) {
      if (op.kind != OpKind::Dot) return;
      DotPlan d;
      d.result = op.result;
      d.knob = p_.knobs.micro_kernel_knob(op);
      d.micro_kernel = chosen_micro_kernel(op);
      if (auto in = in_place_dots_.find(op.result); in != in_place_dots_.end()) {
        d.accumulate_into = in->second.var;
        d.rescaled = in->second.rescaled;
        d.first_trip_writes = in->second.first_trip_writes;
        if (backend_.capabilities().dots_write_output_blocks) d.writes_output = in->second.stored_whole;
      }
      if (int64_t bytes = workspace_bytes(L, op, d, /*b_kept=*/false); bytes > 0) {
        Scratch s;
        s.kind = Scratch::DotWorkspace;
        s.value = op.result;
        s.dtype = DType::f32;
        s.capacity = {(bytes + 3) / 4};  // (whole floats, rounded up)
        s.bytes = s.capacity[0] * 4;
        d.workspace = add_scratch(L, s);
      }
      L.dots.push_back(d);
    });
  }

  // Each dot whose B is read again by a later call: its packed panels are kept in the thread's
  // slow memory, so that a call re-packs nothing an earlier one packed. Two kinds of reuse:
  // - across grid steps, where the grid's fastest dim does not index B: one slot per trip of
  //   the loop that indexes B (measured on a Zen 1 host: B's packing was 10% of a 1024^3 f32
  //   matmul in 128-row blocks);
  // - across the trips of an inner loop around the dot that B does not depend on (an expert's
  //   weights in a jagged loop over its tokens, or a group's K blocks in a jagged loop over its
  //   rows): again one slot per trip of the loop that indexes B, packed by the first trip
  //   (moe_matmul on a Zen 1 host: B was packed again on each of the expert's trips).
  // The runtime keys each slot by B's address, strides and extents (ph_gemm_args::b_panels),
  // and the executor clears the keys when a launch call starts (not at each range of steps a
  // thread claims: those share the panels), so a kept panel is B's as
  // long as the launch writes nothing behind B: a tensor (or another view of its memory) it
  // stores to, a launch with collectives (a peer's copies land during it), or B computed in
  // the kernel rather than loaded, keep nothing. The B part of a keeping dot's workspace is
  // then not needed: it is given back (the footprint shrinks).
  void plan_kept_panels(LaunchPlan& L, const Op& launch) {
    const ir::Function& fn = *p_.fn;
    if (L.collectives) return;
    // A bound on the slow memory kept: 64 MiB a thread, 256 MiB in all.
    const int64_t max_kept_bytes = std::min<int64_t>(int64_t{64} << 20, (int64_t{256} << 20) / L.num_threads);
    std::set<int> written;
    std::map<int, const Op*> defs;
    std::map<int, std::vector<int>> loops_around;  // a dot's result: the tiles of the loops around it
    std::vector<int> enclosing;
    std::function<void(const std::vector<Op>&)> visit = [&](const std::vector<Op>& ops) {
      for (const Op& op : ops) {
        if (op.result >= 0) defs[op.result] = &op;
        if (op.kind == OpKind::Store) written.insert(ir::root_of(fn, op.tensor));
        if (op.kind == OpKind::Dot) loops_around[op.result] = enclosing;
        const size_t depth = enclosing.size();
        if (op.kind == OpKind::Loop) enclosing.insert(enclosing.end(), op.loop_tiles.begin(), op.loop_tiles.end());
        visit(op.body);
        enclosing.resize(depth);
      }
    };
    visit(launch.body);
    // Whether value `v` (a scalar index) or tile `t` changes with tile `moving`'s position: it is
    // that tile, a tile within it, or computed from one (a load's index included). A value
    // defined outside the launch, or read from a Var, counts as fixed: that only costs a
    // re-pack where it is not, the runtime's key telling the panels apart.
    auto tile_moves = [&](int t, int moving) {
      for (; t >= 0; t = fn.tiles[t].parent)
        if (t == moving) return true;
      return false;
    };
    const ir::ValueTiles value_tiles(fn, launch.body);
    auto value_moves = [&](int v, int moving) { return value_tiles.of(v).count(moving) > 0; };
    auto index_moves = [&](const Op& load, int moving) {
      return std::any_of(load.index.begin(), load.index.end(), [&](const ir::IndexItem& ix) {
        return ix.kind == ir::IndexItem::Tile ? tile_moves(ix.tile, moving)
                                              : ix.value >= 0 && value_moves(ix.value, moving);
      });
    };
    // The grid dim that changes from one step to the next (within a group when grouped).
    const int fastest = L.total_steps < 2 || L.grid.empty()
                            ? -1
                            : L.grid[L.group > 1 && L.grid.size() >= 2 ? L.grid.size() - 2 : L.grid.size() - 1].tile;
    // Batched (several Bs a step, a call each): nothing kept. Grid dims (blocks of 1) are not batches.
    auto one_matrix = [&](const ir::Type& t) {
      for (int i = 0; i + 2 < t.rank(); ++i)
        if (capacity(t.shape[i]) != 1) return false;
      return true;
    };
    bool workspace_shrank = false;
    for (DotPlan& d : L.dots) {
      const Op& dot = *defs.at(d.result);
      const ir::Type& r = fn.type_of(dot.result);
      int v = dot.operands[1];
      if (!one_matrix(r) || !one_matrix(fn.type_of(v))) continue;
      while (L.materialized(v) < 0 && defs.count(v) && defs.at(v)->kind == OpKind::Transpose)
        v = defs.at(v)->operands[0];
      if (L.materialized(v) >= 0 || L.staged_load(v) >= 0 || !defs.count(v)) continue;
      const Op& load = *defs.at(v);
      if (load.kind != OpKind::Load || !load.operands.empty() || written.count(ir::root_of(fn, load.tensor))) continue;
      if (std::any_of(load.index.begin(), load.index.end(),
                      [](const ir::IndexItem& ix) { return ix.kind == ir::IndexItem::Gather; }))
        continue;
      std::vector<int> loop_tiles;  // the tiles indexing B that are not the grid's
      for (const ir::IndexItem& ix : load.index)
        if (ix.kind == ir::IndexItem::Tile &&
            !std::any_of(L.grid.begin(), L.grid.end(), [&](const GridDim& g) { return g.tile == ix.tile; }))
          loop_tiles.push_back(ix.tile);
      const std::vector<int>& around = loops_around[d.result];
      const bool across_steps = fastest >= 0 && !index_moves(load, fastest) && loop_tiles.size() <= 1;
      const bool across_trips =
          loop_tiles.size() <= 1 && std::any_of(around.begin(), around.end(), [&](int t) {
            return !index_moves(load, t) && !tile_moves(loop_tiles.empty() ? -1 : loop_tiles[0], t);
          });
      if (!across_steps && !across_trips) continue;
      int64_t slots = 1;
      if (!loop_tiles.empty()) {
        const ir::TileInfo& t = fn.tiles[loop_tiles[0]];
        const InnerLoop* il = L.inner_loop(t.id);
        if (!il || t.is_jagged() || t.parent >= 0) continue;
        slots = il->trips;
        d.kept_b_tile = t.id;
      }
      const ir::Type& a = fn.type_of(dot.operands[0]);
      const bool bf16_operands = L.gemm_operand_dtype(fn, dot.operands[0]) == DType::bf16 &&
                                 L.gemm_operand_dtype(fn, dot.operands[1]) == DType::bf16;
      const int64_t slot = aligned(backend_.dot_kept_b_bytes(
          capacity(r.shape[r.rank() - 1]), capacity(a.shape[a.rank() - 1]), d.micro_kernel, bf16_operands));
      if (slot == 0 || L.kept_panels_bytes + slots * slot > max_kept_bytes) {
        d.kept_b_tile = -1;
        continue;
      }
      d.kept_b_slots = slots;
      d.kept_b_slot_bytes = slot;
      d.kept_b_offset = L.kept_panels_bytes;
      L.kept_panels_bytes += slots * slot;
      if (d.workspace >= 0) {
        Scratch& w = L.scratch[d.workspace];
        const int64_t bytes = workspace_bytes(L, dot, d, /*b_kept=*/true);
        w.capacity = {(bytes + 3) / 4};  // (whole floats, rounded up)
        w.bytes = w.capacity[0] * 4;
        workspace_shrank = true;
      }
    }
    if (!workspace_shrank) return;
    L.scratch_bytes = 0;  // laid out again, in the same order
    for (Scratch& s : L.scratch) {
      s.offset = L.scratch_bytes;
      L.scratch_bytes += aligned(s.bytes);
    }
  }

  void plan_inner_loops(LaunchPlan& L, const Op& launch) {
    const ir::Function& fn = *p_.fn;
    ir::walk(launch.body, [&](const Op& op) {
      if (op.kind != OpKind::Loop) return;
      for (int t : op.loop_tiles) {
        const ir::TileInfo& ti = fn.tiles[t];
        InnerLoop il;
        il.tile = t;
        il.begin = ti.begin;
        il.extent = ti.extent();
        il.block = p_.block_of_tile(t);
        il.trips = ceil_div(il.extent, il.block);
        il.knob = p_.knobs.inner_loop_knob(op);
        if (il.knob >= 0) {
          const InnerLoopChoice& choice = p_.config.inner_loops.at(il.knob);
          il.strategy = parse_strategy(choice.strategy).value();  // validated against the spec
          il.buffers = il.strategy == Strategy::Pipeline ? choice.buffers : 1;
          if (il.strategy != Strategy::Stream && backend_.capabilities().lowering_plans_staged_copies)
            stage(L, il, p_.knobs.inner_loops[il.knob]);
        }
        L.inner_loops.push_back(il);
      }
    });
  }

  // One staging buffer per distinct block the loop reads (loads of the same tensor at the same
  // index share it).
  void stage(LaunchPlan& L, InnerLoop& il, const InnerLoopSite& site) {
    const ir::Function& fn = *p_.fn;
    std::vector<std::pair<const Op*, int>> by_index;  // a load of each staged block, its index
    for (const Op* load : site.blocks) {
      if (load->kind != OpKind::Load) continue;
      auto same = std::find_if(by_index.begin(), by_index.end(), [&](const auto& e) {
        return e.first->tensor == load->tensor && e.first->index == load->index;
      });
      if (same != by_index.end()) {
        L.staged[same->second].loads.push_back(load->result);
        L.values[load->result].staged = same->second;
        continue;
      }
      StagedBlock b;
      b.tensor = load->tensor;
      b.loop_tile = il.tile;
      b.loads.push_back(load->result);
      b.slots = il.buffers;
      const ir::TensorInfo& t = fn.tensors[load->tensor];
      for (size_t d = 0; d < load->index.size(); ++d) {
        const ir::IndexItem& ix = load->index[d];
        if (ix.kind == ir::IndexItem::All) {
          b.capacity.push_back(t.shape[d]);
        } else if (ix.kind == ir::IndexItem::Slice) {
          b.capacity.push_back(ix.length);
          b.refill_key.push_back({IndexExpr::Value, -1, 1, ix.value});
        } else if (ix.kind == ir::IndexItem::Tile && !fn.tiles[ix.tile].is_grid) {
          if (ix.tile == il.tile) {
            b.inner_dim = static_cast<int>(b.capacity.size());
            b.capacity.push_back(il.strategy == Strategy::Resident ? il.extent : il.block);
          } else {
            b.capacity.push_back(p_.block_of_tile(ix.tile));
            b.refill_key.push_back({IndexExpr::TileOffset, ix.tile, p_.block_of_tile(ix.tile), -1});
          }
        } else if (ix.kind == ir::IndexItem::Tile) {
          b.refill_key.push_back({IndexExpr::TileOffset, ix.tile, 1, -1});
        } else {
          b.refill_key.push_back({IndexExpr::Value, -1, 1, ix.value});
        }
      }
      b.slot_elems = 1;
      for (int64_t c : b.capacity) b.slot_elems *= c;
      Scratch s;
      s.kind = Scratch::StagingBuffer;
      s.staged = static_cast<int>(L.staged.size());
      s.dtype = t.dtype;
      s.capacity = {b.slot_elems * b.slots};
      s.bytes = s.capacity[0] * dtype_size(t.dtype);
      b.scratch = add_scratch(L, s);
      const int k = static_cast<int>(L.staged.size());
      by_index.push_back({load, k});
      L.values[load->result].staged = k;
      il.staged.push_back(k);
      L.staged.push_back(std::move(b));
    }
  }

  const backend::Backend& backend_;
  BlockProgram p_;
  std::map<int, AccumulatingDot> in_place_dots_;  // dot result -> the Var it accumulates into
};

// Plans with a knob table already derived for `fn` and `backend`, and verifies the result.
BlockProgram plan_with(const ir::Function& fn, const Config& config, const backend::Backend& backend, KnobTable knobs) {
  BlockProgram p = Planner(fn, config, backend, std::move(knobs)).run();
  verify(p);
  return p;
}

}  // namespace

BlockProgram plan(const ir::Function& fn, const Config& config, const backend::Backend& backend) {
  return plan_with(fn, config, backend, derive_knobs(fn, backend.capabilities()));
}

BlockProgram lower(const ir::Function& fn, const Config& given, const backend::Backend& backend,
                   const ir::Function* traced) {
  KnobTable knobs = derive_knobs(fn, backend.capabilities());
  // The config space is the traced function's: binding block counts (bind_config) changes
  // shapes that a backend's legality rules may read, never the knobs.
  const ConfigSpec spec = traced ? derive_config_spec(*traced, backend) : derive_config_spec(fn, knobs, backend);
  const Config config = spec.complete(given);
  spec.validate(config);
  if (ir::has_block_counts(fn)) {
    // Sizes that are numbers of blocks must be bound to this config's block sizes: code for
    // other sizes would index the per-block partials wrongly.
    ir::Function bound = fn;
    ir::resolve_block_counts(bound, bind_block_sizes(fn, knobs, config));
    bool same = bound.tiles.size() == fn.tiles.size();
    for (size_t t = 0; same && t < fn.tensors.size(); ++t) same = bound.tensors[t].shape == fn.tensors[t].shape;
    for (size_t t = 0; same && t < fn.tiles.size(); ++t) same = bound.tiles[t].end == fn.tiles[t].end;
    if (!same)
      throw InternalError("kernel " + fn.name +
                          ": lowering a function whose ph::num_blocks sizes are not bound to the config "
                          "(call lower::bind_config first)");
  }
  BlockProgram p = plan_with(fn, config, backend, std::move(knobs));
  backend.check(p);
  return p;
}

}  // namespace parhelion::lower

#include "lower/lower.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "ir/printer.h"
#include "lower/fusion.h"
#include "lower/pallas_plan.h"
#include "lower/tpu.h"
#include "parhelion/error.h"
#include "runtime/gemm/gemm.h"

namespace parhelion::lower {
namespace {

using ir::Op;
using ir::OpKind;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t next_pow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

std::vector<int> tunable_block_ids(const ir::Function& fn) {
  std::vector<int> ids;
  for (const ir::BlockSize& b : fn.block_sizes)
    if (b.fixed == 0) ids.push_back(b.id);
  return ids;
}

int64_t compute_bytes(DType d) { return d == DType::f32 ? 4 : d == DType::i64 ? 8 : 1; }

// The loads directly in `body` (not in nested loops) that index `tile` exactly once and read a
// tensor the launch does not write (a staged copy of a tensor being written would go stale).
// With `stores` (the pallas target, where every block a loop touches moves through VMEM), its
// stores and the loads of written tensors too. A block whose scalar index is computed inside
// the loop (a row number loaded per trip) cannot be staged: its copy is made before the trip
// (resident: before the loop) computes the index.
void collect_stageable(const ir::Function& fn, const std::vector<Op>& body, int tile, const std::set<int>& written,
                       bool stores, const std::set<int>& defined_in_loop, std::vector<const Op*>& out) {
  for (const Op& op : body) {
    if (op.kind == OpKind::Loop) continue;
    bool invariant_index = true;
    for (const ir::IndexItem& ix : op.index)
      if (ix.kind == ir::IndexItem::Scalar && defined_in_loop.count(ix.value)) invariant_index = false;
    if (!invariant_index) continue;
    if ((op.kind == OpKind::Load && (stores || !written.count(op.tensor))) || (stores && op.kind == OpKind::Store)) {
      int uses = 0;
      for (const ir::IndexItem& ix : op.index) uses += ix.kind == ir::IndexItem::Tile && ix.tile == tile;
      if (uses == 1 && !fn.tiles[tile].is_grid) out.push_back(&op);
    }
    collect_stageable(fn, op.body, tile, written, stores, defined_in_loop, out);
  }
}

}  // namespace

std::vector<InnerLoopSite> inner_loop_sites(const ir::Function& fn, bool stores) {
  std::vector<InnerLoopSite> sites;
  for (const Op& launch : fn.body) {
    if (launch.kind != OpKind::Launch) continue;
    std::set<int> written;
    ir::walk(launch.body, [&](const Op& op) {
      if (op.kind == OpKind::Store) written.insert(op.tensor);
    });
    ir::walk(launch.body, [&](const Op& op) {
      if (op.kind != OpKind::Loop || op.loop_tiles.size() != 1) return;
      InnerLoopSite s{&op, &launch, {}};
      std::set<int> defined_in_loop;
      ir::walk(op.body, [&](const Op& inner) {
        if (inner.result >= 0) defined_in_loop.insert(inner.result);
      });
      collect_stageable(fn, op.body, op.loop_tiles[0], written, stores, defined_in_loop, s.loads);
      if (!s.loads.empty()) sites.push_back(std::move(s));
    });
  }
  return sites;
}

namespace {

class Planner {
 public:
  Planner(const ir::Function& fn, const Config& config, const Target& target) {
    p_.fn = &fn;
    p_.config = config;
    p_.target = target;
    sites_ = inner_loop_sites(fn, target.name == "pallas");
  }

  BlockProgram run() {
    const ir::Function& fn = *p_.fn;
    p_.block_size.resize(fn.block_sizes.size());
    std::vector<int> tunable = tunable_block_ids(fn);
    for (const ir::BlockSize& b : fn.block_sizes) p_.block_size[b.id] = b.fixed;
    for (size_t i = 0; i < tunable.size(); ++i) p_.block_size[tunable[i]] = p_.config.block_sizes.at(i);
    int order_index = 0, launch_index = 0;
    for (const Op& op : fn.body) {
      if (op.kind != OpKind::Launch) continue;
      LaunchPlan L;
      L.op = &op;
      L.index = launch_index++;
      std::vector<int> order(op.loop_tiles.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
      if (order.size() >= 2) order = p_.config.loop_orders.at(order_index++);
      for (int d : order) {
        const ir::TileInfo& t = fn.tiles[op.loop_tiles[d]];
        GridDim g{t.id, t.begin, t.extent(), p_.block_of_tile(t.id), 0};
        g.steps = ceil_div(g.extent, g.block);
        L.total_steps *= g.steps;
        L.grid.push_back(g);
      }
      L.num_threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(p_.config.num_threads, L.total_steps)));
      plan_operands(L, op.body);
      plan_scratch(L, op);
      plan_inner_loops(L, op);
      // Staged operand blocks live in the dots' packing workspaces and the inner loops'
      // staging buffers, which are scratch already.
      L.footprint_bytes = L.scratch_bytes;
      L.working_set_bytes += L.scratch_bytes;
      p_.footprint_bytes = std::max(p_.footprint_bytes, L.footprint_bytes);
      p_.launches.push_back(std::move(L));
    }
    return std::move(p_);
  }

 private:
  std::string block_dim_str(int tile) { return std::to_string(p_.block_of_tile(tile)); }

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
          int64_t b = p_.block_of_tile(ix.tile);
          s.block_shape.push_back(fn.tiles[ix.tile].is_grid ? "1" : std::to_string(b));
          s.index_map.push_back(ir::tile_name(fn, ix.tile) +
                                (fn.tiles[ix.tile].is_grid ? "" : "*" + std::to_string(b)));
          elems *= fn.tiles[ix.tile].is_grid ? 1 : b;
        } else if (ix.kind == ir::IndexItem::All) {
          s.block_shape.push_back(std::to_string(t.shape[d]));
          s.index_map.push_back("0");
          elems *= t.shape[d];
        } else {
          s.block_shape.push_back("1");
          s.index_map.push_back("%" + std::to_string(ix.value));
        }
      }
      s.block_bytes = elems * dtype_size(t.dtype);
      if (op.kind == OpKind::Load && dot_inputs.count(op.result)) s.mode = BlockSpec::Staged;
      for (const BlockSpec& o : L.operands)
        if (o.tensor == s.tensor && o.index_map == s.index_map) {
          const_cast<BlockSpec&>(o).written |= s.written;
          return;
        }
      L.working_set_bytes += s.block_bytes;
      L.operands.push_back(std::move(s));
    });
  }

  int64_t capacity(const ir::Dim& d) { return d.kind == ir::Dim::Const ? d.size : p_.block_of_tile(d.tile); }

  void add_scratch(LaunchPlan& L, Scratch s, const ir::Type& t) {
    s.dtype = t.dtype;
    int64_t n = 1;
    for (const ir::Dim& d : t.shape) {
      s.capacity.push_back(capacity(d));
      n *= s.capacity.back();
    }
    s.bytes = std::max<int64_t>(1, n) * compute_bytes(t.dtype);
    s.offset = L.scratch_bytes;
    L.scratch_bytes += (s.bytes + 63) / 64 * 64;
    L.scratch.push_back(std::move(s));
  }

  void plan_scratch(LaunchPlan& L, const Op& launch) {
    const ir::Function& fn = *p_.fn;
    ir::walk(launch.body, [&](const Op& op) {
      if (op.kind != OpKind::VarDecl) return;
      Scratch s;
      s.name = "v" + std::to_string(op.var);
      s.var = op.var;
      L.var_scratch[op.var] = static_cast<int>(L.scratch.size());
      add_scratch(L, s, fn.vars[op.var].type);
    });
    L.dot_into_var = accumulating_dots(fn, launch);
    // A value cast to bf16/f16 that only dots read is materialized in that dtype: it is exact
    // (the value is representable), half the bytes, and the dot can take its 16-bit path.
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
    for (int v : choose_materialized(fn, launch, L.dot_into_var)) {
      Scratch s;
      s.name = "%" + std::to_string(v);
      s.value = v;
      L.materialized[v] = static_cast<int>(L.scratch.size());
      const Op* d = defs.count(v) ? defs[v] : nullptr;
      if (d && d->kind == OpKind::Cast && (d->dtype == DType::bf16 || d->dtype == DType::f16) && only_dots_read(v)) {
        ir::Type t = fn.type_of(v);
        add_scratch(L, s, t);
        Scratch& added = L.scratch.back();
        L.scratch_bytes -= (added.bytes + 63) / 64 * 64;
        added.dtype = d->dtype;
        added.bytes /= 2;  // 16-bit storage
        L.scratch_bytes += (added.bytes + 63) / 64 * 64;
        continue;
      }
      add_scratch(L, s, fn.type_of(v));
    }
    // Each dot packs its operand blocks into a workspace in fast memory (the staged buffers).
    ir::walk(launch.body, [&](const Op& op) {
      if (op.kind != OpKind::Dot) return;
      const ir::Type& a = fn.type_of(op.operands[0]);
      const ir::Type& r = fn.type_of(op.result);
      int64_t m = capacity(r.shape[r.rank() - 2]), n = capacity(r.shape[r.rank() - 1]),
              k = capacity(a.shape[a.rank() - 1]);
      Scratch s;
      s.name = "pack%" + std::to_string(op.result);
      s.workspace_of = op.result;
      s.dtype = DType::f32;
      s.capacity = {runtime::gemm_workspace_bytes(m, n, k) / 4};
      s.bytes = s.capacity[0] * 4;
      s.offset = L.scratch_bytes;
      L.scratch_bytes += (s.bytes + 63) / 64 * 64;
      L.dot_workspace[op.result] = static_cast<int>(L.scratch.size());
      L.scratch.push_back(s);
    });
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
        if (site_ < sites_.size() && sites_[site_].loop == &op) {
          const InnerLoopChoice& choice = p_.config.inner_loops.at(site_);
          il.strategy = choice.strategy;
          il.buffers = choice.strategy == "pipeline" ? choice.buffers : 1;
          if (il.strategy != "stream" && p_.target.name == "cpu") stage(L, il, sites_[site_]);
          ++site_;
        }
        L.inner_loops.push_back(il);
      }
    });
  }

  // One staging buffer per distinct block the loop reads (loads of the same tensor at the same
  // index share it).
  void stage(LaunchPlan& L, InnerLoop& il, const InnerLoopSite& site) {
    const ir::Function& fn = *p_.fn;
    std::map<std::string, int> by_index;
    for (const Op* load : site.loads) {
      std::string sig = std::to_string(load->tensor);
      for (const ir::IndexItem& ix : load->index)
        sig += "," + std::to_string(static_cast<int>(ix.kind)) + ":" + std::to_string(ix.tile) + ":" +
               std::to_string(ix.value);
      if (auto it = by_index.find(sig); it != by_index.end()) {
        L.staged[it->second].loads.push_back(load->result);
        L.staged_load[load->result] = it->second;
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
        } else if (ix.kind == ir::IndexItem::Tile && !fn.tiles[ix.tile].is_grid) {
          if (ix.tile == il.tile) {
            b.inner_dim = static_cast<int>(b.capacity.size());
            b.capacity.push_back(il.strategy == "resident" ? il.extent : il.block);
          } else {
            b.capacity.push_back(p_.block_of_tile(ix.tile));
            b.key.push_back("off_" + ir::tile_name(fn, ix.tile));
          }
        } else if (ix.kind == ir::IndexItem::Tile) {
          b.key.push_back("off_" + ir::tile_name(fn, ix.tile));
        } else {
          b.key.push_back("%" + std::to_string(ix.value));
        }
      }
      b.slot_elems = 1;
      for (int64_t c : b.capacity) b.slot_elems *= c;
      Scratch s;
      s.name = "stage" + std::to_string(L.staged.size()) + "(" + t.name + ")";
      s.staged = static_cast<int>(L.staged.size());
      s.dtype = t.dtype;
      s.capacity = {b.slot_elems * b.slots};
      s.bytes = s.capacity[0] * dtype_size(t.dtype);
      s.offset = L.scratch_bytes;
      L.scratch_bytes += (s.bytes + 63) / 64 * 64;
      b.scratch = static_cast<int>(L.scratch.size());
      L.scratch.push_back(s);
      by_index[sig] = static_cast<int>(L.staged.size());
      L.staged_load[load->result] = static_cast<int>(L.staged.size());
      il.staged.push_back(static_cast<int>(L.staged.size()));
      L.staged.push_back(std::move(b));
    }
  }

  BlockProgram p_;
  std::vector<InnerLoopSite> sites_;
  size_t site_ = 0;
};

}  // namespace

// Pallas: a block size is legal when every block it shapes is (see tpu_block_legal).
bool pallas_legal(const ir::Function& fn, int block_id, int64_t choice) {
  bool ok = true;
  ir::walk(fn.body, [&](const Op& op) {
    if (op.kind != OpKind::Load && op.kind != OpKind::Store) return;
    const ir::TensorInfo& t = fn.tensors[op.tensor];
    const int rank = static_cast<int>(op.index.size());
    for (int d = 0; d < rank; ++d) {
      const ir::IndexItem& ix = op.index[d];
      if (ix.kind != ir::IndexItem::Tile || fn.tiles[ix.tile].block != block_id || fn.tiles[ix.tile].is_grid) continue;
      if (!tpu_block_legal(choice, t.shape[d], rank - 1 - d, dtype_size(t.dtype))) ok = false;
    }
  });
  return ok;
}

ConfigSpec derive_config_spec(const ir::Function& fn, const Target& target) {
  ConfigSpec spec;
  const bool pallas = target.name == "pallas";
  for (int id : tunable_block_ids(fn)) {
    const ir::BlockSize& b = fn.block_sizes[id];
    BlockSizeSpec s;
    s.block_id = id;
    s.extent = b.extent;
    s.defined_at = b.loc.str();
    int64_t top = std::min<int64_t>(next_pow2(b.extent), 16384);
    for (int64_t c = 1; c <= top; c <<= 1)
      if (!pallas || pallas_legal(fn, id, c)) s.choices.push_back(c);
    spec.block_sizes.push_back(s);
  }
  ir::walk(fn.body, [&](const Op& op) {
    if (op.kind == OpKind::Dot)
      spec.micro_kernels.push_back(
          {pallas ? std::vector<std::string>{"mxu"} : runtime::gemm_kernel_names(), op.loc.str()});
  });
  for (const InnerLoopSite& site : inner_loop_sites(fn, pallas)) {
    InnerLoopSpec s;
    s.tile = site.loop->loop_tiles[0];
    s.loop = ir::tile_name(fn, s.tile);
    s.defined_at = site.loop->loc.str();
    s.strategies = target.inner_strategies;
    spec.inner_loops.push_back(s);
  }
  int launch = 0;
  for (const Op& op : fn.body) {
    if (op.kind != OpKind::Launch) continue;
    if (op.loop_tiles.size() >= 2) spec.loop_orders.push_back({launch, static_cast<int>(op.loop_tiles.size())});
    ++launch;
  }
  spec.max_threads = target.threads;
  return spec;
}

BlockProgram plan(const ir::Function& fn, const Config& config, const Target& target) {
  return Planner(fn, config, target).run();
}

namespace {
std::string fit_hint(const ir::Function& fn, const LaunchPlan& L) {
  for (const InnerLoop& il : L.inner_loops)
    if (il.strategy == "resident")
      return "Stream loop " + ir::tile_name(fn, il.tile) + " (extent " + std::to_string(il.extent) +
             ") with the pipeline strategy, or use smaller block sizes.";
  return "Use smaller block sizes.";
}
}  // namespace

BlockProgram lower(const ir::Function& fn, const Config& given, const Target& target) {
  ConfigSpec spec = derive_config_spec(fn, target);
  Config config = spec.complete(given);
  spec.validate(config);
  if (target.name == "pallas") {
    // The config space offers only legal TPU blocks; a block the kernel fixes must be legal too.
    for (const ir::BlockSize& b : fn.block_sizes)
      if (b.fixed > 0 && !pallas_legal(fn, b.id, b.fixed))
        throw UserError(b.loc.str() + ": the pallas backend cannot use this loop's fixed block of " +
                        std::to_string(b.fixed) +
                        ": a TPU block's last two dims must be multiples of (8, 128) (16 rows for 16-bit data) "
                        "or whole dims; leave the block size to the config, or fix a legal one");
  }
  BlockProgram p = plan(fn, config, target);
  if (target.name == "pallas") {
    for (const PallasLaunch& pl : plan_pallas(p)) {
      // emit_pipeline copies a ragged last block rounded up to whole tiles of the dtype's
      // layout ((8, 128) for 32-bit data, (16, 128) for 16-bit; a 1-D array in 512-byte rows: 128 f32,
      // 256 bf16): along every dim the block is ragged in, not only the loop's own, that
      // rounded copy must stay inside the array.
      // An argument updated in place (aliased as an output) is not padded either: its grid
      // blocks follow the same rule.
      for (const PallasSlot& s : pl.slots) {
        const ir::TensorInfo& t = fn.tensors[s.tensor];
        const bool in_place = s.written && t.origin == ir::TensorInfo::Param;
        if (s.strategy != "pipeline" && !in_place) continue;
        const int rank = static_cast<int>(t.shape.size());
        const int64_t bytes = dtype_size(t.dtype);
        for (int d = 0; d < rank; ++d) {
          const int64_t e = t.shape[d], b = s.block[d];
          if (b <= 0 || e % b == 0) continue;  // a squeezed dim, or whole blocks
          const int from_minor = rank - 1 - d;
          const int64_t q = from_minor == 0 ? (rank == 1 ? 512 / bytes : 128) : from_minor == 1 ? 32 / bytes : 1;
          // (An aliased argument's grid blocks are not rounded but not padded either: in
          // interpret mode any ragged last block of it is out of bounds.)
          const bool rounded_overruns = e % q != 0, unpadded = in_place && s.strategy != "pipeline";
          if (!rounded_overruns && !unpadded) continue;
          const std::string why =
              unpadded ? "an argument updated in place is not padded, so that block runs past it"
                       : "the TPU's copy of it, rounded up to " + std::to_string(q) + ", would read past the end";
          throw UserError("config " + config.to_json() + " cannot " +
                          (s.strategy == "pipeline" ? "pipeline loop " + ir::tile_name(fn, s.loop_tile)
                                                    : "update " + t.name + " in place") +
                          " (at " + s.first->loc.str() + "): its last block of " + t.name + " is ragged in dimension " +
                          std::to_string(d) + " (" + std::to_string(e) + " is not a multiple of the block " +
                          std::to_string(b) + ") and " + why + ". Use a block size that divides " + std::to_string(e) +
                          (s.strategy == "pipeline" ? ", or the resident strategy." : "."));
        }
      }
    }
    for (const PallasLaunch& pl : plan_pallas(p))
      if (pl.vmem_bytes > target.fast_memory_bytes)
        throw UserError("config " + config.to_json() + " does not fit: launch " + std::to_string(pl.index) +
                        " of kernel " + fn.name + " needs " + format_bytes(pl.vmem_bytes) + " of VMEM (" +
                        pl.vmem_detail + "); TPU " + target.tpu + " has " + format_bytes(target.fast_memory_bytes) +
                        " per core. " + fit_hint(fn, p.launches[pl.index]));
    return p;
  }
  for (const LaunchPlan& L : p.launches)
    if (L.footprint_bytes > target.fast_memory_bytes) {
      std::string what;
      for (const Scratch& s : L.scratch) what += (what.empty() ? "" : ", ") + s.name + " " + format_bytes(s.bytes);
      throw UserError("config " + config.to_json() + " does not fit: launch " + std::to_string(L.index) +
                      " of kernel " + fn.name + " needs " + format_bytes(L.footprint_bytes) +
                      " of fast memory per grid step (" + what + "); the target has " +
                      format_bytes(target.fast_memory_bytes) + ". " + fit_hint(fn, L));
    }
  return p;
}

// The starting point of both defaults: every thread, loop orders as written, the first
// micro-kernel, blocks of 1, each inner loop's default strategy.
Config base_config(const ConfigSpec& spec) {
  Config c;
  c.num_threads = spec.max_threads;
  for (const LoopOrderSpec& l : spec.loop_orders) {
    std::vector<int> order(l.dims);
    for (int i = 0; i < l.dims; ++i) order[i] = i;
    c.loop_orders.push_back(order);
  }
  c.block_sizes.assign(spec.block_sizes.size(), 1);
  c.micro_kernels.assign(spec.micro_kernels.size(), 0);
  return spec.complete(c);
}

// Pallas: every block as large as a legal choice up to 512 allows, halved (largest first) until
// the launch takes at most half of VMEM; inner loops pipelined (the target's first strategy).
Config pallas_default_config(const ir::Function& fn, const ConfigSpec& spec, const Target& target) {
  Config c = base_config(spec);
  c.block_sizes.clear();
  std::vector<size_t> pick(spec.block_sizes.size());
  for (size_t i = 0; i < spec.block_sizes.size(); ++i) {
    const auto& ch = spec.block_sizes[i].choices;
    pick[i] = 0;
    for (size_t j = 0; j < ch.size(); ++j)
      if (ch[j] <= 512 || j == 0) pick[i] = j;
    c.block_sizes.push_back(ch[pick[i]]);
  }
  auto vmem = [&] {
    int64_t most = 0;
    for (const PallasLaunch& pl : plan_pallas(plan(fn, c, target))) most = std::max(most, pl.vmem_bytes);
    return most;
  };
  for (int round = 0; round < 64 && vmem() > target.fast_memory_bytes / 2; ++round) {
    size_t big = 0;
    for (size_t i = 0; i < pick.size(); ++i)
      if (pick[i] > 0 && (pick[big] == 0 || c.block_sizes[i] > c.block_sizes[big])) big = i;
    if (pick[big] == 0) break;
    c.block_sizes[big] = spec.block_sizes[big].choices[--pick[big]];
  }
  return c;
}

Config default_config(const ir::Function& fn, const ConfigSpec& spec, const Target& target) {
  if (target.name == "pallas") return pallas_default_config(fn, spec, target);
  Config c = base_config(spec);
  // Which block ids tile a tensor's contiguous (last) dimension, weighted by that tensor's size:
  // grow those first, so that the blocks of the biggest streams are long unit-stride runs.
  std::vector<double> contiguous(fn.block_sizes.size(), 0);
  ir::walk(fn.body, [&](const Op& op) {
    if ((op.kind == OpKind::Load || op.kind == OpKind::Store) && !op.index.empty() &&
        op.index.back().kind == ir::IndexItem::Tile) {
      const ir::TensorInfo& t = fn.tensors[op.tensor];
      contiguous[fn.tiles[op.index.back().tile].block] +=
          static_cast<double>(shape_numel(t.shape)) * dtype_size(t.dtype);
    }
  });
  std::vector<size_t> order(spec.block_sizes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return contiguous[spec.block_sizes[a].block_id] > contiguous[spec.block_sizes[b].block_id];
  });
  // A grid step should touch a quarter of fast memory at most, and leave 4 steps per thread.
  const int64_t budget = std::max<int64_t>(16 << 10, target.fast_memory_bytes / 4);
  auto acceptable = [&](const Config& cand) {
    BlockProgram p = plan(fn, cand, target);
    for (const LaunchPlan& L : p.launches) {
      if (L.working_set_bytes > budget || L.footprint_bytes > target.fast_memory_bytes) return false;
    }
    return true;
  };
  auto enough_steps = [&](const Config& cand) {
    BlockProgram p = plan(fn, cand, target);
    for (const LaunchPlan& L : p.launches) {
      int64_t max_steps = 1;
      for (const GridDim& g : L.grid) max_steps *= g.extent;
      if (L.total_steps < std::min<int64_t>(4 * spec.max_threads, max_steps)) return false;
    }
    return true;
  };
  // Kernels with dot products: start from GEMM-like blocks (M 128, N 256, K 256), which keep
  // the micro-kernels busy and the packed operands in L2, then halve K and M until the step
  // fits three quarters of fast memory and the grid has two steps per thread.
  std::vector<int> spec_of_block(fn.block_sizes.size(), -1);
  for (size_t i = 0; i < spec.block_sizes.size(); ++i)
    spec_of_block[spec.block_sizes[i].block_id] = static_cast<int>(i);
  std::vector<int> dot_role(spec.block_sizes.size(), -1);  // 0 M, 1 N, 2 K
  ir::walk(fn.body, [&](const Op& op) {
    if (op.kind != OpKind::Dot) return;
    const ir::Type& r = fn.type_of(op.result);
    const ir::Type& a = fn.type_of(op.operands[0]);
    const ir::Dim* dims[3] = {&r.shape[r.rank() - 2], &r.shape[r.rank() - 1], &a.shape[a.rank() - 1]};
    for (int role = 0; role < 3; ++role)
      if (dims[role]->kind == ir::Dim::Tile) {
        int sb = spec_of_block[fn.tiles[dims[role]->tile].block];
        if (sb >= 0 && dot_role[sb] < 0) dot_role[sb] = role;
      }
  });
  bool has_dot = std::any_of(dot_role.begin(), dot_role.end(), [](int r) { return r >= 0; });
  if (has_dot) {
    const int64_t preferred[3] = {128, 256, 256};
    for (size_t i = 0; i < dot_role.size(); ++i)
      if (dot_role[i] >= 0) c.block_sizes[i] = std::min(preferred[dot_role[i]], spec.block_sizes[i].choices.back());
    auto fits = [&](const Config& cand) {
      for (const LaunchPlan& L : plan(fn, cand, target).launches)
        if (L.footprint_bytes > target.fast_memory_bytes * 3 / 4) return false;
      return true;
    };
    for (int round = 0; round < 64 && !fits(c); ++round) {
      int role = round % 3 == 1 ? 0 : round % 3 == 2 ? 1 : 2;  // K, then M, then N
      for (size_t i = 0; i < dot_role.size(); ++i)
        if (dot_role[i] == role && c.block_sizes[i] > 16) c.block_sizes[i] /= 2;
    }
    // Walk the grid with the M tile fastest: consecutive steps then reuse the same B blocks
    // (N, K) from the caches while A's row blocks stream.
    int launch_index = 0, order_index = 0;
    for (const Op& op : fn.body) {
      if (op.kind != OpKind::Launch) continue;
      if (op.loop_tiles.size() >= 2) {
        std::vector<int>& order = c.loop_orders[order_index++];
        for (size_t d = 0; d < op.loop_tiles.size(); ++d) {
          int sb = spec_of_block[fn.tiles[op.loop_tiles[d]].block];
          if (sb >= 0 && dot_role[sb] == 0) {
            order.erase(std::find(order.begin(), order.end(), static_cast<int>(d)));
            order.push_back(static_cast<int>(d));
          }
        }
      }
      ++launch_index;
    }
    for (int round = 0; round < 8; ++round) {
      int64_t steps = 1;
      for (const LaunchPlan& L : plan(fn, c, target).launches) steps = std::max(steps, L.total_steps);
      if (steps >= 2 * spec.max_threads) break;
      for (size_t i = 0; i < dot_role.size(); ++i)
        if (dot_role[i] == 0 && c.block_sizes[i] > 16) c.block_sizes[i] /= 2;
    }
  }
  for (bool grew = true; grew;) {
    grew = false;
    for (size_t i : order) {
      const auto& choices = spec.block_sizes[i].choices;
      if (c.block_sizes[i] >= choices.back() || (has_dot && dot_role[i] >= 0)) continue;
      Config cand = c;
      cand.block_sizes[i] *= 2;
      if (acceptable(cand) && enough_steps(cand)) {
        c = cand;
        grew = true;
        break;  // restart from the highest-priority dimension
      }
    }
  }
  return c;
}

std::string print(const BlockProgram& p) {
  const ir::Function& fn = *p.fn;
  std::ostringstream os;
  os << "block_program " << fn.name << " target=" << p.target.name << " (fast memory "
     << format_bytes(p.target.fast_memory_bytes) << ", " << p.target.threads << " threads)\n";
  os << "  config " << p.config.to_json() << "\n";
  for (size_t i = 0; i < fn.block_sizes.size(); ++i)
    os << "  $b" << i << " = " << p.block_size[i] << (fn.block_sizes[i].fixed ? " (fixed)" : "") << "\n";
  for (const LaunchPlan& L : p.launches) {
    os << "  launch " << L.index << ": grid (";
    for (size_t i = 0; i < L.grid.size(); ++i) {
      const GridDim& g = L.grid[i];
      os << (i ? ", " : "") << ir::tile_name(fn, g.tile) << ": " << g.extent << "/" << g.block << " = " << g.steps;
    }
    os << ") = " << L.total_steps << " steps on " << L.num_threads << " thread" << (L.num_threads > 1 ? "s" : "")
       << "\n";
    for (const BlockSpec& b : L.operands) {
      const ir::TensorInfo& t = fn.tensors[b.tensor];
      os << "    " << (b.written ? "out " : "in  ") << t.name << " " << dtype_name(t.dtype) << " block [";
      for (size_t d = 0; d < b.block_shape.size(); ++d) os << (d ? ", " : "") << b.block_shape[d];
      os << "] at (";
      for (size_t d = 0; d < b.index_map.size(); ++d) os << (d ? ", " : "") << b.index_map[d];
      os << ") " << (b.mode == BlockSpec::Direct ? "direct" : "staged") << " " << format_bytes(b.block_bytes) << "\n";
    }
    for (const Scratch& s : L.scratch) {
      os << "    scratch " << s.name << " " << dtype_name(s.dtype) << " [";
      for (size_t d = 0; d < s.capacity.size(); ++d) os << (d ? ", " : "") << s.capacity[d];
      os << "] " << format_bytes(s.bytes) << " @" << s.offset << "\n";
    }
    for (const InnerLoop& il : L.inner_loops) {
      os << "    inner loop " << ir::tile_name(fn, il.tile) << ": " << il.extent << "/" << il.block << " = " << il.trips
         << " trips, " << il.strategy;
      if (il.strategy == "pipeline") os << " x" << il.buffers << " buffers";
      os << "\n";
      for (int k : il.staged) {
        const StagedBlock& b = L.staged[k];
        os << "      stage " << fn.tensors[b.tensor].name << " [";
        for (size_t d = 0; d < b.capacity.size(); ++d) os << (d ? ", " : "") << b.capacity[d];
        os << "]" << (b.slots > 1 ? " x" + std::to_string(b.slots) : "") << " "
           << format_bytes(L.scratch[b.scratch].bytes);
        if (il.strategy == "resident") {
          os << ", refilled when (";
          for (size_t i = 0; i < b.key.size(); ++i) os << (i ? ", " : "") << b.key[i];
          os << ") changes";
        }
        os << "\n";
      }
    }
    os << "    footprint " << format_bytes(L.footprint_bytes) << " of " << format_bytes(p.target.fast_memory_bytes)
       << ", working set " << format_bytes(L.working_set_bytes) << " per step\n";
  }
  return os.str();
}

}  // namespace parhelion::lower

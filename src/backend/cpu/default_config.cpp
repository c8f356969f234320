// The cpu backend's heuristic default config.
#include "backend/cpu/default_config.h"

#include <algorithm>
#include <set>

#include "backend/cpu/jit.h"
#include "ir/trip_guard.h"
#include "ir/value_tiles.h"
#include "lower/cache_hints.h"
#include "lower/config_space.h"
#include "lower/lower.h"
#include "runtime/gemm/gemm.h"

namespace parhelion::backend::cpu {

using ir::Op;
using ir::OpKind;

// The most memory the default lets the per-thread copies of one atomically updated tensor take.
constexpr int64_t kMaxPartialsBytes = int64_t{64} << 20;

// The host's widest vectors (0), but a kernel that draws random numbers takes 128 bits on an AVX2
// host whose compiler's tuning prefers 128 (its 256-bit vectors are two 128-bit halves: AMD's
// Zen 1). Philox's 32 x 32 -> 64-bit products move its words between 32- and 64-bit lanes every
// round, and there those moves cross the halves at a high cost: dropout [8192, 4096] f32 282 ->
// 160 ms, bf16 276 -> 143 ms (AMD EPYC Zen 1, 2 threads). Other kernels gain or lose up to 20%
// there either way, and AVX-512 hosts (whose tuning prefers 256) are unmeasured: the tuner
// decides those. (Measured before a simd loop drew through ph_rt::philox_row, which takes the
// host's widest vectors whatever this says; the rule now governs only draws made per element.)
static int default_vector_bits(const ir::Function& fn, const ConfigSpec& spec) {
  if (spec.vector_bits.empty()) return 0;
  bool draws = false;
  ir::walk(fn.body, [&](const Op& op) {
    if (op.kind == OpKind::Binary && (static_cast<ir::BinaryFn>(op.fn) == ir::BinaryFn::rand ||
                                      static_cast<ir::BinaryFn>(op.fn) == ir::BinaryFn::randn))
      draws = true;
  });
  if (!draws) return 0;
  return spec.vector_bits.front() == 256 && compiler_preferred_vector_bits() == 128 ? 128 : 0;
}

// The grid dims of `launch` that a jagged loop's range is computed from (moe_matmul's expert,
// whose offsets bound the loop over its tokens): the positions in launch.loop_tiles.
static std::vector<int> grid_dims_bounding_jagged_loops(const ir::Function& fn, const Op& launch) {
  const ir::ValueTiles value_tiles(fn, launch.body);
  std::set<int> tiles;
  ir::walk(launch.body, [&](const Op& op) {
    if (op.kind == OpKind::Loop &&
        std::any_of(op.loop_tiles.begin(), op.loop_tiles.end(), [&](int t) { return fn.tiles[t].is_jagged(); }))
      for (int bound : op.operands) tiles.insert(value_tiles.of(bound).begin(), value_tiles.of(bound).end());
  });
  std::vector<int> dims;
  for (size_t d = 0; d < launch.loop_tiles.size(); ++d)
    if (tiles.count(launch.loop_tiles[d])) dims.push_back(static_cast<int>(d));
  return dims;
}

// A grid dim that bounds a jagged loop goes fastest. Its steps' costs follow the data (an
// expert's token count), and threads that run fixed ranges of steps (the partial copies of an
// atomic update) would otherwise split the data's uneven parts between them: moe_matmul with
// experts outermost gave one thread the heavy experts (AMD EPYC Zen 1, 2 threads, [2048, 1024,
// 1024, 8, 2] f32 at blocks [256, 32]: 162 -> 121 ms); grouped_gemm [4096, 1024, 1024, 8] f32
// 119 -> 108-114 ms.
static void put_jagged_bounds_fastest(const ir::Function& fn, const lower::KnobTable& knobs, Config& c) {
  for (size_t knob = 0; knob < knobs.loop_orders.size(); ++knob) {
    std::vector<int>& grid_order = c.loop_orders[knob];
    for (int d : grid_dims_bounding_jagged_loops(fn, *knobs.loop_orders[knob])) {
      grid_order.erase(std::find(grid_order.begin(), grid_order.end(), d));
      grid_order.push_back(d);
    }
  }
}

Config default_config(const ir::Function& fn, const ConfigSpec& spec, const Backend& backend) {
  Config c = lower::base_config(spec);
  const lower::KnobTable knobs = lower::derive_knobs(fn, backend.capabilities());
  const int64_t fast_memory = backend.machine().fast_memory_bytes;
  // Which block ids tile a tensor's innermost dimensions, weighted by that tensor's size: grow
  // those first, so that the blocks of the biggest streams are long unit-stride runs. The last
  // tile of an access counts whole, the one before it a 1024th (it lengthens the run once the
  // last is whole), and so on: rotary's x [B, S, H, D/2, 2], indexed [b, s, h, j, all], grows j,
  // then h (a row of 16 heads is one 8 KiB run), not s (runs of 512 bytes 8 KiB apart: 4.9 ms
  // against 3.1 at [2, 1024, 16, 128] f32 on an AMD EPYC, 2 threads, before the halves were
  // fused into the store). A whole dim or a scalar index neither counts nor ends the run; a
  // gather or a slice ends it (its index block, not a tile's block, decides the run).
  std::vector<double> contiguous(fn.block_sizes.size(), 0);
  // The element size of the biggest tensor whose unit-stride run a block sets (its last tile).
  std::vector<double> heaviest_run(fn.block_sizes.size(), 0);
  std::vector<int64_t> run_element_bytes(fn.block_sizes.size(), 4);
  ir::walk(fn.body, [&](const Op& op) {
    if (op.kind != OpKind::Load && op.kind != OpKind::Store) return;
    const ir::TensorInfo& t = fn.tensors[op.tensor];
    double weight = static_cast<double>(shape_numel(t.shape)) * dtype_size(t.dtype);
    // (the innermost item: a run of its block's elements where its dim has stride 1; an item
    // skipped after it, a whole dim or a scalar index, makes the next one's run longer or strided)
    bool last = op.index.size() == t.shape.size() && (t.strides.empty() || t.strides.back() == 1);
    for (auto it = op.index.rbegin(); it != op.index.rend(); ++it) {
      if (it->kind == ir::IndexItem::All || it->kind == ir::IndexItem::Scalar) {
        last = false;
        continue;
      }
      if (it->kind != ir::IndexItem::Tile) break;
      const int block = fn.tiles[it->tile].block;
      contiguous[block] += weight;
      if (last && weight > heaviest_run[block]) {
        heaviest_run[block] = weight;
        run_element_bytes[block] = static_cast<int64_t>(dtype_size(t.dtype));
      }
      last = false;
      weight /= 1024;
    }
  });
  std::vector<size_t> order(spec.block_sizes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return contiguous[spec.block_sizes[a].block_id] > contiguous[spec.block_sizes[b].block_id];
  });
  // A grid step should touch a quarter of fast memory at most, and leave 4 steps per thread; or,
  // where the step already touches more (GEMM-sized dot blocks on a small L2), no more than it
  // did: a block that adds nothing to a step's bytes (split_k_matmul's split of K, whose inner
  // loop streams the blocks) is grown as far as the steps allow. Kept at 1, that split added a
  // 256 x 256 block into the output per element of K: 13x slower than torch (AMD EPYC, 512 KiB
  // L2, where the dot blocks alone are over the quarter).
  const int64_t budget = std::max<int64_t>(16 << 10, fast_memory / 4);
  // A block that a trip of an inner loop reads twice (cross_entropy's logits, by its max and then
  // by its exp and sum), or that two statements of a grid step read, stays within half the first cache: the second read
  // then comes from it, while the next trip's or step's block is prefetched (lower/cache_hints.h). Measured on an AMD
  // EPYC Zen 5 (48 KiB L1d), 2 threads, cross_entropy [2048, 32000] f32 at logits blocks [2, 16384] (128 KiB) 7.6 ms,
  // [1, 16384] 6.5, [1, 8192] 6.1, [1, 4096] (16 KiB) 5.8, [1, 2048] 6.6; bf16 at [4, 16384] 8.9 ms, [1, 4096] and [1,
  // 8192] 7.4; softmax_two_pass [1024, 16384] f32 3.6 -> 3.2 ms at a first loop's block of 4096 for 16384. The same for
  // the rows that two statements of a grid step read (a norm's sums and its store; a softmax's max, exp and sum, and
  // scale), same build, 2 threads, 4 alternating rounds: softmax [4096, 4096] f32 5-7% faster at 1 row than 4;
  // rms_norm_backward [8192, 2048] bf16 3.6 -> 2.8 ms at 4 rows against 16; batch_softmax f32,
  // layer_norm, rms_norm 0-5% faster, their bf16 rows alike (a tie).
  const int64_t reread_budget = backend.machine().first_cache_bytes / 2;
  // (Each candidate is planned once; the current config's plan is kept beside it.)
  auto acceptable = [&](const lower::BlockProgram& p, const lower::BlockProgram& was) {
    for (size_t i = 0; i < p.launches.size(); ++i) {
      const lower::LaunchPlan &L = p.launches[i], &before = was.launches[i];
      if (L.working_set_bytes > std::max(budget, before.working_set_bytes) ||
          L.footprint_bytes > std::max(fast_memory, before.footprint_bytes))
        return false;
      if (reread_budget > 0) {  // (each block against itself: a fixed block over the budget holds no other back)
        const std::vector<int64_t> now = lower::reread_block_bytes(p, L), then = lower::reread_block_bytes(was, before);
        for (size_t b = 0; b < now.size() && b < then.size(); ++b)
          if (now[b] > std::max(reread_budget, then[b])) return false;
      }
    }
    return true;
  };
  // A launch with fewer steps than 4 per thread (or than its grid has at blocks of 1).
  auto few_steps = [&](const lower::LaunchPlan& L) {
    int64_t max_steps = 1;
    for (const lower::GridDim& g : L.grid) max_steps *= g.extent;
    return L.total_steps < std::min<int64_t>(4 * spec.max_threads, max_steps);
  };
  // Launches that a short run's growth (below) took under 4 steps per thread: they hold no other
  // block back while their steps stay as they are.
  std::vector<bool> spent_on_a_run;
  auto spent = [&](size_t l) { return l < spent_on_a_run.size() && spent_on_a_run[l]; };
  // The launches of `p` whose steps hold a growth back (`was`: the plan before it).
  auto held_back = [&](const lower::BlockProgram& p, const lower::BlockProgram& was) {
    std::vector<size_t> held;
    for (size_t l = 0; l < p.launches.size(); ++l)
      if (few_steps(p.launches[l]) && !(spent(l) && p.launches[l].total_steps == was.launches[l].total_steps))
        held.push_back(l);
    return held;
  };
  // The biggest stream's unit-stride run is grown to 512 bytes (8 cache lines) even where that
  // leaves fewer than 4 steps per thread: strided runs shorter than that leave the prefetchers
  // and DRAM pages half used. A scan walking row blocks down a column stripe per step (segment_sum
  // [131072, 256, 2048] before 79a00dd, whose scan is now segment_cumsum's): f32 at 32 columns
  // (8 steps) 11.3-11.6 ms, at 128 (2 steps) 8.6 ms; bf16 (128 columns, 256 bytes: 512 would
  // leave one step) 10.3 -> 9.5 ms (AMD EPYC Zen 5, 2 threads). Only where the launches it
  // holds to fewer steps had enough before (or were spent on this run already: a launch short
  // for other reasons, a fixed block or a dot's, still holds it back), and only while the
  // slowest thread's share of each does not grow: with c steps before and n after on T threads,
  // ceil(n / T) / n <= ceil(c / T) / c (8 steps of 32 columns on 6 threads give a thread 64
  // columns; 2 of 128 would give one 128).
  constexpr int64_t kMinRunBytes = 512;
  auto short_run = [&](size_t i) {
    const int block = spec.block_sizes[i].block_id;
    return !order.empty() && i == order[0] && heaviest_run[block] > 0 &&
           2 * heaviest_run[block] >= contiguous[block] &&  // (the run's tensor is most of the block's bytes)
           c.block_sizes[i] * run_element_bytes[block] < kMinRunBytes;
  };
  auto steps_spent_well = [&](const std::vector<size_t>& held, const lower::BlockProgram& p,
                              const lower::BlockProgram& was) {
    const int64_t t = spec.max_threads;
    for (size_t l : held) {
      const int64_t n = p.launches[l].total_steps, before = was.launches[l].total_steps;
      if ((few_steps(was.launches[l]) && !spent(l)) || (n + t - 1) / t * before > (before + t - 1) / t * n)
        return false;
    }
    return true;
  };
  // Kernels with dot products: start from GEMM-like blocks (runtime::gemm_preferred_block: M 256,
  // N 256, K 256 for the vector micro-kernels), which keep the micro-kernels busy and the packed
  // operands in L2, then halve the dim whose halving brings the launches closest to three quarters
  // of fast memory until they fit, then M until the grid has two steps per thread.
  std::vector<int> spec_of_block(fn.block_sizes.size(), -1);
  for (size_t i = 0; i < spec.block_sizes.size(); ++i)
    spec_of_block[spec.block_sizes[i].block_id] = static_cast<int>(i);
  std::vector<int> dot_role(spec.block_sizes.size(), -1);  // 0 M, 1 N, 2 K
  // The blocks the default micro-kernels (each dot's first choice) run best on: the largest.
  int64_t preferred[3] = {0, 0, 0};
  for (const MicroKernelSpec& mk : spec.micro_kernels) {
    const runtime::GemmBlock b = runtime::gemm_preferred_block(mk.choices.at(0));
    preferred[0] = std::max(preferred[0], b.m);
    preferred[1] = std::max(preferred[1], b.n);
    preferred[2] = std::max(preferred[2], b.k);
  }
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
  // A tile re-tiled by an inner loop (`ph::tile(outer)`: split_k_matmul's split of K, whose inner
  // loop is the dot's K) is at least its inner tile's block: a smaller one would cut every inner
  // block short (to one element, at block 1) and leave the inner block unused. (Before the dot
  // blocks are fitted to fast memory: cut short, they looked small.) A dot's dim keeps the block
  // the dots were fitted with: first every tile inside one comes down to it, then every other
  // enclosing tile is raised to the block inside it, until nothing changes (in a chain of three,
  // raising the middle one may leave the outer one below it). Raising only grows blocks, each to
  // at most one inside it, so the caps hold and the loop ends.
  auto raise_outer_tiles = [&](Config& cfg) {
    for (const ir::TileInfo& t : fn.tiles) {
      const int st = spec_of_block[t.block];
      if (st < 0) continue;
      for (int a = t.parent; a >= 0; a = fn.tiles[a].parent) {
        const int sa = spec_of_block[fn.tiles[a].block];
        if (sa >= 0 && dot_role[sa] >= 0) cfg.block_sizes[st] = std::min(cfg.block_sizes[st], cfg.block_sizes[sa]);
      }
    }
    for (bool changed = true; changed;) {
      changed = false;
      for (const ir::TileInfo& t : fn.tiles) {
        if (t.parent < 0) continue;
        const int inner = spec_of_block[t.block], outer = spec_of_block[fn.tiles[t.parent].block];
        if (inner < 0 || outer < 0 || dot_role[outer] >= 0) continue;
        if (cfg.block_sizes[outer] < cfg.block_sizes[inner] &&
            cfg.block_sizes[outer] < spec.block_sizes[outer].choices.back()) {
          cfg.block_sizes[outer] *= 2;
          changed = true;
        }
      }
    }
  };
  bool has_dot = std::any_of(dot_role.begin(), dot_role.end(), [](int r) { return r >= 0; });
  // (The grid order is final before any block is fitted: it decides which Bs are kept, and a
  // kept B's panels take no room in fast memory. For dots, again after the M tile is put
  // fastest, which it overrides.)
  put_jagged_bounds_fastest(fn, knobs, c);
  if (has_dot) {
    for (size_t i = 0; i < dot_role.size(); ++i)
      if (dot_role[i] >= 0) c.block_sizes[i] = std::min(preferred[dot_role[i]], spec.block_sizes[i].choices.back());
    raise_outer_tiles(c);
    // Walk the grid with the M tile fastest: consecutive steps then reuse the same B blocks
    // (N, K) from the caches while A's row blocks stream. Before the fit below (see above): fitted
    // with the order still to come, the family's K came down to 128 for panels that the order
    // then kept: matmul bf16 2048^3 ran 5% slower at [256,256,128] than at [256,256,256] (AMD
    // EPYC Zen 5, 2 threads).
    for (size_t knob = 0; knob < knobs.loop_orders.size(); ++knob) {
      const Op& launch = *knobs.loop_orders[knob];
      std::vector<int>& grid_order = c.loop_orders[knob];
      for (size_t d = 0; d < launch.loop_tiles.size(); ++d) {
        int sb = spec_of_block[fn.tiles[launch.loop_tiles[d]].block];
        if (sb >= 0 && dot_role[sb] == 0) {
          grid_order.erase(std::find(grid_order.begin(), grid_order.end(), static_cast<int>(d)));
          grid_order.push_back(static_cast<int>(d));
        }
      }
    }
    put_jagged_bounds_fastest(fn, knobs, c);
    // How far a config's launches are over three quarters of fast memory, summed over them.
    auto excess = [&](const Config& cand) {
      int64_t over = 0;
      for (const lower::LaunchPlan& L : lower::plan(fn, cand, backend).launches)
        over += std::max<int64_t>(0, L.footprint_bytes - fast_memory * 3 / 4);
      return over;
    };
    auto halved = [&](Config cand, int role) {
      for (size_t i = 0; i < dot_role.size(); ++i)
        if (dot_role[i] == role && cand.block_sizes[i] > 16) cand.block_sizes[i] /= 2;
      return cand;
    };
    // Each round halves the dim (K, M or N, over every dot) whose halving takes the most off the
    // excess; K first among equals. A fixed order (K, then M, then N) halved K first even where
    // the footprint was an [M, N] accumulator that K does not shape: matmul_layernorm bf16
    // [2048,2048,1024] (N whole) came to [128,128] at 11.5 ms where [128,256] runs 10.3 (AMD
    // EPYC Zen 5, 2 threads). Where no single halving helps (launches each over by a dim of its
    // own, scratch no dot block shapes), the round halves in that fixed order, as before.
    constexpr int kRoles[3] = {2, 0, 1};  // K, M, N
    for (int round = 0; round < 64; ++round) {
      const int64_t over = excess(c);
      if (over == 0) break;
      Config best = c;
      int64_t best_over = over;
      for (int role : kRoles) {
        const Config cand = halved(c, role);
        if (cand.block_sizes == c.block_sizes) continue;
        if (const int64_t e = excess(cand); e < best_over) {
          best = cand;
          best_over = e;
        }
      }
      if (best_over == over)  // (K, M, N in turn)
        for (int step = 0; step < 3 && best.block_sizes == c.block_sizes; ++step)
          best = halved(c, kRoles[(round + step) % 3]);
      if (best.block_sizes == c.block_sizes) break;  // every dot block at its floor
      c = best;
    }
    for (int round = 0; round < 8; ++round) {
      int64_t steps = 1;
      for (const lower::LaunchPlan& L : lower::plan(fn, c, backend).launches) steps = std::max(steps, L.total_steps);
      if (steps >= 2 * spec.max_threads) break;
      for (size_t i = 0; i < dot_role.size(); ++i)
        if (dot_role[i] == 0 && c.block_sizes[i] > 16) c.block_sizes[i] /= 2;
    }
  }
  raise_outer_tiles(c);
  lower::BlockProgram current = lower::plan(fn, c, backend);
  for (bool grew = true; grew;) {
    grew = false;
    for (size_t i : order) {
      const auto& choices = spec.block_sizes[i].choices;
      if (c.block_sizes[i] >= choices.back() || (has_dot && dot_role[i] >= 0)) continue;
      Config cand = c;
      cand.block_sizes[i] *= 2;
      raise_outer_tiles(cand);                          // (an inner tile grown past its outer one would be cut short)
      if (cand.block_sizes == c.block_sizes) continue;  // held at a dot's block
      lower::BlockProgram next = lower::plan(fn, cand, backend);
      if (!acceptable(next, current)) continue;
      const std::vector<size_t> held = held_back(next, current);
      if (held.empty() || (short_run(i) && steps_spent_well(held, next, current))) {
        spent_on_a_run.resize(next.launches.size(), false);
        for (size_t l : held) spent_on_a_run[l] = true;
        c = cand;
        current = std::move(next);
        grew = true;
        break;  // restart from the highest-priority dimension
      }
    }
  }
  // A loop whose trips stop at a bound of the launch's tiles (causal attention's key loop, under
  // `ph::when(tk.begin() < tq.end())`) runs the trip that straddles the bound whole, and the part
  // past it is masked-out work: up to a block of the loop per block of the bound's tiles. Its
  // block is kept at most twice theirs. Measured on an Intel Xeon (AMX), causal attention bf16,
  // 2 threads, with the masks decided per block (emit/decided_wheres.cpp): [1,4,4096,128] at
  // query and key blocks 128 x 512 took 20.0 ms, at 128 x 256 16.7 ms; [1,16,1024,64] 6.0 and 4.7.
  // (A bound on tiles of fixed blocks only, which the config does not size, leaves it alone.)
  // Before that, the masked-out part, about (bound's block + loop's block) / the loop's extent of
  // the work, is kept near an eighth by halving the bound's blocks, not below 128 (smaller dot
  // blocks lose more to packing). Measured on the Xeon (AMX), causal attention bf16, 2 threads:
  // [1,4,4096,128] at 128 x 256 17.3-19.2 ms, 256 x 256 18.4-20.8 ms; [1,16,1024,128] 128 x 256
  // 6.2 ms, 256 x 512 7.5 ms (which the dots' blocks fit once a materialized A needed no packing
  // room); f32 [1,16,1024,*] the same at 128 x 256 and 256 x 256.
  constexpr int64_t kMinBoundBlock = 128;
  for (const Op& launch : fn.body) {
    if (launch.kind != OpKind::Launch) continue;
    ir::walk(launch.body, [&](const Op& loop) {
      if (loop.kind != OpKind::Loop || loop.loop_tiles.size() != 1) return;
      const auto bound = ir::TripBound::of(fn, loop, launch.loop_tiles);
      const int inner = spec_of_block[fn.tiles[loop.loop_tiles[0]].block];
      if (!bound || inner < 0) return;
      const int64_t span = fn.tiles[loop.loop_tiles[0]].extent();
      for (int t : bound->tiles())
        if (const int sb = spec_of_block[fn.tiles[t].block]; sb >= 0)
          while (c.block_sizes[sb] > kMinBoundBlock && 8 * (c.block_sizes[sb] + c.block_sizes[inner]) > span &&
                 c.block_sizes[sb] / 2 >= spec.block_sizes[sb].choices.front())
            c.block_sizes[sb] /= 2;
      int64_t outer = 0;
      for (int t : bound->tiles())
        if (const int sb = spec_of_block[fn.tiles[t].block]; sb >= 0) outer = std::max(outer, c.block_sizes[sb]);
      const auto& choices = spec.block_sizes[inner].choices;
      while (outer > 0 && c.block_sizes[inner] > 2 * outer && c.block_sizes[inner] / 2 >= choices.front())
        c.block_sizes[inner] /= 2;
    });
  }
  // Atomic updates: per-thread partial copies where they are small beside memory (plain
  // vectorizable updates, and a combine pass of threads x the tensor), atomic instructions on a
  // large tensor (a copy per thread would cost more than the contention it saves).
  for (size_t i = 0; i < knobs.atomics.size(); ++i) {
    const ir::TensorInfo& t = fn.tensors[knobs.atomics[i].tensor];
    const int64_t bytes = shape_numel(t.shape) * dtype_size(t.dtype) * spec.max_threads;
    const auto& ch = spec.atomics[i].choices;
    if (bytes <= kMaxPartialsBytes && std::find(ch.begin(), ch.end(), "partials") != ch.end())
      c.atomics[i] = "partials";
  }
  // Cache hints for launches that move tensors far larger than the caches (lower/cache_hints.h).
  for (size_t i = 0; i < knobs.cache_hints.size(); ++i)
    c.cache_hints[i] = lower::default_cache_hint(fn, *knobs.cache_hints[i], backend.machine());
  c.vector_bits = default_vector_bits(fn, spec);
  return c;
}

}  // namespace parhelion::backend::cpu

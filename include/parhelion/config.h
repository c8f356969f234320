// Config: one point of a kernel's configuration space, and ConfigSpec: that space.
//
// A ConfigSpec is derived from a traced kernel (its Tile IR) and a target: one block size per
// tiled dimension with its domain, a loop order per multi-dimensional launch, and the parallel
// split over threads. A Config prints as one line of JSON that parses back, so a user can pin
// the configuration a tuner found:
//   {"block_sizes":[8,1024],"loop_orders":[[0,1]],"num_threads":2}
// ("index_checks":false, written only when set, turns off the bounds checks of computed indices)
// (kernels with dot products add "micro_kernels":[0], one choice per dot; kernels with inner tile
// loops that read tensors add "inner_loops":[{"strategy":"pipeline","buffers":2}], one per loop;
// kernels with gathers, on a backend with gather strategies, add "gathers":["dma"], one per
// gather load; kernels with atomic updates, on a backend with atomic strategies, add
// "atomics":["partials"], one per tensor a launch updates atomically; a GPU backend adds
// "num_warps":4, the warps of one program, and "launch_groups":[8], one per launch with a dot and a
// grid of two dims or more: its programs' grouped order; on the cpu, launches that write or read
// contiguous rows of tensors add "cache_hints":["stream"], one per launch: CacheHintSpec; on a
// host with vectors wider than 128 bits, "vector_bits":128 sets the width the cpu's loops are
// compiled for, written where set: ConfigSpec::vector_bits)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace parhelion {

// How one inner (device) tile loop moves the blocks it reads (see lower/block_ir.h):
//   "stream"   read in place, one block per trip, through the caches (cpu only);
//   "pipeline" copy each trip's blocks into `buffers` (1-3) fast-memory buffers, the next
//              block(s) fetched while the current one is computed;
//   "resident" copy the loop's whole extent into fast memory once per outer block, reuse it
//              while consecutive grid steps keep that block, and slice it every trip.
struct InnerLoopChoice {
  std::string strategy = "stream";
  int buffers = 2;  // pipeline only
  bool operator==(const InnerLoopChoice&) const = default;
};

struct Config {
  std::vector<int64_t> block_sizes;           // one per ConfigSpec::block_sizes entry
  std::vector<std::vector<int>> loop_orders;  // one per ConfigSpec::loop_orders entry; outer first
  int num_threads = 0;                        // grid points run on this many threads
  std::vector<int> micro_kernels;             // per dot: index into its MicroKernelSpec choices
  std::vector<InnerLoopChoice> inner_loops;   // per ConfigSpec::inner_loops entry
  // per ConfigSpec::gathers entry: "onehot" or "dma" (initialized, so that aggregate initializers
  // written before the knob need not name it)
  std::vector<std::string> gathers = {};
  // per ConfigSpec::atomics entry: "atomic" or "partials"
  std::vector<std::string> atomics = {};
  // The warps that run one program (one grid step) on a GPU backend; 0 where the backend has
  // no such knob (ConfigSpec::num_warps empty).
  int num_warps = 0;
  // per ConfigSpec::launch_groups entry: G, the launch's programs ordered in groups of G blocks
  // of the grid's second-fastest dim, that dim fastest within a group (1: plain row-major order;
  // a GPU backend's knob, for the reuse of a matmul's operands in the L2 cache)
  std::vector<int> launch_groups = {};
  // per ConfigSpec::cache_hints entry: "none", "stream", "prefetch" or "stream+prefetch"
  // (see CacheHintSpec)
  std::vector<std::string> cache_hints = {};
  // Integer indices computed in the kernel (loaded from tensors, tile offsets) are checked
  // against their dimension before use, and an out-of-range one fails the call with a
  // UserError. `"index_checks":false` opts out for speed: an out-of-range index is then
  // undefined behaviour. Not a tuning knob: the tuner keeps what it is given.
  bool index_checks = true;
  // The vector width, in bits, that the generated loops are compiled for (cpu): one of
  // ConfigSpec::vector_bits, or 0, not set: the default config's, and where that is 0 too, the
  // host's widest. A narrower one can be faster where the compiler moves lanes across a wide
  // vector's halves (the 64-bit products of ph::rand on a host that runs 256-bit vectors as two
  // 128-bit halves).
  int vector_bits = 0;

  std::string to_json() const;
  // Parses a Config; throws UserError on malformed JSON, unknown keys or wrong types.
  static Config from_json(const std::string& json);
  // This config with every knob it leaves out (an absent key: an empty list, a zero count)
  // taken from `defaults`, so that a user may pin {"block_sizes":[64,64,32]} alone.
  Config filled_from(const Config& defaults) const;
  bool operator==(const Config&) const = default;
};

struct BlockSizeSpec {
  int block_id = 0;              // the Tile IR's block-size symbol ($bN)
  int64_t extent = 1;            // the longest range it tiles
  std::vector<int64_t> choices;  // the domain: powers of two up to covering the extent
  std::string defined_at;        // the user's source line of the loop
};

// The register-blocked micro-kernel of one dot (e.g. "avx512_12x32"): the host's ones, best first.
struct MicroKernelSpec {
  std::vector<std::string> choices;
  std::string defined_at;  // the user's source line of the dot
};

// An inner tile loop that reads tensor blocks: its strategy and pipeline depth are knobs.
struct InnerLoopSpec {
  int tile = 0;                         // the Tile IR's tile id of the loop
  std::string loop;                     // its name, e.g. "t3"
  std::string defined_at;               // the user's source line of the loop
  std::vector<std::string> strategies;  // what the target offers, e.g. stream, pipeline, resident
  int max_buffers = 3;                  // (pipeline)
  bool offers_pipeline() const {
    for (const std::string& s : strategies)
      if (s == "pipeline") return true;
    return false;
  }
};

// A gather load (a subscript through a block of indices) on a backend with gather strategies
// (Capabilities::gather_strategies): how its rows are fetched. Pallas: "onehot" (a one-hot
// matmul against the table held in VMEM) or "dma" (one DMA per index from the table in HBM).
struct GatherSpec {
  std::string defined_at;            // the user's source line of the load
  std::string tensor;                // the gathered tensor's name
  std::vector<std::string> choices;  // the legal strategies here, the default (for this shape) first
};

// A tensor a launch updates atomically (ph::atomic_add, ...), on a backend with atomic
// strategies (Capabilities::atomics_have_strategies). cpu: "atomic" (compare-and-swap on the
// tensor, every thread) or "partials" (each thread updates a private copy, the copies are added
// into the tensor when the launch ends: more memory, no contention; not through a view).
struct AtomicSpec {
  std::string defined_at;            // the user's source line of its first update
  std::string tensor;                // the updated tensor's name
  std::vector<std::string> choices;  // the legal strategies; the first is what a config without the knob gets
};

// A launch whose stores write contiguous rows or whose loads read the grid step's block in
// contiguous rows, on a backend with cache hints (Capabilities::cache_hints): how those blocks
// move through the caches, for tensors far larger than them (lower/cache_hints.h).
//   "none"      plain loads and stores;
//   "stream"    the stores write whole cache lines past the caches (non-temporal: the line is
//               not read first, and evicts nothing the step keeps);
//   "prefetch"  the next grid step's input blocks are prefetched into fast memory while this
//               step computes;
//   "stream+prefetch" both. Only the choices the launch has accesses for are offered.
struct CacheHintSpec {
  int launch = 0;                    // index among the kernel's launches
  std::string defined_at;            // the user's source line of the launch
  std::vector<std::string> choices;  // "none" first: what a config without the knob gets
};

struct LoopOrderSpec {
  int launch = 0;  // index among the kernel's launches
  int dims = 0;    // the launch's grid rank; an order is a permutation of 0..dims-1
};

// A launch with a dot and a grid of two dims or more, on a backend with grouped launch orders
// (Capabilities::launch_groups): the group size of its programs' order (Config::launch_groups).
struct LaunchGroupSpec {
  int launch = 0;            // index among the kernel's launches
  std::string defined_at;    // the user's source line of the launch
  std::vector<int> choices;  // the default (1: ungrouped) first
};

struct ConfigSpec {
  std::vector<BlockSizeSpec> block_sizes;
  std::vector<LoopOrderSpec> loop_orders;
  std::vector<MicroKernelSpec> micro_kernels;
  std::vector<InnerLoopSpec> inner_loops;
  std::vector<GatherSpec> gathers;
  std::vector<AtomicSpec> atomics;
  std::vector<int> num_warps;  // the choices of Config::num_warps (a GPU backend's), the default first
  std::vector<LaunchGroupSpec> launch_groups;
  std::vector<CacheHintSpec> cache_hints;
  // The choices of Config::vector_bits, the host's widest first (e.g. 256, 128); empty: no such
  // knob (a backend without it, or a host whose vectors are 128 bits).
  std::vector<int> vector_bits;
  int max_threads = 1;

  // Throws UserError naming the key and its domain if `c` is not a point of this space.
  void validate(const Config& c) const;
  // The default choice of an inner loop: the target's first strategy, two buffers.
  InnerLoopChoice default_inner_loop(size_t i) const { return {inner_loops.at(i).strategies.front(), 2}; }
  // `c` with the knobs it leaves out given their defaults (a config written before inner-loop
  // strategies or gather strategies existed has no "inner_loops" or "gathers").
  Config complete(Config c) const {
    if (c.inner_loops.empty())
      for (size_t i = 0; i < inner_loops.size(); ++i) c.inner_loops.push_back(default_inner_loop(i));
    if (c.gathers.empty())
      for (const GatherSpec& g : gathers) c.gathers.push_back(g.choices.front());
    if (c.atomics.empty())
      for (const AtomicSpec& a : atomics) c.atomics.push_back(a.choices.front());
    if (c.num_warps == 0 && !num_warps.empty()) c.num_warps = num_warps.front();
    if (c.launch_groups.empty())
      for (const LaunchGroupSpec& g : launch_groups) c.launch_groups.push_back(g.choices.front());
    if (c.cache_hints.empty())
      for (const CacheHintSpec& s : cache_hints) c.cache_hints.push_back(s.choices.front());
    return c;
  }
  // A readable description of the space (one knob per line).
  std::string describe() const;
  // Number of points, saturating at INT64_MAX.
  int64_t size() const;
};

}  // namespace parhelion

#include "lower/config_space.h"

#include "lower/cache_hints.h"

#include <algorithm>

#include "backend/backend.h"
#include "ir/collectives.h"
#include "ir/printer.h"
#include "parhelion/error.h"

namespace parhelion::lower {
namespace {

int64_t next_pow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// Block sizes are powers of two up to covering the extent, and at most this.
constexpr int64_t kLargestBlock = 16384;

}  // namespace

ConfigSpec derive_config_spec(const ir::Function& fn, const KnobTable& knobs, const backend::Backend& backend) {
  // Every path to a backend's code starts here: a kernel on a mesh stops at a backend that
  // cannot generate collectives, with a UserError rather than a missing case later.
  if (!fn.mesh.empty() && !backend.capabilities().collectives)
    throw UserError("the " + backend.name() + " backend cannot generate kernel " + fn.name +
                    ", which runs on a mesh (" + ir::mesh_to_string(fn.mesh) +
                    "), yet; the reference interpreter runs it (KernelBase::interpret_on), and the cpu backend "
                    "(KernelBase::run_on)");
  ConfigSpec spec;
  for (int id : knobs.block_sizes) {
    const ir::BlockSize& b = fn.block_sizes[id];
    BlockSizeSpec s;
    s.block_id = id;
    s.extent = b.extent;
    s.defined_at = b.loc.str();
    int64_t top = std::min<int64_t>(next_pow2(b.extent), kLargestBlock);
    for (int64_t c = 1; c <= top; c <<= 1)
      if (backend.block_size_legal(fn, id, c)) s.choices.push_back(c);
    spec.block_sizes.push_back(s);
  }
  auto launch_index = [&](const ir::Op* launch) {
    int index = 0;
    for (const ir::Op& op : fn.body) {
      if (&op == launch) break;
      index += op.kind == ir::OpKind::Launch;
    }
    return index;
  };
  for (const ir::Op* launch : knobs.loop_orders)
    spec.loop_orders.push_back({launch_index(launch), static_cast<int>(launch->loop_tiles.size())});
  for (const ir::Op* dot : knobs.micro_kernels)
    spec.micro_kernels.push_back({backend.micro_kernels(fn, *dot), dot->loc.str()});
  const backend::Capabilities& caps = backend.capabilities();
  for (const InnerLoopSite& site : knobs.inner_loops) {
    InnerLoopSpec s;
    s.tile = site.loop->loop_tiles[0];
    s.loop = ir::tile_name(fn, s.tile);
    s.defined_at = site.loop->loc.str();
    for (Strategy st : caps.loop_strategies(site.nested, site.sole, site.collective))
      s.strategies.push_back(strategy_name(st));
    s.max_buffers = caps.max_pipeline_buffers;
    spec.inner_loops.push_back(s);
  }
  for (const ir::Op* load : knobs.gathers)
    spec.gathers.push_back({load->loc.str(), fn.tensors[load->tensor].name, backend.gather_strategies(fn, *load)});
  // Partials shadow the root tensor's memory: an update through a view takes atomics.
  for (const AtomicSite& a : knobs.atomics)
    spec.atomics.push_back(
        {a.first->loc.str(), fn.tensors[a.tensor].name,
         a.through_view ? std::vector<std::string>{"atomic"} : std::vector<std::string>{"atomic", "partials"}});
  spec.num_warps = caps.num_warps;
  for (const ir::Op* launch : knobs.launch_groups)
    spec.launch_groups.push_back({launch_index(launch), launch->loc.str(), caps.launch_groups});
  for (const ir::Op* launch : knobs.cache_hints)
    spec.cache_hints.push_back({launch_index(launch), launch->loc.str(), cache_hint_choices(fn, *launch)});
  if (caps.vector_bits.size() > 1) spec.vector_bits = caps.vector_bits;
  spec.max_threads = backend.machine().threads;
  return spec;
}

ConfigSpec derive_config_spec(const ir::Function& fn, const backend::Backend& backend) {
  return derive_config_spec(fn, derive_knobs(fn, backend.capabilities()), backend);
}

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

}  // namespace parhelion::lower

#include "backend/triton/triton_backend.h"

#include <algorithm>

#include "backend/triton/codegen.h"
#include "backend/triton/fit.h"
#include "backend/triton/layout.h"
#include "backend/triton/support.h"
#include "lower/config_space.h"
#include "lower/lower.h"
#include "parhelion/error.h"

namespace parhelion::backend::triton {

namespace {

using ir::Op;
using ir::OpKind;

// tl.dot's tiles are at least 16 x 16 x 16 (the tensor cores' smallest); a dot with a smaller
// dim is emitted as products summed (codegen.cpp, small_dot), correct but slow.
constexpr int64_t kMinDotBlock = 16;

// Whether block-size symbol `block_id` shapes an M, N or K dim of a dot (the last two of its
// operands; leading dims are batch dims, of any size).
bool shapes_a_dot(const ir::Function& fn, int block_id) {
  bool found = false;
  ir::walk(fn.body, [&](const Op& op) {
    if (op.kind != OpKind::Dot) return;
    for (int v : {op.operands[0], op.operands[1]}) {
      const std::vector<ir::Dim>& s = fn.type_of(v).shape;
      for (size_t i = s.size() >= 2 ? s.size() - 2 : 0; i < s.size(); ++i)
        found |= s[i].kind == ir::Dim::Tile && fn.tiles[s[i].tile].block == block_id;
    }
  });
  return found;
}

}  // namespace

TritonBackend::TritonBackend(const GpuModel& gpu) : gpu_(gpu) {
  machine_.fast_memory_bytes = gpu.shared_memory_per_block;
  machine_.threads = 1;  // (the grid's programs run on every SM; the GPU schedules them)
  machine_.description = "NVIDIA " + gpu.name + " (sm_" + std::to_string(gpu.arch) + ")";
  // Triton pipelines an inner loop's loads itself (num_stages); nothing else moves blocks.
  caps_.inner_loop_strategies = {lower::Strategy::Pipeline};
  caps_.max_pipeline_buffers = 4;
  caps_.inner_loops_move_every_block = false;
  caps_.lowering_plans_staged_copies = false;
  caps_.runs_on_host = false;
  caps_.num_warps = {4, 1, 2, 8, 16};
  // (8 first: Triton's matmul tutorial's GROUP_SIZE_M; 1 is the plain row-major order)
  caps_.launch_groups = {8, 1, 4, 16};
}

// Powers of two (the default), and at least 16 for the dims of a dot (tensor-core tiles),
// unless the block spans the whole range of a shorter dim.
bool TritonBackend::block_size_legal(const ir::Function& fn, int block_id, int64_t block) const {
  if (block >= kMinDotBlock || !shapes_a_dot(fn, block_id)) return true;
  return block >= next_pow2(fn.block_sizes[block_id].extent);
}

std::vector<std::string> TritonBackend::micro_kernels(const ir::Function&, const ir::Op&) const { return {"tl.dot"}; }

// Every block as large as its choices allow up to 64 for a dot's dims and 1024 for the others,
// then (8 warps first) the largest halved until a program holds at most 128 registers per
// thread (room for Triton's own) and fits shared memory; inner loops with a dot pipelined over
// 3 stages, others 2.
Config TritonBackend::default_config(const ir::Function& fn, const ConfigSpec& spec) const {
  Config c = lower::base_config(spec);
  for (size_t i = 0; i < spec.block_sizes.size(); ++i) {
    const auto& ch = spec.block_sizes[i].choices;
    if (ch.empty())
      throw UserError(spec.block_sizes[i].defined_at + ": the triton backend has no legal block for this loop");
    const int64_t cap = shapes_a_dot(fn, spec.block_sizes[i].block_id) ? 64 : 1024;
    c.block_sizes[i] = ch.front();
    for (int64_t b : ch)
      if (b <= cap) c.block_sizes[i] = b;
  }
  for (size_t i = 0; i < spec.inner_loops.size(); ++i) {
    bool dot = false;
    ir::walk(fn.body, [&](const Op& op) {
      if (op.kind == OpKind::Loop && op.loop_tiles[0] == spec.inner_loops[i].tile)
        ir::walk(op.body, [&](const Op& in) { dot |= in.kind == OpKind::Dot; });
    });
    c.inner_loops[i] = {"pipeline", std::min(dot ? 3 : 2, spec.inner_loops[i].max_buffers)};
  }
  auto resources = [&](const Config& cfg) {
    ProgramResources most;
    const lower::BlockProgram bp = lower::plan(fn, cfg, *this);
    for (const lower::LaunchPlan& L : bp.launches) {
      ProgramResources r = estimate_resources(bp, L);
      most.shared_bytes = std::max(most.shared_bytes, r.shared_bytes);
      most.registers_per_thread = std::max(most.registers_per_thread, r.registers_per_thread);
    }
    return most;
  };
  for (int round = 0; round < 64; ++round) {
    const ProgramResources r = resources(c);
    if (r.registers_per_thread <= 128 && r.shared_bytes <= gpu_.shared_memory_per_block) break;
    // (more warps first, while a program's values are large)
    if (r.registers_per_thread > 128 && c.num_warps < 8) {
      c.num_warps = 8;
      continue;
    }
    size_t big = spec.block_sizes.size();
    for (size_t i = 0; i < spec.block_sizes.size(); ++i) {
      const auto& ch = spec.block_sizes[i].choices;
      if (c.block_sizes[i] > ch.front() && (big == spec.block_sizes.size() || c.block_sizes[i] > c.block_sizes[big]))
        big = i;
    }
    if (big == spec.block_sizes.size()) break;  // nothing left to shrink: check() says why
    c.block_sizes[big] /= 2;
  }
  return c;
}

void TritonBackend::check(const lower::BlockProgram& p) const {
  check_supported(p);
  check_fit(p, gpu_);
}

int64_t TritonBackend::footprint_bytes(const lower::BlockProgram& p) const {
  int64_t most = 0;
  for (const lower::LaunchPlan& L : p.launches) most = std::max(most, estimate_resources(p, L).shared_bytes);
  return most;
}

Artifact TritonBackend::generate(const lower::BlockProgram& p) const { return {"python", generate_module(p, gpu_)}; }

}  // namespace parhelion::backend::triton

// Cache hints: how the blocks of tensors far larger than the caches move through them.
//
// A row kernel (softmax, a norm, an activation) on a tensor of tens of MiB reads each input
// block once and writes each output block once. Through plain loads and stores, two things
// waste memory bandwidth, the only resource such a kernel has:
//   - a store to a line not in the cache reads the line first (read-for-ownership): an output
//     costs twice its bytes of traffic, and evicts lines the step still reads;
//   - a step's compute (the exps of a softmax) and its memory traffic do not overlap: each
//     thread reads its block, then computes, then writes, and the memory idles meanwhile.
// The launch's `cache_hints` knob says which of two hints lowering marks ("stream", "prefetch",
// "stream+prefetch", or "none"):
//   - streamed stores: whole cache lines are written past the caches (non-temporal), from a
//     row buffer in fast memory; partial lines at a row's ends are stored plainly;
//   - prefetches: the next grid step's block of each input is prefetched into fast memory, one
//     cache line per prefetch, by the loop nest of the last statement of the step that reads the
//     input (its rows, just before each row is computed), so the memory works while the step
//     computes; and in a streamed inner loop whose block a statement reads again computing a
//     transcendental (cross_entropy's exp and sum after its max), that statement prefetches the
//     loop's next trip of the block the same way (Prefetch::trip_tile).
// Both are hints: they change no value. (Except by the ulp an fma contraction costs: where a
// product difference such as rotary's x0 c - x1 s has two, g++ may pick the other one in a
// ragged block's scalar tail of a streamed row of pairs.) The sites are found from the Tile IR alone (the knob
// exists where a launch has one); which ones apply is decided with the block sizes bound.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "lower/block_ir.h"

namespace parhelion::backend {
struct Machine;
}

namespace parhelion::lower {

// The cache line the hints are planned in (a row must hold one to be streamed or prefetched),
// and the stride of a prefetch: 64 bytes on every x86-64 and Arm core the cpu backend targets.
constexpr int64_t kCacheLineBytes = 64;

// A load's or store's block has contiguous rows: its innermost block dim walks stride-1 elements
// of the tensor (not gathered).
bool contiguous_rows(const ir::Function& fn, const ir::Op& op);
// A store that can be streamed: unmasked and not atomic, its innermost block dim a contiguous
// row of the tensor (stride 1, not gathered), to a tensor (its root) the launch never loads.
bool streamable_store(const ir::Function& fn, const ir::Op& launch, const ir::Op& store);
// The elements of a group a store's rows are made of: g where its block ends with a whole dim of
// g <= 4 elements (stride 1) after a tile dim whose stride is g (rotary's x[..., j, :] viewed as
// [.., D/2, 2]: the tile's elements are pairs back to back, so a row of the tile's block is one
// contiguous run); 1 otherwise (a row is the innermost dim).
int64_t row_group(const ir::Function& fn, const ir::Op& op);
// A load whose next grid step's block can be prefetched: at the launch's top level, unmasked,
// indexed by the launch's tiles and whole dims only (at least one tile: the block moves with the
// step), its innermost block dim a contiguous row.
bool prefetchable_load(const ir::Function& fn, const ir::Op& launch, const ir::Op& load);
// Whether `launch` has a site of either kind (the launch then has a cache_hints knob), and the
// knob's choices: "none", then those its sites allow.
bool has_cache_hint_sites(const ir::Function& fn, const ir::Op& launch);
std::vector<std::string> cache_hint_choices(const ir::Function& fn, const ir::Op& launch);

// Whether a tensor of `bytes` is too large to be reread from the caches on machine `m`: more than
// four times the fast memory of all its cores. (A host's last-level cache is shared with other
// cores and, on a cloud machine, other tenants; it is not counted.) The cpu's default for the knob.
bool exceeds_caches(int64_t bytes, const backend::Machine& m);

// The cpu's default for the knob: "stream" where a streamable store writes a tensor that
// exceeds the caches; "prefetch" where a prefetchable load of such a tensor is read again by a
// later statement of the step (a norm's store after its sums, a softmax's exp after its max: the
// memory would idle while those re-read the caches), or where a streamed loop's trip re-reads
// its block computing a transcendental (a cross entropy's exp and sum per column block); a single
// pass is left to the hardware's prefetcher, which follows it well; both; or "none".
// (Measured on an AMD EPYC Zen 5, 2 threads, [8192, 2048], stream+prefetch against stream:
// layer_norm f32 2.96 -> 2.51 ms, bf16 1.43 -> 1.18; rms_norm f32 2.87 -> 2.58, bf16 1.28 ->
// 1.06; rms_norm_backward f32 the same, bf16 3.30 -> 3.52, its two reductions each reading a
// tensor first. Prefetching a single pass, swiglu or geglu, cost 25-35% on an Intel Xeon.)
std::string default_cache_hint(const ir::Function& fn, const ir::Op& launch, const backend::Machine& m);

// The blocks of `L` that are read more than once, in bytes with the blocks bound: a top-level
// load that two statements of a grid step read (a norm's rows, by its sums and again by its
// store), then a load that a trip of a top-level loop reads by its transcendental host and a
// statement before it (cross_entropy's logits block, by its max and again by its exp and sum).
// The same loads in the same order for every config of a kernel. Where a block fits the core's
// first cache its second read costs little; the cpu's default keeps them there
// (backend/cpu/default_config.cpp).
std::vector<int64_t> reread_block_bytes(const BlockProgram& p, const LaunchPlan& L);

// Marks the streamed stores and the prefetches of launch `L` that its knob's `choice` asks for:
// the sites whose row holds at least one cache line with the blocks bound, and for each
// prefetch the statement whose loop nest issues it.
void plan_cache_hints(const BlockProgram& p, LaunchPlan& L, const std::string& choice);

}  // namespace parhelion::lower

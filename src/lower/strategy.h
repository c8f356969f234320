// How an inner (device) tile loop moves the blocks its trips touch (config knob
// inner_loops[i].strategy; see block_ir.h):
//   Stream    read in place, one block per trip, through the caches;
//   Pipeline  copy each trip's blocks into `buffers` fast-memory slots, the next block(s)
//             fetched while the current one is computed;
//   Resident  copy the loop's whole extent into fast memory once per outer block, reuse it
//             while consecutive grid steps keep that block, and slice it every trip;
//   Grid      the loop becomes the launch's last (fastest, in-order) grid dimension: each grid
//             step is one trip, its blocks moved by the launch's own pipeline, so the copies
//             of one outer block's trips overlap the last trips of the previous one; the
//             loop-carried state lives in fast memory across steps (the Pallas TPU accumulator
//             pattern). Only for a launch's sole inner loop (Capabilities).
#pragma once

#include <optional>
#include <string>

namespace parhelion::lower {

enum class Strategy { Stream, Pipeline, Resident, Grid };

// The config's spelling: "stream", "pipeline", "resident", "grid".
const char* strategy_name(Strategy s);
std::optional<Strategy> parse_strategy(const std::string& name);

}  // namespace parhelion::lower

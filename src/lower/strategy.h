// How an inner (device) tile loop moves the blocks its trips touch (config knob
// inner_loops[i].strategy; see block_ir.h):
//   Stream    read in place, one block per trip, through the caches;
//   Pipeline  copy each trip's blocks into `buffers` fast-memory slots, the next block(s)
//             fetched while the current one is computed;
//   Resident  copy the loop's whole extent into fast memory once per outer block, reuse it
//             while consecutive grid steps keep that block, and slice it every trip.
#pragma once

#include <optional>
#include <string>

namespace parhelion::lower {

enum class Strategy { Stream, Pipeline, Resident };

// The config's spelling: "stream", "pipeline", "resident".
const char* strategy_name(Strategy s);
std::optional<Strategy> parse_strategy(const std::string& name);

}  // namespace parhelion::lower

// Where Parhelion keeps what it caches on disk (compiled objects, tuning results):
// $PARHELION_CACHE_DIR, else $XDG_CACHE_HOME/parhelion, else ~/.cache/parhelion.
#pragma once

#include <string>

namespace parhelion::runtime {

std::string cache_dir();

}  // namespace parhelion::runtime

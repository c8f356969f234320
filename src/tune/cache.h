// The tuner's on-disk cache of winners.
//
// An entry is keyed by everything that can change the answer: the kernel's fingerprint (a hash
// of its Tile IR, which includes shapes, strides and dtypes), its signature, the target, the
// hardware (CPU model, ISA features, threads, fast memory) and the compiler's identity. Entries of
// the same kernel family (same kernel, dtypes, target, hardware and compiler; any shape) share a
// directory, so a new shape can seed its search with its neighbours' winners.
//   $PARHELION_CACHE_DIR/tune/<family>/<entry>.json
// A file that does not parse, or whose config does not fit the kernel's space, is ignored (and
// overwritten by the next tuning).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "parhelion/config.h"

namespace parhelion::tune {

struct CacheKey {
  std::string kernel, fingerprint, signature, dtypes, target, hardware, compiler;
  std::string family_id() const;  // hash of kernel, dtypes, target, hardware, compiler
  std::string entry_id() const;   // hash of all fields
  std::string describe() const;   // readable, for reports
};

struct CacheEntry {
  Config best_config;
  double best_ms = 0, default_ms = 0;
  std::string signature;
  std::string conditions;  // the machine's while tuning (tune/conditions.h); "" in older entries
  bool noisy = false;
};

std::string tune_cache_dir();
std::string cache_path(const CacheKey& key);
// The entry for `key`, if present and readable (`corrupt` is set when a file existed but was
// unreadable).
std::optional<CacheEntry> cache_lookup(const CacheKey& key, bool* corrupt = nullptr);
void cache_store(const CacheKey& key, const CacheEntry& entry);
// Winners of other shapes of the same family, nearest signature first.
std::vector<Config> cache_neighbours(const CacheKey& key, size_t max = 4);

std::string hash_hex(const std::string& s);

}  // namespace parhelion::tune

// Search strategies over a ConfigSpec. A strategy proposes configs and observes their
// measured times (or failures); it is deterministic for a given seed and sequence of
// observations, so a seeded search is reproducible.
//
// Configs are encoded as a point of a box of integer coordinates (ConfigCodec): one
// coordinate per block size (an index into its choices), one per loop order (an index into the
// permutations), one for num_threads. Neighbours differ by one step in one coordinate.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "parhelion/config.h"

namespace parhelion::tune {

class ConfigCodec {
 public:
  explicit ConfigCodec(const ConfigSpec& spec);
  using Point = std::vector<int>;
  int dims() const { return static_cast<int>(sizes_.size()); }
  int size(int d) const { return sizes_[d]; }  // number of values of coordinate d
  Config decode(const Point& p) const;
  // The point of a config; values outside the spec snap to the nearest choice (for seeds that
  // come from another shape's winner).
  Point encode(const Config& c) const;
  Point random(std::mt19937_64& gen) const;
  Point clamp(Point p) const;

 private:
  const ConfigSpec& spec_;
  std::vector<int> sizes_;
  std::vector<std::vector<std::vector<int>>> perms_;  // per loop order: all permutations
};

// A measured result: time in ms, or failed.
struct Observation {
  Config config;
  double ms = 0;
  bool ok = false;
};

class SearchStrategy {
 public:
  virtual ~SearchStrategy() = default;
  // Up to n new configs to measure (empty when the strategy has nothing left to try).
  virtual std::vector<Config> propose(int n) = 0;
  virtual void observe(const Observation& o) = 0;
  virtual std::string name() const = 0;
};

// Random sampling without repeats.
std::unique_ptr<SearchStrategy> make_random_search(const ConfigSpec& spec, uint64_t seed);
// Pattern search: from the best point so far, try every one-step neighbour; move to the best
// improvement; stop when no neighbour improves (restarts from random points on request).
std::unique_ptr<SearchStrategy> make_pattern_search(const ConfigSpec& spec, uint64_t seed, std::vector<Config> seeds);
// Differential evolution (rand/1/bin) over the integer box, then pattern search from the best.
std::unique_ptr<SearchStrategy> make_differential_evolution(const ConfigSpec& spec, uint64_t seed,
                                                            std::vector<Config> seeds, int population = 12);

}  // namespace parhelion::tune

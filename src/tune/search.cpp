#include "tune/search.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

namespace parhelion::tune {

// --- ConfigCodec ---------------------------------------------------------------------------------

ConfigCodec::ConfigCodec(const ConfigSpec& spec) : spec_(spec) {
  for (const BlockSizeSpec& b : spec.block_sizes) sizes_.push_back(static_cast<int>(b.choices.size()));
  for (const LoopOrderSpec& l : spec.loop_orders) {
    std::vector<int> p(l.dims);
    std::iota(p.begin(), p.end(), 0);
    std::vector<std::vector<int>> all;
    do all.push_back(p);
    while (std::next_permutation(p.begin(), p.end()));
    sizes_.push_back(static_cast<int>(all.size()));
    perms_.push_back(std::move(all));
  }
  for (const MicroKernelSpec& m : spec.micro_kernels) sizes_.push_back(static_cast<int>(m.choices.size()));
  for (const InnerLoopSpec& l : spec.inner_loops) {
    sizes_.push_back(static_cast<int>(l.strategies.size()));
    sizes_.push_back(l.max_buffers);
  }
  for (const GatherSpec& g : spec.gathers) sizes_.push_back(static_cast<int>(g.choices.size()));
  for (const AtomicSpec& a : spec.atomics) sizes_.push_back(static_cast<int>(a.choices.size()));
  if (!spec.num_warps.empty()) sizes_.push_back(static_cast<int>(spec.num_warps.size()));
  for (const LaunchGroupSpec& g : spec.launch_groups) sizes_.push_back(static_cast<int>(g.choices.size()));
  for (const CacheHintSpec& s : spec.cache_hints) sizes_.push_back(static_cast<int>(s.choices.size()));
  if (!spec.vector_bits.empty()) sizes_.push_back(static_cast<int>(spec.vector_bits.size()));
  sizes_.push_back(spec.max_threads);
}

Config ConfigCodec::decode(const Point& p) const {
  Config c;
  size_t k = 0;
  for (const BlockSizeSpec& b : spec_.block_sizes) c.block_sizes.push_back(b.choices[p[k++]]);
  for (const auto& perms : perms_) c.loop_orders.push_back(perms[p[k++]]);
  for (size_t i = 0; i < spec_.micro_kernels.size(); ++i) c.micro_kernels.push_back(p[k++]);
  for (const InnerLoopSpec& l : spec_.inner_loops) {
    InnerLoopChoice choice{l.strategies[p[k]], p[k + 1] + 1};
    // The buffer count only matters to a pipeline: one canonical value otherwise, so that
    // equal configs decode equal.
    if (choice.strategy != "pipeline") choice.buffers = 2;
    c.inner_loops.push_back(choice);
    k += 2;
  }
  for (const GatherSpec& g : spec_.gathers) c.gathers.push_back(g.choices[p[k++]]);
  for (const AtomicSpec& a : spec_.atomics) c.atomics.push_back(a.choices[p[k++]]);
  if (!spec_.num_warps.empty()) c.num_warps = spec_.num_warps[p[k++]];
  for (const LaunchGroupSpec& g : spec_.launch_groups) c.launch_groups.push_back(g.choices[p[k++]]);
  for (const CacheHintSpec& s : spec_.cache_hints) c.cache_hints.push_back(s.choices[p[k++]]);
  // (explicit, the widest too: 0 would take a default that may be narrower)
  if (!spec_.vector_bits.empty()) c.vector_bits = spec_.vector_bits[p[k++]];
  c.num_threads = p[k] + 1;
  return c;
}

ConfigCodec::Point ConfigCodec::encode(const Config& c) const {
  Point p(sizes_.size(), 0);
  size_t k = 0;
  for (size_t i = 0; i < spec_.block_sizes.size(); ++i, ++k) {
    const auto& ch = spec_.block_sizes[i].choices;
    int64_t want = i < c.block_sizes.size() ? c.block_sizes[i] : ch.front();
    int best = 0;
    for (size_t j = 0; j < ch.size(); ++j)
      if (std::abs(ch[j] - want) < std::abs(ch[best] - want)) best = static_cast<int>(j);
    p[k] = best;
  }
  for (size_t i = 0; i < perms_.size(); ++i, ++k) {
    auto it =
        i < c.loop_orders.size() ? std::find(perms_[i].begin(), perms_[i].end(), c.loop_orders[i]) : perms_[i].end();
    p[k] = it == perms_[i].end() ? 0 : static_cast<int>(it - perms_[i].begin());
  }
  for (size_t i = 0; i < spec_.micro_kernels.size(); ++i, ++k)
    p[k] = i < c.micro_kernels.size() ? std::clamp(c.micro_kernels[i], 0, sizes_[k] - 1) : 0;
  for (size_t i = 0; i < spec_.inner_loops.size(); ++i, k += 2) {
    const InnerLoopSpec& l = spec_.inner_loops[i];
    InnerLoopChoice choice = i < c.inner_loops.size() ? c.inner_loops[i] : spec_.default_inner_loop(i);
    auto it = std::find(l.strategies.begin(), l.strategies.end(), choice.strategy);
    p[k] = it == l.strategies.end() ? 0 : static_cast<int>(it - l.strategies.begin());
    p[k + 1] = std::clamp(choice.buffers - 1, 0, l.max_buffers - 1);
  }
  for (size_t i = 0; i < spec_.gathers.size(); ++i, ++k) {
    const std::vector<std::string>& ch = spec_.gathers[i].choices;
    auto it = i < c.gathers.size() ? std::find(ch.begin(), ch.end(), c.gathers[i]) : ch.end();
    p[k] = it == ch.end() ? 0 : static_cast<int>(it - ch.begin());
  }
  for (size_t i = 0; i < spec_.atomics.size(); ++i, ++k) {
    const std::vector<std::string>& ch = spec_.atomics[i].choices;
    auto it = i < c.atomics.size() ? std::find(ch.begin(), ch.end(), c.atomics[i]) : ch.end();
    p[k] = it == ch.end() ? 0 : static_cast<int>(it - ch.begin());
  }
  if (!spec_.num_warps.empty()) {
    auto it = std::find(spec_.num_warps.begin(), spec_.num_warps.end(), c.num_warps);
    p[k++] = it == spec_.num_warps.end() ? 0 : static_cast<int>(it - spec_.num_warps.begin());
  }
  for (size_t i = 0; i < spec_.launch_groups.size(); ++i, ++k) {
    const std::vector<int>& ch = spec_.launch_groups[i].choices;
    auto it = i < c.launch_groups.size() ? std::find(ch.begin(), ch.end(), c.launch_groups[i]) : ch.end();
    p[k] = it == ch.end() ? 0 : static_cast<int>(it - ch.begin());
  }
  for (size_t i = 0; i < spec_.cache_hints.size(); ++i, ++k) {
    const std::vector<std::string>& ch = spec_.cache_hints[i].choices;
    auto it = i < c.cache_hints.size() ? std::find(ch.begin(), ch.end(), c.cache_hints[i]) : ch.end();
    p[k] = it == ch.end() ? 0 : static_cast<int>(it - ch.begin());
  }
  if (!spec_.vector_bits.empty()) {
    auto it = std::find(spec_.vector_bits.begin(), spec_.vector_bits.end(), c.vector_bits);
    p[k++] = it == spec_.vector_bits.end() ? 0 : static_cast<int>(it - spec_.vector_bits.begin());
  }
  p[k] = std::clamp(c.num_threads - 1, 0, sizes_.back() - 1);
  return p;
}

ConfigCodec::Point ConfigCodec::random(std::mt19937_64& gen) const {
  Point p(sizes_.size());
  for (size_t d = 0; d < p.size(); ++d) p[d] = static_cast<int>(gen() % sizes_[d]);
  return p;
}

ConfigCodec::Point ConfigCodec::clamp(Point p) const {
  for (size_t d = 0; d < p.size(); ++d) p[d] = std::clamp(p[d], 0, sizes_[d] - 1);
  return p;
}

namespace {

// Shared bookkeeping: the codec, the seen set, the best observation.
class Base : public SearchStrategy {
 public:
  Base(const ConfigSpec& spec, uint64_t seed) : spec_(spec), codec_(spec_), gen_(seed) {}

  void observe(const Observation& o) override {
    ConfigCodec::Point p = codec_.encode(o.config);
    double ms = o.ok ? o.ms : INFINITY;
    times_[p] = ms;
    if (ms < best_ms_) {
      best_ms_ = ms;
      best_ = p;
    }
  }

 protected:
  bool seen(const ConfigCodec::Point& p) const { return proposed_.count(p) > 0; }
  bool take(const ConfigCodec::Point& p, std::vector<Config>& out) {
    if (seen(p)) return false;
    proposed_.insert(p);
    out.push_back(codec_.decode(p));
    return true;
  }
  double time_of(const ConfigCodec::Point& p) const {
    auto it = times_.find(p);
    return it == times_.end() ? INFINITY : it->second;
  }
  // Whether every point of the space was proposed.
  bool exhausted() const {
    double total = 1;
    for (int d = 0; d < codec_.dims(); ++d) total *= codec_.size(d);
    return static_cast<double>(proposed_.size()) >= total;
  }
  std::vector<Config> random_fill(int n) {
    std::vector<Config> out;
    for (int tries = 0; static_cast<int>(out.size()) < n && tries < 64 * n && !exhausted(); ++tries)
      take(codec_.random(gen_), out);
    return out;
  }

  ConfigSpec spec_;
  ConfigCodec codec_;
  std::mt19937_64 gen_;
  std::set<ConfigCodec::Point> proposed_;
  std::map<ConfigCodec::Point, double> times_;
  ConfigCodec::Point best_;
  double best_ms_ = INFINITY;
};

class RandomSearch : public Base {
 public:
  using Base::Base;
  std::vector<Config> propose(int n) override { return random_fill(n); }
  std::string name() const override { return "random"; }
};

class PatternSearch : public Base {
 public:
  PatternSearch(const ConfigSpec& spec, uint64_t seed, std::vector<Config> seeds) : Base(spec, seed) {
    for (const Config& c : seeds) pending_seeds_.push_back(codec_.encode(c));
  }

  std::vector<Config> propose(int n) override {
    std::vector<Config> out;
    while (!pending_seeds_.empty() && static_cast<int>(out.size()) < n) {
      take(pending_seeds_.front(), out);
      pending_seeds_.erase(pending_seeds_.begin());
    }
    if (!out.empty()) return out;
    if (best_.empty()) return random_fill(n);  // nothing measured yet
    // Neighbours of the best point, nearest first: one step, then two steps, in each coordinate.
    for (int step : {1, 2})
      for (int d = 0; d < codec_.dims() && static_cast<int>(out.size()) < n; ++d)
        for (int dir : {-1, 1}) {
          ConfigCodec::Point p = best_;
          p[d] += dir * step;
          if (p[d] < 0 || p[d] >= codec_.size(d)) continue;
          take(p, out);
          if (static_cast<int>(out.size()) >= n) break;
        }
    if (out.empty()) return random_fill(std::min(n, 2));  // a local optimum: explore a little
    return out;
  }
  std::string name() const override { return "pattern"; }

 private:
  std::vector<ConfigCodec::Point> pending_seeds_;
};

class DifferentialEvolution : public Base {
 public:
  DifferentialEvolution(const ConfigSpec& spec, uint64_t seed, std::vector<Config> seeds, int population)
      : Base(spec, seed), pattern_(spec, seed + 1, {}), population_size_(population) {
    for (const Config& c : seeds) initial_.push_back(codec_.encode(c));
  }

  std::vector<Config> propose(int n) override {
    std::vector<Config> out;
    if (generations_ >= kGenerations || exhausted()) return polish(n);
    if (population_.size() < static_cast<size_t>(population_size_)) {
      // Initial population: the seeds, then random points.
      while (!initial_.empty() && static_cast<int>(out.size()) < n) {
        ConfigCodec::Point p = initial_.front();
        initial_.erase(initial_.begin());
        if (take(p, out)) population_.push_back(p);
      }
      while (population_.size() < static_cast<size_t>(population_size_) && static_cast<int>(out.size()) < n &&
             !exhausted()) {
        ConfigCodec::Point p = codec_.random(gen_);
        if (take(p, out)) population_.push_back(p);
      }
      return out;
    }
    // One trial vector per member: mutant = a + F (b - c), binomial crossover with the member.
    std::uniform_real_distribution<double> u(0, 1);
    for (int tries = 0; static_cast<int>(out.size()) < n && tries < 8 * population_size_; ++tries) {
      size_t i = next_member_++ % population_.size();
      if (next_member_ % population_.size() == 0) ++generations_;
      size_t a = gen_() % population_.size(), b = gen_() % population_.size(), c = gen_() % population_.size();
      ConfigCodec::Point trial = population_[i];
      int forced = static_cast<int>(gen_() % codec_.dims());
      for (int d = 0; d < codec_.dims(); ++d) {
        if (d != forced && u(gen_) > kCrossover) continue;
        double v = population_[a][d] + kF * (population_[b][d] - population_[c][d]);
        trial[d] = static_cast<int>(std::lround(v));
      }
      trial = codec_.clamp(trial);
      if (take(trial, out)) trials_[trial] = i;
    }
    if (out.empty()) return polish(n);
    return out;
  }

  void observe(const Observation& o) override {
    Base::observe(o);
    pattern_.observe(o);
    ConfigCodec::Point p = codec_.encode(o.config);
    auto t = trials_.find(p);
    if (t != trials_.end()) {  // selection: the trial replaces its member if no slower
      if (time_of(p) <= time_of(population_[t->second])) population_[t->second] = p;
      trials_.erase(t);
    }
  }
  std::string name() const override { return "differential-evolution"; }

 private:
  std::vector<Config> polish(int n) {
    // Pattern search from the best point found, skipping configs already measured.
    std::vector<Config> out;
    for (int round = 0; round < 4 && out.empty(); ++round)
      for (const Config& c : pattern_.propose(n))
        if (!seen(codec_.encode(c))) take(codec_.encode(c), out);
    return out;
  }

  static constexpr double kF = 0.7, kCrossover = 0.5;
  static constexpr int kGenerations = 6;
  PatternSearch pattern_;
  int population_size_;
  std::vector<ConfigCodec::Point> initial_, population_;
  std::map<ConfigCodec::Point, size_t> trials_;
  size_t next_member_ = 0;
  int generations_ = 0;
};

}  // namespace

std::unique_ptr<SearchStrategy> make_random_search(const ConfigSpec& spec, uint64_t seed) {
  return std::make_unique<RandomSearch>(spec, seed);
}
std::unique_ptr<SearchStrategy> make_pattern_search(const ConfigSpec& spec, uint64_t seed, std::vector<Config> seeds) {
  return std::make_unique<PatternSearch>(spec, seed, std::move(seeds));
}
std::unique_ptr<SearchStrategy> make_differential_evolution(const ConfigSpec& spec, uint64_t seed,
                                                            std::vector<Config> seeds, int population) {
  return std::make_unique<DifferentialEvolution>(spec, seed, std::move(seeds), population);
}

}  // namespace parhelion::tune

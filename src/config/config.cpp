#include "parhelion/config.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "parhelion/error.h"

namespace parhelion {

using nlohmann::json;

Config Config::filled_from(const Config& defaults) const {
  Config c = *this;
  if (c.block_sizes.empty()) c.block_sizes = defaults.block_sizes;
  if (c.loop_orders.empty()) c.loop_orders = defaults.loop_orders;
  if (c.num_threads == 0) c.num_threads = defaults.num_threads;
  if (c.micro_kernels.empty()) c.micro_kernels = defaults.micro_kernels;
  if (c.inner_loops.empty()) c.inner_loops = defaults.inner_loops;
  if (c.gathers.empty()) c.gathers = defaults.gathers;
  if (c.atomics.empty()) c.atomics = defaults.atomics;
  if (c.num_warps == 0) c.num_warps = defaults.num_warps;
  if (c.launch_groups.empty()) c.launch_groups = defaults.launch_groups;
  if (c.cache_hints.empty()) c.cache_hints = defaults.cache_hints;
  if (c.vector_bits == 0) c.vector_bits = defaults.vector_bits;
  return c;
}

std::string Config::to_json() const {
  json j;
  j["block_sizes"] = block_sizes;
  j["loop_orders"] = loop_orders;
  j["num_threads"] = num_threads;
  if (!micro_kernels.empty()) j["micro_kernels"] = micro_kernels;
  if (!inner_loops.empty()) {
    j["inner_loops"] = json::array();
    for (const InnerLoopChoice& l : inner_loops) {
      json o;
      o["strategy"] = l.strategy;
      if (l.strategy == "pipeline") o["buffers"] = l.buffers;
      j["inner_loops"].push_back(o);
    }
  }
  if (!gathers.empty()) j["gathers"] = gathers;
  if (!atomics.empty()) j["atomics"] = atomics;
  if (num_warps != 0) j["num_warps"] = num_warps;
  if (!launch_groups.empty()) j["launch_groups"] = launch_groups;
  if (!cache_hints.empty()) j["cache_hints"] = cache_hints;
  if (!index_checks) j["index_checks"] = false;
  if (vector_bits != 0) j["vector_bits"] = vector_bits;
  return j.dump();
}

static std::vector<InnerLoopChoice> parse_inner_loops(const json& value) {
  std::vector<InnerLoopChoice> out;
  for (const json& o : value) {
    InnerLoopChoice l;
    if (!o.is_object())
      throw UserError(
          "invalid config: inner_loops entries must be objects like {\"strategy\":\"pipeline\",\"buffers\":2}, got " +
          o.dump());
    for (auto& [k, v] : o.items()) {
      if (k == "strategy")
        l.strategy = v.get<std::string>();
      else if (k == "buffers")
        l.buffers = v.get<int>();
      else
        throw UserError("invalid config: inner_loops has an unknown key '" + k + "' (known: strategy, buffers)");
    }
    out.push_back(l);
  }
  return out;
}

Config Config::from_json(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw UserError("invalid config JSON: " + std::string(e.what()) + "\n  in: " + text);
  }
  if (!j.is_object()) throw UserError("invalid config: expected a JSON object like " + Config{}.to_json());
  Config c;
  for (auto& [key, value] : j.items()) {
    try {
      if (key == "block_sizes")
        c.block_sizes = value.get<std::vector<int64_t>>();
      else if (key == "loop_orders")
        c.loop_orders = value.get<std::vector<std::vector<int>>>();
      else if (key == "num_threads")
        c.num_threads = value.get<int>();
      else if (key == "micro_kernels")
        c.micro_kernels = value.get<std::vector<int>>();
      else if (key == "inner_loops")
        c.inner_loops = parse_inner_loops(value);
      else if (key == "gathers")
        c.gathers = value.get<std::vector<std::string>>();
      else if (key == "atomics")
        c.atomics = value.get<std::vector<std::string>>();
      else if (key == "num_warps")
        c.num_warps = value.get<int>();
      else if (key == "launch_groups")
        c.launch_groups = value.get<std::vector<int>>();
      else if (key == "cache_hints")
        c.cache_hints = value.get<std::vector<std::string>>();
      else if (key == "index_checks")
        c.index_checks = value.get<bool>();
      else if (key == "vector_bits")
        c.vector_bits = value.get<int>();
      else
        throw UserError("invalid config: unknown key '" + key +
                        "' (known: block_sizes, loop_orders, num_threads, micro_kernels, inner_loops, gathers, "
                        "atomics, num_warps, launch_groups, cache_hints, index_checks, vector_bits)");
    } catch (const json::exception&) {
      throw UserError("invalid config: '" + key + "' has the wrong type (" + value.dump() + "); expected " +
                      (key == "block_sizes"     ? "a list of integers"
                       : key == "loop_orders"   ? "a list of integer lists"
                       : key == "micro_kernels" ? "a list of integers"
                       : key == "inner_loops"   ? "a list of objects like {\"strategy\":\"pipeline\",\"buffers\":2}"
                       : key == "gathers"       ? "a list of strings like [\"onehot\",\"dma\"]"
                       : key == "atomics"       ? "a list of strings like [\"partials\"]"
                       : key == "launch_groups" ? "a list of integers"
                       : key == "cache_hints"   ? "a list of strings like [\"stream+prefetch\"]"
                       : key == "index_checks"  ? "true or false"
                                                : "an integer"));
    }
  }
  return c;
}

static std::string list_str(const std::vector<int64_t>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "}";
}

// A knob whose values are one of each site's named choices (gathers, atomics): one value per
// site, each among its site's choices; `what` names the site in an error.
template <class Spec, class What>
static void check_choices(const std::string& key, const std::vector<std::string>& values,
                          const std::vector<Spec>& sites, const std::string& sites_are, What what) {
  if (values.size() != sites.size())
    throw UserError("invalid config: " + key + " has " + std::to_string(values.size()) + " entries; this kernel has " +
                    std::to_string(sites.size()) + " " + sites_are + " with a strategy on this backend");
  for (size_t i = 0; i < sites.size(); ++i) {
    const std::vector<std::string>& ch = sites[i].choices;
    if (std::find(ch.begin(), ch.end(), values[i]) != ch.end()) continue;
    std::string known;
    for (const std::string& k : ch) known += (known.empty() ? "" : ", ") + k;
    throw UserError("invalid config: " + key + "[" + std::to_string(i) + "] = \"" + values[i] + "\" is not one of " +
                    known + " (" + what(sites[i]) + ")");
  }
}

void ConfigSpec::validate(const Config& c) const {
  if (c.block_sizes.size() != block_sizes.size())
    throw UserError("invalid config: block_sizes has " + std::to_string(c.block_sizes.size()) +
                    " entries; this kernel has " + std::to_string(block_sizes.size()) + " tunable block sizes");
  for (size_t i = 0; i < block_sizes.size(); ++i) {
    const auto& ch = block_sizes[i].choices;
    if (std::find(ch.begin(), ch.end(), c.block_sizes[i]) == ch.end())
      throw UserError("invalid config: block_sizes[" + std::to_string(i) + "] = " + std::to_string(c.block_sizes[i]) +
                      " is out of its domain " + list_str(ch) + " (the loop at " + block_sizes[i].defined_at +
                      ", extent " + std::to_string(block_sizes[i].extent) + ")");
  }
  if (c.loop_orders.size() != loop_orders.size())
    throw UserError("invalid config: loop_orders has " + std::to_string(c.loop_orders.size()) +
                    " entries; this kernel has " + std::to_string(loop_orders.size()) + " multi-dimensional launches");
  for (size_t i = 0; i < loop_orders.size(); ++i) {
    std::vector<int> p = c.loop_orders[i];
    std::sort(p.begin(), p.end());
    std::vector<int> want(loop_orders[i].dims);
    std::iota(want.begin(), want.end(), 0);
    if (p != want)
      throw UserError("invalid config: loop_orders[" + std::to_string(i) + "] must be a permutation of 0.." +
                      std::to_string(loop_orders[i].dims - 1));
  }
  if (c.micro_kernels.size() != micro_kernels.size())
    throw UserError("invalid config: micro_kernels has " + std::to_string(c.micro_kernels.size()) +
                    " entries; this kernel has " + std::to_string(micro_kernels.size()) + " dot products");
  for (size_t i = 0; i < micro_kernels.size(); ++i)
    if (c.micro_kernels[i] < 0 || c.micro_kernels[i] >= static_cast<int>(micro_kernels[i].choices.size()))
      throw UserError("invalid config: micro_kernels[" + std::to_string(i) +
                      "] = " + std::to_string(c.micro_kernels[i]) + " is out of its domain 0.." +
                      std::to_string(micro_kernels[i].choices.size() - 1) + " (the dot at " +
                      micro_kernels[i].defined_at + ")");
  if (c.inner_loops.size() != inner_loops.size())
    throw UserError("invalid config: inner_loops has " + std::to_string(c.inner_loops.size()) +
                    " entries; this kernel has " + std::to_string(inner_loops.size()) +
                    " inner tile loops that read tensors");
  for (size_t i = 0; i < inner_loops.size(); ++i) {
    const InnerLoopSpec& s = inner_loops[i];
    const InnerLoopChoice& l = c.inner_loops[i];
    if (std::find(s.strategies.begin(), s.strategies.end(), l.strategy) == s.strategies.end()) {
      std::string known;
      for (const std::string& k : s.strategies) known += (known.empty() ? "" : ", ") + k;
      throw UserError("invalid config: inner_loops[" + std::to_string(i) + "].strategy = \"" + l.strategy +
                      "\" is not one of " + known + " (the loop at " + s.defined_at + ")");
    }
    if (l.buffers < 1 || l.buffers > s.max_buffers)
      throw UserError("invalid config: inner_loops[" + std::to_string(i) + "].buffers = " + std::to_string(l.buffers) +
                      " is out of its domain 1.." + std::to_string(s.max_buffers) + " (the loop at " + s.defined_at +
                      ")");
  }
  check_choices("gathers", c.gathers, gathers, "gather loads",
                [](const GatherSpec& g) { return "the gather from " + g.tensor + " at " + g.defined_at; });
  check_choices("atomics", c.atomics, atomics, "atomically updated tensors",
                [](const AtomicSpec& a) { return "the updates of " + a.tensor + ", first at " + a.defined_at; });
  check_choices("cache_hints", c.cache_hints, cache_hints, "launches with cache hints",
                [](const CacheHintSpec& s) { return "the launch at " + s.defined_at; });
  if (num_warps.empty() && c.num_warps != 0)
    throw UserError("invalid config: num_warps = " + std::to_string(c.num_warps) +
                    " is a GPU knob; this backend runs no warps (leave it out)");
  if (!num_warps.empty() && std::find(num_warps.begin(), num_warps.end(), c.num_warps) == num_warps.end()) {
    std::string known;
    for (int w : num_warps) known += (known.empty() ? "" : ", ") + std::to_string(w);
    throw UserError("invalid config: num_warps = " + std::to_string(c.num_warps) + " is not one of " + known);
  }
  if (c.launch_groups.size() != launch_groups.size())
    throw UserError("invalid config: launch_groups has " + std::to_string(c.launch_groups.size()) +
                    " entries; this kernel has " + std::to_string(launch_groups.size()) +
                    " launches with a grouped order on this backend (a dot and a grid of two dims or more, on a GPU)");
  for (size_t i = 0; i < launch_groups.size(); ++i) {
    const std::vector<int>& ch = launch_groups[i].choices;
    if (std::find(ch.begin(), ch.end(), c.launch_groups[i]) != ch.end()) continue;
    std::string known;
    for (int g : ch) known += (known.empty() ? "" : ", ") + std::to_string(g);
    throw UserError("invalid config: launch_groups[" + std::to_string(i) + "] = " + std::to_string(c.launch_groups[i]) +
                    " is not one of " + known + " (the launch at " + launch_groups[i].defined_at + ")");
  }
  if (c.vector_bits != 0 && std::find(vector_bits.begin(), vector_bits.end(), c.vector_bits) == vector_bits.end()) {
    if (vector_bits.empty())
      throw UserError("invalid config: vector_bits = " + std::to_string(c.vector_bits) +
                      " is not a knob here: this backend or host offers one vector width (leave it out)");
    std::string known;
    for (int b : vector_bits) known += (known.empty() ? "" : ", ") + std::to_string(b);
    throw UserError("invalid config: vector_bits = " + std::to_string(c.vector_bits) + " is not one of " + known +
                    " (this host's vector widths)");
  }
  if (c.num_threads < 1 || c.num_threads > max_threads)
    throw UserError("invalid config: num_threads = " + std::to_string(c.num_threads) + " is out of its domain 1.." +
                    std::to_string(max_threads));
}

std::string ConfigSpec::describe() const {
  std::ostringstream os;
  for (size_t i = 0; i < block_sizes.size(); ++i)
    os << "block_sizes[" << i << "]: " << list_str(block_sizes[i].choices) << "  ($b" << block_sizes[i].block_id
       << ", extent " << block_sizes[i].extent << ", loop at " << block_sizes[i].defined_at << ")\n";
  for (size_t i = 0; i < loop_orders.size(); ++i)
    os << "loop_orders[" << i << "]: permutations of " << loop_orders[i].dims << " grid dims (launch "
       << loop_orders[i].launch << ")\n";
  for (size_t i = 0; i < micro_kernels.size(); ++i) {
    os << "micro_kernels[" << i << "]: ";
    for (size_t j = 0; j < micro_kernels[i].choices.size(); ++j)
      os << (j ? ", " : "") << j << "=" << micro_kernels[i].choices[j];
    os << "  (dot at " << micro_kernels[i].defined_at << ")\n";
  }
  for (size_t i = 0; i < inner_loops.size(); ++i) {
    os << "inner_loops[" << i << "]: strategy ";
    for (size_t j = 0; j < inner_loops[i].strategies.size(); ++j) os << (j ? ", " : "") << inner_loops[i].strategies[j];
    if (inner_loops[i].offers_pipeline()) os << "; buffers 1.." << inner_loops[i].max_buffers << " (pipeline)";
    os << "  (loop " << inner_loops[i].loop << " at " << inner_loops[i].defined_at << ")\n";
  }
  for (size_t i = 0; i < gathers.size(); ++i) {
    os << "gathers[" << i << "]: ";
    for (size_t j = 0; j < gathers[i].choices.size(); ++j) os << (j ? ", " : "") << gathers[i].choices[j];
    os << "  (gather from " << gathers[i].tensor << " at " << gathers[i].defined_at << ")\n";
  }
  for (size_t i = 0; i < atomics.size(); ++i) {
    os << "atomics[" << i << "]: ";
    for (size_t j = 0; j < atomics[i].choices.size(); ++j) os << (j ? ", " : "") << atomics[i].choices[j];
    os << "  (atomic updates of " << atomics[i].tensor << ", first at " << atomics[i].defined_at << ")\n";
  }
  if (!num_warps.empty()) {
    os << "num_warps: ";
    for (size_t j = 0; j < num_warps.size(); ++j) os << (j ? ", " : "") << num_warps[j];
    os << "\n";
  }
  for (size_t i = 0; i < launch_groups.size(); ++i) {
    os << "launch_groups[" << i << "]: ";
    for (size_t j = 0; j < launch_groups[i].choices.size(); ++j) os << (j ? ", " : "") << launch_groups[i].choices[j];
    os << "  (the order of launch " << launch_groups[i].launch << "'s programs, at " << launch_groups[i].defined_at
       << ")\n";
  }
  for (size_t i = 0; i < cache_hints.size(); ++i) {
    os << "cache_hints[" << i << "]: ";
    for (size_t j = 0; j < cache_hints[i].choices.size(); ++j) os << (j ? ", " : "") << cache_hints[i].choices[j];
    os << "  (stores past the caches, the next step's blocks prefetched: launch " << cache_hints[i].launch << " at "
       << cache_hints[i].defined_at << ")\n";
  }
  if (!vector_bits.empty()) {
    os << "vector_bits: ";
    for (size_t j = 0; j < vector_bits.size(); ++j) os << (j ? ", " : "") << vector_bits[j];
    os << "  (the host's vector widths; unset: the default config's)\n";
  }
  os << "num_threads: 1.." << max_threads << "\n";
  return os.str();
}

int64_t ConfigSpec::size() const {
  __int128 n = max_threads;
  for (const auto& b : block_sizes) n *= static_cast<int64_t>(b.choices.size());
  for (const auto& m : micro_kernels) n *= static_cast<int64_t>(m.choices.size());
  // (a pipeline's buffer counts are choices of their own)
  for (const auto& l : inner_loops)
    n *= static_cast<int64_t>(l.offers_pipeline() ? l.strategies.size() - 1 + l.max_buffers : l.strategies.size());
  for (const auto& g : gathers) n *= static_cast<int64_t>(g.choices.size());
  for (const auto& a : atomics) n *= static_cast<int64_t>(a.choices.size());
  if (!num_warps.empty()) n *= static_cast<int64_t>(num_warps.size());
  for (const auto& g : launch_groups) n *= static_cast<int64_t>(g.choices.size());
  for (const auto& s : cache_hints) n *= static_cast<int64_t>(s.choices.size());
  if (!vector_bits.empty()) n *= static_cast<int64_t>(vector_bits.size());
  for (const auto& l : loop_orders)
    for (int k = 2; k <= l.dims; ++k) n *= k;
  return n > INT64_MAX ? INT64_MAX : static_cast<int64_t>(n);
}

}  // namespace parhelion

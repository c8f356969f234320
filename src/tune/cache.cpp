#include "tune/cache.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/cache_dir.h"

namespace parhelion::tune {
namespace fs = std::filesystem;
using nlohmann::json;

std::string hash_hex(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string CacheKey::family_id() const {
  return hash_hex(kernel + "\n" + dtypes + "\n" + target + "\n" + hardware + "\n" + compiler);
}

std::string CacheKey::entry_id() const { return hash_hex(family_id() + "\n" + fingerprint + "\n" + signature); }

std::string CacheKey::describe() const {
  return kernel + " " + signature + " on " + target + " (" + hardware + "; " + compiler + "; ir and code " +
         fingerprint + ")";
}

std::string tune_cache_dir() { return runtime::cache_dir() + "/tune"; }

std::string cache_path(const CacheKey& key) {
  return tune_cache_dir() + "/" + key.family_id() + "/" + key.entry_id() + ".json";
}

static std::optional<CacheEntry> read_entry(const fs::path& path, bool* corrupt) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  try {
    json j = json::parse(f);
    CacheEntry e;
    e.best_config = Config::from_json(j.at("best_config").dump());
    e.best_ms = j.at("best_ms").get<double>();
    e.default_ms = j.at("default_ms").get<double>();
    e.signature = j.at("signature").get<std::string>();
    e.conditions = j.value("conditions", "");
    e.noisy = j.value("noisy", false);
    if (!(e.best_ms > 0)) throw std::runtime_error("best_ms");
    return e;
  } catch (const std::exception&) {
    if (corrupt) *corrupt = true;
    return std::nullopt;
  }
}

std::optional<CacheEntry> cache_lookup(const CacheKey& key, bool* corrupt) {
  return read_entry(cache_path(key), corrupt);
}

void cache_store(const CacheKey& key, const CacheEntry& e) {
  fs::path path = cache_path(key);
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  json j;
  j["key"] = {{"kernel", key.kernel},    {"fingerprint", key.fingerprint}, {"signature", key.signature},
              {"dtypes", key.dtypes},    {"target", key.target},           {"hardware", key.hardware},
              {"compiler", key.compiler}};
  j["best_config"] = json::parse(e.best_config.to_json());
  j["best_ms"] = e.best_ms;
  j["default_ms"] = e.default_ms;
  j["signature"] = e.signature;
  j["conditions"] = e.conditions;
  j["noisy"] = e.noisy;
  fs::path tmp = path.string() + ".tmp." + std::to_string(getpid());
  {
    std::ofstream f(tmp);
    f << j.dump(2) << "\n";
  }
  fs::rename(tmp, path, ec);  // atomic: a reader sees the old entry or the new one
}

std::vector<Config> cache_neighbours(const CacheKey& key, size_t max) {
  std::vector<std::pair<size_t, Config>> found;
  std::error_code ec;
  fs::path dir = fs::path(cache_path(key)).parent_path();
  for (const auto& f : fs::directory_iterator(dir, ec)) {
    if (f.path().extension() != ".json" || f.path().stem() == key.entry_id()) continue;
    if (auto e = read_entry(f.path(), nullptr)) {
      // Distance between signatures: how many characters differ (shapes are written in them).
      size_t d = 0, n = std::max(e->signature.size(), key.signature.size());
      for (size_t i = 0; i < n; ++i)
        d += i >= e->signature.size() || i >= key.signature.size() || e->signature[i] != key.signature[i];
      found.push_back({d, e->best_config});
    }
  }
  std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Config> out;
  for (size_t i = 0; i < found.size() && i < max; ++i) out.push_back(found[i].second);
  return out;
}

}  // namespace parhelion::tune

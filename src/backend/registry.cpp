#include "backend/registry.h"

#include <map>
#include <memory>
#include <mutex>

#include "backend/cpu/cpu_backend.h"
#include "backend/pallas/pallas_backend.h"
#include "backend/triton/triton_backend.h"
#include "parhelion/error.h"

namespace parhelion::backend {
namespace {

// The one list of backends: a name, its variants, and how to make one for a variant.
struct Entry {
  std::string name;
  std::string default_variant;
  std::vector<std::string> variants;  // empty: takes none
  std::unique_ptr<Backend> (*make)(const std::string& variant);
};

std::vector<std::string> tpu_names() {
  std::vector<std::string> v;
  for (const pallas::TpuGeneration& g : pallas::tpu_generations()) v.push_back(g.name);
  return v;
}

std::vector<std::string> gpu_names() {
  std::vector<std::string> v;
  for (const triton::GpuModel& g : triton::gpu_models()) v.push_back(g.name);
  return v;
}

const std::vector<Entry>& entries() {
  static const std::vector<Entry> e = {
      {"cpu",
       "",
       {},
       [](const std::string&) -> std::unique_ptr<Backend> {
         return std::make_unique<cpu::CpuBackend>(cpu::Host::detect());
       }},
      {"pallas", "v7x", tpu_names(),
       [](const std::string& v) -> std::unique_ptr<Backend> {
         return std::make_unique<pallas::PallasBackend>(pallas::tpu_generation(v));
       }},
      {"triton", "h100", gpu_names(),
       [](const std::string& v) -> std::unique_ptr<Backend> {
         return std::make_unique<triton::TritonBackend>(triton::gpu_model(v));
       }},
  };
  return e;
}

}  // namespace

const Backend& for_target(const std::string& target) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Backend>> made;
  const size_t colon = target.find(':');
  const std::string name = target.substr(0, colon);
  for (const Entry& e : entries()) {
    if (e.name != name) continue;
    std::string variant = colon == std::string::npos ? e.default_variant : target.substr(colon + 1);
    if (e.variants.empty() && colon != std::string::npos)
      throw UserError("target '" + target + "': the " + name + " backend takes no variant");
    const std::string key = name + ":" + variant;
    std::lock_guard<std::mutex> lock(mu);
    auto it = made.find(key);
    if (it == made.end()) it = made.emplace(key, e.make(variant)).first;  // throws for an unknown variant
    return *it->second;
  }
  std::string known;
  for (const std::string& t : known_targets()) known += (known.empty() ? "" : ", ") + t;
  throw UserError("unknown target '" + target + "' (known: " + known + ")");
}

const Backend& host_cpu() { return for_target("cpu"); }

std::string canonical_target(const std::string& target) {
  for_target(target);  // refuses an unknown one
  const size_t colon = target.find(':');
  const std::string name = target.substr(0, colon);
  for (const Entry& e : entries())
    if (e.name == name && !e.variants.empty() && colon == std::string::npos) return name + ":" + e.default_variant;
  return target;
}

std::vector<std::string> known_targets() {
  std::vector<std::string> out;
  for (const Entry& e : entries()) {
    out.push_back(e.name);
    for (const std::string& v : e.variants) out.push_back(e.name + ":" + v);
  }
  return out;
}

}  // namespace parhelion::backend

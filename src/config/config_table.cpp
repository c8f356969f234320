// Deployable config tables (include/parhelion/config_table.h): JSON in and out, the choice of
// an entry for a call, and tuning a table.
#include "parhelion/config_table.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "backend/registry.h"
#include "parhelion/error.h"
#include "parhelion/tpu.h"

namespace parhelion {

using json = nlohmann::json;

namespace {

json arg_to_json(const TableArg& a) {
  switch (a.kind) {
    case TableArg::TensorK:
      return json{{"tensor", std::string(dtype_name(a.dtype))}, {"shape", a.shape}};
    case TableArg::ConstantK:
      return json{{"constant", a.value}};
    case TableArg::ScalarK:
      return json{{"scalar", true}};
  }
  return json();
}

TableArg arg_from_json(const json& j, const std::string& where) {
  TableArg a;
  if (j.contains("tensor")) {
    std::optional<DType> d = parse_dtype(j.at("tensor").get<std::string>());
    if (!d) throw UserError(where + ": unknown dtype '" + j.at("tensor").get<std::string>() + "'");
    a.kind = TableArg::TensorK;
    a.dtype = *d;
    a.shape = j.at("shape").get<Shape>();
  } else if (j.contains("constant")) {
    a.kind = TableArg::ConstantK;
    a.value = j.at("constant").get<int64_t>();
  } else if (j.contains("scalar")) {
    a.kind = TableArg::ScalarK;
  } else {
    throw UserError(where +
                    ": an argument is {\"tensor\": dtype, \"shape\": [...]}, {\"constant\": n} or "
                    "{\"scalar\": true}");
  }
  return a;
}

bool same_signature(const std::vector<TableArg>& a, const std::vector<TableArg>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].kind != b[i].kind) return false;
    if (a[i].kind == TableArg::TensorK && (a[i].dtype != b[i].dtype || a[i].shape != b[i].shape)) return false;
    if (a[i].kind == TableArg::ConstantK && a[i].value != b[i].value) return false;
  }
  return true;
}

// How far apart two signatures are: the sum over every size (and compile-time integer) of the
// distance of their logarithms; infinite when they cannot share a config (another number of
// arguments, another dtype or rank).
double distance(const std::vector<TableArg>& a, const std::vector<TableArg>& b) {
  constexpr double kFar = std::numeric_limits<double>::infinity();
  if (a.size() != b.size()) return kFar;
  auto log_gap = [](int64_t x, int64_t y) {
    return std::abs(std::log2(static_cast<double>(x) + 1) - std::log2(static_cast<double>(y) + 1));
  };
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].kind != b[i].kind) return kFar;
    if (a[i].kind == TableArg::TensorK) {
      if (a[i].dtype != b[i].dtype || a[i].shape.size() != b[i].shape.size()) return kFar;
      for (size_t j = 0; j < a[i].shape.size(); ++j) d += log_gap(a[i].shape[j], b[i].shape[j]);
    } else if (a[i].kind == TableArg::ConstantK) {
      d += log_gap(a[i].value, b[i].value);
    }
  }
  return d;
}

}  // namespace

std::string ConfigTableEntry::signature() const {
  std::string s;
  for (const TableArg& a : args) {
    if (!s.empty()) s += " ";
    if (a.kind == TableArg::TensorK)
      s += std::string(dtype_name(a.dtype)) + shape_to_string(a.shape);
    else if (a.kind == TableArg::ConstantK)
      s += std::to_string(a.value);
    else
      s += "scalar";
  }
  return s;
}

std::vector<TableArg> table_args(const KernelBase& kernel, const std::vector<Arg>& args) {
  std::vector<TableArg> out;
  for (size_t i = 0; i < args.size(); ++i) {
    TableArg a;
    if (args[i].is_tensor()) {
      a.kind = TableArg::TensorK;
      a.dtype = args[i].array->dtype();
      a.shape = args[i].array->shape();
    } else if (kernel.arg_is_constant(static_cast<int>(i))) {
      a.kind = TableArg::ConstantK;
      a.value = static_cast<int64_t>(args[i].scalar);
    } else {
      a.kind = TableArg::ScalarK;
    }
    out.push_back(a);
  }
  return out;
}

void ConfigTable::add(ConfigTableEntry e) {
  for (ConfigTableEntry& old : entries)
    if (old.kernel == e.kernel && old.target == e.target && old.hardware == e.hardware &&
        same_signature(old.args, e.args)) {
      old = std::move(e);
      return;
    }
  entries.push_back(std::move(e));
}

std::string ConfigTable::to_json() const {
  json list = json::array();
  for (const ConfigTableEntry& e : entries) {
    json args = json::array();
    for (const TableArg& a : e.args) args.push_back(arg_to_json(a));
    list.push_back(json{{"kernel", e.kernel},
                        {"signature", e.signature()},
                        {"args", args},
                        {"target", e.target},
                        {"hardware", e.hardware},
                        {"config", json::parse(e.config.to_json())},
                        {"ms", e.ms},
                        {"default_ms", e.default_ms}});
  }
  // One entry per line: a table is read and diffed by people too.
  std::string out = "{\"parhelion_config_table\": 1, \"entries\": [";
  for (size_t i = 0; i < list.size(); ++i) out += (i ? ",\n  " : "\n  ") + list[i].dump();
  return out + (list.empty() ? "]}\n" : "\n]}\n");
}

ConfigTable ConfigTable::from_json(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw UserError(std::string("config table: not JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains("entries") || !j.at("entries").is_array())
    throw UserError("config table: expected {\"parhelion_config_table\": 1, \"entries\": [...]}");
  ConfigTable t;
  int i = 0;
  for (const json& e : j.at("entries")) {
    const std::string where = "config table entry " + std::to_string(i++);
    try {
      ConfigTableEntry entry;
      entry.kernel = e.at("kernel").get<std::string>();
      for (const json& a : e.at("args")) entry.args.push_back(arg_from_json(a, where));
      entry.target = e.at("target").get<std::string>();
      entry.hardware = e.value("hardware", "");
      entry.config = Config::from_json(e.at("config").dump());
      entry.ms = e.value("ms", 0.0);
      entry.default_ms = e.value("default_ms", 0.0);
      t.entries.push_back(std::move(entry));
    } catch (const json::exception& ex) {
      throw UserError(where + ": " + ex.what());
    }
  }
  return t;
}

ConfigTable ConfigTable::load(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw UserError("config table: cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    return from_json(ss.str());
  } catch (const UserError& e) {
    throw UserError(path + ": " + e.what());
  }
}

void ConfigTable::save(const std::string& path) const {
  std::ofstream f(path);
  if (!f) throw UserError("config table: cannot write " + path);
  f << to_json();
  if (!f) throw UserError("config table: writing " + path + " failed");
}

std::optional<TableChoice> ConfigTable::select(const KernelBase& kernel, const std::vector<Arg>& args,
                                               const std::string& target, const std::string& hardware,
                                               const std::function<bool(const Config&)>& legal) const {
  const std::vector<TableArg> call = table_args(kernel, args);
  std::optional<TableChoice> best;
  double best_distance = std::numeric_limits<double>::infinity();
  for (const ConfigTableEntry& e : entries) {
    if (e.kernel != kernel.name() || e.target != target) continue;
    const double d = distance(call, e.args);
    if (!std::isfinite(d)) continue;
    const bool same_hw = e.hardware == hardware;
    // Nearer first; at one distance, this machine's entry first.
    const bool better = !best || d < best_distance || (d == best_distance && same_hw && !best->same_hardware);
    if (!better || !legal(e.config)) continue;
    best = TableChoice{&e, d == 0 && same_signature(call, e.args), same_hw};
    best_distance = d;
  }
  return best;
}

ConfigTable tune_table(KernelBase& kernel, const std::vector<std::vector<Arg>>& calls, const TuneOptions& options,
                       const std::string& target) {
  const std::string canonical = backend::canonical_target(target);
  const backend::Backend& backend = backend::for_target(canonical);
  ConfigTable table;
  for (const std::vector<Arg>& args : calls) {
    ConfigTableEntry e;
    e.kernel = kernel.name();
    e.args = table_args(kernel, args);
    e.target = canonical;
    e.hardware = backend.machine().identity();
    if (canonical == "cpu") {
      TuneReport r = kernel.tune(args, options);
      e.config = r.best_config;
      e.ms = r.best_ms;
      e.default_ms = r.default_ms;
    } else if (canonical.rfind("pallas:", 0) == 0) {
      const std::string tpu = canonical.substr(7);
      TpuTuneReport r = tune_tpu(kernel, args, tpu);
      e.config = r.best_config;
      e.ms = r.best.seconds * 1e3;
      e.default_ms = predict_tpu(kernel, args, tpu).seconds * 1e3;
      e.hardware += " (timing model)";
    } else {
      throw UserError("tuning a table for target '" + target +
                      "' needs that hardware: tables are tuned for cpu (measured here) and pallas (the TPU timing "
                      "model)");
    }
    table.add(std::move(e));
  }
  return table;
}

}  // namespace parhelion

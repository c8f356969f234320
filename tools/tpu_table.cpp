#include "tools/tpu_table.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/registry.h"
#include "parhelion/error.h"

namespace parhelion::tools {

std::vector<TpuTableRow> model_published_table(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UserError("cannot read the published TPU table " + path);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw UserError(path + ": not JSON: " + e.what());
  }
  const std::string tpu = doc.value("tpu", "v7x");
  std::vector<TpuTableRow> rows;
  for (const nlohmann::json& c : doc.at("cases")) {
    TpuTableRow r;
    try {
      r.kernel = c.at("kernel").get<std::string>();
      r.shape = c.at("shape").get<std::vector<int64_t>>();
      r.dtype = c.at("dtype").get<std::string>();
      r.published_ms = c.at("helion_ms").get<double>();
      r.same_kernel = c.value("same", true);
      r.note = c.value("note", "");
    } catch (const nlohmann::json::exception& e) {
      throw UserError(path + ": a case needs kernel, shape, dtype and helion_ms (" + e.what() + "): " + c.dump());
    }
    const auto& entry = kernels::find_kernel(r.kernel);
    const std::optional<DType> dtype = parse_dtype(r.dtype);
    if (!dtype) throw UserError(path + ": unknown dtype '" + r.dtype + "' for " + r.kernel);
    auto inputs = entry.make_specs(r.shape, *dtype);
    r.tuned = tune_tpu(*entry.kernel, inputs.args(), tpu);
    rows.push_back(std::move(r));
  }
  return rows;
}

double geomean_error(const std::vector<TpuTableRow>& rows) {
  double log_sum = 0;
  int n = 0;
  for (const TpuTableRow& r : rows) {
    if (!r.same_kernel) continue;
    log_sum += std::abs(std::log1p(r.error()));
    ++n;
  }
  return n ? std::expm1(log_sum / n) : 0;
}

std::string table_markdown(const std::vector<TpuTableRow>& rows) {
  std::string s =
      "| kernel | shape | dtype | model-tuned strategy | device ms | + dispatch = call ms | Helion ms | error |\n"
      "|---|---|---|---|---|---|---|---|\n";
  char line[512];
  for (const TpuTableRow& r : rows) {
    std::string shape;
    for (int64_t d : r.shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    std::snprintf(line, sizeof line, "| %s%s | [%s] | %s | %s | %.3f | %.3f | %.3f | %+.0f%%%s |\n", r.kernel.c_str(),
                  r.same_kernel ? "" : " *", shape.c_str(), r.dtype.c_str(), r.tuned.best.strategy.c_str(),
                  r.tuned.best.seconds * 1e3, r.call_ms(), r.published_ms, r.error() * 100,
                  r.same_kernel ? "" : " (not comparable)");
    s += line;
  }
  std::snprintf(line, sizeof line, "\ngeomean error over the comparable rows: %.0f%%\n", geomean_error(rows) * 100);
  s += line;
  for (const TpuTableRow& r : rows)
    if (!r.note.empty()) s += "- " + r.kernel + ": " + r.note + "\n";
  return s;
}

std::string table_json(const std::vector<TpuTableRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const TpuTableRow& r : rows)
    out.push_back({{"kernel", r.kernel},
                   {"shape", r.shape},
                   {"dtype", r.dtype},
                   {"same_kernel", r.same_kernel},
                   {"config", nlohmann::json::parse(r.tuned.best_config.to_json())},
                   {"prediction", nlohmann::json::parse(r.tuned.best.to_json())},
                   {"call_ms", r.call_ms()},
                   {"published_ms", r.published_ms},
                   {"error", r.error()}});
  return nlohmann::json{{"rows", out}, {"geomean_error", geomean_error(rows)}, {"measured", false}}.dump();
}

}  // namespace parhelion::tools

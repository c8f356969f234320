#include "backend/pallas/interpret.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/python_runner.h"
#include "parhelion/error.h"

namespace parhelion::backend::pallas {

const char* interpret_runner_source();  // the embedded interpret_runner.py (interpret_runner.cpp.in)

using nlohmann::json;

std::string interpret_python() { return project_python(); }

std::vector<InterpretResult> run_in_interpret_mode(const std::vector<InterpretCase>& cases) {
  std::vector<InterpretResult> results;
  if (cases.empty()) return results;
  if (project_python().empty())
    throw UserError(
        "running Pallas in TPU interpret mode needs a Python with jax: set PARHELION_PYTHON, or run "
        "`make test` once to create the project's .venv");
  ScratchDir dir;
  json manifest = json::array();
  for (size_t n = 0; n < cases.size(); ++n) {
    const InterpretCase& c = cases[n];
    std::string stem = "case" + std::to_string(n);
    std::ofstream(dir.path / (stem + ".py")) << c.source;
    json inputs = json::array();
    for (size_t i = 0; i < c.inputs.size(); ++i)
      inputs.push_back(write_input(c.inputs[i], dir.path / (stem + "_in" + std::to_string(i))));
    json devices = json::array(), mesh = json::array();
    for (size_t d = 0; d < c.device_inputs.size(); ++d) {
      json one = json::array();
      for (size_t i = 0; i < c.device_inputs[d].size(); ++i)
        one.push_back(write_input(c.device_inputs[d][i],
                                  dir.path / (stem + "_d" + std::to_string(d) + "_in" + std::to_string(i))));
      devices.push_back(one);
    }
    for (const MeshAxis& a : c.mesh) mesh.push_back(json::array({a.name, a.size}));
    manifest.push_back({{"name", c.name},
                        {"mesh", mesh},
                        {"device_inputs", devices},
                        {"timeout", c.timeout_s},
                        {"module", (dir.path / (stem + ".py")).string()},
                        {"function", c.function},
                        {"inputs", inputs},
                        {"scalars", c.scalars},
                        {"outputs", (dir.path / (stem + "_out")).string()},
                        {"export", c.export_for_tpu}});
  }
  // A case that times out (a deadlock) reports itself and ends the runner (its threads cannot be
  // stopped): the cases after it run in a fresh one.
  std::vector<json> all;
  while (all.size() < manifest.size()) {
    json rest = json::array();
    for (size_t n = all.size(); n < manifest.size(); ++n) rest.push_back(manifest[n]);
    std::string failure;
    std::vector<json> got = run_python_cases_until_exit("the Pallas interpret-mode runner", interpret_runner_source(),
                                                        rest, dir, {}, &failure);
    all.insert(all.end(), got.begin(), got.end());
    const bool timed_out = !got.empty() && !got.back().value("ok", true) &&
                           got.back().value("error", "").rfind("timed out after ", 0) == 0;
    if (!failure.empty() && !timed_out) throw UserError(failure);
  }
  for (const json& r : all) {
    InterpretResult out;
    out.ok = r.value("ok", false);
    out.error = r.value("error", "") + (r.contains("trace") ? "\n" + r.value("trace", "") : "");
    out.races = r.value("races", false);
    out.export_status = r.value("export", "");
    if (out.ok) {
      out.outputs = read_outputs(dir.path / ("case" + std::to_string(results.size()) + "_out"), r, &out.error);
      out.ok = out.error.empty();
      const size_t per = r.value("outputs_per_device", size_t{0});
      for (size_t k = 0; per && k < out.outputs.size(); ++k) {
        if (k % per == 0) out.device_outputs.emplace_back();
        out.device_outputs.back().push_back(out.outputs[k]);
      }
    }
    results.push_back(std::move(out));
  }
  return results;
}

}  // namespace parhelion::backend::pallas

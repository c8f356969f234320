#include "backend/triton/run.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/python_runner.h"

namespace parhelion::backend::triton {

const char* runner_source();  // the embedded runner.py (runner.cpp.in)

using nlohmann::json;

std::vector<TritonRun> run_in_triton_interpreter(const std::vector<TritonCase>& cases) {
  std::vector<TritonRun> results;
  ScratchDir dir;
  json manifest = json::array();
  for (size_t n = 0; n < cases.size(); ++n) {
    const TritonCase& c = cases[n];
    const std::string stem = "case" + std::to_string(n);
    std::ofstream(dir.path / (stem + ".py")) << c.source;
    json inputs = json::array();
    for (size_t i = 0; i < c.inputs.size(); ++i)
      inputs.push_back(write_input(c.inputs[i], dir.path / (stem + "_in" + std::to_string(i))));
    manifest.push_back({{"name", c.name},
                        {"mode", "interpret"},
                        {"module", (dir.path / (stem + ".py")).string()},
                        {"function", c.function},
                        {"inputs", inputs},
                        {"scalars", c.scalars},
                        {"outputs", (dir.path / (stem + "_out")).string()}});
  }
  for (const json& r :
       run_python_cases("the Triton interpreter runner", runner_source(), manifest, dir, {{"TRITON_INTERPRET", "1"}})) {
    TritonRun out;
    out.ok = r.value("ok", false);
    out.error = r.value("error", "") + (r.contains("trace") ? "\n" + r.value("trace", "") : "");
    if (out.ok) {
      out.outputs = read_outputs(dir.path / ("case" + std::to_string(results.size()) + "_out"), r, &out.error);
      out.ok = out.error.empty();
    }
    results.push_back(std::move(out));
  }
  return results;
}

std::vector<TritonCompile> compile_for_gpus(const std::vector<std::string>& sources, const std::vector<int>& archs) {
  std::vector<TritonCompile> results;
  ScratchDir dir;
  json manifest = json::array();
  for (size_t n = 0; n < sources.size(); ++n) {
    const std::string path = (dir.path / ("module" + std::to_string(n) + ".py")).string();
    std::ofstream(path) << sources[n];
    manifest.push_back(
        {{"name", "module" + std::to_string(n)}, {"mode", "compile"}, {"module", path}, {"archs", archs}});
  }
  for (const json& r : run_python_cases("the Triton ahead-of-time compiler", runner_source(), manifest, dir)) {
    TritonCompile out;
    out.ok = r.value("ok", false);
    out.error = r.value("error", "") + (r.contains("trace") ? "\n" + r.value("trace", "") : "");
    if (out.ok)
      for (const json& k : r["compiled"]) out.kernels += k.value("ptx", 0) > 0 && k.value("cubin", 0) > 0;
    results.push_back(std::move(out));
  }
  return results;
}

}  // namespace parhelion::backend::triton

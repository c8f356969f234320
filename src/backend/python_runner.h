// Runs a Python script over a manifest of cases in one process: what the backends whose code
// runs in Python (pallas in JAX's interpret mode, triton in Triton's interpreter and its
// ahead-of-time compiler) share. The script reads the manifest (a JSON list of cases, each
// with a "name") from argv[1] and prints one JSON object per case, in order, naming it.
#pragma once

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "parhelion/array.h"

namespace parhelion::backend {

// A scratch directory, removed when it goes out of scope.
struct ScratchDir {
  std::filesystem::path path;
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
};

// The project's Python: $PARHELION_PYTHON, else the project's .venv, or "" when there is none.
std::string project_python();

// An array's elements as raw bytes in a file (row-major, its dtype), and its manifest entry.
nlohmann::json write_input(const Array& a, const std::filesystem::path& path);
// `n` f32 outputs written as raw files `<stem>.<i>` with the shapes the result names.
std::vector<Array> read_outputs(const std::filesystem::path& stem, const nlohmann::json& result, std::string* error);

// Runs `script` (its source) on `manifest` with `env` set, in `dir`; returns one result per
// case, in order. Throws UserError naming `what` when Python is missing or dies before the last
// case (with the end of its stderr).
// The same, returning the results that came back when Python ends early, with why in `failure`
// ("" when every case came back).
std::vector<nlohmann::json> run_python_cases_until_exit(const std::string& what, const std::string& script,
                                                        const nlohmann::json& manifest, const ScratchDir& dir,
                                                        const std::map<std::string, std::string>& env,
                                                        std::string* failure);
std::vector<nlohmann::json> run_python_cases(const std::string& what, const std::string& script,
                                             const nlohmann::json& manifest, const ScratchDir& dir,
                                             const std::map<std::string, std::string>& env = {});

}  // namespace parhelion::backend

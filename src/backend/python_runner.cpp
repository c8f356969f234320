#include "backend/python_runner.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "parhelion/error.h"

namespace parhelion::backend {

namespace fs = std::filesystem;
using nlohmann::json;

ScratchDir::ScratchDir() {
  std::string tmpl = (fs::temp_directory_path() / "ph-python-XXXXXX").string();
  if (!mkdtemp(tmpl.data()))
    throw UserError("cannot create a temporary directory under " + fs::temp_directory_path().string());
  path = tmpl;
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  fs::remove_all(path, ec);
}

std::string project_python() {
  if (const char* p = std::getenv("PARHELION_PYTHON"); p && *p) return p;
#ifdef PARHELION_SOURCE_DIR
  std::string venv = std::string(PARHELION_SOURCE_DIR) + "/.venv/bin/python";
  if (fs::exists(venv)) return venv;
#endif
  return "";
}

json write_input(const Array& a, const fs::path& path) {
  Array c = a.is_contiguous() ? a : a.to(a.dtype());
  std::ofstream(path, std::ios::binary)
      .write(static_cast<const char*>(c.data()), static_cast<std::streamsize>(c.numel() * dtype_size(c.dtype())));
  return {{"path", path.string()}, {"shape", a.shape()}, {"dtype", dtype_name(a.dtype())}};
}

std::vector<Array> read_outputs(const fs::path& stem, const json& result, std::string* error) {
  std::vector<Array> out;
  std::vector<Shape> shapes = result.value("shapes", std::vector<Shape>{});
  for (size_t i = 0; i < shapes.size(); ++i) {
    Array a = Array::empty(shapes[i], DType::f32);
    std::ifstream f(stem.string() + "." + std::to_string(i), std::ios::binary);
    const auto want_bytes = static_cast<std::streamsize>(a.numel() * 4);
    f.read(static_cast<char*>(a.data()), want_bytes);
    if (f.gcount() != want_bytes) {
      *error = "output " + std::to_string(i) + " came back short (" + std::to_string(f.gcount()) + " of " +
               std::to_string(want_bytes) + " bytes)";
      return {};
    }
    out.push_back(std::move(a));
  }
  return out;
}

std::vector<json> run_python_cases_until_exit(const std::string& what, const std::string& script, const json& manifest,
                                              const ScratchDir& dir, const std::map<std::string, std::string>& env,
                                              std::string* failure) {
  std::vector<json> results;
  if (manifest.empty()) return results;
  const std::string python = project_python();
  if (python.empty())
    throw UserError(what +
                    " needs the project's Python: set PARHELION_PYTHON, or run `make test` once to create "
                    "the project's .venv");
  std::ofstream(dir.path / "runner.py") << script;
  std::ofstream(dir.path / "manifest.json") << manifest.dump();
  std::string vars;
  for (const auto& [k, v] : env) vars += k + "='" + v + "' ";
  std::string cmd = vars + "'" + python + "' '" + (dir.path / "runner.py").string() + "' '" +
                    (dir.path / "manifest.json").string() + "' 2>'" + (dir.path / "stderr.txt").string() + "'";
  // Closed on every path (an exception included), so that Python is reaped before the
  // scratch directory it reads goes away.
  struct Pipe {
    FILE* f;
    int status = -1;
    int close() {
      if (f) status = pclose(f);
      f = nullptr;
      return status;
    }
    ~Pipe() { close(); }
  } p{popen(cmd.c_str(), "r")};
  if (!p.f) throw UserError("cannot start " + python);
  std::string line;
  char buf[1 << 16];
  while (std::fgets(buf, sizeof buf, p.f)) {
    line += buf;
    if (line.empty() || line.back() != '\n') continue;
    json r = json::parse(line, nullptr, false);
    line.clear();
    // Only the runner's result objects, in order and naming their case: a stray line that a
    // module or a library prints is not a result.
    if (r.is_discarded() || !r.is_object() || results.size() >= manifest.size() || !r.contains("ok") ||
        r.value("name", "") != manifest[results.size()].value("name", ""))
      continue;
    results.push_back(std::move(r));
  }
  int status = p.close();
  if (results.size() != manifest.size()) {
    std::ifstream err(dir.path / "stderr.txt");
    std::string text((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
    if (text.size() > 2000) text = text.substr(text.size() - 2000);
    *failure = what + " (" + python + ") stopped after " + std::to_string(results.size()) + " of " +
               std::to_string(manifest.size()) + " cases (exit status " + std::to_string(status) + "):\n" + text;
  }
  return results;
}

std::vector<json> run_python_cases(const std::string& what, const std::string& script, const json& manifest,
                                   const ScratchDir& dir, const std::map<std::string, std::string>& env) {
  std::string failure;
  std::vector<json> results = run_python_cases_until_exit(what, script, manifest, dir, env, &failure);
  if (!failure.empty()) throw UserError(failure);
  return results;
}

}  // namespace parhelion::backend

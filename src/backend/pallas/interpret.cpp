#include "backend/pallas/interpret.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "parhelion/error.h"

namespace parhelion::backend::pallas {

const char* interpret_runner_source();  // the embedded interpret_runner.py (interpret_runner.cpp.in)

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

void write_raw(const Array& a, const fs::path& path) {
  Array c = a.is_contiguous() ? a : a.to(a.dtype());
  std::ofstream(path, std::ios::binary)
      .write(static_cast<const char*>(c.data()), static_cast<std::streamsize>(c.numel() * dtype_size(c.dtype())));
}

// A scratch directory removed when the run ends.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "ph-interpret-XXXXXX").string();
    if (!mkdtemp(tmpl.data()))
      throw UserError("cannot create a temporary directory under " + fs::temp_directory_path().string());
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

}  // namespace

std::string interpret_python() {
  if (const char* p = std::getenv("PARHELION_PYTHON"); p && *p) return p;
#ifdef PARHELION_SOURCE_DIR
  std::string venv = std::string(PARHELION_SOURCE_DIR) + "/.venv/bin/python";
  if (fs::exists(venv)) return venv;
#endif
  return "";
}

std::vector<InterpretResult> run_in_interpret_mode(const std::vector<InterpretCase>& cases) {
  std::vector<InterpretResult> results;
  if (cases.empty()) return results;
  std::string python = interpret_python();
  if (python.empty())
    throw UserError(
        "running Pallas in TPU interpret mode needs a Python with jax: set PARHELION_PYTHON, or run "
        "`make test` once to create the project's .venv");
  TempDir dir;
  std::ofstream(dir.path / "runner.py") << interpret_runner_source();
  json manifest = json::array();
  for (size_t n = 0; n < cases.size(); ++n) {
    const InterpretCase& c = cases[n];
    std::string stem = "case" + std::to_string(n);
    std::ofstream(dir.path / (stem + ".py")) << c.source;
    json inputs = json::array();
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      fs::path p = dir.path / (stem + "_in" + std::to_string(i));
      write_raw(c.inputs[i], p);
      inputs.push_back(
          {{"path", p.string()}, {"shape", c.inputs[i].shape()}, {"dtype", dtype_name(c.inputs[i].dtype())}});
    }
    manifest.push_back({{"name", c.name},
                        {"module", (dir.path / (stem + ".py")).string()},
                        {"function", c.function},
                        {"inputs", inputs},
                        {"scalars", c.scalars},
                        {"outputs", (dir.path / (stem + "_out")).string()},
                        {"export", c.export_for_tpu}});
  }
  std::ofstream(dir.path / "manifest.json") << manifest.dump();
  std::string cmd = "'" + python + "' '" + (dir.path / "runner.py").string() + "' '" +
                    (dir.path / "manifest.json").string() + "' 2>'" + (dir.path / "stderr.txt").string() + "'";
  // Closed on every path (an exception included), so that Python is reaped before the
  // temporary directory it reads goes away.
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
    if (r.is_discarded() || !r.is_object() || results.size() >= cases.size() || !r.contains("ok") ||
        r.value("name", "") != cases[results.size()].name)
      continue;
    const size_t n = results.size();
    InterpretResult out;
    out.ok = r.value("ok", false);
    out.error = r.value("error", "") + (r.contains("trace") ? "\n" + r.value("trace", "") : "");
    out.races = r.value("races", false);
    out.export_status = r.value("export", "");
    if (out.ok) {
      std::vector<Shape> shapes = r.value("shapes", std::vector<Shape>{});
      for (size_t i = 0; i < shapes.size(); ++i) {
        Array a = Array::empty(shapes[i], DType::f32);
        std::ifstream f(dir.path / ("case" + std::to_string(n) + "_out." + std::to_string(i)), std::ios::binary);
        const auto want_bytes = static_cast<std::streamsize>(a.numel() * 4);
        f.read(static_cast<char*>(a.data()), want_bytes);
        if (f.gcount() != want_bytes) {
          out.ok = false;
          out.error = "output " + std::to_string(i) + " came back short (" + std::to_string(f.gcount()) + " of " +
                      std::to_string(want_bytes) + " bytes)";
          out.outputs.clear();
          break;
        }
        out.outputs.push_back(std::move(a));
      }
    }
    results.push_back(std::move(out));
  }
  int status = p.close();
  if (results.size() != cases.size()) {
    std::ifstream err(dir.path / "stderr.txt");
    std::string text((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
    if (text.size() > 2000) text = text.substr(text.size() - 2000);
    throw UserError("the Pallas interpret-mode runner (" + python + ") stopped after " +
                    std::to_string(results.size()) + " of " + std::to_string(cases.size()) + " cases (exit status " +
                    std::to_string(status) + "):\n" + text);
  }
  return results;
}

}  // namespace parhelion::backend::pallas

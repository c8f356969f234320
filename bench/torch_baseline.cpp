#include "bench/torch_baseline.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "parhelion/error.h"

#ifndef PARHELION_SOURCE_DIR
#define PARHELION_SOURCE_DIR "."
#endif

namespace parhelion::bench {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string python_path() {
  if (const char* p = std::getenv("PARHELION_BENCH_PYTHON")) return p;
  return std::string(PARHELION_SOURCE_DIR) + "/.venv-bench/bin/python";
}

std::string jemalloc_path() {
  for (const char* p : {"/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2",
                        "/usr/lib64/libjemalloc.so.2", "/usr/lib/libjemalloc.so.2"})
    if (fs::exists(p)) return p;
  return "";
}

}  // namespace

std::unique_ptr<TorchBaseline> TorchBaseline::start(std::string* why) {
  std::string py = python_path();
  if (!fs::exists(py)) {
    *why = "no bench Python at " + py + " (run `make bench`, or set PARHELION_BENCH_PYTHON)";
    return nullptr;
  }
  std::string script = std::string(PARHELION_SOURCE_DIR) + "/bench/torch_server.py";
  int in[2], out[2];
  if (pipe(in) != 0 || pipe(out) != 0) {
    *why = "pipe failed";
    return nullptr;
  }
  std::string preload = jemalloc_path();
  pid_t pid = fork();
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(in[1]);
    close(out[0]);
    if (!preload.empty()) {
      setenv("LD_PRELOAD", preload.c_str(), 1);
      // Keep freed pages: eager torch allocates every output afresh, and a page returned to
      // the OS costs a fault (about 11 us here) when it is touched again.
      setenv("MALLOC_CONF", "dirty_decay_ms:-1,muzzy_decay_ms:-1", 1);
    }
    // OpenBLAS/MKL core overrides are unset for the benchmark process; torch uses its own.
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("OPENBLAS_L2_SIZE");
    execl(py.c_str(), py.c_str(), "-u", script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  std::unique_ptr<TorchBaseline> t(new TorchBaseline());
  t->pid_ = pid;
  t->to_ = in[1];
  t->from_ = fdopen(out[0], "r");
  t->dir_ = (fs::temp_directory_path() / ("ph-torch-" + std::to_string(getpid()))).string();
  fs::create_directories(t->dir_);
  try {
    json info = json::parse(t->request(R"({"cmd":"info"})"));
    t->settings_ = "torch " + info.value("torch", "?") + " (" + info.value("cpu_capability", "?") + " kernels), " +
                   (info.value("ld_preload", "").empty() ? "glibc malloc" : "jemalloc keeping freed pages");
  } catch (const std::exception& e) {
    *why = std::string("the torch server did not start: ") + e.what();
    return nullptr;
  }
  return t;
}

TorchBaseline::~TorchBaseline() {
  if (to_ >= 0) close(to_);
  if (from_) std::fclose(static_cast<FILE*>(from_));
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
  std::error_code ec;
  if (!dir_.empty()) fs::remove_all(dir_, ec);
}

std::string TorchBaseline::request(const std::string& line) {
  std::string msg = line + "\n";
  if (write(to_, msg.data(), msg.size()) != static_cast<ssize_t>(msg.size()))
    throw UserError("torch baseline: the server is gone");
  std::string reply;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, static_cast<FILE*>(from_))) {
    reply += buf;
    if (!reply.empty() && reply.back() == '\n') break;
  }
  if (reply.empty()) throw UserError("torch baseline: the server exited");
  json j = json::parse(reply);
  if (!j.value("ok", false)) throw UserError("torch baseline: " + j.value("error", std::string("failed")));
  return reply;
}

TorchBaseline::Loaded TorchBaseline::load(const std::string& kernel, const std::vector<Array>& inputs,
                                          const std::vector<double>& scalars, bool compile, bool sdpa) {
  json req{{"cmd", "load"}, {"kernel", kernel}, {"scalars", scalars}, {"compile", compile}, {"sdpa", sdpa}};
  req["inputs"] = json::array();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Array& a = inputs[i];
    std::string path = dir_ + "/in" + std::to_string(i);
    Array c = a.is_contiguous() ? a : a.to(a.dtype());
    std::ofstream(path, std::ios::binary)
        .write(static_cast<const char*>(c.data()), static_cast<std::streamsize>(c.numel() * dtype_size(c.dtype())));
    req["inputs"].push_back({{"path", path}, {"shape", a.shape()}, {"dtype", dtype_name(a.dtype())}});
  }
  json r = json::parse(request(req.dump()));
  return {r["case"].get<int>(), r["impls"].get<std::vector<std::string>>()};
}

std::vector<Array> TorchBaseline::run(int id, const std::string& impl, int threads) {
  std::string prefix = dir_ + "/out";
  json r = json::parse(
      request(json{{"cmd", "run"}, {"case", id}, {"impl", impl}, {"threads", threads}, {"out", prefix}}.dump()));
  std::vector<Array> outs;
  int i = 0;
  for (const auto& s : r["shapes"]) {
    Array a = Array::empty(s.get<Shape>(), DType::f32);
    std::ifstream(prefix + "." + std::to_string(i++), std::ios::binary)
        .read(static_cast<char*>(a.data()), static_cast<std::streamsize>(a.numel() * 4));
    outs.push_back(std::move(a));
  }
  return outs;
}

double TorchBaseline::time_ms(int id, const std::string& impl, int threads, double min_seconds) {
  json r = json::parse(request(
      json{{"cmd", "time"}, {"case", id}, {"impl", impl}, {"threads", threads}, {"min_seconds", min_seconds}}.dump()));
  return r["median_ms"].get<double>();
}

}  // namespace parhelion::bench

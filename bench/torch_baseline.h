// PyTorch baselines (eager, torch.compile, SDPA) for `parhelion bench`, measured by a Python
// server (bench/torch_server.py) that this class starts once and talks to over pipes, so that
// its timings interleave with ours and it reads the very bytes our kernels read.
//
// The server runs in the bench venv (`make bench` creates .venv-bench with a pinned torch; or
// PARHELION_BENCH_PYTHON names an interpreter) with jemalloc preloaded when the machine has
// it, set to keep freed pages: eager torch on an allocator that returns pages to the OS pays a
// first-touch page fault for every page of every fresh output.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "parhelion/array.h"

namespace parhelion::bench {

class TorchBaseline {
 public:
  // Starts the server; null (and the reason in `why`) when there is no Python with torch.
  static std::unique_ptr<TorchBaseline> start(std::string* why);
  ~TorchBaseline();
  TorchBaseline(const TorchBaseline&) = delete;
  TorchBaseline& operator=(const TorchBaseline&) = delete;

  std::string settings() const { return settings_; }  // torch version, CPU capability, allocator
  struct Loaded {
    int id = -1;
    std::vector<std::string> impls;  // "eager", then "sdpa" and "compile" where asked for
  };
  // Loads a case's inputs; throws UserError with the server's message.
  Loaded load(const std::string& kernel, const std::vector<Array>& inputs, const std::vector<double>& scalars,
              bool compile, bool sdpa);
  // One call; its outputs widened to f32.
  std::vector<Array> run(int id, const std::string& impl, int threads);
  // Median milliseconds per call (after warm-up, which includes torch.compile's compilation).
  double time_ms(int id, const std::string& impl, int threads, double min_seconds);

 private:
  TorchBaseline() = default;
  std::string request(const std::string& json_line);
  int pid_ = -1, to_ = -1;
  void* from_ = nullptr;  // FILE*
  std::string dir_, settings_;
};

}  // namespace parhelion::bench

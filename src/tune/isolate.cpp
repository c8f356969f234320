#include "tune/isolate.h"

#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "driver/compiled_kernel_impl.h"
#include "parhelion/error.h"
#include "tune/accuracy.h"

namespace parhelion::tune {
namespace {

struct Message {
  int status;
  double ms, max_err;
  char detail[512];
};

void child_write(int fd, RunResult::Status st, double ms, double err, const std::string& detail) {
  Message m{};
  m.status = st;
  m.ms = ms;
  m.max_err = err;
  std::strncpy(m.detail, detail.c_str(), sizeof m.detail - 1);
  ssize_t n = write(fd, &m, sizeof m);
  (void)n;
}

double median_ms(const std::function<void()>& fn, const TimingPlan& plan) {
  using clock = std::chrono::steady_clock;
  for (int i = 0; i < plan.warmup; ++i) fn();
  std::vector<double> ms;
  auto start = clock::now();
  while (static_cast<int>(ms.size()) < plan.min_reps ||
         (std::chrono::duration<double>(clock::now() - start).count() < plan.min_seconds &&
          static_cast<int>(ms.size()) < plan.max_reps)) {
    auto t0 = clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(clock::now() - t0).count());
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

// Forks; the child runs `body(fd)` and exits; the parent waits up to `timeout_s`.
RunResult in_child(const std::function<void(int)>& body, double timeout_s) {
  int fds[2];
  if (pipe(fds) != 0) throw InternalError("pipe failed");
  pid_t pid = fork();
  if (pid < 0) throw InternalError("fork failed");
  if (pid == 0) {
    close(fds[0]);
    try {
      body(fds[1]);
    } catch (const std::exception& e) {
      child_write(fds[1], RunResult::error, 0, 0, e.what());
    }
    _exit(0);
  }
  close(fds[1]);
  RunResult r;
  Message m{};
  size_t got = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  bool timed_out = false;
  while (got < sizeof m) {
    int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count());
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    int pr = poll(&p, 1, left);
    if (pr <= 0) continue;
    ssize_t n = read(fds[0], reinterpret_cast<char*>(&m) + got, sizeof m - got);
    if (n <= 0) break;  // the child closed the pipe (exited or crashed)
    got += static_cast<size_t>(n);
  }
  close(fds[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  if (timed_out) {
    r.status = RunResult::timeout;
    r.detail = "timed out after " + std::to_string(timeout_s) + " s";
  } else if (got < sizeof m) {
    r.status = RunResult::crashed;
    r.detail = WIFSIGNALED(status) ? "crashed with signal " + std::to_string(WTERMSIG(status)) + " (" +
                                         strsignal(WTERMSIG(status)) + ")"
                                   : "exited with status " + std::to_string(WEXITSTATUS(status)) + " without a result";
  } else {
    r.status = static_cast<RunResult::Status>(m.status);
    r.ms = m.ms;
    r.max_err = m.max_err;
    r.detail = m.detail;
  }
  return r;
}

}  // namespace

std::string RunResult::describe() const {
  switch (status) {
    case ok:
      return "ok";
    case crashed:
      return detail;
    case timeout:
      return detail;
    case wrong:
      return "wrong result (max abs error " + std::to_string(max_err) + ")";
    case error:
      return "error: " + detail;
  }
  return detail;
}

RunResult run_isolated(const CompiledKernel& k, const std::vector<Arg>& args, const std::vector<Array>& expected,
                       DType tolerance_dtype, double tolerance_scale, Fault fault, double timeout_s,
                       const TimingPlan& plan) {
  return in_child(
      [&](int fd) {
        if (fault == Fault::crash) std::abort();  // a crash that sanitizers do not intercept
        if (fault == Fault::hang)
          for (;;) pause();
        std::vector<Array> out = k.run(args);
        if (fault == Fault::wrong_result && !out.empty() && out[0].numel() > 0) out[0].set(0, out[0].get(0) + 1.0);
        double err = 0;
        if (out.size() != expected.size()) {
          child_write(fd, RunResult::wrong, 0, INFINITY, "wrong number of outputs");
          return;
        }
        for (size_t i = 0; i < out.size(); ++i) {
          Closeness c = compare(out[i], expected[i], tolerance_dtype, tolerance_scale);
          err = std::max(err, c.max_abs_err);
          if (!c.ok) {
            child_write(fd, RunResult::wrong, 0, err, "");
            return;
          }
        }
        double ms = median_ms([&] { k.run(args); }, plan);
        child_write(fd, RunResult::ok, ms, err, "");
      },
      timeout_s);
}

std::vector<Array> outputs_isolated(const CompiledKernel& k, const std::vector<Arg>& args, double timeout_s) {
  const ir::Function& fn = k.impl().fn;
  std::vector<Array> shared;
  for (int t : fn.outputs) {
    const ir::TensorInfo& info = fn.tensors[t];
    size_t bytes = std::max<size_t>(1, shape_bytes(info.shape, info.dtype));
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw InternalError("mmap failed");
    std::shared_ptr<void> owner(p, [bytes](void* q) { munmap(q, bytes); });
    shared.push_back(Array::wrap(p, info.shape, contiguous_strides(info.shape), info.dtype, owner));
  }
  RunResult r = in_child(
      [&](int fd) {
        std::vector<Array> out = k.run(args);
        for (size_t i = 0; i < out.size(); ++i) {
          Array c = out[i].is_contiguous() ? out[i] : out[i].clone();
          std::memcpy(shared[i].data(), c.data(), static_cast<size_t>(c.numel() * dtype_size(c.dtype())));
        }
        child_write(fd, RunResult::ok, 0, 0, "");
      },
      timeout_s);
  if (!r.good())
    throw UserError("kernel " + k.impl().name + ": the baseline config " + k.config().to_json() +
                    " failed: " + r.describe());
  return shared;
}

}  // namespace parhelion::tune

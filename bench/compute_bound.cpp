#include "bench/compute_bound.h"

#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <exception>

#include "backend/cpu/host.h"
#include "runtime/timing.h"

namespace parhelion::bench {
namespace {

// The calling thread's retired user-mode instructions and cycles, read as one group. Absent
// where the kernel refuses (perf_event_paranoid, a container without the syscall, a virtual
// machine without counters): the measurement then goes without them.
class ThreadCounters {
 public:
  ThreadCounters() {
    perf_event_attr a{};
    a.type = PERF_TYPE_HARDWARE;
    a.size = sizeof a;
    a.config = PERF_COUNT_HW_INSTRUCTIONS;
    a.disabled = 1;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    a.read_format = PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
    leader_ = static_cast<int>(syscall(SYS_perf_event_open, &a, 0, -1, -1, 0));
    if (leader_ < 0) return;
    a.config = PERF_COUNT_HW_CPU_CYCLES;
    a.disabled = 0;  // (follows its leader)
    cycles_ = static_cast<int>(syscall(SYS_perf_event_open, &a, 0, -1, leader_, 0));
    if (cycles_ < 0) {
      close(leader_);
      leader_ = -1;
    }
  }
  ~ThreadCounters() {
    if (cycles_ >= 0) close(cycles_);
    if (leader_ >= 0) close(leader_);
  }
  ThreadCounters(const ThreadCounters&) = delete;
  ThreadCounters& operator=(const ThreadCounters&) = delete;

  bool available() const { return leader_ >= 0; }
  void start() {
    ioctl(leader_, PERF_EVENT_IOC_RESET, PERF_IOC_FLAG_GROUP);
    ioctl(leader_, PERF_EVENT_IOC_ENABLE, PERF_IOC_FLAG_GROUP);
  }
  // False where the counts could not be read, or the counters were shared with other events
  // for part of the time (multiplexed: the counts would be a sample, not the whole).
  bool stop(uint64_t* instructions, uint64_t* cycles) {
    ioctl(leader_, PERF_EVENT_IOC_DISABLE, PERF_IOC_FLAG_GROUP);
    struct {
      uint64_t nr, time_enabled, time_running, values[2];
    } r{};
    if (read(leader_, &r, sizeof r) != static_cast<ssize_t>(sizeof r) || r.nr != 2) return false;
    if (r.time_running < r.time_enabled) return false;
    *instructions = r.values[0];
    *cycles = r.values[1];
    return *instructions > 0 && *cycles > 0;
  }

 private:
  int leader_ = -1, cycles_ = -1;
};

}  // namespace

std::optional<ComputeBound> measure_compute_bound(const kernels::KernelEntry& entry, const Shape& shape, DType dtype,
                                                  int threads, const std::optional<Shape>& start, std::string* why) {
  // Half a core's fast memory: the inputs, outputs and the kernel's scratch stay there.
  const double budget = static_cast<double>(backend::cpu::Host::detect().fast_memory_bytes) / 2;
  Shape small = start ? *start : shape;
  for (size_t d = 0; d < small.size(); ++d)
    while (entry.bytes(small, dtype) > budget && small[d] > 1) small[d] = std::max<int64_t>(1, small[d] / 2);
  if (entry.bytes(small, dtype) > budget) {
    *why = "no shape of it fits the caches";
    return std::nullopt;
  }
  try {
    kernels::Inputs in = entry.make_inputs(small, dtype, 1);
    // What the kernel moves may not be all it holds: a gather's table keeps its size whatever
    // the shape (embedding's V), and is then read from memory, not the caches.
    double held = 0;
    for (const Array& t : in.tensors) held += static_cast<double>(t.numel() * dtype_size(t.dtype()));
    if (held > 2 * budget) {
      *why = "its inputs at " + shape_to_string(small) + " take " + std::to_string(std::lround(held / 1024)) +
             " KiB: not cache-resident";
      return std::nullopt;
    }
    const std::vector<Arg> args = in.args();
    // Its default config at the small shape (no streamed stores: the data is cache-sized), run
    // on the calling thread: one thread's work is what the counters see.
    Config config = entry.kernel->compile(args).config();
    config.num_threads = 1;
    CompiledKernel k = entry.kernel->compile(args, &config);
    ComputeBound b;
    b.shape = small;
    b.ms = time_it([&] { k.run(args); }, 3, 20, 0.1).median_ms;
    b.ms_scaled = b.ms * entry.bytes(shape, dtype) / entry.bytes(small, dtype) / std::max(1, threads);
    ThreadCounters counters;
    if (counters.available()) {
      constexpr int kCalls = 20;
      uint64_t instructions = 0, cycles = 0;
      counters.start();
      for (int i = 0; i < kCalls; ++i) k.run(args);
      if (counters.stop(&instructions, &cycles)) {
        b.instructions_per_element =
            static_cast<double>(instructions) / kCalls / static_cast<double>(in.tensors.at(0).numel());
        b.ipc = static_cast<double>(instructions) / static_cast<double>(cycles);
      }
    }
    return b;
  } catch (const std::exception& e) {
    *why = e.what();
    return std::nullopt;
  }
}

}  // namespace parhelion::bench

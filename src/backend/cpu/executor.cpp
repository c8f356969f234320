#include "backend/cpu/executor.h"

#include <algorithm>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cpu/codegen.h"
#include "backend/cpu/jit.h"
#include "parhelion/error.h"
#include "runtime/allocator.h"
#include "runtime/gemm/gemm.h"
#include "runtime/step_queue.h"
#include "runtime/thread_pool.h"

namespace parhelion::backend::cpu {
namespace {

// The generated entry point of one launch (see codegen.h): runs grid steps [begin, end).
using LaunchFn = void (*)(void* const* tensors, const double* scalars, char* scratch, int64_t begin, int64_t end,
                          const ph_runtime* runtime, ph_status* status);
// Its partials function (emit/atomics.cpp), where it keeps per-thread copies of atomically
// updated tensors: phase 0 fills thread `tid`'s copies, phase 1 combines its share of them all.
using PartialsFn = void (*)(int phase, void* const* tensors, char* area, int64_t stride, int threads, int tid);
// Its kept-panels function (emit/dots.cpp): clears the keys of the kept B panels in one thread's area.
using KeptFn = void (*)(char* own);

struct Launch {
  LaunchFn fn = nullptr;
  int64_t total_steps = 0;
  int threads = 1;
  int64_t scratch_bytes = 0;  // per thread
  PartialsFn partials = nullptr;
  int64_t partials_bytes = 0;  // per thread, after its scratch
  int64_t kept_bytes = 0;      // per thread, after its partials: kept B panels (DotPlan::kept_b_slots)
  KeptFn clear_kept = nullptr;
};

class CpuExecutable final : public Executable {
 public:
  CpuExecutable(JitResult jit, std::vector<Launch> launches) : jit_(std::move(jit)), launches_(std::move(launches)) {
    source_path = jit_.source_path;
    cache_hit = jit_.cache_hit;
    compile_seconds = jit_.compile_seconds;
  }

  // Each thread runs ranges of consecutive grid steps with its own scratch area.
  void run_launch(int index, void* const* tensors, const double* scalars, const ph_runtime* runtime) const override {
    if (!runtime) runtime = runtime::runtime_table();
    const Launch& L = launches_.at(index);
    if (L.total_steps == 0) return;
    const int threads = L.threads;
    const int64_t per_thread = (L.scratch_bytes + 63) / 64 * 64 + L.partials_bytes + L.kept_bytes;
    std::shared_ptr<void> scratch = runtime::allocate(static_cast<size_t>(std::max<int64_t>(64, per_thread * threads)));
    char* base = static_cast<char*>(scratch.get());
    const int64_t steps = L.total_steps;
    ph_status status{0, 0, nullptr, nullptr};
    runtime::StepQueue queue(steps, threads);
    runtime::parallel_run(threads, [&](int tid) {
      char* own = base + per_thread * tid;
      // Once per launch call: the panels a thread packs for one range of steps serve its next.
      if (L.clear_kept) L.clear_kept(own);
      if (L.partials) {
        // Per-thread partial results are combined in thread order: a fixed split of the steps
        // keeps a float sum the same from run to run.
        int64_t b = steps * tid / threads, e = steps * (tid + 1) / threads;
        L.partials(0, tensors, base, per_thread, threads, tid);
        if (b < e) L.fn(tensors, scalars, own, b, e, runtime, &status);
        return;
      }
      for (auto [b, e] = queue.claim(); b < e; std::tie(b, e) = queue.claim())
        L.fn(tensors, scalars, own, b, e, runtime, &status);
    });
    if (L.partials && !status.failed)
      runtime::parallel_run(threads, [&](int tid) { L.partials(1, tensors, base, per_thread, threads, tid); });
    if (status.failed)
      throw UserError(std::string(status.where) + ": index " + std::to_string(status.value) + " is out of bounds for " +
                      status.what +
                      " (computed indices are checked; the config's \"index_checks\":false turns the check off)");
  }

 private:
  JitResult jit_;  // keeps the loaded object alive
  std::vector<Launch> launches_;
};

}  // namespace

std::shared_ptr<Executable> load_executable(const std::string& source, const lower::BlockProgram& program) {
  JitResult jit = jit_compile(source);
  std::vector<Launch> launches;
  for (const lower::LaunchPlan& L : program.launches) {
    Launch l{reinterpret_cast<LaunchFn>(jit.module->symbol(launch_symbol(L.index))), L.total_steps, L.num_threads,
             L.scratch_bytes};
    if (L.partials_bytes > 0) {
      l.partials = reinterpret_cast<PartialsFn>(jit.module->symbol(launch_symbol(L.index) + "_partials"));
      l.partials_bytes = L.partials_bytes;
    }
    if (L.kept_panels_bytes > 0) {
      l.kept_bytes = L.kept_panels_bytes;
      l.clear_kept = reinterpret_cast<KeptFn>(jit.module->symbol(launch_symbol(L.index) + "_kept"));
    }
    launches.push_back(l);
  }
  return std::make_shared<CpuExecutable>(std::move(jit), std::move(launches));
}

}  // namespace parhelion::backend::cpu

#include "tools/suite_command.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "backend/cpu/host.h"
#include "bench/baselines.h"
#include "bench/compute_bound.h"
#include "bench/torch_baseline.h"
#include "kernels/registry.h"
#include "runtime/timing.h"

#ifndef PARHELION_SOURCE_DIR
#define PARHELION_SOURCE_DIR "."
#endif

namespace parhelion::tools {
namespace {

using nlohmann::json;

struct Impl {
  std::string name;
  std::function<double()> time_ms;  // one timing sample (a median of repeats)
  std::vector<double> ms;
};

struct Row {
  const kernels::KernelEntry* entry;
  Shape shape;
  DType dtype;
  std::string config;
  std::vector<Impl> impls;  // parhelion first
  std::string skipped;      // why the case was dropped (a check failed)
  // A memory-bound row's compute bound: the kernel on a cache-resident shape (bench/compute_bound.h),
  // measured from `compute_start` (the case's "compute_bound_shape") where one is given.
  std::optional<bench::ComputeBound> compute;
  std::optional<Shape> compute_start;
  double ms(const std::string& impl) const {
    for (const Impl& i : impls)
      if (i.name == impl && !i.ms.empty()) {
        std::vector<double> v = i.ms;
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      }
    return 0;
  }
};

// Parhelion's config for a case: the cached winner, or `quick` tuning within the budget; run at
// the suite's thread count.
Config tuned_config(const kernels::KernelEntry& e, const kernels::Inputs& in, double budget, int threads) {
  TuneOptions t;
  t.effort = Effort::quick;
  t.budget_seconds = budget;
  t.progress = false;
  Config c = e.kernel->tune(in.args(), t).best_config;
  c.num_threads = std::min(threads, backend::cpu::Host::detect().threads);
  return c;
}

// Under the table: what each memory-bound row's compute bound was measured on, and the
// instructions behind it (where the host lets the counters be read).
void print_compute_bounds(const std::vector<Row>& rows) {
  bool header = false;
  for (const Row& r : rows) {
    if (!r.compute || !r.skipped.empty()) continue;
    const bench::ComputeBound& c = *r.compute;
    if (!header)
      std::printf(
          "\nCompute bounds of the memory-bound rows (\"compute N%%\": the share of the roofline time the kernel's "
          "instructions allow; the kernel at a cache-resident shape on one thread, its time scaled to the row's "
          "bytes and threads):\n");
    header = true;
    std::string counts = "no counters";
    if (c.ipc > 0) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "%.1f instructions per element of its first input at %.2f per cycle",
                    c.instructions_per_element, c.ipc);
      counts = buf;
    }
    std::printf("- %s %s: %s in %.4f ms, %.3f ms at the row's shape; %s\n", r.entry->name.c_str(),
                std::string(dtype_name(r.dtype)).c_str(), shape_to_string(c.shape).c_str(), c.ms, c.ms_scaled,
                counts.c_str());
  }
}

}  // namespace

int run_suite(const SuiteOptions& o) {
  std::string file = o.suite_file.empty() ? std::string(PARHELION_SOURCE_DIR) + "/bench/suite.json" : o.suite_file;
  std::ifstream f(file);
  if (!f) throw UserError("cannot read the suite file " + file);
  json suite;
  try {
    suite = json::parse(f);
  } catch (const json::exception& e) {
    throw UserError("the suite file " + file + " is not valid JSON: " + e.what());
  }
  std::string why;
  std::unique_ptr<bench::TorchBaseline> torch = bench::TorchBaseline::start(&why);
  if (!torch) throw UserError("the suite needs the torch baselines: " + why);
  const int T = o.threads;
  // bf16's compute roof: the faster of the bf16 dot instruction and, where present, the AMX tiles.
  // Re-measured every round, the best kept, as the memory roof is: a peak taken once, while another
  // tenant held the cores, put the f32 GEMMs at 122% of it.
  double peak_f32 = 0, peak_tiles = 0, peak_bf16 = 0;
  auto measure_peaks = [&] {
    peak_f32 = std::max(peak_f32, bench::fma_peak_f32(T));
    peak_tiles = std::max(peak_tiles, bench::tile_peak_bf16(T));
    peak_bf16 = std::max({peak_bf16, bench::fma_peak_bf16(T), peak_tiles});
  };
  measure_peaks();
  // The compute roof of a row's dtype.
  auto peak_for = [&](DType dt) { return dt == DType::bf16 && peak_bf16 > 0 ? peak_bf16 : peak_f32; };
  // The memory roof: the best of copy, stream copy, triad and read, each re-measured every round
  // (the best of each is kept: the machine is shared).
  bench::MemoryRoof roof = bench::memory_roof(T);

  std::vector<Row> rows;
  std::vector<std::unique_ptr<kernels::Inputs>> inputs;
  std::vector<std::unique_ptr<CompiledKernel>> compiled;
  std::vector<std::unique_ptr<Array>> outs;
  std::vector<std::unique_ptr<bench::OneDnnMatmul>> dnnl;
  for (const json& c : suite.at("cases")) {
    const kernels::KernelEntry& e = kernels::find_kernel(c.at("kernel").get<std::string>());
    if (!o.only.empty() && e.name != o.only) continue;
    Shape shape = c.at("shape").get<Shape>();
    for (const std::string& dn : c.at("dtypes").get<std::vector<std::string>>()) {
      DType dt = *parse_dtype(dn);
      std::fprintf(stderr, "suite: %s %s %s: tuning, checking\n", e.name.c_str(), shape_to_string(shape).c_str(),
                   dn.c_str());
      inputs.push_back(std::make_unique<kernels::Inputs>(e.make_inputs(shape, dt, 1)));
      kernels::Inputs& in = *inputs.back();
      Row row{&e, shape, dt, "", {}, "", std::nullopt, std::nullopt};
      if (c.contains("compute_bound_shape")) row.compute_start = c.at("compute_bound_shape").get<Shape>();
      Config cfg = tuned_config(e, in, o.tune_budget, T);
      compiled.push_back(std::make_unique<CompiledKernel>(e.kernel->compile(in.args(), &cfg)));
      CompiledKernel* k = compiled.back().get();
      row.config = cfg.to_json();
      auto args = std::make_shared<std::vector<Arg>>(in.args());
      row.impls.push_back(
          {"parhelion", [k, args] { return time_it([&] { k->run(*args); }, 1, 3, 0.2).median_ms; }, {}});
      // torch: eager is the yardstick every other output is checked against.
      bench::TorchBaseline::Loaded loaded = torch->load(e.name, in.tensors, in.scalars, /*compile=*/true,
                                                        /*sdpa=*/false);
      std::vector<Array> eager = torch->run(loaded.id, "eager", T);
      const double tol = 2 * e.tolerance(shape);
      // (A baseline with its own random stream is not compared: the kernel is, to its reference.)
      if (e.baseline_has_own_stream) eager = e.reference(in);
      auto agrees = [&](const std::vector<Array>& got, const std::string& who) {
        if (e.baseline_has_own_stream && who != "parhelion") return true;
        for (size_t i = 0; i < got.size() && i < eager.size(); ++i) {
          auto cmp = kernels::compare(got[i], eager[i], dt, tol);
          if (!cmp.ok) {
            row.skipped += who + " differs from eager (max abs error " + std::to_string(cmp.max_abs_err) + ") ";
            return false;
          }
        }
        return true;
      };
      if (!agrees(k->run(in.args()), "parhelion")) {
        rows.push_back(std::move(row));
        continue;
      }
      bench::TorchBaseline* tb = torch.get();
      for (const std::string& impl : loaded.impls) {
        if (impl != "eager" && !agrees(torch->run(loaded.id, impl, T), impl)) continue;
        int id = loaded.id;
        row.impls.push_back({impl, [tb, id, impl, T] { return tb->time_ms(id, impl, T, 0.2); }, {}});
      }
      // Vendor GEMMs for the plain matmuls.
      if (e.name == "matmul") {
        int64_t m = shape[0], kk = shape[1], n = shape[2];
        outs.push_back(std::make_unique<Array>(Array::empty({m, n}, DType::f32)));
        Array* out = outs.back().get();
        if (dt == DType::f32 && bench::have_openblas()) {
          const float* a = in.tensors[0].data_as<float>();
          const float* b = in.tensors[1].data_as<float>();
          auto run = [=] { bench::openblas_sgemm(m, n, kk, a, b, out->data_as<float>(), T); };
          run();
          if (agrees({*out}, "openblas"))
            row.impls.push_back({"openblas", [run] { return time_it(run, 1, 3, 0.2).median_ms; }, {}});
        } else if (dt == DType::bf16 && bench::have_onednn()) {
          if (bench::OneDnnMatmul::available(true)) {
            dnnl.push_back(std::make_unique<bench::OneDnnMatmul>(m, n, kk, true, in.tensors[0].data(),
                                                                 in.tensors[1].data(), out->data_as<float>()));
            bench::OneDnnMatmul* d = dnnl.back().get();
            d->run(T);
            if (agrees({*out}, "onednn"))
              row.impls.push_back({"onednn", [d, T] { return time_it([&] { d->run(T); }, 1, 3, 0.2).median_ms; }, {}});
          } else {
            std::fprintf(stderr,
                         "suite: oneDNN has no bf16 matmul on this host (it needs AVX-512): no vendor column\n");
          }
        }
      }
      rows.push_back(std::move(row));
    }
  }
  // Interleaved rounds: every implementation of every case once per round. A row is complete
  // when the last round has timed it, and is printed then: a long suite shows its rows as it
  // goes, and one cut short keeps what it measured.
  auto roofline_ms = [&](const Row& r) {
    const double peak = peak_for(r.dtype);
    double flops = r.entry->flops(r.shape), bytes = r.entry->bytes(r.shape, r.dtype);
    return std::max(flops / (peak * 1e9), bytes / (roof.gbps() * 1e9)) * 1e3;
  };
  auto bound_by = [&](const Row& r) {
    const double peak = peak_for(r.dtype);
    return r.entry->flops(r.shape) / (peak * 1e9) > r.entry->bytes(r.shape, r.dtype) / (roof.gbps() * 1e9) ? "FMA"
                                                                                                           : "memory";
  };
  // A row's compute bound as the share of its roofline time it allows, with what it was measured on.
  auto compute_bound_json = [&](const Row& r) {
    if (!r.compute) return json(nullptr);
    const bench::ComputeBound& c = *r.compute;
    return json{{"shape", c.shape},
                {"ms_one_thread", c.ms},
                {"ms_scaled", c.ms_scaled},
                {"pct_roofline", 100 * roofline_ms(r) / c.ms_scaled},
                {"instructions_per_element", c.instructions_per_element},
                {"ipc", c.ipc}};
  };
  std::vector<double> over_eager, over_compile;
  std::vector<std::string> timed_once;                               // "kernel dtype impl" of the settled baselines
  std::vector<double> over_eager_unsettled, over_compile_unsettled;  // the rows without one
  json all = json::array();
  auto report_row = [&](const Row& r) {
    if (!r.skipped.empty()) {
      if (!o.json)
        std::printf("| %s | %s | %s | skipped: %s |||||||\n", r.entry->name.c_str(), shape_to_string(r.shape).c_str(),
                    std::string(dtype_name(r.dtype)).c_str(), r.skipped.c_str());
      return;
    }
    double ours = r.ms("parhelion"), eager = r.ms("eager"), comp = r.ms("compile");
    if (ours <= 0) return;
    if (eager > 0) over_eager.push_back(eager / ours);
    if (comp > 0) over_compile.push_back(comp / ours);
    bool settled_row = false;
    for (const Impl& i : r.impls)
      if (static_cast<int>(i.ms.size()) < o.rounds) {
        timed_once.push_back(r.entry->name + " " + std::string(dtype_name(r.dtype)) + " " + i.name);
        settled_row = true;
      }
    if (!settled_row && eager > 0) over_eager_unsettled.push_back(eager / ours);
    if (!settled_row && comp > 0) over_compile_unsettled.push_back(comp / ours);
    for (const Impl& i : r.impls) {
      double ms = r.ms(i.name);
      double gf = r.entry->flops(r.shape) / (ms * 1e6);
      const double peak = peak_for(r.dtype);
      all.push_back({{"kernel", r.entry->name},
                     {"shape", r.shape},
                     {"dtype", dtype_name(r.dtype)},
                     {"impl", i.name},
                     {"threads", T},
                     {"median_ms", ms},
                     {"gflops", gf},
                     {"pct_peak", 100 * gf / peak},
                     {"gbps", r.entry->bytes(r.shape, r.dtype) / (ms * 1e6)},
                     {"pct_roofline", 100 * roofline_ms(r) / ms},
                     {"roofline", bound_by(r)},
                     {"speedup_vs_parhelion", ours / ms},
                     {"compute_bound", compute_bound_json(r)},
                     {"rounds", i.ms.size()},
                     {"config", i.name == "parhelion" ? r.config : ""}});
      if (o.json) std::printf("%s\n", all.back().dump().c_str());
    }
    if (o.json) return;
    std::string vendor = "";
    for (const char* v : {"openblas", "onednn", "scaled_mm"})
      if (r.ms(v) > 0) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%s %.3f ms (%.2fx)", v, r.ms(v), r.ms(v) / ours);
        vendor = buf;
      }
    std::string bound = bound_by(r);
    if (r.compute && bound == "memory")
      bound += "; compute " + std::to_string(std::lround(100 * roofline_ms(r) / r.compute->ms_scaled)) + "%";
    std::printf("| %s | %s | %s | %.3f | %.3f | %.3f | %.2fx | %.2fx | %s | %.0f%% (%s) |\n", r.entry->name.c_str(),
                shape_to_string(r.shape).c_str(), std::string(dtype_name(r.dtype)).c_str(), eager, comp, ours,
                eager / ours, comp > 0 ? comp / ours : 0.0, vendor.c_str(), 100 * roofline_ms(r) / ours, bound.c_str());
  };
  // The table's header, once the last round has measured the memory roof.
  auto report_header = [&] {
    if (o.json) return;
    std::time_t now = std::time(nullptr);
    char date[32];
    std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
    std::printf("# parhelion bench --suite, %s: %s, %d threads (not pinned); %s\n", date,
                backend::cpu::Host::detect().cpu_model.c_str(), T, torch->settings().c_str());
    const std::string note = bench::openblas_core_note();
    std::printf(
        "# FMA peak %.0f GFLOP/s f32, %.0f bf16%s; memory roof %.1f GB/s (%s; copy %.1f, stream copy %.1f, triad "
        "%.1f, read %.1f); "
        "OpenBLAS "
        "core %s%s\n\n",
        peak_f32, peak_bf16, peak_tiles > 0 ? " (AMX tiles)" : "", roof.gbps(), roof.kind(), roof.copy,
        roof.stream_copy, roof.triad, roof.read, bench::openblas_core().c_str(),
        note.empty() ? "" : (" (" + note + ")").c_str());
    std::printf(
        "| kernel | shape | dtype | eager ms | compile ms | Parhelion ms | vs eager | vs compile | vendor | %% of "
        "roofline |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  };
  // A baseline far slower than Parhelion is timed in one round only (bench::settled_in_one_round).
  auto settled = [](const Row& row, const Impl& i) {
    const double ours = row.impls.front().ms.empty() ? 0 : row.impls.front().ms.front();
    return i.name != "parhelion" && !i.ms.empty() && bench::settled_in_one_round(i.ms.front(), ours);
  };
  // Below the memory roof by lack of bandwidth or of compute? The same kernel with its data in
  // the caches says which. Asked in the last round, just before the row is printed: a row is
  // memory-bound by the best peak and roof measured, where the first round's peak, taken while
  // another tenant held the cores, read a third low and classed rows as FMA-bound.
  auto measure_compute_bound = [&](Row& row) {
    const kernels::KernelEntry& e = *row.entry;
    if (!row.skipped.empty() || std::string_view(bound_by(row)) != "memory") return;
    std::string no;
    row.compute = bench::measure_compute_bound(e, row.shape, row.dtype, T, row.compute_start, &no);
    if (!row.compute)
      std::fprintf(stderr, "suite: %s %s: no compute bound (%s)\n", e.name.c_str(),
                   std::string(dtype_name(row.dtype)).c_str(), no.c_str());
  };
  const auto started = std::chrono::steady_clock::now();
  for (int r = 0; r < o.rounds; ++r) {
    const bool last = r + 1 == o.rounds;
    roof.keep_best(bench::memory_roof(T));
    if (r > 0) measure_peaks();
    if (last) report_header();
    for (size_t k = 0; k < rows.size(); ++k) {
      Row& row = rows[k];
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      std::fprintf(stderr, "suite: round %d of %d, row %zu of %zu (%s %s %s), %.0f s into the timing\n", r + 1,
                   o.rounds, k + 1, rows.size(), row.entry->name.c_str(), shape_to_string(row.shape).c_str(),
                   std::string(dtype_name(row.dtype)).c_str(), seconds);
      if (row.skipped.empty())
        for (Impl& i : row.impls)
          if (!settled(row, i)) i.ms.push_back(i.time_ms());
      if (last) {
        measure_compute_bound(row);
        report_row(row);
        std::fflush(stdout);
      }
    }
  }

  auto geomean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += std::log(x);
    return v.empty() ? 0 : std::exp(s / static_cast<double>(v.size()));
  };
  if (!o.png.empty()) {
    std::string data =
        (std::filesystem::temp_directory_path() / ("ph-suite-" + std::to_string(getpid()) + ".json")).string();
    std::ofstream(data) << all.dump();
    std::string py = std::getenv("PARHELION_BENCH_PYTHON")
                         ? std::getenv("PARHELION_BENCH_PYTHON")
                         : std::string(PARHELION_SOURCE_DIR) + "/.venv-bench/bin/python";
    std::string cmd = py + " " + PARHELION_SOURCE_DIR + "/bench/plot_suite.py " + data + " " + o.png + " >&2";
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "suite: the chart was not written (see above)\n");
    std::filesystem::remove(data);
  }
  if (o.json) {
    std::printf("%s\n", json{{"kernel", "geomean"},
                             {"speedup_vs_eager", geomean(over_eager)},
                             {"speedup_vs_compile", geomean(over_compile)},
                             {"speedup_vs_eager_rows_timed_every_round", geomean(over_eager_unsettled)},
                             {"speedup_vs_compile_rows_timed_every_round", geomean(over_compile_unsettled)},
                             {"fma_peak_f32", peak_f32},
                             {"fma_peak_bf16", peak_bf16},
                             {"memory_roof_gbps", roof.gbps()},
                             {"memory_roof", roof.kind()},
                             {"copy_gbps", roof.copy},
                             {"stream_copy_gbps", roof.stream_copy},
                             {"triad_gbps", roof.triad},
                             {"read_gbps", roof.read},
                             {"openblas_core", bench::openblas_core()},
                             {"openblas_core_note", bench::openblas_core_note()},
                             {"torch", torch->settings()}}
                            .dump()
                            .c_str());
    return 0;
  }
  std::printf("| **geomean** | | | | | | **%.2fx** | **%.2fx** | | |\n", geomean(over_eager), geomean(over_compile));
  if (!timed_once.empty()) {
    std::string list;
    for (const std::string& t : timed_once) list += (list.empty() ? "" : ", ") + t;
    std::printf("| geomean of the rows timed in every round | | | | | | %.2fx | %.2fx | | |\n",
                geomean(over_eager_unsettled), geomean(over_compile_unsettled));
    std::printf("\nTimed in one round only (a call of over a second and 20x Parhelion's): %s\n", list.c_str());
  }
  print_compute_bounds(rows);
  return 0;
}

}  // namespace parhelion::tools

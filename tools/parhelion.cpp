// The `parhelion` command-line tool: list, run and emit library kernels.
//
//   parhelion list
//   parhelion run KERNEL --shape 1000,1003 [--dtype f32|bf16|f16|f8e4m3|f8e5m2] [--config JSON] [--threads N] [--seed
//   N] [--json] parhelion emit KERNEL --shape ... [--dtype ...] [--stage ir|spec|block|code] [--config JSON] parhelion
//   tune KERNEL --shape ... [--dtype ...] [--effort quick|full] [--budget SECONDS] [--seed N] [--json] parhelion opt
//   FILE.tir --stage ir|fusion|spec|block|pallas-plan|code [--target cpu|pallas] [--config JSON]
//
// Exit status: 0 success, 1 a result outside tolerance, 2 bad input, 3 the C++ compiler
// failed, 4 an internal error.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/host.h"
#include "bench/baselines.h"
#include "driver/compiled_kernel_impl.h"
#include "interp/interpreter.h"
#include "kernels/mesh_registry.h"
#include "kernels/registry.h"
#include "parhelion/tpu.h"
#include "runtime/format_bytes.h"
#include "runtime/host_memory.h"
#include "runtime/timing.h"
#include "tools/bench_command.h"
#include "tools/cli_options.h"
#include "tools/fuzz_command.h"
#include "tools/opt_command.h"
#include "tools/suite_command.h"
#include "tools/tpu_table.h"

namespace ph = parhelion;
using nlohmann::json;

namespace {

using ph::tools::kUsage;
using ph::tools::Options;

struct Prepared {
  const ph::kernels::KernelEntry* entry;
  ph::Shape shape;
  ph::DType dtype = ph::DType::f32;
  ph::kernels::Inputs inputs;
  std::unique_ptr<ph::Config> config;
};

Prepared prepare(const Options& o) {
  if (o.kernel.empty()) throw ph::UserError("missing KERNEL (see `parhelion list`)\n" + std::string(kUsage));
  Prepared p;
  p.entry = &ph::kernels::find_kernel(o.kernel);
  auto it = o.flags.find("shape");
  p.shape = it != o.flags.end() ? ph::tools::parse_shape(it->second) : p.entry->default_shape;
  if (auto d = o.flags.find("dtype"); d != o.flags.end()) {
    auto dt = ph::parse_dtype(d->second);
    if (!dt || std::find(p.entry->dtypes.begin(), p.entry->dtypes.end(), *dt) == p.entry->dtypes.end()) {
      std::string names;
      for (ph::DType t : p.entry->dtypes) names += (names.empty() ? "" : ", ") + std::string(ph::dtype_name(t));
      throw ph::UserError("--dtype " + d->second + " is not supported by " + p.entry->name + " (supported: " + names +
                          ")");
    }
    p.dtype = *dt;
  }
  uint64_t seed = o.seed().value_or(0);
  // emit and TPU tuning never read the inputs: allocate them without filling.
  bool shapes_only = o.command == "emit" || (o.flags.count("target") && o.flags.at("target") == "pallas");
  p.inputs = shapes_only ? p.entry->make_specs(p.shape, p.dtype) : p.entry->make_inputs(p.shape, p.dtype, seed);
  if (auto c = o.flags.find("config"); c != o.flags.end())
    p.config = std::make_unique<ph::Config>(ph::Config::from_json(c->second));
  if (auto t = o.flags.find("config-table"); t != o.flags.end()) {
    if (p.config) throw ph::UserError("--config and --config-table exclude each other");
    p.entry->kernel->use_config_table(std::make_shared<ph::ConfigTable>(ph::ConfigTable::load(t->second)));
    const std::string target =
        o.get("target", "cpu") == "pallas" ? "pallas:" + o.get("tpu", "v7x") : o.get("target", "cpu");
    ph::KernelBase::ConfigChoice c = p.entry->kernel->config_for(p.inputs.args(), target);
    std::fprintf(stderr, "config      %s (%s)\n", c.config.to_json().c_str(), c.source.c_str());
    p.config = std::make_unique<ph::Config>(c.config);
  }
  return p;
}

ph::TuneReport tune_for(const Options& o, const Prepared& p, const std::string& effort_flag) {
  ph::TuneOptions opt;
  std::string effort = o.flags.count(effort_flag) ? o.flags.at(effort_flag) : "quick";
  if (!ph::parse_effort(effort, &opt.effort))
    throw ph::UserError("--" + effort_flag + " must be none, quick or full; got '" + effort + "'");
  opt.budget_seconds = o.seconds("budget", opt.budget_seconds);
  opt.seed = o.seed().value_or(opt.seed);
  opt.progress = !o.json || isatty(2);
  const ph::kernels::Inputs& in = p.inputs;
  const ph::kernels::KernelEntry* e = p.entry;
  opt.reference = [e, &in] { return e->reference(in); };
  return p.entry->kernel->tune(p.inputs.args(), opt);
}

// A report's JSON with the case's shape and dtype added, on one line.
int print_json_for(const std::string& report, const Prepared& p) {
  json j = json::parse(report);
  j["shape"] = p.shape;
  j["dtype"] = ph::dtype_name(p.dtype);
  std::cout << j.dump() << "\n";
  return 0;
}

void print_prediction(const ph::TpuPrediction& t) {
  if (!t.fits) {
    std::printf("predicted   does not fit: needs %s of VMEM, the core has %s\n", ph::format_bytes(t.vmem_bytes).c_str(),
                ph::format_bytes(t.vmem_capacity).c_str());
    return;
  }
  std::printf(
      "predicted   %.4f ms of device time, %.1f TFLOP/s, %s-bound (compute %.3f ms, DMA %.3f ms, fixed costs "
      "%.3f ms before overlap)\n",
      t.seconds * 1e3, t.tflops, t.bound.c_str(), t.compute_s * 1e3, t.dma_s * 1e3, t.overhead_s * 1e3);
  std::printf(
      "per call    %.4f ms timed from a host: + %.3f ms of dispatch and sync (a framework's; the torch_tpu "
      "figure)\n",
      t.call_seconds() * 1e3, t.dispatch_s * 1e3);
  if (t.comm_s > 0)
    std::printf(
        "ICI         %.4f ms of copies and synchronization over the inter-chip links, %.4f ms of it exposed "
        "(stalls no compute hides; in the device time)\n",
        t.comm_s * 1e3, t.exposed_comm_s * 1e3);
  std::printf("basis       %s\n", t.basis.c_str());
  std::printf("strategy    %s; VMEM %s of %s\n", t.strategy.c_str(), ph::format_bytes(t.vmem_bytes).c_str(),
              ph::format_bytes(t.vmem_capacity).c_str());
}

// tune --target pallas --model: the TPU timing model chooses the config; no TPU, no compiling.
int cmd_tune_tpu(const Options& o, const Prepared& p) {
  if (!o.flags.count("model"))
    throw ph::UserError("tuning for --target pallas needs a TPU; without one, tune against the timing model: --model");
  std::string tpu = o.flags.count("tpu") ? o.flags.at("tpu") : "v7x";
  ph::TpuTuneReport r = ph::tune_tpu(*p.entry->kernel, p.inputs.args(), tpu);
  if (o.json) return print_json_for(r.to_json(), p);
  std::printf("kernel      %s %s %s on TPU %s (timing model)\n", p.entry->name.c_str(),
              ph::shape_to_string(p.shape).c_str(), std::string(ph::dtype_name(p.dtype)).c_str(), tpu.c_str());
  std::printf("modelled    %d configs (%d do not fit VMEM)\n", r.evaluated, r.rejected);
  for (const auto& s : r.per_strategy) {
    std::printf("  %-10s ", s.strategy.c_str());
    if (s.best.fits)
      std::printf("best %.4f ms, %.1f TFLOP/s  %s\n", s.best.seconds * 1e3, s.best.tflops, s.config.to_json().c_str());
    else
      std::printf("does not fit (needs at least %s of VMEM)\n", ph::format_bytes(s.best.vmem_bytes).c_str());
  }
  print_prediction(r.best);
  std::printf("why         %s\n", r.why.c_str());
  std::printf("emit it with --target pallas --tpu %s --config '%s'\n", tpu.c_str(), r.best_config.to_json().c_str());
  return 0;
}

// tune --shapes S1 S2 ... -o FILE: a deployable table, one tuned config per shape (measured
// here for cpu; the timing model's for --target pallas --model).
int cmd_tune_table(const Options& o) {
  if (o.flags.count("shape")) throw ph::UserError("--shape and --shapes exclude each other");
  if (!o.flags.count("output")) throw ph::UserError("tune --shapes writes a config table: name it with -o FILE");
  const bool tpu = o.flags.count("target") && o.flags.at("target") == "pallas";
  if (tpu && !o.flags.count("model"))
    throw ph::UserError("tuning for --target pallas needs a TPU; without one, tune against the timing model: --model");
  const std::string target = tpu ? "pallas:" + o.get("tpu", "v7x") : "cpu";
  std::istringstream words(o.flags.at("shapes"));
  ph::ConfigTable table;
  const std::string path = o.flags.at("output");
  if (std::ifstream(path).good()) table = ph::ConfigTable::load(path);  // add to it: other kernels' entries stay
  std::string word;
  while (words >> word) {
    Options one = o;
    one.flags.erase("shapes");
    one.flags["shape"] = word;
    Prepared p = prepare(one);
    ph::TuneOptions opt;
    std::string effort = o.get("effort", "quick");
    if (!ph::parse_effort(effort, &opt.effort))
      throw ph::UserError("--effort must be none, quick or full; got '" + effort + "'");
    opt.budget_seconds = o.seconds("budget", opt.budget_seconds);
    opt.seed = o.seed().value_or(opt.seed);
    opt.progress = isatty(2);
    const ph::kernels::Inputs& in = p.inputs;
    const ph::kernels::KernelEntry* e = p.entry;
    opt.reference = [e, &in] { return e->reference(in); };
    ph::ConfigTable one_shape = ph::tune_table(*p.entry->kernel, {p.inputs.args()}, opt, target);
    for (ph::ConfigTableEntry& entry : one_shape.entries) {
      std::printf("%-12s %-28s %-10s %9.4f ms (default %.4f ms)  %s\n", p.entry->name.c_str(),
                  entry.signature().c_str(), entry.target.c_str(), entry.ms, entry.default_ms,
                  entry.config.to_json().c_str());
      table.add(std::move(entry));
    }
  }
  table.save(path);
  std::printf(
      "wrote %zu entries to %s (load it with --config-table, ph::ConfigTable::load, or "
      "parhelion.load_config_table)\n",
      table.entries.size(), path.c_str());
  return 0;
}

int cmd_tune(const Options& o) {
  if (o.flags.count("shapes")) return cmd_tune_table(o);
  Prepared p = prepare(o);
  if (o.flags.count("target") && o.flags.at("target") == "pallas") return cmd_tune_tpu(o, p);
  ph::TuneReport r = tune_for(o, p, "effort");
  if (o.json) return print_json_for(r.to_json(), p);
  std::printf("kernel      %s %s %s\n", p.entry->name.c_str(), ph::shape_to_string(p.shape).c_str(),
              std::string(ph::dtype_name(p.dtype)).c_str());
  std::printf("searched    %d candidates (%d failed, %d did not fit, %d too slow, %d duplicate code) in %.1f s%s\n",
              r.candidates, r.failed, r.rejected, r.too_slow, r.duplicates, r.seconds,
              r.cache_hit ? " (cached winner)" : "");
  for (const std::string& f : r.failures)  // too-slow candidates are listed too, as stopped
    std::printf("  %s %s\n", f.find("not counted as failed") != std::string::npos ? "stopped  " : "failed   ",
                f.c_str());
  std::printf("default     %.4f ms  %s\n", r.default_ms, r.default_config.to_json().c_str());
  std::printf("best        %.4f ms  (%.2fx the default)\n", r.best_ms, r.speedup());
  if (!r.conditions.empty())
    std::printf("machine     %s%s\n", r.conditions.c_str(),
                r.noisy ? " (more rounds timed; the winner may differ on a quiet machine)" : "");
  std::printf("pin it with --config '%s'\n", r.best_config.to_json().c_str());
  return 0;
}

int cmd_list(const Options& o) {
  if (o.json) {
    for (const auto& e : ph::kernels::registry())
      std::cout << json{{"kernel", e.name}, {"summary", e.summary}, {"shape", e.shape_help}}.dump() << "\n";
    return 0;
  }
  for (const auto& e : ph::kernels::registry())
    std::printf("%-18s %-28s %s\n", e.name.c_str(), ("[" + e.shape_help + "]").c_str(), e.summary.c_str());
  return 0;
}

int cmd_run(const Options& o) {
  Prepared p = prepare(o);
  auto args = p.inputs.args();
  if (o.flags.count("tune")) {
    if (p.config) throw ph::UserError("--tune and --config exclude each other");
    ph::TuneReport r = tune_for(o, p, "tune");
    p.config = std::make_unique<ph::Config>(r.best_config);
    if (!o.json)  // what the tuner measured, to set beside the time measured below
      std::printf("tuned       %.4f ms (the default %.4f ms)%s; %s\n", r.best_ms, r.default_ms,
                  r.cache_hit ? ", a cached winner" : "", r.conditions.c_str());
  }
  if (o.has("threads")) {  // the default config (or --config's) on that many threads
    if (!p.config) p.config = std::make_unique<ph::Config>(p.entry->kernel->trace(args)->config);
    p.config->num_threads = static_cast<int>(o.integer("threads", 1, ph::tools::kMaxThreadsFlag, 1));
  }
  ph::CompiledKernel k = p.entry->kernel->compile(args, p.config.get());
  std::vector<ph::Array> out = k.run(args);
  std::vector<ph::Array> want = p.entry->reference(p.inputs);
  auto check = [&](const std::vector<ph::Array>& expected, double* err) {
    bool same = out.size() == expected.size();
    for (size_t i = 0; i < out.size() && i < expected.size(); ++i) {
      auto c = ph::kernels::compare(out[i], expected[i], p.dtype, p.entry->tolerance(p.shape));
      *err = std::max(*err, c.max_abs_err);
      same = same && c.ok;
    }
    return same;
  };
  double err = 0;
  const bool reference_ok = check(want, &err);
  // The second check: the Tile IR interpreter, which shares nothing with the compiler's
  // lowering (skipped for shapes too large to interpret in about a second).
  double interp_err = 0;
  const bool interpreted = ph::interp::work_estimate(p.entry->kernel->trace(args)->fn) <= ph::interp::kAffordableWork;
  bool interp_ok = !interpreted || check(p.entry->kernel->interpret(args), &interp_err);
  const bool ok = reference_ok && interp_ok;
  int reps = static_cast<int>(o.integer("reps", 1, 1000000, 10));
  auto t = ph::time_it([&] { k.run(args); }, 2, reps);
  double gbps = p.entry->bytes(p.shape, p.dtype) / (t.median_ms * 1e6);
  double gflops = p.entry->flops(p.shape) / (t.median_ms * 1e6);
  if (o.json) {
    std::cout << json{{"kernel", p.entry->name},
                      {"shape", p.shape},
                      {"dtype", ph::dtype_name(p.dtype)},
                      {"target", "cpu"},
                      {"config", json::parse(k.config().to_json())},
                      {"max_abs_err", err},
                      {"interpreter_max_abs_err", interpreted ? json(interp_err) : json(nullptr)},
                      {"ok", ok},
                      {"median_ms", t.median_ms},
                      {"gbps", gbps},
                      {"gflops", gflops},
                      {"reps", t.reps},
                      {"compile_seconds", k.compile_seconds()},
                      {"cache_hit", k.cache_hit()},
                      {"source", k.source_path()}}
                     .dump()
              << "\n";
  } else {
    std::printf("kernel      %s %s %s\n", p.entry->name.c_str(), ph::shape_to_string(p.shape).c_str(),
                std::string(ph::dtype_name(p.dtype)).c_str());
    std::printf("config      %s\n", k.config().to_json().c_str());
    std::printf("compiled    %s (%s)\n", k.source_path().c_str(),
                k.cache_hit() ? "cache hit" : ("compiled in " + std::to_string(k.compile_seconds()) + " s").c_str());
    std::printf("check       max abs error %.3g vs reference: %s\n", err, reference_ok ? "ok" : "MISMATCH");
    if (interpreted)
      std::printf("            max abs error %.3g vs the Tile IR interpreter: %s\n", interp_err,
                  interp_ok ? "ok" : "MISMATCH");
    else
      std::printf("            (too large to interpret as a second check)\n");
    std::printf("time        median %.4f ms over %d runs (min %.4f), %.1f GB/s, %.1f GFLOP/s\n", t.median_ms, t.reps,
                t.min_ms, gbps, gflops);
  }
  return ok ? 0 : 1;
}

// emit --target pallas: the kernel as a Pallas module for a TPU generation.
int cmd_emit_pallas(const Options& o, const Prepared& p, const std::string& stage) {
  std::string tpu = o.flags.count("tpu") ? o.flags.at("tpu") : "v7x";
  if (o.flags.count("predict")) {
    ph::TpuPrediction t = ph::predict_tpu(*p.entry->kernel, p.inputs.args(), tpu, p.config.get());
    if (o.json) {
      json j = json::parse(t.to_json());
      j["kernel"] = p.entry->name;
      j["shape"] = p.shape;
      j["dtype"] = ph::dtype_name(p.dtype);
      j["tpu"] = tpu;
      std::cout << j.dump() << "\n";
    } else {
      std::printf("kernel      %s %s %s on TPU %s (timing model)\n", p.entry->name.c_str(),
                  ph::shape_to_string(p.shape).c_str(), std::string(ph::dtype_name(p.dtype)).c_str(), tpu.c_str());
      print_prediction(t);
    }
    return t.fits ? 0 : 1;
  }
  ph::PallasModule m = p.entry->kernel->emit_pallas(p.inputs.args(), tpu, p.config.get());
  if (stage == "spec") {
    std::cout << m.config_spec << "default: " << m.config.to_json() << "\n";
    return 0;
  }
  if (stage == "block") {
    std::cout << m.block_ir;
    return 0;
  }
  if (stage != "code")
    throw ph::UserError("--stage for --target pallas must be spec, block or code; got '" + stage + "'");
  if (auto f = o.flags.find("output"); f != o.flags.end()) {
    std::ofstream out(f->second);
    if (!(out << m.source)) throw ph::UserError("cannot write " + f->second);
    std::cerr << "wrote " << f->second << ": " << p.entry->name << " for TPU " << tpu << ", config "
              << m.config.to_json() << ", VMEM " << ph::format_bytes(m.vmem_bytes) << "\n";
  } else {
    std::cout << m.source;
  }
  return 0;
}

// emit --target triton: the kernel as a Triton module for an NVIDIA GPU model.
int cmd_emit_triton(const Options& o, const Prepared& p, const std::string& stage) {
  const std::string gpu = o.flags.count("gpu") ? o.flags.at("gpu") : "h100";
  if (stage != "spec" && stage != "block" && stage != "code")
    throw ph::UserError("--stage for --target triton must be spec, block or code; got '" + stage + "'");
  ph::EmittedKernel m = p.entry->kernel->emit(p.inputs.args(), "triton:" + gpu, p.config.get());
  if (stage == "spec") {
    std::cout << m.config_spec << "default: " << m.config.to_json() << "\n";
    return 0;
  }
  if (stage == "block") {
    std::cout << m.block_ir;
    return 0;
  }
  if (auto f = o.flags.find("output"); f != o.flags.end()) {
    std::ofstream out(f->second);
    if (!(out << m.source)) throw ph::UserError("cannot write " + f->second);
    std::cerr << "wrote " << f->second << ": " << p.entry->name << " for NVIDIA " << gpu << ", config "
              << m.config.to_json() << ", shared memory about " << ph::format_bytes(m.footprint_bytes)
              << " per program\n";
  } else {
    std::cout << m.source;
  }
  return 0;
}

// emit --mesh: a library kernel that runs on a mesh (kernels/mesh_registry.h), one device's
// arguments at --shape; the code of the target, or with --predict the TPU model's time.
int cmd_emit_on_mesh(const Options& o) {
  const ph::kernels::MeshKernelEntry* e = ph::kernels::find_mesh_kernel(o.kernel);
  if (!e) {
    std::string names;
    for (const auto& m : ph::kernels::mesh_registry()) names += (names.empty() ? "" : ", ") + m.name;
    throw ph::UserError("--mesh: '" + o.kernel + "' is not a kernel that runs on a mesh; those are: " + names);
  }
  const ph::Mesh mesh = ph::tools::parse_mesh(o.flags.at("mesh"));
  const ph::Shape shape = o.flags.count("shape") ? ph::tools::parse_shape(o.flags.at("shape")) : e->default_shape;
  ph::DType dtype = ph::DType::f32;
  if (auto d = o.flags.find("dtype"); d != o.flags.end()) {
    auto dt = ph::parse_dtype(d->second);
    if (!dt || (*dt != ph::DType::f32 && *dt != ph::DType::bf16))
      throw ph::UserError("--dtype " + d->second + " is not supported by " + e->name + " (supported: f32, bf16)");
    dtype = *dt;
  }
  const ph::kernels::Inputs in = e->make_inputs(shape, dtype, mesh.devices());
  std::unique_ptr<ph::Config> config;
  if (auto c = o.flags.find("config"); c != o.flags.end())
    config = std::make_unique<ph::Config>(ph::Config::from_json(c->second));
  const std::string target = o.flags.count("target") ? o.flags.at("target") : "cpu";
  const std::string tpu = o.flags.count("tpu") ? o.flags.at("tpu") : "v7x";
  const std::string what = e->name + " " + ph::shape_to_string(shape) + " " + std::string(ph::dtype_name(dtype)) +
                           " on the mesh " + mesh.to_string();
  if (o.flags.count("predict")) {
    if (target != "pallas") throw ph::UserError("--predict needs --target pallas (it models a TPU)");
    const ph::TpuPrediction t = ph::predict_tpu_on(*e->kernel, mesh, in.args(), tpu, config.get());
    if (o.json) {
      json j = json::parse(t.to_json());
      j["kernel"] = e->name;
      j["shape"] = shape;
      j["dtype"] = ph::dtype_name(dtype);
      j["tpu"] = tpu;
      j["mesh"] = mesh.to_string();
      std::cout << j.dump() << "\n";
    } else {
      std::printf("kernel      %s, on TPU %s (timing model, one device)\n", what.c_str(), tpu.c_str());
      print_prediction(t);
    }
    return t.fits ? 0 : 1;
  }
  if (target != "cpu" && target != "pallas")
    throw ph::UserError("--mesh: --target must be cpu or pallas (the backends that generate collectives); got '" +
                        target + "'");
  const ph::EmittedKernel m =
      e->kernel->emit_on(mesh, in.args(), target == "pallas" ? "pallas:" + tpu : "cpu", config.get());
  const std::string stage = o.flags.count("stage") ? o.flags.at("stage") : "code";
  if (stage == "spec") {
    std::cout << m.config_spec << "default: " << m.config.to_json() << "\n";
  } else if (stage == "block") {
    std::cout << m.block_ir;
  } else if (stage != "code") {
    throw ph::UserError("--stage with --mesh must be spec, block or code; got '" + stage + "'");
  } else if (auto f = o.flags.find("output"); f != o.flags.end()) {
    std::ofstream out(f->second);
    if (!(out << m.source)) throw ph::UserError("cannot write " + f->second);
    std::cerr << "wrote " << f->second << ": " << what << ", config " << m.config.to_json() << "\n";
  } else {
    std::cout << m.source;
  }
  return 0;
}

int cmd_emit(const Options& o) {
  if (o.flags.count("mesh")) return cmd_emit_on_mesh(o);
  Prepared p = prepare(o);
  std::string stage = o.flags.count("stage") ? o.flags.at("stage") : "code";
  std::string target = o.flags.count("target") ? o.flags.at("target") : "cpu";
  if (target == "pallas") return cmd_emit_pallas(o, p, stage);
  if (target == "triton") return cmd_emit_triton(o, p, stage);
  if (target != "cpu") throw ph::UserError("--target must be cpu, pallas or triton; got '" + target + "'");
  if (stage != "ir" && stage != "spec" && stage != "block" && stage != "code")
    throw ph::UserError("--stage must be one of ir, spec, block, code; got '" + stage + "'");
  ph::CompiledKernel k = p.entry->kernel->compile(p.inputs.args(), p.config.get());
  if (stage == "ir")
    std::cout << k.ir();
  else if (stage == "spec")
    std::cout << k.config_spec().describe() << "default: " << k.config().to_json() << "\n";
  else if (stage == "block")
    std::cout << k.block_ir();
  else
    std::cout << k.source();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o = ph::tools::parse_options(argc, argv);
    if (o.command == "help") {
      std::cout << kUsage;
      return argc > 1 ? 0 : 2;
    }
    ph::tools::check_flags_apply(o);
    if (o.command == "list") return cmd_list(o);
    if (o.command == "run") return cmd_run(o);
    if (o.command == "emit") return cmd_emit(o);
    if (o.command == "tune") return cmd_tune(o);
    if (o.command == "fuzz") return ph::tools::run_fuzz(o);
    if (o.command == "opt") return ph::tools::run_opt(o);
    if (o.command == "bench") {
      // OpenBLAS reads OPENBLAS_CORETYPE when it loads. A value from the environment (a sandbox
      // forcing AVX2 kernels): restart once without it and without OPENBLAS_L2_SIZE, in this
      // process only, to see what OpenBLAS detects; then, where that is a generic kernel set
      // on a CPU OpenBLAS does not know, restart once with the best set this host supports
      // (bench::best_openblas_coretype), which the output names.
      if (!std::getenv("PH_OPENBLAS_DETECTED")) {
        if (std::getenv("OPENBLAS_CORETYPE") || std::getenv("OPENBLAS_L2_SIZE")) {
          unsetenv("OPENBLAS_CORETYPE");
          unsetenv("OPENBLAS_L2_SIZE");
          execv("/proc/self/exe", argv);
        }
        const std::string detected = ph::bench::openblas_core();
        const std::string best = ph::bench::best_openblas_coretype(ph::backend::cpu::Host::detect().features, detected);
        if (!best.empty()) {
          setenv("OPENBLAS_CORETYPE", best.c_str(), 1);
          setenv("PH_OPENBLAS_DETECTED", detected.c_str(), 1);
          execv("/proc/self/exe", argv);
        }
      }
      if (o.flags.count("tpu-table")) {
        const std::string file = o.has("suite-file") ? o.flags.at("suite-file")
                                                     : std::string(PARHELION_SOURCE_DIR) + "/bench/tpu_published.json";
        const std::vector<ph::tools::TpuTableRow> rows = ph::tools::model_published_table(file);
        std::cout << (o.json ? ph::tools::table_json(rows) + "\n" : ph::tools::table_markdown(rows));
        if (!o.json)
          std::cout << "(* another kernel than Helion's. The TPU timing model's predictions, not measurements: "
                       "docs/tpu-model.md)\n";
        return 0;
      }
      if (o.flags.count("suite")) {
        ph::tools::SuiteOptions so;
        so.json = o.json;
        if (auto f = o.flags.find("png"); f != o.flags.end()) so.png = f->second;
        if (auto f = o.flags.find("suite-file"); f != o.flags.end()) so.suite_file = f->second;
        so.tune_budget = o.seconds("budget", so.tune_budget);
        so.rounds = static_cast<int>(o.integer("rounds", 1, 1000, so.rounds));
        so.threads = static_cast<int>(o.integer("threads", 1, ph::tools::kMaxThreadsFlag, so.threads));
        if (!o.extra.empty()) so.only = o.extra[0];
        return ph::tools::run_suite(so);
      }
      ph::tools::BenchOptions b;
      b.kernels = o.extra;
      for (const std::string& k : b.kernels) ph::kernels::find_kernel(k);  // unknown names fail here
      b.json = o.json;
      b.quick = o.flags.count("quick") > 0;
      b.tune = o.flags.count("tuned") > 0;
      if (o.has("threads")) b.threads = o.integer_list("threads", 1, ph::tools::kMaxThreadsFlag);
      if (o.has("shape") || o.has("dtype")) {
        // One case of one kernel: checked here as `run` checks it, so a bad shape names the flag.
        if (b.kernels.size() != 1)
          throw ph::UserError(
              "bench --shape and --dtype need exactly one KERNEL (e.g. bench matmul --shape 2048,2048,2048)");
        Options one = o;
        one.kernel = b.kernels[0];
        one.command = "emit";  // checked on unfilled inputs: the case's own are made once, by bench
        Prepared p = prepare(one);
        if (o.has("shape")) b.shape = p.shape;
        if (o.has("dtype")) b.dtype = p.dtype;
      }
      return ph::tools::run_bench(b);
    }
    throw ph::UserError("unknown command '" + o.command + "'\n" + kUsage);
  } catch (const ph::UserError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const ph::CompileError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 3;
  } catch (const std::bad_alloc&) {
    // Arrays check their size against the memory available (a UserError); this is any other
    // allocation running out, still most likely because of the problem's size.
    std::cerr << "error: out of memory (" << ph::runtime::available_host_memory()
              << " bytes are available); try a smaller --shape\n";
    return 2;
  } catch (const ph::InternalError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 4;
  } catch (const std::exception& e) {
    std::cerr << "error: internal error (a bug in Parhelion): " << e.what() << "\n";
    return 4;
  } catch (...) {
    std::cerr << "error: internal error (a bug in Parhelion): an unknown exception\n";
    return 4;
  }
}

#include "tools/opt_command.h"

#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <sstream>

#include "backend/cpu/cpu_backend.h"
#include "backend/pallas/plan.h"
#include "backend/pallas/plan_printer.h"
#include "backend/registry.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "lower/config_space.h"
#include "lower/fusion_printer.h"
#include "lower/lower.h"
#include "parhelion/error.h"
#include "runtime/parse_number.h"

namespace parhelion::tools {
namespace {

const char* const kStages = "ir, fusion, spec, block, pallas-plan, code";

// The compiler's stages, one call each, on the backend the request names.
namespace stage {

// The request's backend: pallas for a TPU generation, or a cpu backend for a fixed, made-up
// host (not this one: see opt_command.h).
std::unique_ptr<backend::Backend> fixed_cpu(const OptRequest& r) {
  backend::cpu::Host host = backend::cpu::Host::detect();  // its micro-kernels and features
  host.fast_memory_bytes = r.fast_memory_bytes;
  host.threads = r.threads;
  host.cpu_model = "parhelion opt's fixed cpu";
  return std::make_unique<backend::cpu::CpuBackend>(host);
}

std::string fusion(const ir::Function& fn) { return lower::print_fusion(fn); }

std::string pallas_plan(const lower::BlockProgram& p) {
  return backend::pallas::print(p, backend::pallas::plan_pallas(p));
}

}  // namespace stage

}  // namespace

OptRequest opt_request(const Options& o) {
  OptRequest r;
  r.stage = o.get("stage", r.stage);
  static const std::set<std::string> stages = {"ir", "fusion", "spec", "block", "pallas-plan", "code"};
  if (!stages.count(r.stage))
    throw UserError("--stage must be one of " + std::string(kStages) + "; got '" + r.stage + "'");
  r.target = o.get("target", r.target);
  r.tpu = o.get("tpu", r.tpu);
  r.gpu = o.get("gpu", r.gpu);
  r.config_json = o.get("config", "");
  if (o.has("fast-memory")) r.fast_memory_bytes = parse_byte_size(o.get("fast-memory", ""), "--fast-memory");
  r.threads = static_cast<int>(o.integer("threads", 1, kMaxThreadsFlag, r.threads));
  if (r.stage == "pallas-plan" && r.target != "pallas")
    throw UserError("--stage pallas-plan needs --target pallas (the plan of pallas_call operands)");
  return r;
}

std::string run_opt_stage(const std::string& tir, const std::string& file_name, const OptRequest& r) {
  const ir::Function fn = ir::parse(tir, file_name);
  if (r.stage == "ir") return ir::print(fn);
  if (r.stage == "fusion") return stage::fusion(fn);
  std::unique_ptr<backend::Backend> cpu = r.target == "cpu" ? stage::fixed_cpu(r) : nullptr;
  const backend::Backend& backend =
      cpu ? *cpu : backend::for_target(r.target + ":" + (r.target == "triton" ? r.gpu : r.tpu));
  const ConfigSpec spec = lower::derive_config_spec(fn, backend);
  const Config default_config = backend.default_config(fn, spec);
  if (r.stage == "spec") return spec.describe() + "default: " + default_config.to_json() + "\n";
  Config config = r.config_json.empty() ? default_config : Config::from_json(r.config_json);
  if (config.vector_bits == 0) config.vector_bits = default_config.vector_bits;  // unset: the default's
  const ir::Function bound = lower::bind_config(fn, config, backend);            // ph::num_blocks sizes
  const lower::BlockProgram program = lower::lower(bound, config, backend, &fn);
  if (r.stage == "block") return lower::print(program);
  if (r.stage == "pallas-plan") return stage::pallas_plan(program);
  return backend.generate(program).source;
}

int run_opt(const Options& o) {
  if (o.kernel.empty()) throw UserError("parhelion opt needs a Tile IR file: parhelion opt FILE.tir --stage STAGE");
  const OptRequest r = opt_request(o);
  std::ifstream in(o.kernel);
  if (!in) throw UserError("cannot read " + o.kernel);
  std::stringstream text;
  text << in.rdbuf();
  std::cout << run_opt_stage(text.str(), o.kernel, r);
  return 0;
}

}  // namespace parhelion::tools

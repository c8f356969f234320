#include "tools/opt_command.h"

#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "backend/cpu/codegen.h"
#include "backend/pallas/codegen.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "lower/fusion_printer.h"
#include "lower/lower.h"
#include "lower/pallas_plan.h"
#include "lower/pallas_plan_printer.h"
#include "lower/tpu.h"
#include "parhelion/error.h"
#include "runtime/parse_number.h"

namespace parhelion::tools {
namespace {

const char* const kStages = "ir, fusion, spec, block, pallas-plan, code";

// The compiler's stages, one call each. This is the only place that knows where each stage
// lives, so that re-pointing `opt` (at a Backend interface, say) is a change here alone.
namespace stage {

lower::Target target(const OptRequest& r) {
  if (r.target == "pallas") return lower::pallas_target(r.tpu);
  lower::Target t;  // a fixed machine, not Target::host(): see opt_command.h
  t.name = "cpu";
  t.fast_memory_bytes = r.fast_memory_bytes;
  t.threads = r.threads;
  t.cpu_model = "parhelion opt's fixed cpu";
  return t;
}

ConfigSpec config_spec(const ir::Function& fn, const lower::Target& t) { return lower::derive_config_spec(fn, t); }

Config default_config(const ir::Function& fn, const ConfigSpec& spec, const lower::Target& t) {
  return lower::default_config(fn, spec, t);
}

lower::BlockProgram block_program(const ir::Function& fn, const Config& c, const lower::Target& t) {
  return lower::lower(fn, c, t);
}

std::string fusion(const ir::Function& fn) { return lower::print_fusion(fn); }

std::string pallas_plan(const lower::BlockProgram& p) { return lower::print(p, lower::plan_pallas(p)); }

std::string code(const lower::BlockProgram& p) {
  return p.target.name == "pallas" ? backend::pallas::generate_module(p) : backend::cpu::generate_source(p);
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
  const lower::Target target = stage::target(r);
  const ConfigSpec spec = stage::config_spec(fn, target);
  const Config config =
      r.config_json.empty() ? stage::default_config(fn, spec, target) : Config::from_json(r.config_json);
  if (r.stage == "spec")
    return spec.describe() + "default: " + stage::default_config(fn, spec, target).to_json() + "\n";
  const lower::BlockProgram program = stage::block_program(fn, config, target);
  if (r.stage == "block") return lower::print(program);
  if (r.stage == "pallas-plan") return stage::pallas_plan(program);
  return stage::code(program);
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

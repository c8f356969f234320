#include "tools/cli_options.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "backend/registry.h"
#include "parhelion/error.h"
#include "runtime/parse_number.h"

namespace parhelion::tools {

const char* const kUsage = R"(usage:
  parhelion list [--json]
  parhelion run KERNEL --shape D0,D1,... [--dtype f32|bf16|f16|f8e4m3|f8e5m2] [--config JSON] [--threads N] [--seed N] [--reps N] [--json]
  parhelion emit KERNEL --shape D0,D1,... [--dtype ...] [--stage ir|spec|block|code] [--config JSON]
  parhelion emit KERNEL --target pallas [--tpu v5e|v6e|v5p|v7x] --shape ... [--dtype ...] [--config JSON]
                 [--stage spec|block|code] [-o FILE]     a JAX Pallas TPU module (see docs/pallas.md)
  parhelion emit KERNEL --target pallas --tpu v7x --shape ... --predict [--json]   modelled TPU time
  parhelion emit KERNEL --mesh x=4 [--target cpu|pallas] [--tpu v7x] --shape ... [--dtype ...] [--config JSON]
                 [--stage spec|block|code] [--predict [--json]] [-o FILE]
                 a kernel that runs on a mesh (all_gather, all_reduce, all_reduce_ring, all_gather_matmul,
                 matmul_reduce_scatter, all_reduce_bias_rms_norm); --predict: one device's modelled TPU time
                 and its exposed communication (docs/distributed.md)
  parhelion emit KERNEL --target triton [--gpu h100|h200|b200] --shape ... [--dtype ...] [--config JSON]
                 [--stage spec|block|code] [-o FILE]     a Triton module for an NVIDIA GPU (see docs/triton.md)
  parhelion tune KERNEL --target pallas --tpu v7x --shape ... --model [--json]     tune against the model
  parhelion tune KERNEL --shape D0,D1,... [--dtype ...] [--effort quick|full] [--budget SECONDS] [--seed N] [--json]
  parhelion tune KERNEL --shapes S1 S2 ... -o configs.json [--dtype ...] [--effort ...] [--target pallas --tpu v7x --model]
                 a deployable table of tuned configs, one per shape (docs/configs.md)

  parhelion bench [KERNEL...] [--threads 1,2] [--quick] [--tuned] [--json]
  parhelion bench KERNEL [--shape D0,D1,...] [--dtype f32|bf16] [--threads 1,2] [--quick] [--tuned] [--json]
                 one case of one kernel (its benchmark shapes, or dtypes, where one flag is left out)
  parhelion bench --suite [KERNEL] [--threads 2] [--rounds 3] [--budget SECONDS] [--png FILE] [--json]
                 [--suite-file FILE]
                 the kernel table against PyTorch eager and torch.compile (bench/suite.json)
  parhelion bench --tpu-table [--suite-file FILE] [--json]
                 the seed's published TPU v7x table beside the TPU model's tuned predictions
                 (bench/tpu_published.json; no TPU, no timing here)

  parhelion opt FILE.tir [--stage ir|fusion|spec|block|pallas-plan|code] [--target cpu|pallas|triton] [--tpu v7x] [--gpu h100]
                [--config JSON] [--fast-memory 1M] [--threads 2]
                one compiler stage on a Tile IR file; the cpu target is fixed, not this host (docs/testing.md)

  parhelion fuzz [--seconds N] [--programs N] [--seed S] [--family NAME] [--configs N] [--pallas-every N] [--triton-every N]
                 [--no-minimize] [--json]
                 random kernels on every backend against the reference interpreter (docs/testing.md)

  run --tune quick|full [--budget SECONDS]   tunes first (or takes the cached winner), then runs the best config
  run --threads N   runs the default (or --config's) config on N threads
  run|emit --config-table FILE   the table's config for the shape (exact, else the nearest legal one)
)";

namespace {

const std::set<std::string> kSwitches = {"quick", "tuned", "predict", "model", "suite", "tpu-table", "no-minimize"};
const std::set<std::string> kValued = {
    "shape",        "dtype",        "config",      "seed",         "stage",    "reps",   "tune",
    "effort",       "budget",       "threads",     "target",       "tpu",      "gpu",    "output",
    "png",          "rounds",       "suite-file",  "seconds",      "programs", "family", "configs",
    "pallas-every", "triton-every", "fast-memory", "config-table", "mesh"};

std::string flag_name(const std::string& key) { return key == "output" ? "-o" : "--" + key; }

void refuse(const std::string& flag, const std::string& why) { throw UserError(flag_name(flag) + " " + why); }

}  // namespace

std::string Options::get(const std::string& flag, const std::string& fallback) const {
  auto it = flags.find(flag);
  return it == flags.end() ? fallback : it->second;
}

int64_t Options::integer(const std::string& flag, int64_t lo, int64_t hi, int64_t fallback) const {
  auto it = flags.find(flag);
  return it == flags.end() ? fallback : parse_integer(it->second, flag_name(flag), lo, hi);
}

std::optional<uint64_t> Options::seed() const {
  auto it = flags.find("seed");
  if (it == flags.end()) return std::nullopt;
  return parse_unsigned(it->second, "--seed");
}

double Options::seconds(const std::string& flag, double fallback) const {
  auto it = flags.find(flag);
  // A budget below a millisecond cannot time even one candidate; a year is a typo.
  return it == flags.end() ? fallback : parse_real(it->second, flag_name(flag) + " (seconds)", 1e-3, 3.2e7);
}

std::vector<int> Options::integer_list(const std::string& flag, int64_t lo, int64_t hi) const {
  std::vector<int> values;
  std::string text = get(flag, "");
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ','))
    values.push_back(static_cast<int>(parse_integer(item, flag_name(flag) + " (a list like 1,2)", lo, hi)));
  if (values.empty() || text.back() == ',')
    throw UserError(flag_name(flag) + " must be a list like 1,2; got '" + text + "'");
  return values;
}

Options parse_options(int argc, char** argv) {
  Options o;
  std::vector<std::string> pos;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json") {
      o.json = true;
    } else if (a.rfind("--", 0) == 0 && kSwitches.count(a.substr(2))) {
      o.flags[a.substr(2)] = "1";
    } else if (a == "-o") {
      if (i + 1 >= argc) throw UserError("option -o needs a file name");
      o.flags["output"] = argv[++i];
    } else if (a == "-h" || a == "--help") {
      o.command = "help";
    } else if (a == "--shapes") {  // one or more shapes: the words up to the next option
      std::string list;
      while (i + 1 < argc && argv[i + 1][0] != '-') list += (list.empty() ? "" : " ") + std::string(argv[++i]);
      if (list.empty()) throw UserError("option --shapes needs one or more shapes (--shapes 1024,4096 2048,8192)");
      o.flags["shapes"] = list;
    } else if (a.rfind("--", 0) == 0) {
      std::string key = a.substr(2), value;
      auto eq = key.find('=');
      if (eq != std::string::npos) {
        value = key.substr(eq + 1);
        key = key.substr(0, eq);
      } else {
        if (i + 1 >= argc) throw UserError("option --" + key + " needs a value");
        value = argv[++i];
      }
      if (!kValued.count(key)) throw UserError("unknown option --" + key + "\n" + kUsage);
      o.flags[key] = value;
    } else {
      pos.push_back(a);
    }
  }
  if (o.command.empty()) o.command = pos.empty() ? "help" : pos[0];
  if (pos.size() > 1) o.kernel = pos[1];
  if (o.command == "bench")
    o.extra.assign(pos.begin() + std::min<size_t>(1, pos.size()), pos.end());
  else if (pos.size() > 2)
    throw UserError("unexpected argument '" + pos[2] + "'\n" + kUsage);
  return o;
}

void check_flags_apply(const Options& o) {
  static const std::map<std::string, std::set<std::string>> takes = {
      {"list", {}},
      {"run", {"shape", "dtype", "config", "seed", "reps", "tune", "budget", "threads", "target", "config-table"}},
      {"emit",
       {"shape", "dtype", "config", "stage", "target", "tpu", "gpu", "output", "predict", "config-table", "mesh"}},
      {"tune", {"shape", "shapes", "dtype", "effort", "budget", "seed", "target", "tpu", "model", "output"}},
      {"bench",
       {"threads", "quick", "tuned", "suite", "tpu-table", "png", "rounds", "budget", "suite-file", "shape", "dtype"}},
      {"fuzz", {"seconds", "programs", "seed", "family", "configs", "pallas-every", "triton-every", "no-minimize"}},
      {"opt", {"stage", "target", "tpu", "gpu", "config", "fast-memory", "threads"}},
  };
  auto it = takes.find(o.command);
  if (it == takes.end()) return;  // help, or an unknown command (refused by the caller)
  for (const auto& [flag, value] : o.flags)
    if (!it->second.count(flag)) refuse(flag, "does not apply to `parhelion " + o.command + "`\n" + kUsage);

  const std::string target = o.get("target", "cpu");
  // A backend's name (its variants, e.g. a TPU generation, have flags of their own).
  std::string backends;
  bool known = false;
  for (const std::string& t : backend::known_targets())
    if (t.find(':') == std::string::npos) {
      backends += (backends.empty() ? "" : " or ") + t;
      known |= t == target;
    }
  if (!known) refuse("target", "must be " + backends + "; got '" + target + "'");
  const bool pallas = target == "pallas";
  if (o.command == "run") {
    if (pallas)
      refuse("target", "for run must be cpu (run executes on this machine); for TPU code use `parhelion emit " +
                           o.kernel + " --target pallas`");
    if (o.has("budget") && !o.has("tune")) refuse("budget", "needs --tune (it bounds the tuning time)");
    if (o.has("threads") && o.has("tune"))
      refuse("threads", "and --tune exclude each other (tuning chooses num_threads)");
  }
  if (o.command == "emit") {
    for (const char* flag : {"tpu", "predict"})
      if (o.has(flag) && !pallas) refuse(flag, "needs --target pallas");
    if (o.has("gpu") && target != "triton") refuse("gpu", "needs --target triton");
    if (o.has("output") && target == "cpu") refuse("output", "needs --target pallas or triton");
    if (o.json && !o.has("predict")) throw UserError("--json for emit needs --predict (emitted code is printed as is)");
    if (o.has("predict") && (o.has("stage") || o.has("output")))
      refuse("predict", "prints the modelled time; it takes neither --stage nor -o");
  }
  if (o.command == "opt") {
    if (o.has("tpu") && !pallas) refuse("tpu", "needs --target pallas");
    if (o.has("gpu") && target != "triton") refuse("gpu", "needs --target triton");
    for (const char* flag : {"fast-memory", "threads"})
      if (o.has(flag) && target != "cpu")
        refuse(flag, "describes the cpu target; --target " + target + " takes its machine's own (--tpu, --gpu)");
  }
  if (o.command == "tune") {
    for (const char* flag : {"tpu", "model"})
      if (o.has(flag) && !pallas) refuse(flag, "needs --target pallas");
    if (pallas)
      for (const char* flag : {"effort", "budget", "seed"})
        if (o.has(flag))
          refuse(flag, "does not apply to --target pallas --model (the timing model evaluates every config)");
  }
  if (o.command == "bench") {
    bool suite = o.has("suite");
    if (o.has("tpu-table")) {
      // (the seed's published TPU table beside the timing model: no timing on this machine)
      for (const auto& [flag, value] : o.flags)
        if (flag != "tpu-table" && flag != "suite-file")
          refuse(flag, "does not apply to --tpu-table (it tunes each row against the TPU model)");
      if (!o.extra.empty()) throw UserError("bench --tpu-table takes no KERNEL (the table file lists them)");
      return;
    }
    for (const char* flag : {"png", "rounds", "budget", "suite-file"})
      if (o.has(flag) && !suite) refuse(flag, "needs --suite");
    for (const char* flag : {"shape", "dtype"})
      if (o.has(flag) && suite) refuse(flag, "does not apply to --suite (the suite file names its cases)");
    for (const char* flag : {"quick", "tuned"})
      if (o.has(flag) && suite) refuse(flag, "does not apply to --suite (the suite tunes every case itself)");
    if (suite && o.extra.size() > 1) throw UserError("bench --suite takes at most one KERNEL");
  }
}

Mesh parse_mesh(const std::string& text) {
  std::vector<MeshAxis> axes;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      throw UserError("--mesh: '" + item + "' is not NAME=SIZE (expected e.g. --mesh x=4 or --mesh x=2,y=4)");
    axes.push_back(
        {item.substr(0, eq), parse_integer(item.substr(eq + 1), "--mesh " + item.substr(0, eq), 1, 1 << 16)});
  }
  if (axes.empty()) throw UserError("--mesh is empty (expected e.g. --mesh x=4)");
  return Mesh(axes);
}

Shape parse_shape(const std::string& text) {
  Shape shape;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      shape.push_back(parse_integer(item, "--shape", 1, INT64_MAX));
    } catch (const UserError&) {
      throw UserError("--shape: '" + item + "' is not a positive integer below 2^63 (expected e.g. --shape 1000,1003)");
    }
  }
  if (shape.empty()) throw UserError("--shape is empty (expected e.g. --shape 1000,1003)");
  if (text.back() == ',') throw UserError("--shape '" + text + "' ends with a comma (expected e.g. --shape 1000,1003)");
  return shape;
}

}  // namespace parhelion::tools

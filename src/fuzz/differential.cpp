#include "fuzz/differential.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "backend/pallas/interpret.h"
#include "backend/python_runner.h"
#include "backend/registry.h"
#include "backend/triton/run.h"
#include "driver/compiled_kernel_impl.h"
#include "driver/driver.h"
#include "fuzz/generate.h"
#include "interp/interpreter.h"
#include "parhelion/error.h"
#include "tune/accuracy.h"
#include "tune/search.h"

namespace parhelion::fuzz {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// JSON has no NaN or infinity (nlohmann writes either as null), and a kernel's reference output
// may hold them (a log of a row masked to zeros): they travel between processes as strings.
json number_to_json(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return x;
}
double number_from_json(const json& j) {
  if (!j.is_string()) return j.get<double>();
  const std::string s = j.get<std::string>();
  return s == "nan" ? std::nan("") : s == "inf" ? HUGE_VAL : -HUGE_VAL;
}

// Outputs as JSON, and back (as f32: they are compared in f32).
json to_json(const std::vector<Array>& outputs) {
  json all = json::array();
  for (const Array& w : outputs) {
    json data = json::array();
    for (int64_t i = 0; i < w.numel(); ++i) data.push_back(number_to_json(w.get(i)));
    all.push_back({{"shape", w.shape()}, {"data", data}});
  }
  return all;
}
std::vector<Array> from_json(const json& all) {
  std::vector<Array> outputs;
  for (const json& w : all) {
    Array a = Array::empty(w["shape"].get<Shape>(), DType::f32);
    const json& data = w["data"];
    for (int64_t i = 0; i < a.numel(); ++i) a.set(i, number_from_json(data[static_cast<size_t>(i)]));
    outputs.push_back(a);
  }
  return outputs;
}

// --- tolerance ---------------------------------------------------------------------------------

// The interpreter computes in double; the backends in f32 with fast transcendentals, and round
// where the program does (16-bit data, casts, a rounded product). The tolerance follows the
// coarsest rounding the program contains and widens with the longest reduction (rounding
// accumulates ~ sqrt(length)).
struct Tolerance {
  DType dtype = DType::f32;
  double scale = 1;
};

Tolerance tolerance_of(const Program& p) {
  bool bf16 = false, f16 = false;
  auto note = [&](DType d) {
    // fp8 data is exact, but feeds the MXU (pallas) and dots as bf16 next to rounded operands.
    bf16 |= d == DType::bf16 || is_fp8(d);
    f16 |= d == DType::f16;
  };
  for (const TensorDecl& t : p.tensors) note(t.dtype);
  for (const Expr& e : p.exprs)
    if (e.kind == Expr::Cast || e.kind == Expr::Dot) note(e.dtype);
  int64_t longest = 1;
  std::function<void(const std::vector<Stmt>&)> walk = [&](const std::vector<Stmt>& body) {
    for (const Stmt& s : body) {
      for (const LoopDim& d : s.dims) longest = std::max(longest, d.extent);
      walk(s.body);
    }
  };
  walk(p.body);
  for (const TensorDecl& t : p.tensors)
    for (int64_t d : t.shape) longest = std::max(longest, d);
  Tolerance t;
  t.dtype = bf16 ? DType::bf16 : f16 ? DType::f16 : DType::f32;
  // f32: 2e-5 (tune::compare) x 5 for the fast exp/log/tanh of the runtime over deep chains.
  t.scale = (t.dtype == DType::f32 ? 5.0 : 1.0) * std::max(1.0, std::sqrt(static_cast<double>(longest)) / 4);
  return t;
}

std::string compare_outputs(const std::vector<Array>& got, const std::vector<Array>& want, const Tolerance& tol) {
  if (got.size() != want.size())
    return std::to_string(got.size()) + " outputs, the interpreter has " + std::to_string(want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    Array g = got[i].dtype() == DType::f32 ? got[i] : got[i].to(DType::f32);
    Array w = want[i].dtype() == DType::f32 ? want[i] : want[i].to(DType::f32);
    tune::Closeness c = tune::compare(g, w, tol.dtype, tol.scale);
    if (!c.ok)
      return "output " + std::to_string(i) + ": max |got - interpreter| = " + std::to_string(c.max_abs_err) +
             " (tolerance of " + std::string(dtype_name(tol.dtype)) + " x" + std::to_string(tol.scale) + ")";
  }
  return "";
}

// The expressions a program uses (reachable from its statements).
std::set<int> used_exprs(const Program& p) {
  std::set<int> used;
  std::function<void(int)> expr = [&](int id) {
    if (id < 0 || !used.insert(id).second) return;
    for (int a : p.exprs[id].args) expr(a);
    for (const Subscript& s : p.exprs[id].index)
      if (s.kind == Subscript::Scalar || s.kind == Subscript::Slice) expr(s.expr);
  };
  std::function<void(const std::vector<Stmt>&)> walk = [&](const std::vector<Stmt>& body) {
    for (const Stmt& s : body) {
      expr(s.expr);
      expr(s.mask);
      for (const Subscript& x : s.index)
        if (x.kind == Subscript::Scalar || x.kind == Subscript::Slice) expr(x.expr);
      walk(s.body);
    }
  };
  walk(p.body);
  return used;
}

// --- a program whose result follows its blocking --------------------------------------------------

// A dot whose product is rounded (to bf16, as a bf16 matmul's output) inside a K loop rounds
// once per K block, so its exact result depends on the config's K block: the sum of rounded
// partials against the rounding of one whole-K product. Where the partials are large beside
// their sum (they cancel), the two differ by more than any tolerance relative to the result
// (a program that triples the sum of fp8 products differed by 0.094 where 0.04 was allowed).
// Such a program is compared with the interpreter with its inner loops cut at the config's own
// blocks instead of one block per tunable tile: both round at the same points. (They can still
// differ by one bf16 ulp of a partial where the f32 partial and the interpreter's double one
// round to either side of a tie: rare, and within the tolerance unless the partials cancel.)
bool rounds_per_block(const Program& p) {
  for (int id : used_exprs(p))
    if (p.exprs[id].kind == Expr::Dot && p.exprs[id].dtype != DType::f32) return true;
  return false;
}

// The interpreter's outputs with the tunable tiles of inner loops cut at `c`'s blocks (of
// `spec`'s space). A grid's blocks do not move a rounding point, and left whole they keep the
// interpreter's trips few (a config's blocks of 1 on every dim would be millions).
std::vector<Array> interpret_at_blocks(const ir::Function& traced, const ConfigSpec& spec, const Config& c,
                                       const std::vector<Arg>& args) {
  std::set<int> inner_blocks;
  ir::walk(traced.body, [&](const ir::Op& op) {
    if (op.kind == ir::OpKind::Loop)
      for (int t : op.loop_tiles) inner_blocks.insert(traced.tiles[t].block);
  });
  ir::Function fn = traced;
  for (size_t i = 0; i < spec.block_sizes.size() && i < c.block_sizes.size(); ++i)
    if (inner_blocks.count(spec.block_sizes[i].block_id))
      fn.block_sizes.at(spec.block_sizes[i].block_id).fixed = c.block_sizes[i];
  return interp::interpret(fn, args).outputs;
}

bool is_fit_rejection(const std::string& msg) {
  return msg.find("of fast memory") != std::string::npos || msg.find("of VMEM") != std::string::npos;
}

// --- one program on the cpu, in this process -----------------------------------------------------

struct Outcome {
  std::string kind, config, detail;
};

void add_finding(json& r, const std::string& kind, const std::string& config, const std::string& detail) {
  r["findings"].push_back({{"kind", kind}, {"config", config}, {"detail", detail}});
}

// A program ready to run: its kernel, inputs, trace and the interpreter's outputs. nullptr,
// with a finding in `r`, when it does not trace or interpret (the generator makes only valid
// programs, so that is a finding too).
struct Ready {
  std::unique_ptr<KernelBase> kernel;
  std::vector<Array> inputs;
  std::vector<Arg> args;  // point into `inputs`
  std::shared_ptr<CompiledKernel::Impl> traced;
  std::vector<Array> want;
  // On a mesh: every device's inputs (`inputs` are device 0's), and `want` every device's
  // outputs in turn.
  Mesh mesh;
  std::vector<std::vector<Array>> device_inputs;
};

std::unique_ptr<Ready> make_ready(const Program& p, uint64_t seed, json& r) {
  auto k = std::make_unique<Ready>();
  k->kernel = make_kernel(p);
  k->mesh = Mesh(p.mesh);
  k->inputs = make_inputs(p, p.mesh.empty() ? seed : device_seed(seed, 0));
  k->args = make_args(p, k->inputs);
  try {
    k->traced = k->kernel->trace_on(k->mesh, k->args);
    if (p.mesh.empty()) {
      k->want = k->kernel->interpret(k->args);
    } else {
      std::vector<std::vector<Arg>> args;
      for (int64_t d = 0; d < k->mesh.devices(); ++d) {
        k->device_inputs.push_back(make_inputs(p, device_seed(seed, d)));
        args.push_back(make_args(p, k->device_inputs.back()));
      }
      for (std::vector<Array>& outs : k->kernel->interpret_on(k->mesh, args))
        for (Array& o : outs) k->want.push_back(std::move(o));
    }
  } catch (const UserError& e) {
    add_finding(r, "rejected", "", e.what());
    return nullptr;
  } catch (const std::exception& e) {
    add_finding(r, "internal error", "", std::string("tracing or interpreting: ") + e.what());
    return nullptr;
  }
  return k;
}

// The configs a program runs at: the given ones, else the default and `configs - 1` random ones
// of `configured`'s space (seeded by the program's seed).
std::vector<Config> configs_to_run(const CompiledKernel::Impl& configured, uint64_t seed, int configs,
                                   const std::vector<Config>& explicit_configs) {
  std::vector<Config> todo = explicit_configs;
  if (!todo.empty()) return todo;
  tune::ConfigCodec codec(configured.spec);
  std::mt19937_64 gen(seed * 7919 + 17);
  todo.push_back(configured.config);
  for (int i = 1; i < configs; ++i) todo.push_back(codec.decode(codec.random(gen)));
  return todo;
}

// Runs one config's compile, run and comparison (`run`), turning what it throws into findings
// of `r` at config `cj` (a config refused for fast memory is counted, not a finding).
void run_config(json& r, const std::string& cj, const std::function<void()>& run) {
  try {
    run();
  } catch (const UserError& e) {
    if (is_fit_rejection(e.what()))
      r["not_fitting"] = r["not_fitting"].get<int>() + 1;
    else
      add_finding(r, "rejected", cj, e.what());
  } catch (const CompileError& e) {
    add_finding(r, "compile error", cj, std::string(e.what()) + " (source " + e.source_path() + ")");
  } catch (const std::exception& e) {
    add_finding(r, "internal error", cj, e.what());
  }
}

// The program's trace configured for the cpu backend (on its mesh, for device 0's inputs).
std::shared_ptr<CompiledKernel::Impl> configured_on_cpu(KernelBase& k, const Program& q, uint64_t seed) {
  if (q.mesh.empty()) return k.trace(make_args(q, make_inputs(q, seed)));
  const std::vector<Array> in = make_inputs(q, device_seed(seed, 0));
  return driver::configure(*k.trace_on(Mesh(q.mesh), make_args(q, in)), backend::for_target("cpu"));
}

// A program on a mesh: every device's outputs from the cpu backend (KernelBase::run_on) at each
// config against the interpreter's (interpret_on), which also checks the program for races.
json check_mesh_here(const Program& p, uint64_t seed, int configs, const std::vector<Config>& explicit_configs) {
  json r = {{"findings", json::array()}, {"runs", 0}, {"not_fitting", 0}};
  std::unique_ptr<KernelBase> kernel = make_kernel(p);
  const Mesh mesh(p.mesh);
  auto inputs_of = [&] {
    std::vector<std::vector<Array>> in;
    for (int64_t d = 0; d < mesh.devices(); ++d) in.push_back(make_inputs(p, device_seed(seed, d)));
    return in;
  };
  auto args_of = [&](const std::vector<std::vector<Array>>& in) {
    std::vector<std::vector<Arg>> args;
    for (const std::vector<Array>& a : in) args.push_back(make_args(p, a));
    return args;
  };
  const std::vector<std::vector<Array>> inputs = inputs_of();
  std::vector<std::vector<Array>> want;
  std::shared_ptr<CompiledKernel::Impl> configured;
  try {
    want = kernel->interpret_on(mesh, args_of(inputs));
    configured = configured_on_cpu(*kernel, p, seed);
  } catch (const UserError& e) {
    add_finding(r, "rejected", "", e.what());
    return r;
  } catch (const std::exception& e) {
    add_finding(r, "internal error", "", std::string("tracing or interpreting: ") + e.what());
    return r;
  }
  const Tolerance tol = tolerance_of(p);
  for (const Config& c : configs_to_run(*configured, seed, configs, explicit_configs)) {
    const std::string cj = c.to_json();
    run_config(r, cj, [&] {
      const std::vector<std::vector<Array>> fresh = inputs_of();
      const std::vector<std::vector<Array>> got = kernel->run_on(mesh, args_of(fresh), &c);
      r["runs"] = r["runs"].get<int>() + 1;
      for (size_t d = 0; d < got.size(); ++d) {
        const std::string diff = compare_outputs(got[d], want.at(d), tol);
        if (!diff.empty()) {
          add_finding(r, "mismatch", cj, "device " + std::to_string(d) + ": " + diff);
          break;
        }
      }
    });
  }
  return r;
}

json check_here(const Program& p, uint64_t seed, int configs, const std::vector<Config>& explicit_configs) {
  if (!p.mesh.empty()) return check_mesh_here(p, seed, configs, explicit_configs);
  json r = {{"findings", json::array()}, {"runs", 0}, {"not_fitting", 0}};
  std::unique_ptr<Ready> ready = make_ready(p, seed, r);
  if (!ready) return r;
  KernelBase* kernel = ready->kernel.get();
  const std::vector<Array>& want = ready->want;
  const auto& traced = ready->traced;
  const Tolerance tol = tolerance_of(p);
  const bool per_block = rounds_per_block(p);
  for (const Config& c : configs_to_run(*traced, seed, configs, explicit_configs)) {
    const std::string cj = c.to_json();
    run_config(r, cj, [&] {
      // Fresh inputs for every run: an in-place kernel updates its arguments.
      std::vector<Array> fresh = make_inputs(p, seed);
      std::vector<Arg> fresh_args = make_args(p, fresh);
      const CompiledKernel compiled = kernel->compile(fresh_args, &c);
      std::vector<Array> got = compiled.run(fresh_args);
      r["runs"] = r["runs"].get<int>() + 1;
      for (const lower::LaunchPlan& L : compiled.impl().program.launches)
        if (!L.streamed_stores.empty() || !L.prefetches.empty()) {
          r["streamed"] = r.value("streamed", 0) + 1;
          break;
        }
      const std::string diff =
          per_block ? compare_outputs(got, interpret_at_blocks(traced->fn, traced->spec, c, ready->args), tol)
                    : compare_outputs(got, want, tol);
      if (!diff.empty()) add_finding(r, "mismatch", cj, diff);
    });
  }
  return r;
}

// --- in a child process ---------------------------------------------------------------------------

// Runs `body` in a forked child; its JSON result comes back through a pipe. A signal or a
// timeout becomes a finding.
json in_child(const std::function<json()>& body, double timeout_s) {
  int fds[2];
  // Close-on-exec: the compilers the child starts must not hold the pipe open.
  if (pipe2(fds, O_CLOEXEC) != 0) throw InternalError("fuzz: pipe failed");
  pid_t pid = fork();
  if (pid < 0) throw InternalError("fuzz: fork failed");
  if (pid == 0) {
    setpgid(0, 0);  // its own process group: a timeout kills the compilers it started too
    close(fds[0]);
    std::string out;
    try {
      out = body().dump();
    } catch (const std::exception& e) {
      out = json{{"findings", {{{"kind", "internal error"}, {"config", ""}, {"detail", e.what()}}}}}.dump();
    }
    size_t off = 0;
    while (off < out.size()) {
      ssize_t w = write(fds[1], out.data() + off, out.size() - off);
      if (w <= 0) break;
      off += static_cast<size_t>(w);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  bool timed_out = false;
  char buf[1 << 15];
  for (;;) {
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd pf{fds[0], POLLIN, 0};
    int n = poll(&pf, 1, left);
    if (n <= 0) continue;
    ssize_t got = read(fds[0], buf, sizeof buf);
    if (got <= 0) break;
    text.append(buf, static_cast<size_t>(got));
  }
  close(fds[0]);
  if (timed_out) {
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  auto one = [](const std::string& kind, const std::string& detail) {
    return json{{"findings", {{{"kind", kind}, {"config", ""}, {"detail", detail}}}}, {"runs", 0}, {"not_fitting", 0}};
  };
  if (timed_out) return one("timeout", "no result after " + std::to_string(timeout_s) + " s");
  if (WIFSIGNALED(status)) return one("crash", std::string("signal ") + strsignal(WTERMSIG(status)));
  json r = json::parse(text, nullptr, false);
  if (r.is_discarded()) return one("crash", "the child exited without a result");
  return r;
}

json check_isolated(const Program& p, uint64_t seed, int configs, const std::vector<Config>& explicit_configs) {
  return in_child([&] { return check_here(p, seed, configs, explicit_configs); }, 120);
}

std::vector<Outcome> outcomes_of(const json& r) {
  std::vector<Outcome> out;
  for (const json& f : r["findings"]) out.push_back({f["kind"], f["config"], f["detail"]});
  return out;
}

// --- minimization -----------------------------------------------------------------------------------

// Smaller variants of `p`: an expression replaced by one of its operands or by a number, then
// every extent halved.
std::vector<Program> shrink_candidates(const Program& p) {
  std::vector<Program> out;
  for (int id : used_exprs(p)) {
    const Expr& e = p.exprs[id];
    for (int a : e.args) {
      Program q = p;
      q.exprs[id] = p.exprs[a];
      out.push_back(std::move(q));
    }
    if (e.kind != Expr::Number && e.kind != Expr::Load) {
      Program q = p;
      q.exprs[id] = Expr{};
      q.exprs[id].number = 0.5;
      out.push_back(std::move(q));
    }
  }
  std::set<int64_t> extents;
  // (not of a program with host views: their ops' sizes, starts and factors would not follow)
  const bool views = std::any_of(p.tensors.begin(), p.tensors.end(), [](const TensorDecl& t) { return t.is_view(); });
  for (const TensorDecl& t : p.tensors)
    for (int64_t d : t.shape)
      if (d > 1 && !views) extents.insert(d);
  for (int64_t v : extents) {
    Program q = p;
    int64_t to = v / 2;
    for (TensorDecl& t : q.tensors) {
      for (int64_t& d : t.shape)
        if (d == v) d = to;
      if (t.index_bound == v) t.index_bound = to;
    }
    std::function<void(std::vector<Stmt>&)> walk = [&](std::vector<Stmt>& body) {
      for (Stmt& s : body) {
        for (LoopDim& d : s.dims)
          if (d.extent == v) d.extent = to;
        walk(s.body);
      }
    };
    walk(q.body);
    out.push_back(std::move(q));
  }
  return out;
}

// Shrinks a program that fails on the cpu with `kind` at `config` while it keeps failing so.
Program minimize_cpu(Program p, uint64_t seed, const std::string& kind, const std::string& config_json,
                     double budget_s) {
  auto start = Clock::now();
  Config config = config_json.empty() ? Config{} : Config::from_json(config_json);
  // The failing config as a point of `q`'s (possibly smaller) space, and two references: one
  // block per tunable loop (the interpreter's own blocking) and the smallest blocks (the most
  // trips). Shrinking can make a program whose result depends on its block count (a loop that
  // adds a number per trip, a Var overwritten instead of accumulated): such a candidate fails
  // at any config with more trips than one, the smallest blocks included. So at each reference
  // where the original passes, a candidate must pass too; it must fail at the failing config.
  enum Which { Failing, Whole, Smallest };
  auto config_of = [&](const Program& q, Which which) {
    std::unique_ptr<KernelBase> k = make_kernel(q);
    auto traced = configured_on_cpu(*k, q, seed);
    tune::ConfigCodec codec(traced->spec);
    Config c = config_json.empty() ? traced->config : codec.decode(codec.encode(config));
    c.index_checks = config.index_checks;
    for (size_t i = 0; which != Failing && i < traced->spec.block_sizes.size(); ++i)
      c.block_sizes[i] =
          which == Whole ? traced->spec.block_sizes[i].choices.back() : traced->spec.block_sizes[i].choices.front();
    return c;
  };
  auto kinds_at = [&](const Program& q, Which which) {
    json r = in_child(
        [&] {
          Config c;
          try {
            c = config_of(q, which);
          } catch (const std::exception& e) {  // a shrunk candidate that is not a valid kernel
            return json{{"findings", {{{"kind", "rejected"}, {"config", ""}, {"detail", e.what()}}}}};
          }
          return check_here(q, seed, 1, {c});
        },
        60);
    std::set<std::string> kinds;
    for (const Outcome& o : outcomes_of(r)) kinds.insert(o.kind);
    return kinds;
  };
  std::vector<Which> must_pass;
  for (Which w : {Whole, Smallest})
    if (kinds_at(p, w).empty()) must_pass.push_back(w);
  auto still_fails = [&](const Program& q) {
    if (!kinds_at(q, Failing).count(kind)) return false;
    for (Which w : must_pass)
      if (!kinds_at(q, w).empty()) return false;
    return true;
  };
  bool progress = true;
  while (progress && std::chrono::duration<double>(Clock::now() - start).count() < budget_s) {
    progress = false;
    for (Program& q : shrink_candidates(p)) {
      if (std::chrono::duration<double>(Clock::now() - start).count() >= budget_s) break;
      if (still_fails(q)) {
        p = std::move(q);
        progress = true;
        break;
      }
    }
  }
  return p;
}

// --- the backends whose modules run in Python ------------------------------------------------------
// pallas in JAX's TPU interpret mode, triton in Triton's interpreter.

struct ModulePending {
  Program program;
  uint64_t seed;
  std::string config;
  std::vector<Array> want;
  Tolerance tol;
  std::string name, source;
  std::vector<Array> inputs;
  std::vector<double> scalars;
  // On a mesh: every device's inputs (`want`: every device's outputs in turn).
  std::vector<MeshAxis> mesh = {};
  std::vector<std::vector<Array>> device_inputs = {};
};

// In the child: the interpreter's outputs, and the module of the target's default config and
// of one random config of its space (a clear refusal counts as unsupported, not a finding).
json prepare_module_here(const Program& p, uint64_t seed, const std::string& target) {
  json r = {{"findings", json::array()},
            {"modules", json::array()},
            {"want", json::array()},
            {"unsupported", 0},
            {"refusals", json::array()}};
  // (the reason, without the "file:line: " it names; a config that does not fit, as one reason)
  auto refused = [&](const UserError& e) {
    r["unsupported"] = r["unsupported"].get<int>() + 1;
    std::string m = e.what();
    if (m.find(" does not fit ") != std::string::npos && m.rfind("config ", 0) == 0)
      m = "a config that does not fit" + m.substr(m.find(" does not fit ") + 13, 40);
    if (size_t at = m.find(": "); at != std::string::npos && m.find(':') < at) m = m.substr(at + 2);
    r["refusals"].push_back(m.substr(0, 160));
  };
  std::unique_ptr<Ready> ready = make_ready(p, seed, r);
  if (!ready) return r;
  KernelBase* kernel = ready->kernel.get();
  const std::vector<Arg>& args = ready->args;
  const std::vector<Array>& want = ready->want;
  r["want"] = to_json(want);
  // Configuring for the target plans its default config, which refuses what the backend
  // cannot express yet: that counts as unsupported, like a refused module.
  std::shared_ptr<CompiledKernel::Impl> configured;
  try {
    configured =
        p.mesh.empty() ? kernel->trace(args, target) : driver::configure(*ready->traced, backend::for_target(target));
  } catch (const UserError& e) {
    refused(e);
    return r;
  }
  tune::ConfigCodec codec(configured->spec);
  std::mt19937_64 gen(seed);
  Config random = codec.decode(codec.random(gen));
  // Each gather with two strategies (pallas: onehot, dma) runs both: the default module takes
  // the first, the random one the other.
  for (size_t i = 0; i < configured->spec.gathers.size(); ++i) {
    const std::vector<std::string>& ch = configured->spec.gathers[i].choices;
    if (ch.size() > 1 && i < configured->config.gathers.size())
      random.gathers[i] = ch[ch[0] == configured->config.gathers[i] ? 1 : 0];
  }
  for (const Config* c : {static_cast<const Config*>(nullptr), static_cast<const Config*>(&random)}) {
    try {
      EmittedKernel m = kernel->emit_on(ready->mesh, args, target, c);
      json module = {{"source", m.source}, {"config", m.config.to_json()}};
      if (rounds_per_block(p) && p.mesh.empty())
        module["want"] = to_json(interpret_at_blocks(configured->fn, configured->spec, m.config, args));
      r["modules"].push_back(std::move(module));
    } catch (const UserError& e) {
      refused(e);
    }
  }
  return r;
}

// A module's run in its backend's Python runner.
struct ModuleRun {
  bool ok;
  std::string error;
  bool races;
  std::vector<Array> outputs;
};
using ModuleRunner = std::function<std::vector<ModuleRun>(const std::vector<ModulePending>&)>;

std::vector<ModuleRun> run_pallas(const std::vector<ModulePending>& pending) {
  std::vector<backend::pallas::InterpretCase> cases;
  for (const ModulePending& m : pending) {
    cases.push_back({m.name, m.source, m.program.name, m.inputs, m.scalars, false});
    cases.back().mesh = m.mesh;
    cases.back().device_inputs = m.device_inputs;
    cases.back().timeout_s = m.mesh.empty() ? 600 : 120;  // (a deadlock)
  }
  std::vector<ModuleRun> out;
  for (auto& r : backend::pallas::run_in_interpret_mode(cases))
    out.push_back({r.ok, r.error, r.races, std::move(r.outputs)});  // (on a mesh: every device's in turn)
  return out;
}

// Triton's interpreter runs the modules; `archs`, when given, compile them too (what the
// interpreter does not check: tl.dot shapes, layouts, types), a failed compile failing the run.
std::vector<ModuleRun> run_triton(const std::vector<ModulePending>& pending, const std::vector<int>& archs) {
  std::vector<backend::triton::TritonCase> cases;
  std::vector<std::string> sources;
  for (const ModulePending& m : pending) {
    cases.push_back({m.name, m.source, m.program.name, m.inputs, m.scalars});
    sources.push_back(m.source);
  }
  std::vector<ModuleRun> out;
  for (auto& r : backend::triton::run_in_triton_interpreter(cases))
    out.push_back({r.ok, r.error, false, std::move(r.outputs)});
  if (archs.empty()) return out;
  const std::vector<backend::triton::TritonCompile> compiled = backend::triton::compile_for_gpus(sources, archs);
  for (size_t i = 0; i < out.size() && i < compiled.size(); ++i)
    if (out[i].ok && !compiled[i].ok) {
      out[i].ok = false;
      out[i].error = "the ahead-of-time compile failed: " + compiled[i].error;
    }
  return out;
}

// One Python backend's share of the programs: prepared in a child, run in batches.
class ModuleSampler {
 public:
  ModuleSampler(std::string backend, std::string target, int every, ModuleRunner run)
      : backend_(std::move(backend)), target_(std::move(target)), every_(every), run_(std::move(run)) {}

  bool samples(int64_t n) const { return every_ > 0 && n % every_ == 0; }

  void prepare(const Program& p, uint64_t seed, FuzzReport& report,
               const std::function<void(const std::string&)>& log) {
    // Emitted in a child, like the cpu runs: a crash there is a finding.
    json r = in_child([&] { return prepare_module_here(p, seed, target_); }, 120);
    BackendCounts& counts = report.by_backend[backend_];
    counts.unsupported += r.value("unsupported", 0);
    if (r.contains("refusals"))
      for (const json& why : r["refusals"]) ++counts.refusals[why.get<std::string>()];
    for (const Outcome& x : outcomes_of(r)) {
      log("FOUND " + x.kind + " preparing " + backend_ + ", seed " + std::to_string(seed) + ": " +
          x.detail.substr(0, 300));
      report.findings.push_back({x.kind, backend_, x.config, x.detail, seed, p, to_cpp(p, "", seed), ""});
    }
    if (!r.contains("modules")) return;
    const std::vector<Array> inputs = make_inputs(p, seed), want = from_json(r["want"]);
    std::vector<double> scalars;
    if (p.has_scalar) scalars.push_back(p.scalar_value);
    std::vector<std::vector<Array>> device_inputs;
    for (int64_t d = 0; !p.mesh.empty() && d < Mesh(p.mesh).devices(); ++d)
      device_inputs.push_back(make_inputs(p, device_seed(seed, d)));
    for (const json& m : r["modules"])
      pending_.push_back({p, seed, m["config"], m.contains("want") ? from_json(m["want"]) : want, tolerance_of(p),
                          p.family + " seed " + std::to_string(seed), m["source"], inputs, scalars, p.mesh,
                          device_inputs});
    if (pending_.size() >= 16) flush(report, log);
  }

  // Runs the pending modules (one Python process) and compares each with the interpreter.
  void flush(FuzzReport& report, const std::function<void(const std::string&)>& log) {
    if (pending_.empty()) return;
    std::vector<ModuleRun> results;
    try {
      results = run_(pending_);
    } catch (const UserError& e) {  // the runner died: one finding for the batch, the run goes on
      const ModulePending& m = pending_[0];
      log("FOUND the " + backend_ + " runner failing on a batch from seed " + std::to_string(m.seed));
      report.findings.push_back(
          {backend_ + " error", backend_, "", e.what(), m.seed, m.program, to_cpp(m.program, "", m.seed), m.source});
      pending_.clear();
      return;
    }
    for (size_t i = 0; i < results.size(); ++i) {
      const ModulePending& m = pending_[i];
      const ModuleRun& r = results[i];
      ++report.by_backend[backend_].runs;
      std::string kind, detail;
      if (!r.ok) {
        kind = backend_ + " error";
        detail = r.error;
      } else if (r.races) {
        kind = backend_ + " race";
        detail = "interpret mode detected a race";
      } else {
        detail = compare_outputs(r.outputs, m.want, m.tol);
        if (!detail.empty()) kind = "mismatch";
      }
      if (kind.empty()) continue;
      log("FOUND " + kind + " on " + backend_ + ", seed " + std::to_string(m.seed) + ": " + detail.substr(0, 300));
      report.findings.push_back(
          {kind, backend_, m.config, detail, m.seed, m.program, to_cpp(m.program, "", m.seed), m.source});
    }
    pending_.clear();
  }

 private:
  std::string backend_, target_;
  int every_;
  ModuleRunner run_;
  std::vector<ModulePending> pending_;
};

}  // namespace

std::vector<Finding> check_on_cpu(const Program& p, uint64_t seed, int configs, FuzzReport* counts) {
  json r = check_isolated(p, seed, configs, {});
  if (counts) {
    counts->cpu_runs += r.value("runs", 0);
    counts->cpu_runs_streamed += r.value("streamed", 0);
    counts->not_fitting += r.value("not_fitting", 0);
  }
  std::vector<Finding> out;
  for (const Outcome& o : outcomes_of(r)) {
    Finding f;
    f.kind = o.kind;
    f.backend = "cpu";
    f.config = o.config;
    f.detail = o.detail;
    f.seed = seed;
    f.program = p;
    out.push_back(std::move(f));
  }
  return out;
}

FuzzReport fuzz(const FuzzOptions& o) {
  FuzzReport report;
  auto start = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  auto log = [&](const std::string& s) {
    if (o.log) o.log(s);
  };
  const bool python = !backend::project_python().empty();
  if ((o.pallas_every > 0 || o.triton_every > 0) && !python)
    log("no project Python (PARHELION_PYTHON or the project's .venv): cpu only");
  std::vector<ModuleSampler> samplers;
  if (python) {
    samplers.emplace_back("pallas", "pallas:v7x", o.pallas_every, run_pallas);
    samplers.emplace_back(
        "triton", "triton:h100", o.triton_every,
        [archs = o.triton_archs](const std::vector<ModulePending>& pending) { return run_triton(pending, archs); });
  }
  for (int64_t n = 0; o.max_programs < 0 || n < o.max_programs; ++n) {
    if (elapsed() >= o.seconds) break;
    const uint64_t seed = o.seed + static_cast<uint64_t>(n);
    Program p = generate(seed, o.family);
    ++report.programs;
    ++report.by_family[p.family];
    for (Finding& f : check_on_cpu(p, seed, o.configs_per_program, &report)) {
      log("FOUND " + f.kind + " on cpu, seed " + std::to_string(seed) + " (" + p.family +
          "): " + f.detail.substr(0, 300));
      if (o.minimize && f.kind != "timeout") {
        f.program = minimize_cpu(f.program, seed, f.kind, f.config, o.minimize_seconds);
      }
      f.cpp = to_cpp(f.program, f.config, seed);
      report.findings.push_back(std::move(f));
    }
    for (ModuleSampler& m : samplers)
      if (m.samples(n)) m.prepare(p, seed, report, log);
    if ((n + 1) % 25 == 0)
      log(std::to_string(n + 1) + " programs, " + std::to_string(report.cpu_runs) + " cpu runs, " +
          std::to_string(report.by_backend["pallas"].runs) + " pallas runs, " +
          std::to_string(report.by_backend["triton"].runs) + " triton runs, " + std::to_string(report.findings.size()) +
          " findings, " + std::to_string(static_cast<int>(elapsed())) + " s");
  }
  for (ModuleSampler& m : samplers) m.flush(report, log);
  report.seconds = elapsed();
  return report;
}

}  // namespace parhelion::fuzz

// KernelBase and CompiledKernel: the public face of the driver (driver.h), with a cache per
// signature and config.
#include "parhelion/kernel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "backend/registry.h"
#include "driver/driver.h"
#include "interp/interpreter.h"
#include "ir/printer.h"
#include "parhelion/config_table.h"
#include "parhelion/error.h"
#include "tune/tuner.h"

namespace parhelion {

struct KernelBase::Cache {
  std::map<std::string, std::shared_ptr<CompiledKernel::Impl>> traced;      // by signature
  std::map<std::string, std::shared_ptr<CompiledKernel::Impl>> configured;  // by signature + target
  std::map<std::string, std::shared_ptr<CompiledKernel::Impl>> by_key;      // by signature + config
  // The config table's choice, by signature + target: made once, not at every call (emptied
  // when the table changes).
  std::map<std::string, KernelBase::ConfigChoice> table_choices;
};

namespace {

// The signature a kernel is traced and compiled for: each tensor's dtype, shape and strides, and
// the value of each compile-time integer argument (other scalars are runtime values).
std::string signature_key(const KernelBase& kernel, const std::vector<Arg>& args) {
  std::string k;
  for (size_t i = 0; i < args.size(); ++i) {
    const Arg& a = args[i];
    if (!a.is_tensor()) {
      k += kernel.arg_is_constant(static_cast<int>(i)) ? "c" + std::to_string(static_cast<int64_t>(a.scalar)) + ";"
                                                       : "s;";
      continue;
    }
    k += std::string(dtype_name(a.array->dtype())) + shape_to_string(a.array->shape()) +
         shape_to_string(a.array->strides()) + ";";
  }
  return k;
}

void check_args(const KernelBase& k, const std::vector<Arg>& args) {
  if (static_cast<int>(args.size()) != k.num_args())
    throw UserError("kernel " + k.name() + " takes " + std::to_string(k.num_args()) + " arguments, got " +
                    std::to_string(args.size()));
  for (size_t i = 0; i < args.size(); ++i) {
    bool want = k.arg_is_tensor(static_cast<int>(i));
    if (want != args[i].is_tensor())
      throw UserError("kernel " + k.name() + ": argument " + std::to_string(i) + " must be " +
                      (want ? "a tensor" : "a scalar"));
    if (!want) {
      const double v = args[i].scalar;
      if (k.arg_is_constant(static_cast<int>(i)) && !(std::nearbyint(v) == v && std::abs(v) < 9007199254740992.0))
        throw UserError("kernel " + k.name() + ": argument " + std::to_string(i) + " is a compile-time integer, got " +
                        std::to_string(v));
      continue;
    }
    const Array& a = *args[i].array;
    if (!a.defined())
      throw UserError("kernel " + k.name() + ": argument " + std::to_string(i) + " is an empty (undefined) Array");
    for (int d = 0; d < a.rank(); ++d)
      if (a.strides()[d] < 0 || (a.strides()[d] == 0 && a.shape()[d] > 1))
        throw UserError("kernel " + k.name() + ": argument " + std::to_string(i) + " has stride " +
                        std::to_string(a.strides()[d]) + " in dimension " + std::to_string(d) +
                        "; Parhelion needs positive strides (make a contiguous copy with clone())");
  }
}

}  // namespace

// --- CompiledKernel -----------------------------------------------------------------------------

std::string CompiledKernel::ir() const { return ir::print(impl_->fn); }
std::string CompiledKernel::block_ir() const { return lower::print(impl_->program); }
std::string CompiledKernel::source() const { return impl_->artifact.source; }
std::string CompiledKernel::source_path() const { return impl_->executable ? impl_->executable->source_path : ""; }
const ConfigSpec& CompiledKernel::config_spec() const { return impl_->spec; }
const Config& CompiledKernel::config() const { return impl_->config; }
bool CompiledKernel::cache_hit() const { return impl_->executable && impl_->executable->cache_hit; }
double CompiledKernel::compile_seconds() const { return impl_->executable ? impl_->executable->compile_seconds : 0; }
int64_t CompiledKernel::footprint_bytes() const { return impl_->program.footprint_bytes; }

std::vector<Array> CompiledKernel::run(const std::vector<Arg>& args) const { return driver::run(*impl_, args); }

// --- KernelBase ---------------------------------------------------------------------------------

KernelBase::KernelBase(std::string name, std::vector<bool> arg_is_tensor, TraceFn trace,
                       std::vector<bool> arg_is_constant)
    : name_(std::move(name)),
      arg_is_tensor_(std::move(arg_is_tensor)),
      arg_is_constant_(std::move(arg_is_constant)),
      trace_(std::move(trace)),
      cache_(std::make_unique<Cache>()) {}

KernelBase::~KernelBase() = default;

void KernelBase::pin_config(const Config& c) {
  std::lock_guard<std::mutex> lock(mu_);
  pinned_ = std::make_unique<Config>(c);
}

void KernelBase::unpin_config() {
  std::lock_guard<std::mutex> lock(mu_);
  pinned_.reset();
  pinned_by_signature_.clear();
}

std::shared_ptr<CompiledKernel::Impl> KernelBase::trace(const std::vector<Arg>& args) { return trace(args, "cpu"); }

std::shared_ptr<CompiledKernel::Impl> KernelBase::trace(const std::vector<Arg>& args, const std::string& target) {
  check_args(*this, args);
  std::lock_guard<std::mutex> lock(mu_);
  const std::string key = signature_key(*this, args);
  const std::string configured_key = key + "|" + target;
  // Every call passes here: a hit costs the two keys and one lookup; the backend is resolved
  // (and the kernel traced) on a miss only.
  auto configured = cache_->configured.find(configured_key);
  if (configured != cache_->configured.end()) return configured->second;
  const backend::Backend& backend = backend::for_target(target);
  auto traced = cache_->traced.find(key);
  if (traced == cache_->traced.end())
    traced = cache_->traced.emplace(key, driver::trace(name_, arg_is_tensor_, arg_is_constant_, trace_, args)).first;
  return cache_->configured[configured_key] = driver::configure(*traced->second, backend);
}

KernelBase::ConfigChoice KernelBase::choose_config(const std::vector<Arg>& args, const std::string& target,
                                                   const CompiledKernel::Impl& configured) {
  const std::string signature = signature_key(*this, args);
  auto pinned = pinned_by_signature_.find(signature);
  if (pinned != pinned_by_signature_.end()) return {pinned->second, "pinned for this signature"};
  if (pinned_) return {*pinned_, "pinned"};
  if (!table_) return {configured.config, "default"};
  const std::string key = signature + "|" + target;
  auto memo = cache_->table_choices.find(key);
  if (memo == cache_->table_choices.end())
    memo = cache_->table_choices.emplace(key, choose_from_table(args, target, configured)).first;
  return memo->second;
}

KernelBase::ConfigChoice KernelBase::choose_from_table(const std::vector<Arg>& args, const std::string& target,
                                                       const CompiledKernel::Impl& configured) const {
  auto legal = [&](const Config& c) {
    try {
      configured.spec.validate(c.filled_from(configured.config));
      return true;
    } catch (const UserError&) {
      return false;
    }
  };
  std::optional<TableChoice> t =
      table_->select(*this, args, backend::canonical_target(target), configured.backend->machine().identity(), legal);
  if (!t) return {configured.config, "default"};
  std::string how = t->exact ? "table: exact" : "table: nearest (" + t->entry->signature() + ")";
  if (!t->same_hardware) how += ", tuned on " + t->entry->hardware;
  return {t->entry->config, how};
}

KernelBase::ConfigChoice KernelBase::config_for(const std::vector<Arg>& args, const std::string& target) {
  std::shared_ptr<CompiledKernel::Impl> configured = trace(args, target);
  std::lock_guard<std::mutex> lock(mu_);
  ConfigChoice c = choose_config(args, target, *configured);
  c.config = c.config.filled_from(configured->config);
  return c;
}

void KernelBase::pin_config(const Config& c, const std::vector<Arg>& for_args) {
  check_args(*this, for_args);
  std::lock_guard<std::mutex> lock(mu_);
  pinned_by_signature_[signature_key(*this, for_args)] = c;
}

void KernelBase::use_config_table(std::shared_ptr<const ConfigTable> table) {
  std::lock_guard<std::mutex> lock(mu_);
  table_ = std::move(table);
  cache_->table_choices.clear();
}

CompiledKernel KernelBase::compile(const std::vector<Arg>& args, const Config* config) {
  std::shared_ptr<CompiledKernel::Impl> traced = trace(args);
  std::lock_guard<std::mutex> lock(mu_);
  Config chosen;
  if (!config && (pinned_ || !pinned_by_signature_.empty() || table_)) {
    chosen = choose_config(args, "cpu", *traced).config;
    config = &chosen;
  }
  std::string key = signature_key(*this, args) + "|" + (config ? config->to_json() : "default");
  auto it = cache_->by_key.find(key);
  if (it != cache_->by_key.end()) return CompiledKernel(it->second);
  auto K = driver::specialize(*traced, config ? config->filled_from(traced->config) : traced->config);
  driver::load(*K);
  cache_->by_key[key] = K;
  return CompiledKernel(K);
}

EmittedKernel KernelBase::emit(const std::vector<Arg>& args, const std::string& target, const Config* config) {
  std::shared_ptr<CompiledKernel::Impl> configured = trace(args, target);
  Config chosen;
  if (!config && table_) {  // a table's entry for this target (pins are the cpu's calls')
    std::lock_guard<std::mutex> lock(mu_);
    chosen = choose_config(args, target, *configured).config;
    config = &chosen;
  }
  return emitted(*configured, target, config);
}

// The code of a configured kernel at `config` (or its default).
EmittedKernel KernelBase::emitted(const CompiledKernel::Impl& configured, const std::string& target,
                                  const Config* config) {
  auto K = driver::specialize(configured, config ? config->filled_from(configured.config) : configured.config);
  EmittedKernel e;
  e.target = target;
  e.language = K->artifact.language;
  e.source = K->artifact.source;
  e.config = K->config;
  e.config_spec = K->spec.describe();
  e.block_ir = lower::print(K->program);
  e.footprint_bytes = K->backend->footprint_bytes(K->program);
  return e;
}

PallasModule KernelBase::emit_pallas(const std::vector<Arg>& args, const std::string& tpu, const Config* config) {
  EmittedKernel e = emit(args, "pallas:" + tpu, config);
  return PallasModule{e.source, e.config, e.config_spec, e.block_ir, e.footprint_bytes, tpu};
}

EmittedKernel KernelBase::emit_on(const Mesh& mesh, const std::vector<Arg>& args, const std::string& target,
                                  const Config* config) {
  if (mesh.empty()) return emit(args, target, config);
  auto configured = driver::configure(*trace_on(mesh, args), backend::for_target(target));
  return emitted(*configured, target, config);
}

PallasModule KernelBase::emit_pallas_on(const Mesh& mesh, const std::vector<Arg>& args, const std::string& tpu,
                                        const Config* config) {
  EmittedKernel e = emit_on(mesh, args, "pallas:" + tpu, config);
  return PallasModule{e.source, e.config, e.config_spec, e.block_ir, e.footprint_bytes, tpu};
}

std::vector<Array> KernelBase::run(const std::vector<Arg>& args) { return compile(args).run(args); }

TuneReport KernelBase::tune(const std::vector<Arg>& args, const TuneOptions& options) {
  return tune::tune(*this, args, options);
}

std::vector<Array> KernelBase::interpret(const std::vector<Arg>& args) {
  return interp::interpret(trace(args)->fn, args).outputs;
}

std::shared_ptr<CompiledKernel::Impl> KernelBase::trace_on(const Mesh& mesh, const std::vector<Arg>& args) {
  if (mesh.empty()) return trace(args);
  check_args(*this, args);
  std::lock_guard<std::mutex> lock(mu_);
  const std::string key = "mesh(" + mesh.to_string() + ")|" + signature_key(*this, args);
  auto traced = cache_->traced.find(key);
  if (traced == cache_->traced.end())
    traced =
        cache_->traced.emplace(key, driver::trace(name_, arg_is_tensor_, arg_is_constant_, trace_, args, mesh)).first;
  return traced->second;
}

namespace {

// Checks a collective call's per-device arguments: one list per device of the mesh, each of the
// signature of device 0's.
void check_mesh_args(const KernelBase& k, const Mesh& mesh, const std::vector<std::vector<Arg>>& args) {
  if (static_cast<int64_t>(args.size()) != mesh.devices())
    throw UserError("kernel " + k.name() + " on mesh " + mesh.to_string() + " takes the arguments of " +
                    std::to_string(mesh.devices()) + " devices, got " + std::to_string(args.size()));
  const std::string signature = signature_key(k, args.at(0));
  for (size_t d = 1; d < args.size(); ++d) {
    check_args(k, args[d]);
    if (signature_key(k, args[d]) != signature)
      throw UserError("kernel " + k.name() + ": device " + std::to_string(d) +
                      "'s arguments differ in shape, dtype or layout from device 0's (every device of a mesh runs "
                      "the same specialization)");
  }
}

}  // namespace

std::vector<std::vector<Array>> KernelBase::interpret_on(const Mesh& mesh, const std::vector<std::vector<Arg>>& args) {
  check_mesh_args(*this, mesh, args);
  std::vector<std::vector<Array>> outputs;
  for (interp::Interpretation& r : interp::interpret_on_mesh(trace_on(mesh, args[0])->fn, args))
    outputs.push_back(std::move(r.outputs));
  return outputs;
}

std::vector<std::vector<Array>> KernelBase::run_on(const Mesh& mesh, const std::vector<std::vector<Arg>>& args,
                                                   const Config* config) {
  check_mesh_args(*this, mesh, args);
  std::shared_ptr<CompiledKernel::Impl> traced = trace_on(mesh, args[0]);
  std::shared_ptr<CompiledKernel::Impl> K;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string key = "mesh(" + mesh.to_string() + ")|" + signature_key(*this, args[0]);
    auto configured = cache_->configured.find(key + "|cpu");
    if (configured == cache_->configured.end())
      configured =
          cache_->configured.emplace(key + "|cpu", driver::configure(*traced, backend::for_target("cpu"))).first;
    const std::string compiled_key = key + "|" + (config ? config->to_json() : "default");
    auto it = cache_->by_key.find(compiled_key);
    if (it == cache_->by_key.end()) {
      auto specialized = driver::specialize(
          *configured->second, config ? config->filled_from(configured->second->config) : configured->second->config);
      driver::load(*specialized);
      it = cache_->by_key.emplace(compiled_key, specialized).first;
    }
    K = it->second;
  }
  return driver::run_on_mesh(*K, args);
}

}  // namespace parhelion

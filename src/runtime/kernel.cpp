// The call path: signature -> (trace, verify, config, lower, generate, JIT) cached -> execute.
#include "parhelion/kernel.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "backend/cpu/codegen.h"
#include "backend/cpu/jit.h"
#include "frontend/tracer.h"
#include "interp/interpreter.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "lower/lower.h"
#include "parhelion/error.h"
#include "runtime/allocator.h"
#include "runtime/compiled_kernel_impl.h"
#include "runtime/thread_pool.h"

namespace parhelion {

struct KernelBase::Cache {
  std::map<std::string, std::shared_ptr<CompiledKernel::Impl>> traced;  // by signature
  std::map<std::string, std::shared_ptr<CompiledKernel::Impl>> by_key;  // by signature + config
};

namespace {

std::string signature_key(const std::vector<Arg>& args) {
  std::string k;
  for (const Arg& a : args) {
    if (!a.is_tensor()) {
      k += "s;";
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
    if (!want) continue;
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

std::pair<const char*, const char*> byte_range(const Array& a) {
  const char* lo = static_cast<const char*>(a.data());
  int64_t last = 0;
  for (int d = 0; d < a.rank(); ++d) last += (a.shape()[d] - 1) * a.strides()[d];
  return {lo, lo + (a.numel() ? (last + 1) * dtype_size(a.dtype()) : 0)};
}

}  // namespace

// --- CompiledKernel -----------------------------------------------------------------------------

std::string CompiledKernel::ir() const { return ir::print(impl_->fn); }
std::string CompiledKernel::block_ir() const { return lower::print(impl_->program); }
std::string CompiledKernel::source() const { return impl_->source; }
std::string CompiledKernel::source_path() const { return impl_->jit.source_path; }
const ConfigSpec& CompiledKernel::config_spec() const { return impl_->spec; }
const Config& CompiledKernel::config() const { return impl_->config; }
bool CompiledKernel::cache_hit() const { return impl_->jit.cache_hit; }
double CompiledKernel::compile_seconds() const { return impl_->jit.compile_seconds; }
int64_t CompiledKernel::footprint_bytes() const { return impl_->program.footprint_bytes; }

std::vector<Array> CompiledKernel::run(const std::vector<Arg>& args) const {
  const Impl& K = *impl_;
  const ir::Function& fn = K.fn;
  std::vector<Array> tensors(fn.tensors.size());
  std::vector<double> scalars;
  int ti = 0;
  for (const Arg& a : args) {
    if (a.is_tensor())
      tensors[ti++] = *a.array;
    else
      scalars.push_back(a.scalar);
  }
  // Written arguments must not overlap any other argument: generated code assumes no aliasing.
  for (int i : K.written_params) {
    auto [lo, hi] = byte_range(tensors[i]);
    for (int j = 0; j < fn.num_tensor_params; ++j) {
      if (j == i) continue;
      auto [lo2, hi2] = byte_range(tensors[j]);
      if (lo < hi2 && lo2 < hi)
        throw UserError("kernel " + K.name + ": argument " + std::to_string(i) +
                        " is written by the kernel and overlaps argument " + std::to_string(j) +
                        " in memory; pass distinct arrays");
    }
  }
  std::vector<void*> ptrs(fn.tensors.size(), nullptr);
  for (int i = 0; i < fn.num_tensor_params; ++i) ptrs[i] = tensors[i].data();
  int launch = 0;
  for (const ir::Op& op : fn.body) {
    if (op.kind == ir::OpKind::Alloc) {
      const ir::TensorInfo& t = fn.tensors[op.tensor];
      Array a = Array::empty(t.shape, t.dtype);
      if (op.has_fill) {
        if (op.number == 0)
          std::memset(a.data(), 0, static_cast<size_t>(a.numel() * dtype_size(t.dtype)));
        else
          for (int64_t i = 0; i < a.numel(); ++i) a.set(i, op.number);
      }
      ptrs[op.tensor] = a.data();
      tensors[op.tensor] = std::move(a);
      continue;
    }
    if (op.kind != ir::OpKind::Launch) continue;
    const lower::LaunchPlan& L = K.program.launches[launch];
    LaunchFn f = K.launches[launch++];
    if (L.total_steps == 0) continue;
    int threads = L.num_threads;
    int64_t per_thread = (L.scratch_bytes + 63) / 64 * 64;
    std::shared_ptr<void> scratch = runtime::allocate(static_cast<size_t>(std::max<int64_t>(64, per_thread * threads)));
    char* base = static_cast<char*>(scratch.get());
    int64_t steps = L.total_steps;
    ph_status status{0, 0, nullptr, nullptr};
    runtime::parallel_run(threads, [&](int tid) {
      int64_t b = steps * tid / threads, e = steps * (tid + 1) / threads;
      if (b < e) f(ptrs.data(), scalars.data(), base + per_thread * tid, b, e, runtime::runtime_table(), &status);
    });
    if (status.failed)
      throw UserError(std::string(status.where) + ": index " + std::to_string(status.value) + " is out of bounds for " +
                      status.what +
                      " (computed indices are checked; the config's \"index_checks\":false turns the check off)");
  }
  std::vector<Array> out;
  for (int t : fn.outputs) out.push_back(tensors[t]);
  return out;
}

// --- KernelBase ---------------------------------------------------------------------------------

KernelBase::KernelBase(std::string name, std::vector<bool> arg_is_tensor, TraceFn trace)
    : name_(std::move(name)),
      arg_is_tensor_(std::move(arg_is_tensor)),
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
}

std::shared_ptr<CompiledKernel::Impl> KernelBase::trace(const std::vector<Arg>& args) {
  check_args(*this, args);
  std::lock_guard<std::mutex> lock(mu_);
  std::string key = signature_key(args);
  auto it = cache_->traced.find(key);
  if (it != cache_->traced.end()) return it->second;
  auto K = std::make_shared<CompiledKernel::Impl>();
  K->name = name_;
  K->arg_is_tensor = arg_is_tensor_;
  {
    frontend::Tracer tracer(name_);
    std::vector<TraceArg> targs;
    for (const Arg& a : args) {
      TraceArg t;
      if (a.is_tensor()) {
        frontend::ArgSpec s{true, a.array->shape(), a.array->strides(), a.array->dtype()};
        K->signature.push_back(s);
        t.tensor = tracer.add_tensor_param(s);
      } else {
        K->signature.push_back(frontend::ArgSpec{false, {}, {}, DType::f32});
        t.scalar = tracer.add_scalar_param();
      }
      targs.push_back(t);
    }
    std::vector<Tensor> outs = trace_(targs);
    K->fn = tracer.finish(outs);
  }
  ir::verify(K->fn);
  std::vector<bool> written(K->fn.tensors.size(), false);
  ir::walk(K->fn.body, [&](const ir::Op& op) {
    if (op.kind == ir::OpKind::Store) written[op.tensor] = true;
  });
  for (int i = 0; i < K->fn.num_tensor_params; ++i)
    if (written[i]) K->written_params.push_back(i);
  K->target = lower::Target::host();
  K->spec = lower::derive_config_spec(K->fn, K->target);
  K->config = lower::default_config(K->fn, K->spec, K->target);
  cache_->traced[key] = K;
  return K;
}

std::shared_ptr<CompiledKernel::Impl> specialize(const CompiledKernel::Impl& traced, const Config& config) {
  auto K = std::make_shared<CompiledKernel::Impl>();
  K->name = traced.name;
  K->arg_is_tensor = traced.arg_is_tensor;
  K->signature = traced.signature;
  K->fn = traced.fn;  // the Block IR points into this copy
  K->target = traced.target;
  K->written_params = traced.written_params;
  K->spec = traced.spec;
  K->config = config;
  K->program = lower::lower(K->fn, K->config, K->target);
  K->config = K->program.config;  // completed with defaults for knobs the given config left out
  K->source = backend::cpu::generate_source(K->program);
  return K;
}

void load(CompiledKernel::Impl& K) {
  K.jit = backend::cpu::jit_compile(K.source);
  K.launches.clear();
  for (const lower::LaunchPlan& L : K.program.launches)
    K.launches.push_back(reinterpret_cast<LaunchFn>(K.jit.module->symbol(backend::cpu::launch_symbol(L.index))));
}

CompiledKernel KernelBase::compile(const std::vector<Arg>& args, const Config* config) {
  std::shared_ptr<CompiledKernel::Impl> traced = trace(args);
  std::lock_guard<std::mutex> lock(mu_);
  if (!config && pinned_) config = pinned_.get();
  std::string key = signature_key(args) + "|" + (config ? config->to_json() : "default");
  auto it = cache_->by_key.find(key);
  if (it != cache_->by_key.end()) return CompiledKernel(it->second);
  auto K = specialize(*traced, config ? *config : traced->config);
  load(*K);
  cache_->by_key[key] = K;
  return CompiledKernel(K);
}

std::vector<Array> KernelBase::run(const std::vector<Arg>& args) { return compile(args).run(args); }

std::vector<Array> KernelBase::interpret(const std::vector<Arg>& args) {
  return interp::interpret(trace(args)->fn, args).outputs;
}

}  // namespace parhelion

#include "driver/driver.h"

#include <cmath>
#include <cstring>
#include <set>

#include "frontend/tracer.h"
#include "ir/collectives.h"
#include "ir/verifier.h"
#include "ir/views.h"
#include "lower/config_space.h"
#include "lower/lower.h"
#include "parhelion/error.h"

namespace parhelion::driver {
namespace {

std::pair<const char*, const char*> byte_range(const Array& a) {
  const char* lo = static_cast<const char*>(a.data());
  int64_t last = 0;
  for (int d = 0; d < a.rank(); ++d) last += (a.shape()[d] - 1) * a.strides()[d];
  return {lo, lo + (a.numel() ? (last + 1) * dtype_size(a.dtype()) : 0)};
}

// A new Impl with the traced stages of `k` (the kernel, its signature and Tile IR).
std::shared_ptr<Impl> traced_part(const Impl& k) {
  auto K = std::make_shared<Impl>();
  K->name = k.name;
  K->arg_is_tensor = k.arg_is_tensor;
  K->signature = k.signature;
  K->fn = k.fn;
  K->written_params = k.written_params;
  K->integer_params = k.integer_params;
  return K;
}

}  // namespace

std::shared_ptr<Impl> trace(const std::string& name, const std::vector<bool>& arg_is_tensor,
                            const std::vector<bool>& arg_is_constant, const KernelBase::TraceFn& trace_fn,
                            const std::vector<Arg>& args, const Mesh& mesh) {
  auto K = std::make_shared<Impl>();
  K->name = name;
  K->arg_is_tensor = arg_is_tensor;
  {
    frontend::Tracer tracer(name);
    tracer.fn().mesh = mesh.axes();
    std::vector<KernelBase::TraceArg> targs;
    for (size_t i = 0; i < args.size(); ++i) {
      const Arg& a = args[i];
      KernelBase::TraceArg t;
      if (a.is_tensor()) {
        frontend::ArgSpec s{true, a.array->shape(), a.array->strides(), a.array->dtype()};
        K->signature.push_back(s);
        t.tensor = tracer.add_tensor_param(s);
      } else {
        K->signature.push_back(frontend::ArgSpec{false, {}, {}, DType::f32});
        t.scalar = tracer.add_scalar_param();
        // A compile-time integer is a host value while tracing (it also stays a scalar
        // parameter, so that every call passes its scalars the same way).
        if (i < arg_is_constant.size() && arg_is_constant[i]) t.constant = static_cast<int64_t>(a.scalar);
      }
      targs.push_back(t);
    }
    std::vector<Tensor> outs = trace_fn(targs);
    K->fn = tracer.finish(outs);
  }
  ir::verify(K->fn);
  std::vector<bool> written(K->fn.tensors.size(), false);
  ir::walk(K->fn.body, [&](const ir::Op& op) {
    // (a view writes its root; a copy writes the same tensor on its peer, and its peers' copies here)
    if (op.kind == ir::OpKind::Store || op.kind == ir::OpKind::CopyStart) written[ir::root_of(K->fn, op.tensor)] = true;
  });
  for (int i = 0; i < K->fn.num_tensor_params; ++i)
    if (written[i]) K->written_params.push_back(i);
  std::set<int> integral;
  ir::walk(K->fn.body, [&](const ir::Op& op) {
    if (op.kind == ir::OpKind::ScalarParam && K->fn.type_of(op.result).dtype == DType::i64) integral.insert(op.param);
  });
  K->integer_params.assign(integral.begin(), integral.end());
  return K;
}

std::shared_ptr<Impl> configure(const Impl& traced, const backend::Backend& backend) {
  auto K = traced_part(traced);
  K->backend = &backend;
  K->spec = lower::derive_config_spec(K->fn, backend);
  K->config = backend.default_config(K->fn, K->spec);
  return K;
}

std::shared_ptr<Impl> specialize(const Impl& configured, const Config& config) {
  auto K = traced_part(configured);  // the Block IR points into this copy of the Tile IR
  K->backend = configured.backend;
  K->spec = configured.spec;
  // Sizes that are numbers of blocks (ph::num_blocks) are bound to this config's block sizes
  // here, before lowering: every later pass, and the run's allocations, see concrete shapes.
  K->fn = lower::bind_config(configured.fn, config, *K->backend);
  K->program = lower::lower(K->fn, config, *K->backend, &configured.fn);
  K->config = K->program.config;  // completed with defaults for knobs the given config left out
  K->artifact = K->backend->generate(K->program);
  return K;
}

lower::BlockProgram plan(const Impl& configured, const Config& config) {
  configured.spec.validate(config);
  return lower::plan(configured.fn, config, *configured.backend);
}

void load(Impl& K) { K.executable = K.backend->load(K.artifact, K.program); }

namespace {

// One device's run of a loaded kernel: its tensors (arguments, then allocations and views, all
// made before the first launch), their addresses and the scalar arguments.
struct DeviceRun {
  std::vector<Array> tensors;
  std::vector<void*> ptrs;
  std::vector<double> scalars;
};

DeviceRun prepare(const Impl& K, const std::vector<Arg>& args) {
  PH_CHECK(K.executable, "run() of a kernel that is not loaded");
  const ir::Function& fn = K.fn;
  DeviceRun r;
  std::vector<Array>& tensors = r.tensors;
  tensors.resize(fn.tensors.size());
  int ti = 0;
  for (const Arg& a : args) {
    if (a.is_tensor())
      tensors[ti++] = *a.array;
    else
      r.scalars.push_back(a.scalar);
  }
  // An integer argument (ph::Int) reaches the generated code as a double: it must be one.
  for (int i : K.integer_params) {
    const double v = r.scalars.at(i);
    if (std::nearbyint(v) != v || std::abs(v) >= 9007199254740992.0)
      throw UserError("kernel " + K.name + ": integer argument " + fn.scalar_params.at(i) + " is " + std::to_string(v) +
                      ", not an integer");
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
  std::vector<void*>& ptrs = r.ptrs;
  ptrs.assign(fn.tensors.size(), nullptr);
  for (int i = 0; i < fn.num_tensor_params; ++i) ptrs[i] = tensors[i].data();
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
    } else if (op.kind == ir::OpKind::View) {  // the root's memory at the view's offset (its strides are in the code)
      const ir::TensorInfo& t = fn.tensors[op.tensor];
      ptrs[op.tensor] = static_cast<char*>(ptrs[t.root]) + t.offset * static_cast<int64_t>(dtype_size(t.dtype));
      Array root = tensors[t.root];
      tensors[op.tensor] = Array::wrap(ptrs[op.tensor], t.shape, t.strides, t.dtype, std::make_shared<Array>(root));
    }
  }
  return r;
}

// The launches, in order; `runtime` (null: the process's) is what their code calls.
std::vector<Array> execute(const Impl& K, DeviceRun& r, const ph_runtime* runtime) {
  int launch = 0;
  for (const ir::Op& op : K.fn.body)
    if (op.kind == ir::OpKind::Launch) K.executable->run_launch(launch++, r.ptrs.data(), r.scalars.data(), runtime);
  std::vector<Array> out;
  for (int t : K.fn.outputs) out.push_back(r.tensors[t]);
  return out;
}

}  // namespace

std::vector<Array> run(const Impl& K, const std::vector<Arg>& args) {
  DeviceRun r = prepare(K, args);
  return execute(K, r, nullptr);
}

std::vector<std::vector<Array>> run_on_mesh(const Impl& K, const std::vector<std::vector<Arg>>& args) {
  if (!K.backend->capabilities().collectives)
    throw UserError("the " + K.backend->name() + " backend cannot run kernel " + K.name + " on a mesh");
  std::vector<DeviceRun> devices;
  for (const std::vector<Arg>& a : args) devices.push_back(prepare(K, a));
  // Every device has its own copy of what the kernel writes (or copies land in): devices that
  // shared one would see each other's writes, which the semantics (and the interpreter) do not.
  for (int i : K.written_params)
    for (size_t d = 0; d < devices.size(); ++d)
      for (size_t e = d + 1; e < devices.size(); ++e) {
        auto [lo, hi] = byte_range(devices[d].tensors[i]);
        auto [lo2, hi2] = byte_range(devices[e].tensors[i]);
        if (lo < hi2 && lo2 < hi)
          throw UserError("kernel " + K.name + ": tensor argument " + std::to_string(i) +
                          " is written by the kernel (or copies land in it), and device " + std::to_string(d) +
                          "'s and device " + std::to_string(e) +
                          "'s overlap in memory; pass each device its own array");
      }
  std::vector<std::vector<void*>> tensors;
  for (const DeviceRun& d : devices) tensors.push_back(d.ptrs);
  std::vector<std::vector<Array>> outputs(devices.size());
  K.backend->run_on_mesh(K.fn, tensors, [&](int device, const ph_runtime* runtime) {
    outputs.at(device) = execute(K, devices.at(device), runtime);
  });
  return outputs;
}

}  // namespace parhelion::driver

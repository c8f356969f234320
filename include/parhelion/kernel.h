// Kernel: a traced, specialized, JIT-compiled kernel you call like a function.
//
//   ph::Tensor add(ph::Tensor x, ph::Tensor y) { ... }
//   ph::Kernel add_kernel("add", add);
//   ph::Array out = add_kernel(x, y);    // traces, compiles and caches on first use
//
// Each distinct input signature (shapes, strides, dtypes) is traced and compiled once; later
// calls with the same signature reuse it, and a second process finds the compiled object in
// the on-disk cache. The configuration is the heuristic default unless one is pinned.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "parhelion/array.h"
#include "parhelion/config.h"
#include "parhelion/lang.h"
#include "parhelion/mesh.h"
#include "parhelion/tune.h"

namespace parhelion {

class ConfigTable;

// One runtime argument: a tensor or a scalar.
struct Arg {
  const Array* array = nullptr;
  double scalar = 0;
  Arg(const Array& a) : array(&a) {}  // NOLINT
  Arg(double s) : scalar(s) {}        // NOLINT
  // An integer (a ph::Int, or a compile-time int64_t parameter): exact up to 2^53.
  Arg(int64_t i) : scalar(static_cast<double>(i)) {}  // NOLINT
  Arg(int i) : scalar(i) {}                           // NOLINT
  bool is_tensor() const { return array != nullptr; }
};

// A kernel specialized for one signature and compiled for one config: every stage printable.
class CompiledKernel {
 public:
  struct Impl;
  explicit CompiledKernel(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

  std::string ir() const;           // Tile IR text
  std::string block_ir() const;     // Block IR text
  std::string source() const;       // generated C++
  std::string source_path() const;  // where the generated C++ lies in the cache
  const ConfigSpec& config_spec() const;
  const Config& config() const;
  bool cache_hit() const;  // the compiled object came from the cache
  double compile_seconds() const;
  int64_t footprint_bytes() const;
  // Runs on these arguments (their signature must be the one this was compiled for).
  std::vector<Array> run(const std::vector<Arg>& args) const;

  Impl& impl() const { return *impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

// A kernel's code as a backend generated it for a target (docs/backends.md).
struct EmittedKernel {
  std::string target;           // as given: "cpu", "pallas", "pallas:v5e", ...
  std::string language;         // "c++", "python"
  std::string source;           // the program's text
  Config config;                // the config it was generated for (completed with defaults)
  std::string config_spec;      // the target's config space (legal values only)
  std::string block_ir;         // the Block IR it was generated from
  int64_t footprint_bytes = 0;  // fast memory (VMEM on a TPU) the largest launch needs
};

// A kernel generated for a TPU: a self-contained Python module of JAX Pallas kernels.
struct PallasModule {
  std::string source;       // the module's text
  Config config;            // the config it was generated for
  std::string config_spec;  // the pallas config space (legal TPU blocks only)
  std::string block_ir;     // the Block IR it was generated from
  int64_t vmem_bytes = 0;   // the largest launch's planned VMEM
  std::string tpu;          // the TPU generation, e.g. "v7x"
};

class KernelBase {
 public:
  // Builds the kernel's body on symbolic arguments; returns its outputs.
  struct TraceArg {
    Tensor tensor;
    Scalar scalar;
    int64_t constant = 0;  // a compile-time integer argument's value
  };
  using TraceFn = std::function<std::vector<Tensor>(const std::vector<TraceArg>&)>;

  // `arg_is_constant` (empty: none): the scalar arguments that are compile-time integers, whose
  // values are part of the signature the kernel is traced and compiled for.
  KernelBase(std::string name, std::vector<bool> arg_is_tensor, TraceFn trace, std::vector<bool> arg_is_constant = {});
  virtual ~KernelBase();

  const std::string& name() const { return name_; }
  // Whether a scalar argument is an integer (ph::Int, or a compile-time int) rather than a float,
  // and how many tensors the kernel returns (-1: known only once traced), where the kernel's
  // C++ signature says so (ph::Kernel<...>): what a typed interface (a torch operator's schema)
  // needs before any call.
  bool arg_is_integer(int i) const { return !arg_is_integer_.empty() && arg_is_integer_.at(i); }
  int num_outputs() const { return num_outputs_; }
  void set_signature_kinds(std::vector<bool> arg_is_integer, int num_outputs) {
    arg_is_integer_ = std::move(arg_is_integer);
    num_outputs_ = num_outputs;
  }
  int num_args() const { return static_cast<int>(arg_is_tensor_.size()); }
  bool arg_is_tensor(int i) const { return arg_is_tensor_.at(i); }
  bool arg_is_constant(int i) const { return !arg_is_constant_.empty() && arg_is_constant_.at(i); }
  const std::vector<bool>& constant_args() const { return arg_is_constant_; }

  // Traces and compiles for the signature of `args` (cached), with `config` if given, else
  // the pinned config, else the heuristic default.
  CompiledKernel compile(const std::vector<Arg>& args, const Config* config = nullptr);
  // Runs on `args`; returns the kernel's outputs.
  std::vector<Array> run(const std::vector<Arg>& args);

  // Evaluates the kernel on `args` with the reference interpreter (src/interp/interpreter.h):
  // the traced Tile IR (the same cached trace as compile/run), op by op on whole tensors in
  // double precision, with no config and no generated code; returns its outputs in their
  // storage dtypes. The oracle for the compiled kernel, within the dtype's tolerance. Unlike
  // run(), it never modifies the arguments (an in-place kernel's result is in the returned
  // output). Throws UserError for a data-dependent error (an out-of-bounds index read from a
  // tensor, a float that does not convert to an integer), naming the source line.
  std::vector<Array> interpret(const std::vector<Arg>& args);
  // Evaluates a collective kernel (parhelion/collectives.h) on every device of `mesh` with the
  // reference interpreter: `args[d]` are device d's arguments (the same shapes, dtypes and
  // layouts on every device), element d of the result its outputs. Devices run one at a time,
  // switching when one waits. Throws UserError, naming the line, for a race on a copy's regions,
  // a deadlock (every device still running is waiting), a copy never waited for, a semaphore not
  // back at 0 at the end, a peer outside the mesh, and interpret()'s errors.
  std::vector<std::vector<Array>> interpret_on(const Mesh& mesh, const std::vector<std::vector<Arg>>& args);
  // Runs a collective kernel on every device of `mesh` on this host's cpu backend: the devices
  // are threads of this process, run one at a time, switching when one waits (the interpreter's
  // schedule), with `config` if given, else the default. Throws UserError for a deadlock, a copy
  // never waited for, a semaphore not back at 0 and a peer outside the mesh, as interpret_on;
  // races are found by interpret_on only.
  std::vector<std::vector<Array>> run_on(const Mesh& mesh, const std::vector<std::vector<Arg>>& args,
                                         const Config* config = nullptr);
  // The kernel traced on `mesh` for the signature of `args` (one device's; cached).
  std::shared_ptr<CompiledKernel::Impl> trace_on(const Mesh& mesh, const std::vector<Arg>& args);

  // Searches the config space for the fastest correct config for the signature of `args`
  // (or returns the cached winner); see tune.h.
  TuneReport tune(const std::vector<Arg>& args, const TuneOptions& options = {});

  // The traced kernel for the signature of `args` (cached), configured for this host's cpu
  // backend: Tile IR, ConfigSpec and the default config, before any code is generated.
  std::shared_ptr<CompiledKernel::Impl> trace(const std::vector<Arg>& args);
  // The same trace configured for `target`'s backend (cached per target).
  std::shared_ptr<CompiledKernel::Impl> trace(const std::vector<Arg>& args, const std::string& target);

  // Generates the kernel for `target` ("cpu", "pallas" = "pallas:v7x", "pallas:v5e", ...)
  // for the signature of `args`, with `config` if given, else the target's default. Throws
  // UserError for an unknown target, an illegal config, one that does not fit the target's
  // fast memory, or a construct the target's backend does not support.
  EmittedKernel emit(const std::vector<Arg>& args, const std::string& target = "cpu", const Config* config = nullptr);

  // emit() for TPU generation `tpu` (v5e, v6e, v5p, v7x), as a Pallas module.
  PallasModule emit_pallas(const std::vector<Arg>& args, const std::string& tpu = "v7x",
                           const Config* config = nullptr);
  // emit() for a kernel on `mesh` (args: one device's; an empty mesh: emit()).
  EmittedKernel emit_on(const Mesh& mesh, const std::vector<Arg>& args, const std::string& target = "cpu",
                        const Config* config = nullptr);
  // emit_pallas() for a kernel on `mesh` (args: one device's): the module's kernel function takes
  // every tensor argument stacked over the mesh's devices and runs under jax.shard_map
  // (docs/distributed.md).
  PallasModule emit_pallas_on(const Mesh& mesh, const std::vector<Arg>& args, const std::string& tpu = "v7x",
                              const Config* config = nullptr);

  // Pins a config for every later call (validated against each signature's ConfigSpec).
  void pin_config(const Config& c);
  // Pins a config for later calls with the signature of `for_args` only (their shapes, dtypes,
  // strides and compile-time integers); it takes precedence over the config pinned for all.
  void pin_config(const Config& c, const std::vector<Arg>& for_args);
  // Drops every pinned config.
  void unpin_config();
  // Takes the configs of calls with none given or pinned from a table of tuned configs
  // (config_table.h): the entry for the call's signature, else the nearest legal one, else the
  // default. Null drops the table.
  void use_config_table(std::shared_ptr<const ConfigTable> table);

  // The config a call on `args` takes for `target` when none is given, and where it comes from:
  // "pinned for this signature", "pinned", "table: exact", "table: nearest (f32[...] ...)",
  // "default".
  struct ConfigChoice {
    Config config;
    std::string source;
  };
  ConfigChoice config_for(const std::vector<Arg>& args, const std::string& target = "cpu");

 private:
  std::string name_;
  std::vector<bool> arg_is_tensor_;
  std::vector<bool> arg_is_constant_;
  std::vector<bool> arg_is_integer_;
  int num_outputs_ = -1;
  TraceFn trace_;
  std::mutex mu_;
  std::unique_ptr<Config> pinned_;
  std::map<std::string, Config> pinned_by_signature_;
  std::shared_ptr<const ConfigTable> table_;
  ConfigChoice choose_config(const std::vector<Arg>& args, const std::string& target,
                             const CompiledKernel::Impl& configured);
  ConfigChoice choose_from_table(const std::vector<Arg>& args, const std::string& target,
                                 const CompiledKernel::Impl& configured) const;
  EmittedKernel emitted(const CompiledKernel::Impl& configured, const std::string& target, const Config* config);
  struct Cache;
  std::unique_ptr<Cache> cache_;
};

namespace detail {
template <class T>
struct ArgTraits;
template <>
struct ArgTraits<Tensor> {
  using Host = const Array&;
  static constexpr bool is_tensor = true, is_constant = false, is_integer = false;
  static Tensor from(const KernelBase::TraceArg& a) { return a.tensor; }
};
template <>
struct ArgTraits<Scalar> {
  using Host = double;
  static constexpr bool is_tensor = false, is_constant = false, is_integer = false;
  static Scalar from(const KernelBase::TraceArg& a) { return a.scalar; }
};
template <>
struct ArgTraits<Int> {
  using Host = int64_t;
  static constexpr bool is_tensor = false, is_constant = false, is_integer = true;
  static Int from(const KernelBase::TraceArg& a) { return Int(a.scalar.param()); }
};
template <>
struct ArgTraits<int64_t> {  // a compile-time constant
  using Host = int64_t;
  static constexpr bool is_tensor = false, is_constant = true, is_integer = true;
  static int64_t from(const KernelBase::TraceArg& a) { return a.constant; }
};
template <>
struct ArgTraits<int> {
  using Host = int64_t;
  static constexpr bool is_tensor = false, is_constant = true, is_integer = true;
  static int from(const KernelBase::TraceArg& a) { return static_cast<int>(a.constant); }
};
template <class T>
struct ArgTraits<const T&> : ArgTraits<T> {};

template <class R>
struct ResultTraits;
template <>
struct ResultTraits<Tensor> {
  using Host = Array;
  static constexpr int count = 1;
  static std::vector<Tensor> flatten(const Tensor& t) { return {t}; }
  static Host unflatten(std::vector<Array> v) { return std::move(v.at(0)); }
};
template <class... T>
struct ResultTraits<std::tuple<T...>> {
  using Host = std::tuple<std::conditional_t<true, Array, T>...>;
  static constexpr int count = sizeof...(T);
  static std::vector<Tensor> flatten(const std::tuple<T...>& t) {
    return std::apply([](const auto&... x) { return std::vector<Tensor>{x...}; }, t);
  }
  template <size_t... I>
  static Host unflatten_impl(std::vector<Array>& v, std::index_sequence<I...>) {
    return Host{std::move(v.at(I))...};
  }
  static Host unflatten(std::vector<Array> v) { return unflatten_impl(v, std::index_sequence_for<T...>{}); }
};
template <>
struct ResultTraits<void> {
  using Host = void;
};
}  // namespace detail

template <class Fn>
class Kernel;

template <class R, class... Args>
class Kernel<R(Args...)> : public KernelBase {
 public:
  using HostResult = typename detail::ResultTraits<R>::Host;

  Kernel(std::string name, R (*fn)(Args...))
      : KernelBase(std::move(name), {detail::ArgTraits<Args>::is_tensor...},
                   [fn](const std::vector<TraceArg>& a) { return invoke(fn, a, std::index_sequence_for<Args...>{}); },
                   {detail::ArgTraits<Args>::is_constant...}) {
    set_signature_kinds({detail::ArgTraits<Args>::is_integer...}, result_count());
  }

  static constexpr int result_count() {
    if constexpr (std::is_void_v<R>)
      return 0;
    else
      return detail::ResultTraits<R>::count;
  }

  HostResult operator()(typename detail::ArgTraits<Args>::Host... args) {
    std::vector<Array> out = run({Arg(args)...});
    if constexpr (!std::is_void_v<R>) return detail::ResultTraits<R>::unflatten(std::move(out));
  }

 private:
  template <size_t... I>
  static std::vector<Tensor> invoke(R (*fn)(Args...), const std::vector<TraceArg>& a, std::index_sequence<I...>) {
    if constexpr (std::is_void_v<R>) {
      fn(detail::ArgTraits<Args>::from(a[I])...);
      return {};
    } else {
      return detail::ResultTraits<R>::flatten(fn(detail::ArgTraits<Args>::from(a[I])...));
    }
  }
};

template <class R, class... Args>
Kernel(std::string, R (*)(Args...)) -> Kernel<R(Args...)>;

}  // namespace parhelion

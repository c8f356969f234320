#include "kernels.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <dlfcn.h>

#include <parhelion/export.h>
#include <parhelion/parhelion.h>

#include "arrays.h"
#include "driver/compiled_kernel_impl.h"
#include "kernels/registry.h"

namespace nb = nanobind;

namespace parhelion::python {
namespace {

// The arguments of one call, converted: the Arrays must outlive the Args that point at them.
struct CallArgs {
  std::vector<Array> arrays;
  std::vector<Arg> args;
};

// A mesh from its axes, (name, devices) pairs in order.
Mesh mesh_of(const std::vector<std::pair<std::string, int64_t>>& axes) {
  std::vector<MeshAxis> a;
  for (const auto& [name, size] : axes) a.push_back({name, size});
  return Mesh(a);
}

// `names`: the parameters' names (the Python signature's), for errors; empty: by position.
CallArgs convert_args(KernelBase& k, const nb::sequence& values, const std::vector<std::string>& names) {
  const size_t n = nb::len(values);
  if (static_cast<int>(n) != k.num_args())
    throw UserError(k.name() + " takes " + std::to_string(k.num_args()) + " arguments, got " + std::to_string(n));
  CallArgs c;
  c.arrays.reserve(n);  // the Args point into it: no reallocation
  std::vector<bool> read_only;
  std::vector<std::string> names_of_tensors;
  for (size_t i = 0; i < n; ++i) {
    nb::handle v = values[i];
    const std::string what = k.name() + "'s argument " + (i < names.size() ? "'" + names[i] + "'" : std::to_string(i));
    if (k.arg_is_tensor(static_cast<int>(i))) {
      bool ro = false;
      c.arrays.push_back(to_array(v, what, &ro));
      read_only.push_back(ro);
      names_of_tensors.push_back(what);
    } else if (nb::isinstance<nb::bool_>(v)) {
      throw UserError(what + " is a bool; a scalar argument is an int or a float");
    } else if (nb::isinstance<nb::int_>(v)) {
      c.args.emplace_back(nb::cast<int64_t>(v));
    } else if (nb::isinstance<nb::float_>(v)) {
      if (k.arg_is_constant(static_cast<int>(i))) throw UserError(what + " is a compile-time integer; got a float");
      c.args.emplace_back(nb::cast<double>(v));
    } else if (nb::hasattr(v, "__float__") && !nb::hasattr(v, "__dlpack__")) {
      c.args.emplace_back(nb::cast<double>(v.attr("__float__")()));
    } else {
      throw UserError(what + " is a scalar (an int or a float), got a " + nb::type_name(v.type()).c_str());
    }
  }
  // Args in order: tensors point into `arrays`.
  size_t next_array = 0;
  std::vector<Arg> ordered;
  for (size_t i = 0, s = 0; i < n; ++i) {
    if (k.arg_is_tensor(static_cast<int>(i)))
      ordered.emplace_back(c.arrays[next_array++]);
    else
      ordered.push_back(c.args[s++]);
  }
  c.args = std::move(ordered);
  // A kernel that stores to an argument must not write memory its producer marked read-only.
  if (std::find(read_only.begin(), read_only.end(), true) != read_only.end()) {
    std::shared_ptr<CompiledKernel::Impl> traced = k.trace(c.args);
    for (int p : traced->written_params)
      if (read_only.at(p))
        throw UserError(names_of_tensors.at(p) +
                        " is read-only (a jax array, or a numpy array with write=False), and " + k.name() +
                        " stores to it; pass a writable copy (numpy.array(x))");
  }
  return c;
}

nb::list to_python(std::vector<Array> outs) {
  nb::list l;
  for (Array& a : outs) l.append(from_array(std::move(a)));
  return l;
}

std::unique_ptr<Config> parse_config(const std::string& json) {
  if (json.empty()) return nullptr;
  return std::make_unique<Config>(Config::from_json(json));
}

nb::dict emitted(const EmittedKernel& e) {
  nb::dict d;
  d["target"] = e.target;
  d["language"] = e.language;
  d["source"] = e.source;
  d["config"] = e.config.to_json();
  d["config_spec"] = e.config_spec;
  d["block_ir"] = e.block_ir;
  d["footprint_bytes"] = e.footprint_bytes;
  return d;
}

Effort effort_of(const std::string& s) {
  Effort e;
  if (!parse_effort(s, &e)) throw UserError("unknown tuning effort '" + s + "': none, quick or full");
  return e;
}

}  // namespace

void bind_kernels(nb::module_& m) {
  // Every call releases the GIL around the compiled kernel or compiler: a long kernel does not
  // stop the caller's other Python threads.
  nb::class_<KernelBase>(m, "KernelBase")
      .def_prop_ro("name", &KernelBase::name)
      .def_prop_ro("num_args", &KernelBase::num_args)
      .def("arg_is_tensor", &KernelBase::arg_is_tensor)
      .def("arg_is_constant", &KernelBase::arg_is_constant)
      .def("arg_is_integer", &KernelBase::arg_is_integer)
      .def_prop_ro("num_outputs", &KernelBase::num_outputs)
      .def(
          "output_specs",
          [](KernelBase& k, const nb::sequence& specs) {
            // specs: per argument, (shape, dtype) for a tensor, or its value for a scalar. The
            // kernel is traced on memory-less arrays of those shapes (a fake tensor's view of a
            // call): its outputs' (shape, dtype), with no data read or written.
            if (static_cast<int>(nb::len(specs)) != k.num_args())
              throw UserError(k.name() + " takes " + std::to_string(k.num_args()) + " arguments, got " +
                              std::to_string(nb::len(specs)));
            std::vector<Array> arrays;
            arrays.reserve(nb::len(specs));
            std::vector<Arg> args;
            for (size_t i = 0; i < nb::len(specs); ++i) {
              nb::handle s = specs[i];
              if (k.arg_is_tensor(static_cast<int>(i))) {
                auto [shape, dtype] = nb::cast<std::pair<Shape, std::string>>(s);
                std::optional<DType> d = parse_dtype(dtype);
                if (!d) throw UserError(k.name() + ": argument " + std::to_string(i) + " has dtype " + dtype);
                arrays.push_back(Array::placeholder(shape, *d));
                args.emplace_back(arrays.back());
              } else {
                args.emplace_back(nb::cast<double>(s));
              }
            }
            std::shared_ptr<CompiledKernel::Impl> traced = k.trace(args);
            nb::list out;
            for (int t : traced->fn.outputs) {
              const ir::TensorInfo& info = traced->fn.tensors.at(t);
              out.append(nb::make_tuple(info.shape, std::string(dtype_name(info.dtype))));
            }
            return out;
          },
          nb::arg("specs"))
      .def(
          "run",
          [](KernelBase& k, const nb::sequence& args, const std::vector<std::string>& names) {
            CallArgs c = convert_args(k, args, names);
            std::vector<Array> out;
            {
              nb::gil_scoped_release nogil;
              out = k.run(c.args);
            }
            return to_python(std::move(out));
          },
          nb::arg("args"), nb::arg("names") = std::vector<std::string>{})
      .def(
          "interpret",
          [](KernelBase& k, const nb::sequence& args, const std::vector<std::string>& names) {
            CallArgs c = convert_args(k, args, names);
            return to_python(k.interpret(c.args));
          },
          nb::arg("args"), nb::arg("names") = std::vector<std::string>{})
      .def(
          "interpret_on",
          [](KernelBase& k, const std::vector<std::pair<std::string, int64_t>>& axes, const nb::sequence& devices,
             const std::vector<std::string>& names) {
            std::vector<CallArgs> calls;
            calls.reserve(nb::len(devices));  // the Args point into each CallArgs' arrays
            for (nb::handle d : devices) calls.push_back(convert_args(k, nb::cast<nb::sequence>(d), names));
            std::vector<std::vector<Arg>> args;
            for (const CallArgs& c : calls) args.push_back(c.args);
            nb::list out;
            for (std::vector<Array>& o : k.interpret_on(mesh_of(axes), args)) out.append(to_python(std::move(o)));
            return out;
          },
          nb::arg("axes"), nb::arg("devices"), nb::arg("names") = std::vector<std::string>{})
      .def(
          "run_on",
          [](KernelBase& k, const std::vector<std::pair<std::string, int64_t>>& axes, const nb::sequence& devices,
             const std::string& config, const std::vector<std::string>& names) {
            std::vector<CallArgs> calls;
            calls.reserve(nb::len(devices));
            for (nb::handle d : devices) calls.push_back(convert_args(k, nb::cast<nb::sequence>(d), names));
            std::vector<std::vector<Arg>> args;
            for (const CallArgs& c : calls) args.push_back(c.args);
            std::unique_ptr<Config> cfg = parse_config(config);
            std::vector<std::vector<Array>> outs;
            {
              nb::gil_scoped_release nogil;
              outs = k.run_on(mesh_of(axes), args, cfg.get());
            }
            nb::list out;
            for (std::vector<Array>& o : outs) out.append(to_python(std::move(o)));
            return out;
          },
          nb::arg("axes"), nb::arg("devices"), nb::arg("config") = "", nb::arg("names") = std::vector<std::string>{})
      .def(
          "emit",
          [](KernelBase& k, const nb::sequence& args, const std::string& target, const std::string& config,
             const std::vector<std::string>& names) {
            CallArgs c = convert_args(k, args, names);
            std::unique_ptr<Config> cfg = parse_config(config);
            return emitted(k.emit(c.args, target, cfg.get()));
          },
          nb::arg("args"), nb::arg("target") = "cpu", nb::arg("config") = "",
          nb::arg("names") = std::vector<std::string>{})
      .def(
          "emit_on",
          [](KernelBase& k, const std::vector<std::pair<std::string, int64_t>>& axes, const nb::sequence& args,
             const std::string& target, const std::string& config, const std::vector<std::string>& names) {
            CallArgs c = convert_args(k, args, names);
            std::unique_ptr<Config> cfg = parse_config(config);
            return emitted(k.emit_on(mesh_of(axes), c.args, target, cfg.get()));
          },
          nb::arg("axes"), nb::arg("args"), nb::arg("target") = "cpu", nb::arg("config") = "",
          nb::arg("names") = std::vector<std::string>{})
      .def(
          "compile",
          [](KernelBase& k, const nb::sequence& args, const std::string& config,
             const std::vector<std::string>& names) {
            CallArgs c = convert_args(k, args, names);
            std::unique_ptr<Config> cfg = parse_config(config);
            CompiledKernel ck = k.compile(c.args, cfg.get());
            nb::dict d;
            d["ir"] = ck.ir();
            d["block_ir"] = ck.block_ir();
            d["source"] = ck.source();
            d["config"] = ck.config().to_json();
            d["cache_hit"] = ck.cache_hit();
            d["compile_seconds"] = ck.compile_seconds();
            return d;
          },
          nb::arg("args"), nb::arg("config") = "", nb::arg("names") = std::vector<std::string>{})
      .def(
          "tune",
          [](KernelBase& k, const nb::sequence& args, const std::string& effort, double budget, bool progress,
             const std::vector<std::string>& names) {
            CallArgs c = convert_args(k, args, names);
            TuneOptions opt;
            opt.effort = effort_of(effort);
            opt.budget_seconds = budget;
            opt.progress = progress;
            TuneReport r;
            {
              nb::gil_scoped_release nogil;
              r = k.tune(c.args, opt);
            }
            return r.to_json();
          },
          nb::arg("args"), nb::arg("effort") = "quick", nb::arg("budget_seconds") = 0.0, nb::arg("progress") = false,
          nb::arg("names") = std::vector<std::string>{})
      .def("pin_config", [](KernelBase& k, const std::string& json) { k.pin_config(Config::from_json(json)); })
      .def(
          "pin_config_for",
          [](KernelBase& k, const std::string& json, const nb::sequence& args, const std::vector<std::string>& names) {
            CallArgs c = convert_args(k, args, names);
            k.pin_config(Config::from_json(json), c.args);
          },
          nb::arg("config"), nb::arg("args"), nb::arg("names") = std::vector<std::string>{})
      .def("unpin_config", &KernelBase::unpin_config)
      .def(
          "use_config_table",
          [](KernelBase& k, const ConfigTable* table) {
            k.use_config_table(table ? std::make_shared<const ConfigTable>(*table) : nullptr);
          },
          nb::arg("table").none())
      .def(
          "config_for",
          [](KernelBase& k, const nb::sequence& args, const std::string& target,
             const std::vector<std::string>& names) {
            CallArgs c = convert_args(k, args, names);
            KernelBase::ConfigChoice choice = k.config_for(c.args, target);
            return nb::make_tuple(choice.config.to_json(), choice.source);
          },
          nb::arg("args"), nb::arg("target") = "cpu", nb::arg("names") = std::vector<std::string>{});

  // Deployable config tables (include/parhelion/config_table.h).
  nb::class_<ConfigTable>(m, "ConfigTable")
      .def(nb::init<>())
      .def_static("load", &ConfigTable::load)
      .def_static("from_json", &ConfigTable::from_json)
      .def("save", &ConfigTable::save)
      .def("to_json", &ConfigTable::to_json)
      .def("merge",
           [](ConfigTable& t, const ConfigTable& other) {
             for (const ConfigTableEntry& e : other.entries) t.add(e);
           })
      .def("__len__", [](const ConfigTable& t) { return t.entries.size(); });
  m.def(
      "tune_table",
      [](KernelBase& k, const nb::sequence& calls, const std::string& effort, double budget, const std::string& target,
         const std::vector<std::string>& names) {
        std::vector<CallArgs> converted;
        converted.reserve(nb::len(calls));  // the Args point into each CallArgs' arrays
        std::vector<std::vector<Arg>> arg_lists;
        for (nb::handle call : calls) {
          converted.push_back(convert_args(k, nb::cast<nb::sequence>(call), names));
          arg_lists.push_back(converted.back().args);
        }
        TuneOptions opt;
        opt.effort = effort_of(effort);
        opt.budget_seconds = budget;
        opt.progress = false;
        nb::gil_scoped_release nogil;
        return tune_table(k, arg_lists, opt, target);
      },
      nb::arg("kernel"), nb::arg("calls"), nb::arg("effort") = "quick", nb::arg("budget_seconds") = 0.0,
      nb::arg("target") = "cpu", nb::arg("names") = std::vector<std::string>{});

  // The kernel library (kernels/registry.h): name -> (kernel, summary, shape help, dtypes).
  m.def("library", [] {
    nb::dict d;
    for (const kernels::KernelEntry& e : kernels::registry()) {
      std::vector<std::string> dtypes;
      for (DType t : e.dtypes) dtypes.emplace_back(dtype_name(t));
      d[e.name.c_str()] = nb::make_tuple(nb::cast(e.kernel, nb::rv_policy::reference), e.summary, e.shape_help, dtypes);
    }
    return d;
  });

  // Kernels a user compiled into a shared library (include/parhelion/export.h). The library
  // stays loaded for the life of the process: its kernels are static objects.
  m.def("load_library", [](const std::string& path) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) throw UserError(std::string("cannot load the kernel library: ") + dlerror());
    using AbiFn = int (*)();
    using KernelsFn = int (*)(KernelBase* const**);
    auto abi = reinterpret_cast<AbiFn>(dlsym(handle, "parhelion_export_abi"));
    auto kernels = reinterpret_cast<KernelsFn>(dlsym(handle, "parhelion_exported_kernels"));
    if (!abi || !kernels)
      throw UserError(path +
                      " exports no Parhelion kernels: add PARHELION_EXPORT_KERNELS(k1, k2, ...) "
                      "(parhelion/export.h) to one of its source files");
    if (abi() != PARHELION_EXPORT_ABI)
      throw UserError(path + " was built against another Parhelion (export ABI " + std::to_string(abi()) +
                      ", this one's " + std::to_string(PARHELION_EXPORT_ABI) + "): rebuild it");
    KernelBase* const* list = nullptr;
    const int n = kernels(&list);
    nb::list out;
    for (int i = 0; i < n; ++i) out.append(nb::cast(list[i], nb::rv_policy::reference));
    return out;
  });
  // Where libparhelion is, for users who link their kernel libraries against it.
  m.def("library_path", [] {
    Dl_info info;
    if (!dladdr(reinterpret_cast<void*>(&parse_effort), &info) || !info.dli_fname)
      throw UserError("cannot locate libparhelion");
    return std::string(info.dli_fname);
  });

  // For tests of the Python entry points against the library's own references: seeded
  // arguments for a shape (arrays, then scalars, in the kernel's order) and the expected outputs.
  m.def("sample", [](const std::string& name, const Shape& shape, const std::string& dtype, uint64_t seed) {
    const kernels::KernelEntry& e = kernels::find_kernel(name);
    std::optional<DType> d = parse_dtype(dtype);
    if (!d) throw UserError("unknown dtype '" + dtype + "'");
    kernels::Inputs in = e.make_inputs(shape, *d, seed);
    nb::list args;
    for (const Array& t : in.tensors) args.append(from_array(t));
    // Scalars follow the tensors; an integer parameter gets a Python int.
    const int first_scalar = e.kernel->num_args() - static_cast<int>(in.scalars.size());
    for (size_t i = 0; i < in.scalars.size(); ++i) {
      if (e.kernel->arg_is_integer(first_scalar + static_cast<int>(i)))
        args.append(static_cast<int64_t>(in.scalars[i]));
      else
        args.append(in.scalars[i]);
    }
    nb::list refs;
    for (Array& r : e.reference(in)) refs.append(from_array(std::move(r)));
    return nb::make_tuple(args, refs);
  });
  // Each output against its reference, with the library's tolerance for the kernel and shape:
  // a list of (ok, max_abs_err).
  m.def("compare", [](const std::string& name, const Shape& shape, const std::string& dtype, const nb::sequence& outs,
                      const nb::sequence& refs) {
    const kernels::KernelEntry& e = kernels::find_kernel(name);
    std::optional<DType> d = parse_dtype(dtype);
    if (!d) throw UserError("unknown dtype '" + dtype + "'");
    if (nb::len(outs) != nb::len(refs))
      throw UserError(name + ": " + std::to_string(nb::len(outs)) + " outputs for " + std::to_string(nb::len(refs)) +
                      " references");
    nb::list res;
    for (size_t i = 0; i < nb::len(outs); ++i) {
      kernels::Closeness c =
          kernels::compare(to_array(outs[i], "output " + std::to_string(i)),
                           to_array(refs[i], "reference " + std::to_string(i)), *d, e.tolerance(shape));
      res.append(nb::make_tuple(c.ok, c.max_abs_err));
    }
    return res;
  });
}

}  // namespace parhelion::python

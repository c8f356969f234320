// The language from Python: the same operations as include/parhelion/lang.h, traced into the
// same Tile IR. Each binding names the user's Python line (ScopedSourceLine) before it calls
// the C++ operation, so that the trace and every error carry the Python file and line.
#include "language.h"

#include <Python.h>
#include <frameobject.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nanobind/stl/function.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <parhelion/parhelion.h>

#include "runtime/source_line.h"

namespace nb = nanobind;

namespace parhelion::python {
namespace {

// The directory of the parhelion package's own Python files: their frames are skipped when
// looking for the user's line (the `tile` generator, the kernel decorator).
std::string& package_dir() {
  static std::string dir;
  return dir;
}

// Names the innermost Python frame outside the parhelion package as the source line of every
// operation traced while this lives.
class PythonLine {
 public:
  PythonLine() {
    PyFrameObject* f = PyEval_GetFrame();  // borrowed
    Py_XINCREF(f);
    while (f) {
      PyCodeObject* code = PyFrame_GetCode(f);
      nb::object file = nb::steal(PyObject_GetAttrString(reinterpret_cast<PyObject*>(code), "co_filename"));
      Py_DECREF(code);
      std::string name = file.is_valid() && nb::isinstance<nb::str>(file) ? nb::cast<std::string>(file) : "";
      if (package_dir().empty() || name.rfind(package_dir(), 0) != 0) {
        line_.emplace(name, PyFrame_GetLineNumber(f));
        Py_DECREF(f);
        return;
      }
      PyFrameObject* back = PyFrame_GetBack(f);
      Py_DECREF(f);
      f = back;
    }
  }

 private:
  std::optional<ScopedSourceLine> line_;
};

std::string py_type_name(nb::handle h) { return nb::type_name(h.type()).c_str(); }

DType dtype_of(nb::handle h) {
  std::string s = nb::isinstance<nb::str>(h) ? nb::cast<std::string>(h) : nb::cast<std::string>(nb::str(h));
  if (s.rfind("torch.", 0) == 0) s = s.substr(6);
  static const std::pair<const char*, const char*> kAliases[] = {
      {"float32", "f32"},       {"float", "f32"}, {"bfloat16", "bf16"}, {"float16", "f16"},
      {"half", "f16"},          {"int64", "i64"}, {"long", "i64"},      {"int32", "i32"},
      {"int", "i32"},           {"int8", "i8"},   {"uint8", "u8"},      {"float8_e4m3fn", "f8e4m3"},
      {"float8_e5m2", "f8e5m2"}};
  for (const auto& [alias, name] : kAliases)
    if (s == alias) s = name;
  if (std::optional<DType> d = parse_dtype(s)) return *d;
  throw UserError(
      "unknown dtype '" + s + "': f32, bf16, f16, f8e4m3, f8e5m2, i8, u8, i32, i64 or bool (or the torch dtype)",
      std::source_location::current());
}

Operand operand(nb::handle h) {
  if (nb::isinstance<Tensor>(h)) return Operand(nb::cast<const Tensor&>(h));
  if (nb::isinstance<Var>(h)) return Operand(nb::cast<const Var&>(h));
  if (nb::isinstance<Int>(h)) return Operand(nb::cast<const Int&>(h));
  if (nb::isinstance<Scalar>(h)) return Operand(nb::cast<const Scalar&>(h));
  if (nb::isinstance<nb::bool_>(h))
    throw UserError("a bool as an operand: write 1 or 0, or a comparison (which is a bool block)",
                    std::source_location::current());
  if (nb::isinstance<nb::int_>(h)) return Operand(nb::cast<int64_t>(h));
  if (nb::isinstance<nb::float_>(h)) return Operand(nb::cast<double>(h));
  throw UserError("expected a block, a parhelion.Var, a scalar argument or a number, got a " + py_type_name(h),
                  std::source_location::current());
}

std::vector<Operand> operands(const nb::sequence& xs) {
  std::vector<Operand> v;
  for (nb::handle x : xs) v.push_back(operand(x));
  return v;
}

Index index_of(nb::handle h) {
  if (nb::isinstance<Tile>(h)) return Index(nb::cast<const Tile&>(h));
  if (nb::isinstance<Tensor>(h)) return Index(nb::cast<const Tensor&>(h));
  if (nb::isinstance<Var>(h)) return Index(nb::cast<const Var&>(h));
  if (nb::isinstance<SliceSpec>(h)) return Index(nb::cast<const SliceSpec&>(h));
  if (nb::isinstance<nb::bool_>(h)) throw UserError("a bool as an index", std::source_location::current());
  if (nb::isinstance<nb::int_>(h)) return Index(nb::cast<int64_t>(h));
  if (nb::isinstance<nb::slice>(h)) {
    nb::object start = h.attr("start"), stop = h.attr("stop"), step = h.attr("step");
    if (!step.is_none()) throw UserError("a slice with a step as an index", std::source_location::current());
    if (start.is_none() && stop.is_none()) return Index(all);
    if (!start.is_none() && !stop.is_none() && nb::isinstance<nb::int_>(start) && nb::isinstance<nb::int_>(stop))
      return Index(slice(nb::cast<int64_t>(start), nb::cast<int64_t>(stop)));
    throw UserError(
        "a slice index is `:` (the whole dim) or `a:b` with two integers; for a start computed in the kernel "
        "use parhelion.slice(start, length)",
        std::source_location::current());
  }
  throw UserError(
      "an index is a tile, `:`, an integer, `a:b`, an i64 scalar or an i64 index block, got a " + py_type_name(h),
      std::source_location::current());
}

std::vector<Index> indices(nb::handle key) {
  std::vector<Index> idx;
  if (nb::isinstance<nb::tuple>(key)) {
    for (nb::handle k : nb::cast<nb::tuple>(key)) {
      // A tuple of tiles (`tile(x.shape)`'s) inside a subscript indexes one dim each.
      if (nb::isinstance<nb::tuple>(k)) {
        for (nb::handle kk : nb::cast<nb::tuple>(k)) idx.push_back(index_of(kk));
      } else {
        idx.push_back(index_of(k));
      }
    }
  } else {
    idx.push_back(index_of(key));
  }
  return idx;
}

DimSpec dim_of(nb::handle h) {
  if (nb::isinstance<Tile>(h)) return DimSpec(nb::cast<const Tile&>(h));
  if (nb::isinstance<BlockSizeRef>(h)) return DimSpec(nb::cast<const BlockSizeRef&>(h));
  if (nb::isinstance<NumBlocks>(h)) return DimSpec(nb::cast<const NumBlocks&>(h));
  if (nb::isinstance<nb::int_>(h) && !nb::isinstance<nb::bool_>(h)) return DimSpec(nb::cast<int64_t>(h));
  throw UserError("a dimension is an integer, a tile or a block size, got a " + py_type_name(h),
                  std::source_location::current());
}

std::vector<DimSpec> dims_of(nb::handle shape) {
  std::vector<DimSpec> dims;
  if (nb::isinstance<nb::sequence>(shape) && !nb::isinstance<nb::str>(shape)) {
    for (nb::handle d : nb::cast<nb::sequence>(shape)) dims.push_back(dim_of(d));
  } else {
    dims.push_back(dim_of(shape));
  }
  return dims;
}

Extent extent_of(nb::handle h) {
  if (nb::isinstance<Extent>(h)) return nb::cast<const Extent&>(h);
  if (nb::isinstance<Tile>(h)) return Extent(nb::cast<const Tile&>(h));
  if (nb::isinstance<NumBlocks>(h)) return Extent(nb::cast<const NumBlocks&>(h));
  if (nb::isinstance<nb::int_>(h) && !nb::isinstance<nb::bool_>(h)) return Extent(nb::cast<int64_t>(h));
  throw UserError("a loop dimension is an integer, parhelion.range(...), an enclosing tile or num_blocks(...), got a " +
                      py_type_name(h),
                  std::source_location::current());
}

// A unary or binary operation of the language, bound with the caller's Python line.
template <class F>
auto unary(F f) {
  return [f](nb::handle x) {
    PythonLine line;
    return f(operand(x));
  };
}
template <class F>
auto binary(F f) {
  return [f](nb::handle a, nb::handle b) {
    PythonLine line;
    return f(operand(a), operand(b));
  };
}
// The reflected form (`2 * x` is x.__rmul__(2)).
template <class F>
auto reflected(F f) {
  return [f](nb::handle a, nb::handle b) {
    PythonLine line;
    return f(operand(b), operand(a));
  };
}

// A kernel traced from a Python function: the function runs once per signature, on Tensors,
// Scalars, Ints and ints, and returns a Tensor, a tuple of them or None.
class PythonKernel : public KernelBase {
 public:
  PythonKernel(const std::string& name, const std::vector<std::string>& kinds, nb::object fn)
      : KernelBase(name, tensors(kinds), trace_fn(kinds, hold(std::move(fn))), constants(kinds)) {
    std::vector<bool> integers;
    for (const std::string& k : kinds) integers.push_back(k == "int" || k == "constexpr");
    set_signature_kinds(integers, -1);  // the outputs: known once traced
  }

 private:
  static std::vector<bool> tensors(const std::vector<std::string>& kinds) {
    std::vector<bool> v;
    for (const std::string& k : kinds) v.push_back(k == "tensor");
    return v;
  }
  static std::vector<bool> constants(const std::vector<std::string>& kinds) {
    std::vector<bool> v;
    for (const std::string& k : kinds) v.push_back(k == "constexpr");
    return v;
  }
  // The function outlives no interpreter: released with the GIL held.
  static std::shared_ptr<nb::object> hold(nb::object fn) {
    return std::shared_ptr<nb::object>(new nb::object(std::move(fn)), [](nb::object* p) {
      nb::gil_scoped_acquire gil;
      delete p;
    });
  }
  static TraceFn trace_fn(std::vector<std::string> kinds, std::shared_ptr<nb::object> fn) {
    return [kinds = std::move(kinds), fn](const std::vector<TraceArg>& args) {
      nb::gil_scoped_acquire gil;
      nb::list py_args;
      for (size_t i = 0; i < args.size(); ++i) {
        const std::string& k = kinds.at(i);
        if (k == "tensor")
          py_args.append(nb::cast(args[i].tensor));
        else if (k == "int")
          py_args.append(nb::cast(Int(args[i].scalar.param())));
        else if (k == "constexpr")
          py_args.append(nb::int_(args[i].constant));
        else
          py_args.append(nb::cast(args[i].scalar));
      }
      nb::object result = (*fn)(*py_args);
      std::vector<Tensor> outs;
      if (result.is_none()) return outs;
      if (nb::isinstance<Tensor>(result)) return std::vector<Tensor>{nb::cast<Tensor>(result)};
      if (nb::isinstance<nb::tuple>(result) || nb::isinstance<nb::list>(result)) {
        for (nb::handle r : nb::cast<nb::sequence>(result)) {
          if (!nb::isinstance<Tensor>(r))
            throw UserError(
                "a kernel returns tensors it allocated (a tuple of them, or None); got a " + py_type_name(r),
                std::source_location::current());
          outs.push_back(nb::cast<Tensor>(r));
        }
        return outs;
      }
      throw UserError("a kernel returns a tensor it allocated, a tuple of them, or None; got a " + py_type_name(result),
                      std::source_location::current());
    };
  }
};

// The arithmetic, comparison and bitwise operators of a block value (Tensor and Var alike:
// each converts to an Operand), forward and reflected.
template <class T>
void bind_operators(nb::class_<T>& c) {
  c.def("__add__", binary([](const Operand& a, const Operand& b) { return a + b; }))
      .def("__radd__", reflected([](const Operand& a, const Operand& b) { return a + b; }))
      .def("__sub__", binary([](const Operand& a, const Operand& b) { return a - b; }))
      .def("__rsub__", reflected([](const Operand& a, const Operand& b) { return a - b; }))
      .def("__mul__", binary([](const Operand& a, const Operand& b) { return a * b; }))
      .def("__rmul__", reflected([](const Operand& a, const Operand& b) { return a * b; }))
      .def("__truediv__", binary([](const Operand& a, const Operand& b) { return a / b; }))
      .def("__rtruediv__", reflected([](const Operand& a, const Operand& b) { return a / b; }))
      .def("__floordiv__", binary([](const Operand& a, const Operand& b) { return floordiv(a, b); }))
      .def("__rfloordiv__", reflected([](const Operand& a, const Operand& b) { return floordiv(a, b); }))
      .def("__mod__", binary([](const Operand& a, const Operand& b) { return a % b; }))
      .def("__rmod__", reflected([](const Operand& a, const Operand& b) { return a % b; }))
      .def("__pow__", binary([](const Operand& a, const Operand& b) { return pow(a, b); }))
      .def("__rpow__", reflected([](const Operand& a, const Operand& b) { return pow(a, b); }))
      .def("__matmul__", binary([](const Operand& a, const Operand& b) { return dot(a, b); }))
      .def("__and__", binary([](const Operand& a, const Operand& b) { return a & b; }))
      .def("__rand__", reflected([](const Operand& a, const Operand& b) { return a & b; }))
      .def("__or__", binary([](const Operand& a, const Operand& b) { return a | b; }))
      .def("__ror__", reflected([](const Operand& a, const Operand& b) { return a | b; }))
      .def("__xor__", binary([](const Operand& a, const Operand& b) { return a ^ b; }))
      .def("__rxor__", reflected([](const Operand& a, const Operand& b) { return a ^ b; }))
      .def("__lshift__", binary([](const Operand& a, const Operand& b) { return a << b; }))
      .def("__rshift__", binary([](const Operand& a, const Operand& b) { return a >> b; }))
      .def("__lt__", binary([](const Operand& a, const Operand& b) { return a < b; }))
      .def("__le__", binary([](const Operand& a, const Operand& b) { return a <= b; }))
      .def("__gt__", binary([](const Operand& a, const Operand& b) { return a > b; }))
      .def("__ge__", binary([](const Operand& a, const Operand& b) { return a >= b; }))
      .def("__neg__", unary([](const Operand& a) { return -a; }))
      .def("__invert__", unary([](const Operand& a) { return ~a; }))
      .def("__abs__", unary([](const Operand& a) { return abs(a); }));
}

void bind_tensor(nb::module_& m) {
  auto tensor = nb::class_<Tensor>(m, "Tensor",
                                   "A tensor inside a kernel being traced: an argument or allocation (host), or a "
                                   "block value inside a tile loop.");
  tensor
      .def_prop_ro("shape",
                   [](const Tensor& t) {
                     PythonLine line;
                     if (t.is_block())
                       throw UserError("a block's shape is symbolic (its tile dims); .shape is a host tensor's",
                                       std::source_location::current());
                     Shape s = t.sizes();
                     nb::list l;
                     for (int64_t d : s) l.append(d);
                     return nb::tuple(l);
                   })
      .def("size",
           [](const Tensor& t, int dim) {
             PythonLine line;
             return t.size(dim < 0 ? dim + t.rank() : dim);
           })
      .def_prop_ro("ndim", [](const Tensor& t) { return t.rank(); })
      .def_prop_ro("is_block", &Tensor::is_block)
      .def_prop_ro("dtype", [](const Tensor& t) { return std::string(dtype_name(t.dtype())); })
      .def("__getitem__",
           [](const Tensor& t, nb::handle key) {
             PythonLine line;
             return t.at(indices(key));
           })
      .def("__setitem__",
           [](const Tensor& t, nb::handle key, nb::handle value) {
             PythonLine line;
             Tensor target = t.at(indices(key));
             std::move(target) = operand(value);
           })
      .def("to",
           [](const Tensor& t, nb::handle dtype) {
             PythonLine line;
             return t.to(dtype_of(dtype));
           })
      .def("unsqueeze",
           [](const Tensor& t, int axis) {
             PythonLine line;
             return t.unsqueeze(axis);
           })
      .def("view",
           [](const Tensor& t, const Shape& s) {
             PythonLine line;
             return t.view(s);
           })
      .def("reshape",
           [](const Tensor& t, nb::handle s) {
             PythonLine line;
             if (t.is_block()) return reshape(t, dims_of(s));
             return t.reshape(nb::cast<Shape>(s));
           })
      .def("permute",
           [](const Tensor& t, const std::vector<int>& dims) {
             PythonLine line;
             if (t.is_block()) return permute(t, dims);
             return t.permute(Shape(dims.begin(), dims.end()));
           })
      .def("transpose",
           [](const Tensor& t, int d0, int d1) {
             PythonLine line;
             return t.transpose(d0, d1);
           })
      .def("expand",
           [](const Tensor& t, nb::handle s) {
             PythonLine line;
             if (t.is_block()) return expand(t, dims_of(s));
             return t.expand(nb::cast<Shape>(s));
           })
      .def("squeeze",
           [](const Tensor& t, int dim) {
             PythonLine line;
             return t.squeeze(dim);
           })
      .def("narrow",
           [](const Tensor& t, int dim, int64_t start, int64_t length) {
             PythonLine line;
             return t.narrow(dim, start, length);
           })
      .def(
          "sum",
          [](const Tensor& t, int axis, bool keepdim) {
            PythonLine line;
            return sum(t, axis, keepdim);
          },
          nb::arg("dim"), nb::arg("keepdim") = false)
      .def(
          "mean",
          [](const Tensor& t, int axis, bool keepdim) {
            PythonLine line;
            return mean(t, axis, keepdim);
          },
          nb::arg("dim"), nb::arg("keepdim") = false)
      .def(
          "amax",
          [](const Tensor& t, int axis, bool keepdim) {
            PythonLine line;
            return amax(t, axis, keepdim);
          },
          nb::arg("dim"), nb::arg("keepdim") = false)
      .def(
          "amin",
          [](const Tensor& t, int axis, bool keepdim) {
            PythonLine line;
            return amin(t, axis, keepdim);
          },
          nb::arg("dim"), nb::arg("keepdim") = false)
      .def("__bool__",
           [](const Tensor&) -> bool {
             PythonLine line;
             throw UserError(
                 "a traced value has no Python truth value: its value is known when the kernel runs. Use "
                 "parhelion.where(cond, a, b) for a value, parhelion.when(cond, fn) for code",
                 std::source_location::current());
           })
      .def("__eq__", binary([](const Operand& a, const Operand& b) { return a == b; }))
      .def("__ne__", binary([](const Operand& a, const Operand& b) { return a != b; }))
      .def("__hash__", [](const Tensor& t) { return static_cast<int64_t>(t.id()) * 2 + (t.is_block() ? 1 : 0); });
  bind_operators(tensor);
}

void bind_loops(nb::module_& m) {
  nb::class_<Tile>(m, "Tile", "One dimension of a tile loop, inside the loop's body.")
      .def_prop_ro("begin",
                   [](const Tile& t) {
                     PythonLine line;
                     return t.begin();
                   })
      .def_prop_ro("end",
                   [](const Tile& t) {
                     PythonLine line;
                     return t.end();
                   })
      .def_prop_ro("index",
                   [](const Tile& t) {
                     PythonLine line;
                     return t.index();
                   })
      .def_prop_ro("id", [](const Tile& t) {
        PythonLine line;
        return t.id();
      });
  nb::class_<Extent>(m, "Extent", "One dimension of a tile loop: a range and how its block size is chosen.")
      .def("block", [](const Extent& e, nb::handle b) {
        if (nb::isinstance<BlockSizeRef>(b)) return e.block(nb::cast<BlockSizeRef>(b));
        return e.block(nb::cast<int64_t>(b));
      });
  nb::class_<BlockSizeRef>(m, "BlockSize", "A block-size symbol that several tile loops share.");
  nb::class_<NumBlocks>(m, "NumBlocks", "The number of blocks of a block size over its extent.");
  nb::class_<SliceSpec>(m, "Slice", "A slice index of constant length.");
  m.def(
      "range",
      [](nb::handle a, nb::handle b) {
        PythonLine line;
        if (b.is_none()) return range(nb::cast<int64_t>(a));
        if (nb::isinstance<nb::int_>(a) && nb::isinstance<nb::int_>(b))
          return range(nb::cast<int64_t>(a), nb::cast<int64_t>(b));
        return range(operand(a), operand(b));
      },
      nb::arg("begin"), nb::arg("end").none() = nb::none());
  m.def("jagged", [](const Tensor& offsets, nb::handle group) {
    PythonLine line;
    if (nb::isinstance<Tile>(group)) return jagged(offsets, nb::cast<const Tile&>(group));
    return jagged(offsets, nb::cast<const Tensor&>(group));
  });
  m.def("register_block_size", [](int64_t extent) {
    PythonLine line;
    return register_block_size(extent);
  });
  m.def("num_blocks", [](BlockSizeRef b) {
    PythonLine line;
    return num_blocks(b);
  });
  m.def("slice", [](const Tensor& start, int64_t n) {
    PythonLine line;
    return slice(start, length(n));
  });
  m.def("_open_loop", [](const nb::sequence& dims, bool grid) {
    PythonLine line;
    std::vector<Extent> e;
    for (nb::handle d : dims) e.push_back(extent_of(d));
    return detail::open_loop(e, grid, std::source_location::current());
  });
  m.def("_close_loop", [] { detail::close_loop(); });
  // `acc += x` updates the Var and rebinds the name to it: the Python spelling of C++'s
  // `acc = acc + x`.
  auto update = [](auto f) {
    return [f](nb::handle self, nb::handle x) {
      PythonLine line;
      Var& v = nb::cast<Var&>(self);
      v = f(Operand(v), operand(x));
      return self;
    };
  };
  auto var = nb::class_<Var>(m, "Var", "Loop-carried state: declare it in a tile loop, update it in a nested one.");
  var.def("__init__",
          [](Var* v, nb::handle init) {
            PythonLine line;
            Tensor t = nb::isinstance<Tensor>(init) ? nb::cast<Tensor>(init)
                                                    : full(std::vector<DimSpec>{}, nb::cast<double>(init));
            new (v) Var(t);
          })
      .def("assign",
           [](Var& v, nb::handle value) {
             PythonLine line;
             v = operand(value);
           })
      .def_prop_ro("value",
                   [](const Var& v) {
                     PythonLine line;
                     return Tensor::block(Operand(v).value);
                   })
      .def("__iadd__", update([](const Operand& a, const Operand& b) { return a + b; }))
      .def("__isub__", update([](const Operand& a, const Operand& b) { return a - b; }))
      .def("__imul__", update([](const Operand& a, const Operand& b) { return a * b; }))
      .def("__bool__", [](const Var&) -> bool {
        PythonLine line;
        throw UserError("a parhelion.Var has no Python truth value (see parhelion.where and parhelion.when)",
                        std::source_location::current());
      });
  bind_operators(var);
}

void bind_functions(nb::module_& m) {
  // Allocation (host code) and blocks (device code).
  m.def(
      "empty",
      [](nb::handle shape, nb::handle dtype) {
        PythonLine line;
        return empty(dims_of(shape), dtype.is_none() ? DType::f32 : dtype_of(dtype));
      },
      nb::arg("shape"), nb::arg("dtype").none() = nb::none());
  m.def(
      "empty_like",
      [](const Tensor& t, nb::handle dtype) {
        PythonLine line;
        return dtype.is_none() ? empty_like(t) : empty_like(t, dtype_of(dtype));
      },
      nb::arg("t"), nb::arg("dtype").none() = nb::none());
  m.def(
      "full",
      [](nb::handle shape, double value, nb::handle dtype) {
        PythonLine line;
        return full(dims_of(shape), value, dtype.is_none() ? DType::f32 : dtype_of(dtype));
      },
      nb::arg("shape"), nb::arg("value"), nb::arg("dtype").none() = nb::none());
  m.def(
      "zeros",
      [](nb::handle shape, nb::handle dtype) {
        PythonLine line;
        return full(dims_of(shape), 0.0, dtype.is_none() ? DType::f32 : dtype_of(dtype));
      },
      nb::arg("shape"), nb::arg("dtype").none() = nb::none());
  m.def("zeros_like", [](const Tensor& t) {
    PythonLine line;
    return zeros_like(t);
  });
  m.def("arange", [](int64_t n) {
    PythonLine line;
    return arange(n);
  });
  m.def("expect", [](bool ok, const std::string& what) {
    PythonLine line;
    expect(ok, what);
  });

  // Pointwise.
  m.def("exp", unary([](const Operand& x) { return exp(x); }));
  m.def("exp2", unary([](const Operand& x) { return exp2(x); }));
  m.def("log", unary([](const Operand& x) { return log(x); }));
  m.def("sqrt", unary([](const Operand& x) { return sqrt(x); }));
  m.def("rsqrt", unary([](const Operand& x) { return rsqrt(x); }));
  m.def("tanh", unary([](const Operand& x) { return tanh(x); }));
  m.def("sigmoid", unary([](const Operand& x) { return sigmoid(x); }));
  m.def("silu", unary([](const Operand& x) { return silu(x); }));
  m.def("erf", unary([](const Operand& x) { return erf(x); }));
  m.def("abs", unary([](const Operand& x) { return abs(x); }));
  m.def("round", unary([](const Operand& x) { return round(x); }));
  m.def("floor", unary([](const Operand& x) { return floor(x); }));
  m.def("ceil", unary([](const Operand& x) { return ceil(x); }));
  m.def("trunc", unary([](const Operand& x) { return trunc(x); }));
  m.def(
      "gelu",
      [](nb::handle x, const std::string& approximate) {
        PythonLine line;
        if (approximate != "tanh" && approximate != "none")
          throw UserError("gelu's approximate is \"tanh\" or \"none\" (exact), got \"" + approximate + "\"",
                          std::source_location::current());
        return gelu(operand(x), approximate == "tanh" ? Gelu::tanh : Gelu::exact);
      },
      nb::arg("x"), nb::arg("approximate") = "tanh");
  m.def("maximum", binary([](const Operand& a, const Operand& b) { return maximum(a, b); }));
  m.def("minimum", binary([](const Operand& a, const Operand& b) { return minimum(a, b); }));
  m.def("pow", binary([](const Operand& a, const Operand& b) { return pow(a, b); }));
  m.def("floordiv", binary([](const Operand& a, const Operand& b) { return floordiv(a, b); }));
  m.def("remainder", binary([](const Operand& a, const Operand& b) { return remainder(a, b); }));
  m.def("rand", binary([](const Operand& s, const Operand& o) { return rand(s, o); }));
  m.def("randn", binary([](const Operand& s, const Operand& o) { return randn(s, o); }));
  m.def("where", [](nb::handle c, nb::handle a, nb::handle b) {
    PythonLine line;
    return where(operand(c), operand(a), operand(b));
  });
  m.def("clamp", [](nb::handle x, nb::handle lo, nb::handle hi) {
    PythonLine line;
    return clamp(operand(x), operand(lo), operand(hi));
  });
  m.def("cast", [](nb::handle x, nb::handle dtype) {
    PythonLine line;
    return cast(operand(x), dtype_of(dtype));
  });

  // Reductions and scans.
  m.def(
      "sum",
      [](nb::handle x, int dim, bool keepdim) {
        PythonLine line;
        return sum(operand(x), dim, keepdim);
      },
      nb::arg("x"), nb::arg("dim"), nb::arg("keepdim") = false);
  m.def(
      "mean",
      [](nb::handle x, int dim, bool keepdim) {
        PythonLine line;
        return mean(operand(x), dim, keepdim);
      },
      nb::arg("x"), nb::arg("dim"), nb::arg("keepdim") = false);
  m.def(
      "amax",
      [](nb::handle x, int dim, bool keepdim) {
        PythonLine line;
        return amax(operand(x), dim, keepdim);
      },
      nb::arg("x"), nb::arg("dim"), nb::arg("keepdim") = false);
  m.def(
      "amin",
      [](nb::handle x, int dim, bool keepdim) {
        PythonLine line;
        return amin(operand(x), dim, keepdim);
      },
      nb::arg("x"), nb::arg("dim"), nb::arg("keepdim") = false);
  m.def(
      "cumsum",
      [](nb::handle x, int dim, bool reverse) {
        PythonLine line;
        return cumsum(operand(x), dim, reverse);
      },
      nb::arg("x"), nb::arg("dim"), nb::arg("reverse") = false);
  m.def(
      "cumprod",
      [](nb::handle x, int dim, bool reverse) {
        PythonLine line;
        return cumprod(operand(x), dim, reverse);
      },
      nb::arg("x"), nb::arg("dim"), nb::arg("reverse") = false);
  m.def(
      "associative_scan",
      [](nb::handle x, int dim, nb::callable combine, bool reverse) {
        PythonLine line;
        ScanCombine1 fn = [combine](const Tensor& a, const Tensor& b) {
          nb::object r = combine(a, b);
          if (!nb::isinstance<Tensor>(r))
            throw UserError("an associative_scan combine returns one block, got a " + py_type_name(r),
                            std::source_location::current());
          return nb::cast<Tensor>(r);
        };
        return associative_scan(operand(x), dim, fn, reverse);
      },
      nb::arg("x"), nb::arg("dim"), nb::arg("combine"), nb::arg("reverse") = false);

  // Shapes of blocks.
  m.def("unsqueeze", [](nb::handle x, int axis) {
    PythonLine line;
    return unsqueeze(operand(x), axis);
  });
  m.def("squeeze", [](nb::handle x, int axis) {
    PythonLine line;
    return squeeze(operand(x), axis);
  });
  m.def("transpose", unary([](const Operand& x) { return transpose(x); }));
  m.def("reshape", [](nb::handle x, nb::handle shape) {
    PythonLine line;
    return reshape(operand(x), dims_of(shape));
  });
  m.def("expand", [](nb::handle x, nb::handle shape) {
    PythonLine line;
    return expand(operand(x), dims_of(shape));
  });
  m.def("permute", [](nb::handle x, const std::vector<int>& perm) {
    PythonLine line;
    return permute(operand(x), perm);
  });
  m.def("split", [](nb::handle x) {
    PythonLine line;
    auto [a, b] = split(operand(x));
    return nb::make_tuple(a, b);
  });
  m.def("join", binary([](const Operand& a, const Operand& b) { return join(a, b); }));
  m.def(
      "stack",
      [](const nb::sequence& xs, int dim) {
        PythonLine line;
        return stack(operands(xs), dim);
      },
      nb::arg("xs"), nb::arg("dim") = 0);
  m.def(
      "cat",
      [](const nb::sequence& xs, int dim) {
        PythonLine line;
        return cat(operands(xs), dim);
      },
      nb::arg("xs"), nb::arg("dim") = 0);

  // Matrix products.
  m.def(
      "dot",
      [](nb::handle a, nb::handle b, nb::handle acc, nb::handle out_dtype) {
        PythonLine line;
        if (!acc.is_none() && !out_dtype.is_none())
          throw UserError("dot takes acc or out_dtype, not both", std::source_location::current());
        if (!acc.is_none()) return dot(operand(a), operand(b), operand(acc));
        if (!out_dtype.is_none()) return dot(operand(a), operand(b), dtype_of(out_dtype));
        return dot(operand(a), operand(b));
      },
      nb::arg("a"), nb::arg("b"), nb::arg("acc").none() = nb::none(), nb::arg("out_dtype").none() = nb::none());

  // Masked access and atomics.
  m.def(
      "load",
      [](const Tensor& x, nb::handle index, nb::handle mask, nb::handle other) {
        PythonLine line;
        return load(x, indices(index), operand(mask), operand(other));
      },
      nb::arg("x"), nb::arg("index"), nb::arg("mask"), nb::arg("other") = 0.0);
  m.def(
      "store",
      [](const Tensor& x, nb::handle index, nb::handle value, nb::handle mask) {
        PythonLine line;
        store(x, indices(index), operand(value), operand(mask));
      },
      nb::arg("x"), nb::arg("index"), nb::arg("value"), nb::arg("mask"));
  auto atomic = [](Atomic fn) {
    return [fn](const Tensor& x, nb::handle index, nb::handle value, nb::handle mask) {
      PythonLine line;
      if (mask.is_none()) {
        atomic_update(fn, x, indices(index), operand(value), nullptr);
      } else {
        Operand mk = operand(mask);
        atomic_update(fn, x, indices(index), operand(value), &mk);
      }
    };
  };
  m.def("atomic_add", atomic(Atomic::add), nb::arg("x"), nb::arg("index"), nb::arg("value"),
        nb::arg("mask").none() = nb::none());
  m.def("atomic_max", atomic(Atomic::max), nb::arg("x"), nb::arg("index"), nb::arg("value"),
        nb::arg("mask").none() = nb::none());
  m.def("atomic_min", atomic(Atomic::min), nb::arg("x"), nb::arg("index"), nb::arg("value"),
        nb::arg("mask").none() = nb::none());

  // Device control: `then` (and `otherwise`) are traced once, as regions.
  m.def(
      "when",
      [](nb::handle cond, nb::callable then, nb::handle otherwise) {
        PythonLine line;
        if (otherwise.is_none()) {
          when(operand(cond), [&] { then(); });
        } else {
          nb::callable other = nb::cast<nb::callable>(otherwise);
          when(
              operand(cond), [&] { then(); }, [&] { other(); });
        }
      },
      nb::arg("cond"), nb::arg("then"), nb::arg("otherwise").none() = nb::none());
}

// Collectives (include/parhelion/collectives.h; docs/distributed.md), at the user's Python line.
void bind_collectives(nb::module_& m) {
  nb::class_<Peer>(m, "Peer", "A device of the mesh, by its coordinates (peer, ring_next, ring_prev).")
      .def(
          "along",
          [](const Peer& p, const std::string& axis, nb::handle index) {
            PythonLine line;
            return p.along(axis, operand(index));
          },
          nb::arg("axis"), nb::arg("index"));
  nb::class_<RemoteCopy>(m, "RemoteCopy", "A copy of a block into a tensor of a peer (remote_copy).")
      .def("start",
           [](const RemoteCopy& c) {
             PythonLine line;
             c.start();
           })
      .def("wait_send",
           [](const RemoteCopy& c) {
             PythonLine line;
             c.wait_send();
           })
      .def("wait_recv",
           [](const RemoteCopy& c) {
             PythonLine line;
             c.wait_recv();
           })
      .def("wait", [](const RemoteCopy& c) {
        PythonLine line;
        c.wait();
      });
  nb::class_<Semaphore>(m, "Semaphore", "A counting semaphore on every device (semaphore).");
  m.def(
      "device_index",
      [](const std::string& axis) {
        PythonLine line;
        return device_index(axis);
      },
      nb::arg("axis"));
  m.def(
      "mesh_size",
      [](const std::string& axis) {
        PythonLine line;
        return mesh_size(axis);
      },
      nb::arg("axis"));
  m.def(
      "peer",
      [](const std::string& axis, nb::handle index) {
        PythonLine line;
        return peer(axis, operand(index));
      },
      nb::arg("axis"), nb::arg("index"));
  m.def(
      "ring_next",
      [](const std::string& axis) {
        PythonLine line;
        return ring_next(axis);
      },
      nb::arg("axis"));
  m.def(
      "ring_prev",
      [](const std::string& axis) {
        PythonLine line;
        return ring_prev(axis);
      },
      nb::arg("axis"));
  m.def(
      "remote_copy",
      [](const Tensor& dst, nb::handle index, nb::handle block, const Peer& to) {
        PythonLine line;
        return remote_copy(dst, indices(index), operand(block), to);
      },
      nb::arg("dst"), nb::arg("index"), nb::arg("block"), nb::arg("to"));
  m.def(
      "barrier",
      [](nb::handle axes) {
        PythonLine line;
        if (nb::isinstance<nb::str>(axes)) return barrier(std::vector<std::string>{nb::cast<std::string>(axes)});
        barrier(nb::cast<std::vector<std::string>>(axes));
      },
      nb::arg("axes"));
  m.def("semaphore", [] {
    PythonLine line;
    return semaphore();
  });
  m.def(
      "signal",
      [](const Semaphore& s, const Peer& to, nb::handle count) {
        PythonLine line;
        signal(s, to, operand(count));
      },
      nb::arg("s"), nb::arg("to"), nb::arg("count") = 1);
  m.def(
      "wait",
      [](const Semaphore& s, nb::handle count) {
        PythonLine line;
        wait(s, operand(count));
      },
      nb::arg("s"), nb::arg("count") = 1);
}

}  // namespace

void bind_language(nb::module_& m) {
  nb::class_<Scalar>(m, "Scalar", "A float argument of a kernel: a runtime value, not specialized on.");
  nb::class_<Int, Scalar>(m, "Int", "An integer argument of a kernel: a runtime value, not specialized on.");
  bind_tensor(m);
  bind_loops(m);
  bind_functions(m);
  bind_collectives(m);
  nb::class_<PythonKernel, KernelBase>(m, "PythonKernel")
      .def(nb::init<const std::string&, const std::vector<std::string>&, nb::object>());
  m.def("_set_package_dir", [](const std::string& dir) { package_dir() = dir; });
}

}  // namespace parhelion::python

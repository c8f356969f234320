#include "arrays.h"

#include <memory>
#include <optional>
#include <utility>

#include <parhelion/error.h>

namespace nb = nanobind;

namespace parhelion::python {
namespace {

using nb::dlpack::dtype_code;

std::optional<DType> dtype_from_dlpack(nb::dlpack::dtype t) {
  if (t.lanes != 1) return std::nullopt;
  auto code = static_cast<dtype_code>(t.code);
  switch (code) {
    case dtype_code::Float:
      if (t.bits == 32) return DType::f32;
      if (t.bits == 16) return DType::f16;
      return std::nullopt;
    case dtype_code::Bfloat:
      return t.bits == 16 ? std::optional(DType::bf16) : std::nullopt;
    case dtype_code::Float8_E4M3FN:
      return t.bits == 8 ? std::optional(DType::f8e4m3) : std::nullopt;
    case dtype_code::Float8_E5M2:
      return t.bits == 8 ? std::optional(DType::f8e5m2) : std::nullopt;
    case dtype_code::Int:
      if (t.bits == 8) return DType::i8;
      if (t.bits == 32) return DType::i32;
      if (t.bits == 64) return DType::i64;
      return std::nullopt;
    case dtype_code::UInt:
      return t.bits == 8 ? std::optional(DType::u8) : std::nullopt;
    case dtype_code::Bool:
      return t.bits == 8 ? std::optional(DType::boolean) : std::nullopt;
    default:
      return std::nullopt;
  }
}

nb::dlpack::dtype dlpack_dtype(DType d) {
  auto make = [](dtype_code c, int bits) {
    nb::dlpack::dtype t;
    t.code = static_cast<uint8_t>(c);
    t.bits = static_cast<uint8_t>(bits);
    t.lanes = 1;
    return t;
  };
  switch (d) {
    case DType::f32:
      return make(dtype_code::Float, 32);
    case DType::f16:
      return make(dtype_code::Float, 16);
    case DType::bf16:
      return make(dtype_code::Bfloat, 16);
    case DType::f8e4m3:
      return make(dtype_code::Float8_E4M3FN, 8);
    case DType::f8e5m2:
      return make(dtype_code::Float8_E5M2, 8);
    case DType::i8:
      return make(dtype_code::Int, 8);
    case DType::i32:
      return make(dtype_code::Int, 32);
    case DType::i64:
      return make(dtype_code::Int, 64);
    case DType::u8:
      return make(dtype_code::UInt, 8);
    case DType::boolean:
      return make(dtype_code::Bool, 8);
  }
  throw InternalError("dlpack_dtype: unknown dtype");
}

std::string describe_dlpack_dtype(nb::dlpack::dtype t) {
  static const char* const kCodes[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  std::string code = t.code < 7 ? kCodes[t.code] : "code " + std::to_string(t.code);
  return code + std::to_string(t.bits) + (t.lanes == 1 ? "" : "x" + std::to_string(t.lanes));
}

}  // namespace

Array to_array(nb::handle obj, const std::string& what, bool* read_only) {
  // Read-only arrays (jax's, a numpy array marked so) are taken too; the caller refuses them
  // where the kernel stores to its argument.
  if (read_only) {
    // jax arrays are immutable but do not say so through DLPack.
    std::string module = nb::cast<std::string>(nb::str(obj.type().attr("__module__")));
    nb::ndarray<> writable;
    *read_only = module.rfind("jax", 0) == 0 || !nb::try_cast(obj, writable);
  }
  nb::ndarray<nb::ro> nd;
  if (!nb::try_cast(obj, nd))
    throw UserError(what + " is a " + nb::type_name(obj.type()).c_str() +
                    ", not an array: pass a torch tensor, a numpy array or a jax array (any CPU array with "
                    "__dlpack__)");
  if (nd.device_type() != nb::device::cpu::value)
    throw UserError(what + " lives on a device (DLPack device type " + std::to_string(nd.device_type()) +
                    "); Parhelion runs kernels on CPU arrays. Move it with .cpu(), or emit the kernel for that "
                    "device's target (kernel.emit(target=...))");
  std::optional<DType> dtype = dtype_from_dlpack(nd.dtype());
  if (!dtype)
    throw UserError(what + " has dtype " + describe_dlpack_dtype(nd.dtype()) +
                    ", which Parhelion kernels do not take (f32, bf16, f16, f8e4m3, f8e5m2, i8, u8, i32, i64, "
                    "bool); convert it first (e.g. x.float())");
  Shape shape(nd.ndim()), strides(nd.ndim());
  for (size_t i = 0; i < nd.ndim(); ++i) {
    shape[i] = static_cast<int64_t>(nd.shape(i));
    strides[i] = nd.stride(i);
  }
  // The Array keeps the producer's array alive; releasing it touches Python objects.
  auto* keep = new nb::ndarray<nb::ro>(nd);
  std::shared_ptr<void> owner(keep, [](void* p) {
    nb::gil_scoped_acquire gil;
    delete static_cast<nb::ndarray<nb::ro>*>(p);
  });
  return Array::wrap(const_cast<void*>(nd.data()), std::move(shape), std::move(strides), *dtype, std::move(owner));
}

nb::object from_array(Array a) {
  std::vector<size_t> shape(a.shape().begin(), a.shape().end());
  std::vector<int64_t> strides(a.strides().begin(), a.strides().end());
  void* data = a.data();
  nb::dlpack::dtype dtype = dlpack_dtype(a.dtype());
  auto* keep = new Array(std::move(a));
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<Array*>(p); });
  // array_api: nanobind's own ndarray object, with __dlpack__ and __dlpack_device__, which
  // torch.from_dlpack, numpy.from_dlpack and jax.numpy.from_dlpack all take.
  nb::ndarray<nb::array_api> nd(data, shape.size(), shape.data(), owner, strides.data(), dtype);
  return nb::cast(nd, nb::rv_policy::reference);
}

void bind_arrays(nb::module_& m) {
  m.def(
      "_roundtrip", [](nb::handle obj) { return from_array(to_array(obj, "the argument")); },
      "Wraps an array and hands it back without a copy (for tests of the DLPack exchange).");
}

}  // namespace parhelion::python

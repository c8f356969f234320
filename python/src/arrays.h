// Arrays across the Python boundary, without copies: any CPU array that speaks DLPack (torch,
// numpy, jax) in, Parhelion Arrays out as DLPack-capable ndarrays, which the Python side hands
// to the caller's framework (python/parhelion/_arrays.py).
#pragma once

#include <string>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <parhelion/array.h>

namespace parhelion::python {

// Wraps `obj`'s memory as an Array (shape, strides and dtype as they are; the Array keeps `obj`
// alive). A UserError naming `what` for an array on another device, of a dtype kernels do not
// take, or an object that is no array. `read_only` (if given) says whether the producer marked
// the memory read-only (a jax array, a numpy array with write=False).
Array to_array(nanobind::handle obj, const std::string& what, bool* read_only = nullptr);

// The Array as an ndarray (DLPack, the buffer protocol) that owns a reference to its storage.
nanobind::object from_array(Array a);

void bind_arrays(nanobind::module_& m);

}  // namespace parhelion::python

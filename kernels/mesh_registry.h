// The library's kernels that run on a mesh (kernels/collectives.cpp), by name, for the CLI
// (`parhelion emit KERNEL --target pallas --mesh x=4 ...`): one device's arguments for a shape on
// a ring of n devices. They are not in registry(): its commands run a kernel on one device.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kernels/registry.h"

namespace parhelion::kernels {

struct MeshKernelEntry {
  std::string name;
  std::string summary;
  std::string shape_help;  // the shape's dims, e.g. "M,K,N"
  Shape default_shape;
  KernelBase* kernel = nullptr;
  // One device's inputs for a shape on a ring of `devices` (throws UserError on a shape it cannot
  // take); random contents.
  std::function<Inputs(const Shape&, DType, int64_t devices)> make_inputs;
};

const std::vector<MeshKernelEntry>& mesh_registry();
// nullptr when `name` is no mesh kernel.
const MeshKernelEntry* find_mesh_kernel(const std::string& name);

}  // namespace parhelion::kernels

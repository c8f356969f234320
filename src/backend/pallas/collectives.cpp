#include "backend/pallas/collectives.h"

#include "ir/collectives.h"

namespace parhelion::backend::pallas {
namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

std::string axis_index(const ir::Function& fn, size_t axis) {
  return "jax.lax.axis_index(\"" + fn.mesh[axis].name + "\")";
}

}  // namespace

std::string mesh_device_id(const ir::Function& fn, const std::vector<int64_t>& axes, const std::string& flat) {
  std::vector<std::string> coords;
  for (size_t a = 0; a < fn.mesh.size(); ++a) {
    int64_t stride = 1;
    bool in_group = false;
    for (int64_t b : axes) {
      in_group |= b == static_cast<int64_t>(a);
      if (b > static_cast<int64_t>(a)) stride *= fn.mesh[b].size;
    }
    if (!in_group)
      coords.push_back(axis_index(fn, a));
    else
      coords.push_back("(" + flat + " // " + std::to_string(stride) + ") % " + std::to_string(fn.mesh[a].size));
  }
  return "(" + join(coords) + ",)";
}

std::string own_device_id(const ir::Function& fn) { return mesh_device_id(fn, {}, "0"); }

std::vector<std::string> group_barrier(const ir::Function& fn, const std::vector<int64_t>& axes,
                                       const std::string& sem) {
  int64_t size = 1;
  std::vector<std::string> names;
  for (int64_t a : axes) {
    size *= fn.mesh[a].size;
    names.push_back(fn.mesh[a].name);
  }
  return {"for _d in range(" + std::to_string(size) + "):  # every device along " + join(names) +
              ", the other coordinates ours",
          "    pl.semaphore_signal(" + sem + ", 1, device_id=" + mesh_device_id(fn, axes, "_d") +
              ", device_id_type=pl.DeviceIdType.MESH)",
          "pl.semaphore_wait(" + sem + ", " + std::to_string(size) + ")"};
}

std::vector<std::string> collective_helpers(const ir::Function& fn, const std::string& device_kind) {
  std::vector<std::string> names, sizes;
  for (const ir::MeshAxis& a : fn.mesh) {
    names.push_back("\"" + a.name + "\"");
    sizes.push_back(std::to_string(a.size));
  }
  return {
      "MESH = ((" + join(names) + ",), (" + join(sizes) + ",))  # the mesh's axis names and sizes",
      "",
      "",
      "def _mesh(abstract=False):",
      "    \"\"\"The mesh the kernel runs on: this process's first devices (the CPU's simulated ones in",
      "    interpret mode: jax_num_cpu_devices), or with `abstract`, the target TPU's (for jax.export).\"\"\"",
      "    names, sizes = MESH",
      "    if abstract:",
      "        device = jax.sharding.AbstractDevice(device_kind=\"" + device_kind +
          "\", num_cores=1, platform=\"tpu\")",
      "        return jax.sharding.AbstractMesh(sizes, names, abstract_device=device)",
      "    n = math.prod(sizes)",
      "    if len(jax.devices()) < n:",
      "        raise ValueError(f\"" + fn.name +
          " runs on {n} devices and this process has {len(jax.devices())} (on a CPU: set jax_num_cpu_devices, and "
          "NPROC to at least devices + 1 before JAX starts)\")",
      "    return jax.sharding.Mesh(np.array(jax.devices()[:n]).reshape(sizes), names)",
      "",
      "",
      "def _hbm_copy(src, dst, sem):",
      "    \"\"\"A DMA between a tensor left in HBM (copies land in it) and a VMEM buffer, waited for at once.\"\"\"",
      "    c = pltpu.make_async_copy(src, dst, sem)",
      "    c.start()",
      "    c.wait()",
  };
}

std::vector<std::string> mesh_host_function(const ir::Function& fn, const std::string& device_fn) {
  std::vector<std::string> args;
  for (int i = 0; i < fn.num_tensor_params; ++i) args.push_back(fn.tensors[i].name);
  std::vector<std::string> scalars(fn.scalar_params.begin(), fn.scalar_params.end());
  std::vector<std::string> all = args;
  all.insert(all.end(), scalars.begin(), scalars.end());
  const std::string n_out = std::to_string(fn.outputs.size());
  std::string devices = "1";
  for (const ir::MeshAxis& a : fn.mesh) devices += " * " + std::to_string(a.size);
  std::vector<std::string> l = {
      "def " + fn.name + "(" + join(all) + (all.empty() ? "" : ", ") + "*, interpret=False, mesh=None):",
      "    \"\"\"" + fn.name + " on every device of MESH (" + ir::mesh_to_string(fn.mesh) +
          "): each tensor argument stacked over the devices, [devices] + its",
      "    SIGNATURE shape (device-major, row-major over the mesh's coordinates); returns the outputs stacked",
      "    the same way. `mesh`: default _mesh().\"\"\"",
      "    mesh = _mesh() if mesh is None else mesh",
      "    spec = P(MESH[0])  # the leading dim split over every axis of the mesh",
  };
  for (size_t i = 0; i < args.size(); ++i)
    l.push_back("    if " + args[i] + ".shape[:1] != (" + devices + ",):\n        raise ValueError(f\"" + fn.name +
                ": " + args[i] + " must be stacked over the mesh's " + devices + " devices, got {tuple(" + args[i] +
                ".shape)}\")");
  l.push_back("");
  l.push_back("    def per_device(" + join(args) + "):");
  std::vector<std::string> sliced;
  for (const std::string& a : args) sliced.push_back(a + "[0]");
  sliced.insert(sliced.end(), scalars.begin(), scalars.end());
  l.push_back("        outs = " + device_fn + "(" + join(sliced) + (sliced.empty() ? "" : ", ") +
              "interpret=interpret)");
  l.push_back("        outs = outs if isinstance(outs, (tuple, list)) else (outs,)");
  l.push_back("        return tuple(o[None] for o in outs)");
  l.push_back("");
  l.push_back("    f = jax.shard_map(per_device, mesh=mesh, in_specs=(spec,) * " + std::to_string(args.size()) +
              ", out_specs=(spec,) * " + n_out + ", check_vma=False)");
  l.push_back("    outs = jax.jit(f)(" + join(args) + ")");
  l.push_back("    return outs[0] if len(outs) == 1 else outs");
  return l;
}

}  // namespace parhelion::backend::pallas

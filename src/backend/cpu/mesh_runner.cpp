// The cpu backend's mesh: a kernel on a mesh runs every device on a thread of this process,
// scheduled by the reference interpreter's MeshWorld (src/interp/mesh_world.h): one device at a
// time, switching when one waits, so a run is deterministic and a deadlock is reported (with
// what each device waits for) rather than hung. The generated code writes a copy's block into
// the peer's tensor itself (emit/collectives.cpp) and calls the table's mesh functions below
// for everything else. The region checks for races are the interpreter's alone (here the
// copies' regions are not tracked): the cpu result of a racy kernel is one schedule's.
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "interp/mesh_world.h"
#include "ir/collectives.h"
#include "parhelion/error.h"
#include "runtime/gemm/gemm.h"

namespace parhelion::backend::cpu {
namespace {

struct Mesh {
  const ir::Function* fn;
  interp::MeshWorld* world;
  std::vector<const ir::Op*> ops;  // the collectives, in program order (the generated code's numbers)
  const std::vector<std::vector<void*>>* tensors;
};

struct Device {
  Mesh* mesh;
  int index;
  std::vector<int64_t> coords;
};

Device& device_of(void* mesh) { return *static_cast<Device*>(mesh); }

int64_t mesh_coord(void* mesh, int axis) { return device_of(mesh).coords.at(axis); }

void* mesh_tensor(void* mesh, int64_t device, int tensor) {
  return device_of(mesh).mesh->tensors->at(device).at(tensor);
}

int64_t mesh_peer(void* mesh, int op, const int64_t* coords) {
  const Device& d = device_of(mesh);
  const ir::Op& o = *d.mesh->ops.at(op);
  const std::vector<ir::MeshAxis>& axes = d.mesh->fn->mesh;
  std::vector<int64_t> c(coords, coords + axes.size());
  for (size_t i = 0; i < axes.size(); ++i)
    if (c[i] < 0 || c[i] >= axes[i].size)
      throw UserError(o.loc.str() + ": " + std::string(ir::op_name(o)) + ": the peer's coordinate along " +
                      axes[i].name + " is " + std::to_string(c[i]) + ", outside the mesh's 0.." +
                      std::to_string(axes[i].size - 1));
  return d.mesh->world->mesh().device_at(c);
}

void mesh_sync(void* mesh, int op, int64_t peer, int64_t count) {
  const Device& d = device_of(mesh);
  interp::MeshWorld& w = *d.mesh->world;
  const ir::Op& o = *d.mesh->ops.at(op);
  const int p = static_cast<int>(peer);
  switch (o.kind) {
    case ir::OpKind::CopyStart:
      return w.start_copy(d.index, p, o.channel, {}, {}, nullptr, o.loc);  // (races: the interpreter's)
    case ir::OpKind::CopyWait:
      if (static_cast<ir::CopyEnd>(o.fn) == ir::CopyEnd::send) return w.wait_send(d.index, o.channel, o.loc);
      return w.wait_recv(d.index, o.channel, o.loc);
    case ir::OpKind::Barrier:
      return w.barrier(d.index, o.dims, o.loc);
    case ir::OpKind::Signal:
      return w.signal(d.index, p, o.channel, count, o.loc);
    case ir::OpKind::SemWait:
      return w.wait(d.index, o.channel, count, o.loc);
    default:
      throw InternalError("mesh_sync of " + std::string(ir::op_name(o)));
  }
}

}  // namespace

void CpuBackend::run_on_mesh(const ir::Function& fn, const std::vector<std::vector<void*>>& tensors,
                             const MeshDeviceFn& device) const {
  interp::MeshWorld world(fn);
  Mesh mesh{&fn, &world, {}, &tensors};
  ir::walk(fn.body, [&](const ir::Op& op) {
    if (ir::is_collective(op)) mesh.ops.push_back(&op);
  });
  const int n = world.devices();
  PH_CHECK(static_cast<int>(tensors.size()) == n, "one set of tensors per device");
  std::vector<Device> devices;
  std::vector<ph_runtime> tables(static_cast<size_t>(n), *runtime::runtime_table());
  devices.reserve(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) devices.push_back(Device{&mesh, d, world.mesh().coords(d)});
  for (int d = 0; d < n; ++d) {
    ph_runtime& t = tables[static_cast<size_t>(d)];
    t.mesh = &devices[static_cast<size_t>(d)];
    t.mesh_coord = mesh_coord;
    t.mesh_tensor = mesh_tensor;
    t.mesh_peer = mesh_peer;
    t.mesh_sync = mesh_sync;
  }
  world.run([&](int d) { device(d, &tables[static_cast<size_t>(d)]); });
}

}  // namespace parhelion::backend::cpu

// The pallas backend's collectives (docs/distributed.md): what a kernel on a mesh becomes.
// - The module's kernel function takes every tensor argument stacked over the devices (a leading
//   dim of the mesh's size, device-major, row-major over its coordinates) and runs the per-device
//   function under jax.shard_map, each device on its own slice; outputs come back stacked.
// - In a launch with collectives (plan.h, LaunchCollectives) a copy is
//   pltpu.make_async_remote_copy into the peer's tensor in HBM, its DMA semaphores one pair per
//   copy channel; a wait rebuilds the channel's descriptor (a DMA semaphore counts bytes, so any
//   region of the copy's shape waits for one copy); ph::semaphore is a REGULAR semaphore; a
//   barrier signals every device of its group and waits for as many signals (a semaphore per
//   group of axes: two groups sharing one would mix their counts); and the first grid step
//   starts with a handshake on the barrier semaphore (collective_id), so no copy or signal
//   reaches a device that has not entered the kernel (a TPU's requirement).
#pragma once

#include <string>
#include <vector>

#include "ir/ir.h"

namespace parhelion::backend::pallas {

// The device ids (MESH coordinates, one Python expression per axis) of device `flat` (a Python
// expression, row-major over `axes` of the mesh; the other axes are this device's own).
std::string mesh_device_id(const ir::Function& fn, const std::vector<int64_t>& axes, const std::string& flat);

// This device's coordinates: the device_id of itself.
std::string own_device_id(const ir::Function& fn);

// Lines (unindented) that signal `sem` on every device of the group over `axes` (this device
// included) and wait for as many signals: a barrier, or with every axis, the handshake.
std::vector<std::string> group_barrier(const ir::Function& fn, const std::vector<int64_t>& axes,
                                       const std::string& sem);

// The module's helpers for collectives: the mesh, and a DMA waited for at once.
std::vector<std::string> collective_helpers(const ir::Function& fn, const std::string& device_kind);

// The host function of a kernel on a mesh: `name` over stacked arguments, calling `device_fn`
// (the per-device function, which takes the same arguments) on every device under shard_map.
std::vector<std::string> mesh_host_function(const ir::Function& fn, const std::string& device_fn);

}  // namespace parhelion::backend::pallas

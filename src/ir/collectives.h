// Collectives in the Tile IR: the rules of a kernel that runs on every device of a mesh.
//
// Semantics (docs/distributed.md is the user's account).
// - A Function with a non-empty `mesh` runs once on every device of the mesh (SPMD). A device is
//   named by its coordinates, one per mesh axis; devices are numbered row-major over them (the
//   first axis outermost). Each device has its own copy of every tensor (parameters, outputs and
//   allocations have the same shape on every device), so a tensor names the same buffer on any
//   device: a copy's destination is "this tensor on that peer".
// - DeviceIndex is the device's coordinate along one axis. A peer is given by one i64 scalar
//   per axis; a coordinate outside 0..size-1 is an error when the op runs.
// - CopyStart begins an asynchronous copy of a block (its operand, in the destination tensor's
//   storage dtype) into tensor[index] on the peer. The copy `channel` (ph::remote_copy) has, on
//   every device, a send count and a receive count: the copy adds one to the sender's send count
//   when its data has left and one to the receiver's receive count when it has landed. CopyWait
//   send waits for the device's send count to be positive and takes one from it; CopyWait recv
//   does the same with its receive count: it waits for a copy of this channel that some device
//   (often another) sent to it. Waits pair with copies by count only (a TPU's DMA semaphore counts
//   bytes): while two copies of a channel are in flight to (or from) a device, which one a wait saw
//   complete is not defined, so a copy is known landed (sent) only once the device has waited as
//   many times as such copies were in flight. Until then:
//   - the receiver must not read or write the landing region, and two copies in flight must not
//     land on overlapping regions;
//   - when the copied block is sent in place (copy_block_load: an unmasked load, without a gather,
//     of a tensor of the destination's dtype), the sender must not write the loaded region from
//     the load until its wait on the send (a backend copies from that memory when the copy
//     starts, and reads it until it has left);
//   - any other block is staged (a backend stores it into a buffer of the copy statement's own,
//     which the copy reads until it has been sent): the device must not start the statement's
//     copy again while an earlier one of it may still be sending (before as many wait_sends).
//   A copy that starts unordered with the receiver's earlier receive wait on its channel could
//   have been the copy that wait saw land: the regions that wait released count as landed again
//   only once this copy is received, and an access the receiver made to them in between is a race.
//   Every copy started must be waited for, send and receive, before the kernel ends.
// - Barrier: no device of the group (the devices whose coordinates differ only along the
//   barrier's axes) passes its k-th barrier on that group before each of them has reached it.
//   Copies and signals made before a barrier are not thereby complete; only their waits say so.
// - Signal adds `count` to the peer's semaphore `channel` (ph::semaphore, 0 when the kernel
//   starts); SemWait waits until the device's own semaphore is at least `count`, then subtracts
//   it. What a wait orders after the signals is known once it drains the semaphore (which of
//   several outstanding signals it took is not defined). A semaphore must be back at 0 when the
//   kernel ends.
// - A launch that contains collectives runs its grid steps in order, on every backend.
// The reference interpreter runs every device and reports a race, a deadlock (every device that
// has not finished is waiting), an unwaited copy or a semaphore left non-zero at the user's line.
#pragma once

#include <string>
#include <vector>

#include "ir/ir.h"

namespace parhelion::ir {

// Whether an op communicates or synchronizes (CopyStart, CopyWait, Barrier, Signal, SemWait).
bool is_collective(const Op& op);
// Whether a function has a mesh and reads its device's coordinates or communicates.
bool uses_collectives(const Function& fn);
// Whether ops (or ops nested in them) communicate.
bool has_collectives(const std::vector<Op>& ops);

// The mesh axis named `name`, or -1.
int mesh_axis(const Function& fn, const std::string& name);
// How many devices the mesh has (1 without one).
int64_t mesh_devices(const Function& fn);
// "x=4, y=2".
std::string mesh_to_string(const std::vector<MeshAxis>& mesh);

// A peer's coordinates: one i64 scalar per mesh axis.
std::string peer_rule(const Function& fn, const std::vector<Type>& coords);
// A copy's destination and block: tensor[index] takes a block of exactly the value's shape, with
// no gather or scatter item (a copy moves one rectangular region), into a tensor that is not an
// expanded view.
std::string copy_rule(const Function& fn, int tensor, const std::vector<IndexItem>& index, const Type& value);
// The load a copy (CopyStart) sends in place (collectives.h: an unmasked load without a gather,
// of the destination's dtype), or nullptr when its block is staged.
const Op* copy_block_load(const Function& fn, const Op& start);

// A semaphore's count: an i64 scalar.
std::string count_rule(const Function& fn, const Type& count);

}  // namespace parhelion::ir

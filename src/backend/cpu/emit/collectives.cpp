// Collectives (src/ir/collectives.h) on the cpu backend's simulated mesh: every device runs on
// a thread of the same process (CpuBackend::run_on_mesh), so a copy to a peer is a store into
// the peer's tensor, made when the copy starts (a valid schedule of an asynchronous copy), and
// every synchronization is a call into the runtime's mesh (ph_runtime::mesh_sync), which
// keeps the copies' counts, the barriers and the semaphores, and waits. Each call names its op
// by its number among the kernel's collectives, for the runtime's messages.
#include <string>

#include "backend/cpu/emit/launch_emitter.h"
#include "ir/collectives.h"
#include "ir/type_rules.h"
#include "parhelion/error.h"

namespace parhelion::backend::cpu::emit {

int LaunchEmitter::collective_number(const Op& op) const {
  int n = 0, found = -1;
  ir::walk(fn_.body, [&](const Op& o) {
    if (&o == &op) found = n;
    if (ir::is_collective(o)) ++n;
  });
  PH_CHECK(found >= 0, "a collective op outside its kernel");
  return found;
}

std::string LaunchEmitter::device_index_expr(const Op& op) {
  return "ph_rt_table->mesh_coord(ph_rt_table->mesh, " + std::to_string(op.axis) + ")";
}

void LaunchEmitter::collective(const Op& op) {
  const std::string n = std::to_string(collective_number(op));
  const std::string mesh = "ph_rt_table->mesh";
  // `ph_peer`: the device the operands from `first` on name (the runtime checks them).
  auto peer = [&](size_t first) {
    std::string coords;
    for (size_t i = first; i < op.operands.size(); ++i) coords += (i > first ? ", " : "") + expr(op.operands[i], {});
    line("const int64_t ph_peer_at[] = {" + coords + "};");
    line("const int64_t ph_peer = ph_rt_table->mesh_peer(" + mesh + ", " + n + ", ph_peer_at);");
  };
  const std::string what = std::string(ir::op_name(op)) + " at " + op.loc.str();
  switch (op.kind) {
    case OpKind::CopyStart: {
      ir::Type region;
      ir::load_type(fn_, op.tensor, op.index, &region);
      const std::string ty = storage_type(fn_.tensors[op.tensor].dtype);
      line("{  // " + what + ": copy c" + std::to_string(op.channel) + " lands in the peer's " +
           fn_.tensors[op.tensor].name);
      ++depth_;
      peer(1);
      line(ty + "* ph_dst = static_cast<" + ty + "*>(ph_rt_table->mesh_tensor(" + mesh + ", ph_peer, " +
           std::to_string(op.tensor) + "));");
      nest(region.shape,
           [&](const Idx& idx) { line("ph_dst[" + tensor_offset(op, idx) + "] = " + stored_operand(op, idx) + ";"); });
      line("ph_rt_table->mesh_sync(" + mesh + ", " + n + ", ph_peer, 0);");
      --depth_;
      line("}");
      return;
    }
    case OpKind::Signal:
      line("{  // " + what);
      ++depth_;
      peer(1);
      line("ph_rt_table->mesh_sync(" + mesh + ", " + n + ", ph_peer, " + expr(op.operands[0], {}) + ");");
      --depth_;
      line("}");
      return;
    case OpKind::SemWait:
      line("ph_rt_table->mesh_sync(" + mesh + ", " + n + ", -1, " + expr(op.operands[0], {}) + ");  // " + what);
      return;
    default:  // a copy's wait, a barrier
      line("ph_rt_table->mesh_sync(" + mesh + ", " + n + ", -1, 0);  // " + what);
  }
}

}  // namespace parhelion::backend::cpu::emit

// The DSL's collectives (parhelion/collectives.h): mesh coordinates, peers, remote copies,
// barriers and semaphores, each checked against src/ir/collectives.h's rules at the user's line.
#include "parhelion/collectives.h"

#include <algorithm>

#include "frontend/operands.h"
#include "frontend/tracer.h"
#include "ir/collectives.h"
#include "ir/printer.h"
#include "ir/type_rules.h"
#include "parhelion/error.h"

namespace parhelion {

using frontend::Tracer;
using ir::Op;
using ir::OpKind;
using ir::Type;

namespace {

// The mesh axis `axis` names, or a UserError that lists the mesh's axes.
int axis_of(Tracer& T, const std::string& axis, const char* what, const Loc& loc) {
  if (T.fn().mesh.empty())
    T.fail(std::string(what) + " needs a mesh: call the kernel on one (ph::Mesh, KernelBase::interpret_on)", loc);
  const int a = ir::mesh_axis(T.fn(), axis);
  if (a < 0)
    T.fail(std::string(what) + ": '" + axis + "' is not an axis of the mesh (" + ir::mesh_to_string(T.fn().mesh) + ")",
           loc);
  return a;
}

int emit_value(Tracer& T, Op op, Type t, const Loc& loc) {
  op.result = T.new_value(std::move(t));
  return T.emit(std::move(op), loc);
}

// An i64 scalar operand: a peer's coordinate or a semaphore's count.
int i64_scalar(Tracer& T, const Operand& o, const std::string& what, const Loc& loc) {
  const int v = frontend::operand_value(T, o, DType::i64);
  const Type& t = T.fn().type_of(v);
  if (t.rank() != 0 || t.dtype != DType::i64)
    T.fail(what + " must be an i64 scalar (an integer, device_index(...), t.begin(), ...), got " +
               ir::type_to_string(T.fn(), t),
           loc);
  return v;
}

void check_in_scope(Tracer& T, const std::vector<int>& values, const std::string& what, const Loc& loc) {
  for (int v : values)
    if (!T.value_in_scope(v)) T.fail(what + " uses a value outside the tile loop that computes it", loc);
}

void emit_collective(Tracer& T, Op op, const Loc& loc) {
  if (op.kind != OpKind::Barrier && op.channel < 0)
    T.fail(std::string("ph::") + std::string(ir::op_name(op)) + " of a " +
               (op.kind == OpKind::CopyWait ? "copy ph::remote_copy" : "semaphore ph::semaphore") + " did not make",
           loc);
  T.require_device((std::string("ph::") + std::string(ir::op_name(op))).c_str(), loc);
  T.emit(std::move(op), loc);
}

}  // namespace

Peer self_peer(const Loc& loc) {
  Tracer& T = Tracer::current(loc);
  T.require_device("a peer", loc);
  if (T.fn().mesh.empty())
    T.fail("a peer needs a mesh: call the kernel on one (ph::Mesh, KernelBase::interpret_on)", loc);
  Peer p;
  for (const ir::MeshAxis& a : T.fn().mesh) p.coords_.push_back(device_index(a.name, loc).id());
  return p;
}

Tensor device_index(const std::string& axis, Loc loc) {
  Tracer& T = Tracer::current(loc);
  T.require_device("ph::device_index", loc);
  Op op{OpKind::DeviceIndex};
  op.axis = axis_of(T, axis, "ph::device_index", loc);
  return Tensor::block(emit_value(T, op, Type{DType::i64, {}}, loc));
}

int64_t mesh_size(const std::string& axis, Loc loc) {
  Tracer& T = Tracer::current(loc);
  return T.fn().mesh.at(axis_of(T, axis, "ph::mesh_size", loc)).size;
}

Peer Peer::along(const std::string& axis, const Operand& index, Loc loc) const {
  Tracer& T = Tracer::current(loc);
  const int a = axis_of(T, axis, "a peer", loc);
  Peer p = *this;
  p.coords_.at(a) = i64_scalar(T, index, "a peer's coordinate along " + axis, loc);
  return p;
}

Peer peer(const std::string& axis, const Operand& index, Loc loc) { return self_peer(loc).along(axis, index, loc); }

Peer ring_next(const std::string& axis, Loc loc) {
  const int64_t n = mesh_size(axis, loc);
  return peer(axis, remainder(Operand(device_index(axis, loc), loc) + Operand(int64_t{1}, loc), Operand(n, loc)), loc);
}

Peer ring_prev(const std::string& axis, Loc loc) {
  const int64_t n = mesh_size(axis, loc);
  return peer(axis, remainder(Operand(device_index(axis, loc), loc) + Operand(n - 1, loc), Operand(n, loc)), loc);
}

RemoteCopy remote_copy(const Tensor& dst, std::initializer_list<Index> index, const Operand& block, const Peer& to,
                       Loc loc) {
  return remote_copy(dst, std::vector<Index>(index), block, to, loc);
}

RemoteCopy remote_copy(const Tensor& dst, const std::vector<Index>& index, const Operand& block, const Peer& to,
                       Loc loc) {
  Tracer& T = Tracer::current(loc);
  T.require_device("ph::remote_copy", loc);
  if (dst.kind() != Tensor::HostK)
    T.fail("ph::remote_copy lands in a tensor (a kernel argument or an allocation), not a block", loc);
  Op op{OpKind::CopyStart};
  op.tensor = dst.id();
  op.index = frontend::subscript_items(T, dst, index, loc);
  Type landing;
  if (std::string err = ir::load_type(T.fn(), op.tensor, op.index, &landing); !err.empty()) T.fail(err, loc);
  op.operands = {frontend::operand_value(T, block, landing.dtype)};
  if (std::string err = ir::copy_rule(T.fn(), op.tensor, op.index, T.fn().type_of(op.operands[0])); !err.empty())
    T.fail("ph::remote_copy: " + err, loc);
  std::vector<Type> coords;
  for (int v : to.coords()) {
    op.operands.push_back(v);
    coords.push_back(T.fn().type_of(v));
  }
  if (std::string err = ir::peer_rule(T.fn(), coords); !err.empty()) T.fail("ph::remote_copy: " + err, loc);
  op.loc = frontend::to_loc(loc);
  RemoteCopy c;
  c.id_ = T.add_copy(std::move(op));
  return c;
}

void RemoteCopy::start(Loc loc) const {
  Tracer& T = Tracer::current(loc);
  if (id_ < 0) T.fail("start() of a ph::RemoteCopy that ph::remote_copy did not make", loc);
  Op op = T.copy_start(id_);
  std::vector<int> used = op.operands;
  for (const ir::IndexItem& it : op.index)
    if (it.has_value()) used.push_back(it.value);
  check_in_scope(T, used, "this copy's start (its block, index or peer)", loc);
  emit_collective(T, std::move(op), loc);
}

void RemoteCopy::wait_send(Loc loc) const {
  Op op{OpKind::CopyWait};
  op.fn = static_cast<int>(ir::CopyEnd::send);
  op.channel = id_;
  emit_collective(Tracer::current(loc), op, loc);
}

void RemoteCopy::wait_recv(Loc loc) const {
  Op op{OpKind::CopyWait};
  op.fn = static_cast<int>(ir::CopyEnd::recv);
  op.channel = id_;
  emit_collective(Tracer::current(loc), op, loc);
}

void RemoteCopy::wait(Loc loc) const {
  wait_send(loc);
  wait_recv(loc);
}

void barrier(const char* axis, Loc loc) { barrier(std::vector<std::string>{axis}, loc); }

void barrier(const std::vector<std::string>& axes, Loc loc) {
  Tracer& T = Tracer::current(loc);
  if (axes.empty()) T.fail("ph::barrier names the mesh axes of its group", loc);
  Op op{OpKind::Barrier};
  for (const std::string& a : axes) {
    const int axis = axis_of(T, a, "ph::barrier", loc);
    for (int64_t b : op.dims)
      if (b == axis) T.fail("ph::barrier names axis " + a + " twice", loc);
    op.dims.push_back(axis);
  }
  std::sort(op.dims.begin(), op.dims.end());  // a group is a set of axes: {"y", "x"} is {"x", "y"}
  emit_collective(T, op, loc);
}

Semaphore semaphore(Loc loc) {
  Tracer& T = Tracer::current(loc);
  if (T.fn().mesh.empty())
    T.fail("ph::semaphore needs a mesh: call the kernel on one (ph::Mesh, KernelBase::interpret_on)", loc);
  Semaphore s;
  s.id_ = T.fn().num_semaphores++;
  return s;
}

void signal(const Semaphore& s, const Peer& to, Loc loc) { signal(s, to, Operand(int64_t{1}, loc), loc); }

void signal(const Semaphore& s, const Peer& to, const Operand& count, Loc loc) {
  Tracer& T = Tracer::current(loc);
  T.require_device("ph::signal", loc);
  Op op{OpKind::Signal};
  op.channel = s.id();
  op.operands = {i64_scalar(T, count, "ph::signal's count", loc)};
  op.operands.insert(op.operands.end(), to.coords().begin(), to.coords().end());
  check_in_scope(T, op.operands, "ph::signal", loc);
  emit_collective(T, op, loc);
}

void wait(const Semaphore& s, Loc loc) { wait(s, Operand(int64_t{1}, loc), loc); }

void wait(const Semaphore& s, const Operand& count, Loc loc) {
  Tracer& T = Tracer::current(loc);
  T.require_device("ph::wait", loc);
  Op op{OpKind::SemWait};
  op.channel = s.id();
  op.operands = {i64_scalar(T, count, "ph::wait's count", loc)};
  emit_collective(T, op, loc);
}

}  // namespace parhelion

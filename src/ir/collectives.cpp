#include "ir/collectives.h"

#include "ir/printer.h"
#include "ir/type_rules.h"

namespace parhelion::ir {

bool is_collective(const Op& op) {
  switch (op.kind) {
    case OpKind::CopyStart:
    case OpKind::CopyWait:
    case OpKind::Barrier:
    case OpKind::Signal:
    case OpKind::SemWait:
      return true;
    default:
      return false;
  }
}

bool has_collectives(const std::vector<Op>& ops) {
  bool found = false;
  walk(ops, [&](const Op& op) { found |= is_collective(op); });
  return found;
}

bool uses_collectives(const Function& fn) {
  bool found = false;
  walk(fn.body, [&](const Op& op) { found |= is_collective(op) || op.kind == OpKind::DeviceIndex; });
  return !fn.mesh.empty() && found;
}

int mesh_axis(const Function& fn, const std::string& name) {
  for (size_t i = 0; i < fn.mesh.size(); ++i)
    if (fn.mesh[i].name == name) return static_cast<int>(i);
  return -1;
}

int64_t mesh_devices(const Function& fn) {
  int64_t n = 1;
  for (const MeshAxis& a : fn.mesh) n *= a.size;
  return n;
}

std::string mesh_to_string(const std::vector<MeshAxis>& mesh) { return Mesh(mesh).to_string(); }

std::string peer_rule(const Function& fn, const std::vector<Type>& coords) {
  if (fn.mesh.empty()) return "a peer needs a mesh: call the kernel on one (ph::Mesh)";
  if (coords.size() != fn.mesh.size())
    return "a peer has one coordinate per mesh axis (" + mesh_to_string(fn.mesh) + "), got " +
           std::to_string(coords.size());
  for (size_t i = 0; i < coords.size(); ++i)
    if (coords[i].rank() != 0 || coords[i].dtype != DType::i64)
      return "a peer's coordinate along " + fn.mesh[i].name + " must be an i64 scalar, got " +
             type_to_string(fn, coords[i]);
  return {};
}

std::string copy_rule(const Function& fn, int tensor, const std::vector<IndexItem>& index, const Type& value) {
  if (tensor < 0 || tensor >= static_cast<int>(fn.tensors.size())) return "a copy needs a destination tensor";
  const TensorInfo& t = fn.tensors[tensor];
  for (const IndexItem& it : index)
    if (it.kind == IndexItem::Gather)
      return "a remote copy moves one rectangular region: its destination " + t.name +
             " cannot be indexed by an index block (scatter locally, then copy)";
  for (int64_t s : t.strides)
    if (s == 0) return "a remote copy cannot land in " + t.name + ", an expanded (broadcast) view";
  Type dst;
  if (std::string err = load_type(fn, tensor, index, &dst); !err.empty()) return err;
  if (!(dst.shape == value.shape))
    return "a remote copy of a block of shape " + dims_to_string(fn, value.shape) + " into " + t.name + " indexed as " +
           dims_to_string(fn, dst.shape) + ": the shapes must be the same (no broadcast)";
  if (value.dtype == DType::boolean && t.dtype != DType::boolean)
    return "a remote copy of a bool block into " + t.name + ", a " + std::string(dtype_name(t.dtype)) + " tensor";
  return {};
}

const Op* copy_block_load(const Function& fn, const Op& start) {
  const Op* load = nullptr;
  walk(fn.body, [&](const Op& op) {
    if (op.kind == OpKind::Load && op.result == start.operands[0]) load = &op;
  });
  if (!load || is_masked(*load) || has_gather(*load) ||
      fn.tensors[load->tensor].dtype != fn.tensors[start.tensor].dtype)
    return nullptr;
  return load;
}

std::string count_rule(const Function& fn, const Type& count) {
  if (count.rank() != 0 || count.dtype != DType::i64)
    return "a semaphore's count must be an i64 scalar, got " + type_to_string(fn, count);
  return {};
}

}  // namespace parhelion::ir

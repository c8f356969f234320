// Views in the DSL: host views of tensors (Tensor::view, permute, expand, narrow, ...) and block
// views of device values (ph::reshape, permute, expand, squeeze, split, join, stack, cat). The
// rules are src/ir/views.h's; a violation is reported at the user's line.
#include "ir/views.h"
#include "frontend/tracer.h"
#include "ir/printer.h"
#include "parhelion/error.h"
#include "parhelion/lang.h"

namespace parhelion {

using frontend::Tracer;
using ir::Dim;
using ir::Op;
using ir::OpKind;
using ir::Type;

namespace {

Tracer& tracer(const Loc& loc) { return Tracer::current(loc); }

int value_of(Tracer& T, const Operand& o, const char* what) {
  if (o.kind == Operand::TensorK) return o.value;
  T.fail(std::string(what) + " of a number: it takes a block", o.loc);
}

Tensor emit(Tracer& T, Op op, const std::vector<Dim>& target, const Loc& loc) {
  Type t;
  std::string err = ir::block_view_type(T.fn(), op, target, &t);
  if (!err.empty()) T.fail(err, loc);
  op.result = T.new_value(t);
  return Tensor::block(T.emit(std::move(op), loc));
}

std::vector<Dim> dims_of(Tracer& T, const std::vector<DimSpec>& shape, const Loc& loc) {
  std::vector<Dim> d;
  for (const DimSpec& s : shape) {
    if (s.tile >= 0) {
      if (!T.tile_in_scope(s.tile)) T.fail("tile used outside the loop that defines it", loc);
      d.push_back(Dim::of_tile(s.tile));
    } else {
      if (s.size < -1) T.fail("a negative size in a block shape", loc);
      d.push_back(Dim::constant(s.size));
    }
  }
  return d;
}

Tensor multi(OpKind kind, const std::vector<Operand>& xs, int axis, const char* what) {
  if (xs.empty()) throw UserError(std::string(what) + " of no blocks");
  const Loc& loc = xs.begin()->loc;
  Tracer& T = tracer(loc);
  T.require_device(what, loc);
  Op op{kind};
  for (const Operand& x : xs) op.operands.push_back(value_of(T, x, what));
  // The rule normalizes the axis; record the normalized one.
  std::vector<Type> in;
  for (int v : op.operands) in.push_back(T.fn().type_of(v));
  Type t;
  std::string err = kind == OpKind::Cat ? ir::cat_type(T.fn(), in, &axis, &t) : ir::stack_type(T.fn(), in, &axis, &t);
  if (!err.empty()) T.fail(err, loc);
  op.axis = axis;
  return emit(T, op, {}, loc);
}

}  // namespace

// --- block views ------------------------------------------------------------------------------

Tensor reshape(const Operand& x, std::initializer_list<DimSpec> shape) {
  return reshape(x, std::vector<DimSpec>(shape));
}

Tensor reshape(const Operand& x, const std::vector<DimSpec>& shape) {
  Tracer& T = tracer(x.loc);
  T.require_device("reshape", x.loc);
  Op op{OpKind::Reshape};
  op.operands = {value_of(T, x, "reshape")};
  std::vector<Dim> target = dims_of(T, shape, x.loc);
  // One -1 is inferred from the constant dims' product (as torch.reshape).
  int infer = -1;
  int64_t known = 1, total = 1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i].kind == Dim::Const && target[i].size == -1) {
      if (infer >= 0) T.fail("reshape: only one dim can be -1", x.loc);
      infer = static_cast<int>(i);
    } else if (target[i].kind == Dim::Const) {
      known *= target[i].size;
    }
  }
  if (infer >= 0) {
    for (const Dim& d : T.fn().type_of(op.operands[0]).shape)
      if (d.kind == Dim::Const) total *= d.size;
    if (known == 0 || total % known != 0) T.fail("reshape: the -1 cannot be inferred", x.loc);
    target[infer] = Dim::constant(total / known);
  }
  return emit(T, op, target, x.loc);
}

Tensor permute(const Operand& x, std::initializer_list<int> perm) { return permute(x, std::vector<int>(perm)); }

Tensor permute(const Operand& x, const std::vector<int>& perm) {
  Tracer& T = tracer(x.loc);
  T.require_device("permute", x.loc);
  Op op{OpKind::Permute};
  op.operands = {value_of(T, x, "permute")};
  const int r = T.fn().type_of(op.operands[0]).rank();
  for (int p : perm) op.dims.push_back(p < 0 ? p + r : p);
  return emit(T, op, {}, x.loc);
}

Tensor expand(const Operand& x, std::initializer_list<DimSpec> shape) { return expand(x, std::vector<DimSpec>(shape)); }

Tensor expand(const Operand& x, const std::vector<DimSpec>& shape) {
  Tracer& T = tracer(x.loc);
  T.require_device("expand", x.loc);
  Op op{OpKind::Expand};
  op.operands = {value_of(T, x, "expand")};
  std::vector<Dim> target = dims_of(T, shape, x.loc);
  const Type& in = T.fn().type_of(op.operands[0]);
  const size_t lead = target.size() >= in.shape.size() ? target.size() - in.shape.size() : 0;
  for (size_t k = 0; k < target.size(); ++k)
    if (target[k].kind == Dim::Const && target[k].size == -1) {
      if (k < lead) T.fail("expand: a new leading dim needs a size (not -1)", x.loc);
      target[k] = in.shape[k - lead];
    }
  return emit(T, op, target, x.loc);
}

Tensor squeeze(const Operand& x, int axis) {
  Tracer& T = tracer(x.loc);
  T.require_device("squeeze", x.loc);
  Op op{OpKind::Squeeze};
  op.operands = {value_of(T, x, "squeeze")};
  Type t;
  std::string err = ir::squeeze_type(T.fn(), T.fn().type_of(op.operands[0]), &axis, &t);
  if (!err.empty()) T.fail(err, x.loc);
  op.axis = axis;
  return emit(T, op, {}, x.loc);
}

std::pair<Tensor, Tensor> split(const Operand& x) {
  Tracer& T = tracer(x.loc);
  T.require_device("split", x.loc);
  Op op{OpKind::Split};
  op.operands = {value_of(T, x, "split")};
  Tensor lo = emit(T, op, {}, x.loc);
  op.axis = 1;
  Tensor hi = emit(T, op, {}, x.loc);
  return {lo, hi};
}

Tensor join(const Operand& a, const Operand& b) {
  Tracer& T = tracer(a.loc);
  T.require_device("join", a.loc);
  Op op{OpKind::Join};
  op.operands = {value_of(T, a, "join"), value_of(T, b, "join")};
  return emit(T, op, {}, a.loc);
}

Tensor stack(std::initializer_list<Operand> xs, int axis) { return multi(OpKind::Stack, xs, axis, "stack"); }
Tensor cat(std::initializer_list<Operand> xs, int axis) { return multi(OpKind::Cat, xs, axis, "cat"); }
Tensor stack(const std::vector<Operand>& xs, int axis) { return multi(OpKind::Stack, xs, axis, "stack"); }
Tensor cat(const std::vector<Operand>& xs, int axis) { return multi(OpKind::Cat, xs, axis, "cat"); }

// --- host views -------------------------------------------------------------------------------

namespace {

Tensor host_view(const Tensor& x, ir::ViewKind kind, const Shape& dims, int axis, const char* what, const Loc& loc) {
  Tracer& T = tracer(loc);
  if (x.kind() != Tensor::HostK)
    T.fail(std::string("Tensor::") + what + " is a view of a tensor (host code); for a block use ph::" + what, loc);
  return Tensor::host(T.add_view(x.id(), kind, dims, axis, what, loc));
}

int normalized_dim(Tracer& T, int d, int rank, const char* what, const Loc& loc) {
  int a = d < 0 ? d + rank : d;
  if (a < 0 || a >= rank)
    T.fail(std::string(what) + ": dim " + std::to_string(d) + " of a tensor of rank " + std::to_string(rank), loc);
  return a;
}

}  // namespace

Tensor Tensor::view(const Shape& shape, Loc loc) const {
  return host_view(*this, ir::ViewKind::reshape, shape, 0, "view", loc);
}
Tensor Tensor::reshape(const Shape& shape, Loc loc) const {
  return host_view(*this, ir::ViewKind::reshape, shape, 0, "reshape", loc);
}
Tensor Tensor::permute(const Shape& dims, Loc loc) const {
  if (kind() == BlockK) {
    Tracer& T = tracer(loc);
    T.fail("Tensor::permute is a host view; for a block write ph::permute(block, {...})", loc);
  }
  Shape d = dims;
  for (int64_t& p : d)
    if (p < 0) p += static_cast<int64_t>(d.size());
  return host_view(*this, ir::ViewKind::permute, d, 0, "permute", loc);
}
Tensor Tensor::transpose(int d0, int d1, Loc loc) const {
  Tracer& T = tracer(loc);
  if (kind() != HostK) T.fail("Tensor::transpose is a host view; for a block use ph::transpose or ph::permute", loc);
  const int r = static_cast<int>(T.fn().tensors[id()].shape.size());
  Shape perm;
  for (int i = 0; i < r; ++i) perm.push_back(i);
  std::swap(perm[normalized_dim(T, d0, r, "transpose", loc)], perm[normalized_dim(T, d1, r, "transpose", loc)]);
  return host_view(*this, ir::ViewKind::permute, perm, 0, "transpose", loc);
}
Tensor Tensor::expand(const Shape& shape, Loc loc) const {
  return host_view(*this, ir::ViewKind::expand, shape, 0, "expand", loc);
}
Tensor Tensor::squeeze(int dim, Loc loc) const {
  Tracer& T = tracer(loc);
  if (kind() == BlockK) return parhelion::squeeze(Operand(*this, loc), dim);
  if (kind() != HostK) T.fail("squeeze of an uninitialized ph::Tensor", loc);
  Shape s = T.fn().tensors[id()].shape;
  const int a = normalized_dim(T, dim, static_cast<int>(s.size()), "squeeze", loc);
  if (s[a] != 1)
    T.fail("squeeze(" + std::to_string(dim) + ") of a tensor " + shape_to_string(s) + ": that dim is not of size 1",
           loc);
  s.erase(s.begin() + a);
  return host_view(*this, ir::ViewKind::reshape, s, 0, "squeeze", loc);
}
Tensor Tensor::narrow(int dim, int64_t start, int64_t length, Loc loc) const {
  Tracer& T = tracer(loc);
  if (kind() != HostK) T.fail("Tensor::narrow is a host view of a tensor (host code)", loc);
  const int a = normalized_dim(T, dim, rank(), "narrow", loc);
  return host_view(*this, ir::ViewKind::narrow, {start, length}, a, "narrow", loc);
}

}  // namespace parhelion

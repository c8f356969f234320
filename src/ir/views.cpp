#include "ir/views.h"

#include <algorithm>

#include "ir/type_rules.h"
#include "parhelion/error.h"

namespace parhelion::ir {
namespace {

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// The constant dims between tile dims: segment k holds the constant dims after the k-th tile
// (segment 0: before the first). Returns the tile ids in order and each segment's product.
void segments(const std::vector<Dim>& shape, std::vector<int>* tiles, std::vector<int64_t>* products) {
  products->assign(1, 1);
  for (const Dim& d : shape) {
    if (d.kind == Dim::Tile) {
      tiles->push_back(d.tile);
      products->push_back(1);
    } else {
      products->back() *= d.size;
    }
  }
}

// Broadcasts every type to one shape; all must share a dtype.
std::string common_type(const Function& fn, const std::vector<Type>& in, const char* what, Type* out) {
  if (in.empty()) return std::string(what) + " needs at least one block";
  Type t = in[0];
  for (size_t i = 1; i < in.size(); ++i) {
    if (in[i].dtype != t.dtype)
      return std::string(what) + ": the blocks must have one dtype, got " + std::string(dtype_name(t.dtype)) + " and " +
             std::string(dtype_name(in[i].dtype)) + " (cast one)";
    std::vector<Dim> s;
    std::string err = broadcast_shapes(fn, t.shape, in[i].shape, &s);
    if (!err.empty()) return std::string(what) + ": " + err;
    t.shape = s;
  }
  *out = t;
  return "";
}

}  // namespace

std::string reshape_type(const Function& fn, const Type& in, const std::vector<Dim>& target, Type* out) {
  std::vector<int> ta, tb;
  std::vector<int64_t> pa, pb;
  segments(in.shape, &ta, &pa);
  segments(target, &tb, &pb);
  const std::string what = "reshape of a block " + dims_to_string(fn, in.shape) + " to " + dims_to_string(fn, target);
  if (ta != tb) return what + ": the tile dims must stay, in the same order (only constant dims split or merge)";
  for (size_t k = 0; k < pa.size(); ++k)
    if (pa[k] != pb[k])
      return what + ": the constant dims " +
             (k == 0 ? "before the first tile" : "after tile dim " + std::to_string(k)) + " hold " +
             std::to_string(pa[k]) + " elements in the block and " + std::to_string(pb[k]) + " in the target";
  *out = Type{in.dtype, target};
  return "";
}

std::string permute_type(const Function& fn, const Type& in, const std::vector<int64_t>& perm, Type* out) {
  if (static_cast<int>(perm.size()) != in.rank())
    return "permute " + dims_str(perm) + " of a block of rank " + std::to_string(in.rank()) +
           ": give one entry per dim";
  std::vector<bool> seen(perm.size(), false);
  Type t{in.dtype, {}};
  for (int64_t p : perm) {
    if (p < 0 || p >= in.rank() || seen[p])
      return "permute " + dims_str(perm) + " of a block " + dims_to_string(fn, in.shape) +
             ": not a permutation of 0.." + std::to_string(in.rank() - 1);
    seen[p] = true;
    t.shape.push_back(in.shape[p]);
  }
  *out = t;
  return "";
}

std::string expand_type(const Function& fn, const Type& in, const std::vector<Dim>& target, Type* out) {
  const std::string what = "expand of a block " + dims_to_string(fn, in.shape) + " to " + dims_to_string(fn, target);
  if (target.size() < in.shape.size()) return what + ": the target has fewer dims than the block";
  const size_t lead = target.size() - in.shape.size();
  for (size_t k = 0; k < in.shape.size(); ++k) {
    const Dim &a = in.shape[k], &b = target[lead + k];
    if (!(a == b) && !a.is_one())
      return what + ": dim " + std::to_string(k) + " is neither equal to its target nor a constant 1";
  }
  *out = Type{in.dtype, target};
  return "";
}

std::string squeeze_type(const Function& fn, const Type& in, int* axis, Type* out) {
  int a = *axis < 0 ? *axis + in.rank() : *axis;
  if (a < 0 || a >= in.rank())
    return "squeeze(" + std::to_string(*axis) + ") of a block of rank " + std::to_string(in.rank());
  if (!in.shape[a].is_one())
    return "squeeze(" + std::to_string(*axis) + ") of a block " + dims_to_string(fn, in.shape) +
           ": that dim is not a constant 1";
  *axis = a;
  Type t = in;
  t.shape.erase(t.shape.begin() + a);
  *out = t;
  return "";
}

std::string split_type(const Function& fn, const Type& in, Type* out) {
  if (in.rank() == 0 || !(in.shape.back() == Dim::constant(2)))
    return "split of a block " + dims_to_string(fn, in.shape) + ": its last dim must be a constant 2";
  Type t = in;
  t.shape.pop_back();
  *out = t;
  return "";
}

std::string stack_type(const Function& fn, const std::vector<Type>& in, int* axis, Type* out) {
  Type t;
  if (std::string err = common_type(fn, in, "stack", &t); !err.empty()) return err;
  int a = *axis < 0 ? *axis + t.rank() + 1 : *axis;
  if (a < 0 || a > t.rank())
    return "stack at axis " + std::to_string(*axis) + " of blocks of rank " + std::to_string(t.rank());
  *axis = a;
  t.shape.insert(t.shape.begin() + a, Dim::constant(static_cast<int64_t>(in.size())));
  *out = t;
  return "";
}

std::string cat_type(const Function& fn, const std::vector<Type>& in, int* axis, Type* out) {
  if (in.empty()) return "cat needs at least one block";
  const int r = in[0].rank();
  int a = *axis < 0 ? *axis + r : *axis;
  if (a < 0 || a >= r) return "cat along axis " + std::to_string(*axis) + " of blocks of rank " + std::to_string(r);
  Type t = in[0];
  int64_t n = 0;
  for (const Type& x : in) {
    if (x.dtype != t.dtype) return "cat: the blocks must have one dtype (cast one)";
    if (x.rank() != r) return "cat: the blocks must have one rank";
    for (int k = 0; k < r; ++k) {
      if (k == a) continue;
      if (!(x.shape[k] == t.shape[k]))
        return "cat along axis " + std::to_string(a) + ": the blocks " + dims_to_string(fn, t.shape) + " and " +
               dims_to_string(fn, x.shape) + " differ in dim " + std::to_string(k);
    }
    if (x.shape[a].kind != Dim::Const)
      return "cat along axis " + std::to_string(a) + " of a block " + dims_to_string(fn, x.shape) +
             ": only a constant dim can be concatenated (not a tile)";
    n += x.shape[a].size;
  }
  *axis = a;
  t.shape[a] = Dim::constant(n);
  *out = t;
  return "";
}

bool is_block_view(OpKind k) {
  switch (k) {
    case OpKind::Reshape:
    case OpKind::Permute:
    case OpKind::Expand:
    case OpKind::Squeeze:
    case OpKind::Split:
    case OpKind::Join:
    case OpKind::Stack:
    case OpKind::Cat:
      return true;
    default:
      return false;
  }
}

std::string block_view_type(const Function& fn, const Op& op, const std::vector<Dim>& target, Type* out) {
  std::vector<Type> in;
  for (int v : op.operands) in.push_back(fn.type_of(v));
  if (in.empty()) return std::string(op_name(op)) + " needs an operand";
  int axis = op.axis;
  std::string err;
  switch (op.kind) {
    case OpKind::Reshape:
      return reshape_type(fn, in[0], target, out);
    case OpKind::Permute:
      return permute_type(fn, in[0], op.dims, out);
    case OpKind::Expand:
      return expand_type(fn, in[0], target, out);
    case OpKind::Squeeze:
      err = squeeze_type(fn, in[0], &axis, out);
      break;
    case OpKind::Split:
      if (op.axis != 0 && op.axis != 1) return "split: the half must be 0 or 1";
      return split_type(fn, in[0], out);
    case OpKind::Join:
      if (in.size() != 2) return "join takes two blocks";
      axis = -1;
      err = stack_type(fn, in, &axis, out);
      return err;
    case OpKind::Stack:
      err = stack_type(fn, in, &axis, out);
      break;
    case OpKind::Cat:
      err = cat_type(fn, in, &axis, out);
      break;
    default:
      throw InternalError("not a block view");
  }
  if (err.empty() && axis != op.axis) return std::string(op_name(op)) + ": axis not normalized";
  return err;
}

std::string_view view_kind_name(ViewKind k) {
  switch (k) {
    case ViewKind::reshape:
      return "view";
    case ViewKind::permute:
      return "permute";
    case ViewKind::expand:
      return "expand";
    case ViewKind::narrow:
      return "narrow";
  }
  return "?";
}

std::string host_view(const TensorInfo& base, ViewKind kind, std::vector<int64_t> dims, int axis, HostView* out) {
  const Shape& s = base.shape;
  const Shape& st = base.strides;
  const int r = static_cast<int>(s.size());
  HostView v;
  v.offset = base.origin == TensorInfo::View ? base.offset : 0;
  const std::string what =
      std::string(view_kind_name(kind)) + " " + dims_str(dims) + " of " + base.name + " " + shape_to_string(s);
  switch (kind) {
    case ViewKind::reshape: {
      int64_t known = 1, numel = shape_numel(s);
      int infer = -1;
      for (size_t i = 0; i < dims.size(); ++i) {
        if (dims[i] == -1) {
          if (infer >= 0) return what + ": only one dim can be -1";
          infer = static_cast<int>(i);
        } else if (dims[i] < 0) {
          return what + ": a negative size";
        } else {
          known *= dims[i];
        }
      }
      if (infer >= 0) {
        if (known == 0 || numel % known != 0)
          return what + ": the -1 cannot be inferred (" + std::to_string(numel) + " elements)";
        dims[infer] = numel / known;
        known = numel;
      }
      if (known != numel)
        return what + ": " + std::to_string(known) + " elements, the tensor has " + std::to_string(numel);
      v.shape = dims;
      v.strides.assign(dims.size(), 0);
      if (numel == 0) {
        v.strides = contiguous_strides(dims);
        break;
      }
      // Walk the base from its last dim, in chunks of dims that are contiguous with each
      // other; the new dims that make up each chunk's elements take strides inside it.
      int vd = static_cast<int>(dims.size()) - 1;
      int64_t chunk_stride = r ? st[r - 1] : 1, tensor_numel = 1, view_numel = 1;
      for (int td = r - 1; td >= 0; --td) {
        tensor_numel *= s[td];
        if (td == 0 || (s[td - 1] != 1 && st[td - 1] != tensor_numel * chunk_stride)) {
          while (vd >= 0 && (view_numel < tensor_numel || dims[vd] == 1)) {
            v.strides[vd] = view_numel * chunk_stride;
            view_numel *= dims[vd];
            --vd;
          }
          if (view_numel != tensor_numel)
            return what + ": its strides " + shape_to_string(st) +
                   " cannot describe that shape without a copy (view needs dims that merge to be contiguous "
                   "with each other)";
          if (td > 0) {
            chunk_stride = st[td - 1];
            tensor_numel = view_numel = 1;
          }
        }
      }
      for (; vd >= 0; --vd) v.strides[vd] = 1;  // size-1 dims of a rank-0 base
      break;
    }
    case ViewKind::permute: {
      if (static_cast<int>(dims.size()) != r) return what + ": give one entry per dim";
      std::vector<bool> seen(r, false);
      for (int64_t p : dims) {
        if (p < 0 || p >= r || seen[p]) return what + ": not a permutation of 0.." + std::to_string(r - 1);
        seen[p] = true;
        v.shape.push_back(s[p]);
        v.strides.push_back(st[p]);
      }
      break;
    }
    case ViewKind::expand: {
      if (static_cast<int>(dims.size()) < r) return what + ": fewer dims than the tensor";
      const size_t lead = dims.size() - r;
      for (size_t k = 0; k < dims.size(); ++k) {
        if (k < lead) {
          if (dims[k] < 0) return what + ": a new dim needs a size";
          v.shape.push_back(dims[k]);
          v.strides.push_back(0);
          continue;
        }
        const int64_t n = s[k - lead];
        if (dims[k] == -1 || dims[k] == n) {
          v.shape.push_back(n);
          v.strides.push_back(st[k - lead]);
        } else if (n == 1 && dims[k] >= 0) {
          v.shape.push_back(dims[k]);
          v.strides.push_back(0);
        } else {
          return what + ": dim " + std::to_string(k - lead) + " has size " + std::to_string(n) +
                 " (only size-1 dims expand)";
        }
      }
      break;
    }
    case ViewKind::narrow: {
      if (axis < 0 || axis >= r) return what + ": dim " + std::to_string(axis) + " out of range";
      if (dims.size() != 2 || dims[0] < 0 || dims[1] < 0 || dims[0] + dims[1] > s[axis])
        return "narrow(" + std::to_string(axis) + ", start, length) of " + base.name + " " + shape_to_string(s) +
               ": the range must lie inside dim " + std::to_string(axis) + " (size " + std::to_string(s[axis]) + ")";
      v.shape = s;
      v.strides = st;
      v.shape[axis] = dims[1];
      v.offset += dims[0] * st[axis];
      break;
    }
  }
  *out = v;
  return "";
}

std::pair<int64_t, int64_t> element_span(const TensorInfo& t) {
  int64_t lo = t.origin == TensorInfo::View ? t.offset : 0, hi = lo;
  for (size_t d = 0; d < t.shape.size(); ++d) {
    if (t.shape[d] == 0) return {0, -1};
    const int64_t e = (t.shape[d] - 1) * t.strides[d];
    (e < 0 ? lo : hi) += e;
  }
  return {lo, hi};
}

}  // namespace parhelion::ir

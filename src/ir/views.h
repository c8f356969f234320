// The rules of views, shared by the tracer (which reports a violation at the user's line), the
// verifier and the Tile IR parser. Each returns an error message, or "" when the rule holds.
//
// Block views (device values; ops Reshape ... Cat) are index remaps of their operands:
//   reshape  tile dims keep their positions and order; the constant dims between two tile dims
//            (or before the first, after the last) may split or merge, keeping their product:
//            [t, 4] -> [t, 2, 2], [2, 3, t] -> [6, t]. The row-major order of the elements is
//            unchanged, so it moves no element.
//   permute  result dim i is operand dim perm[i] (torch.permute).
//   expand   the target is right-aligned with the operand; each operand dim either equals its
//            target dim or is a constant 1 (broadcast to it); extra leading target dims are new.
//   squeeze  removes a constant size-1 dim.
//   split    the halves of a last dim of constant size 2: x[..., 0] and x[..., 1].
//   join     a, b (broadcast to one shape, one dtype) -> [..., 2] with [..., 0] = a, [..., 1] = b.
//   stack    n operands (broadcast, one dtype) -> a new constant dim of size n at `axis`.
//   cat      operands equal except along `axis`, a constant dim in each; the result's is their sum.
// Host views (OpKind::View, TensorInfo::View) alias their base's memory: see TensorInfo.
#pragma once

#include <string>
#include <vector>

#include "ir/ir.h"

namespace parhelion::ir {

std::string reshape_type(const Function& fn, const Type& in, const std::vector<Dim>& target, Type* out);
std::string permute_type(const Function& fn, const Type& in, const std::vector<int64_t>& perm, Type* out);
std::string expand_type(const Function& fn, const Type& in, const std::vector<Dim>& target, Type* out);
// `axis` may be negative; it is normalized.
std::string squeeze_type(const Function& fn, const Type& in, int* axis, Type* out);
std::string split_type(const Function& fn, const Type& in, Type* out);
// join is stack at axis = rank.
std::string stack_type(const Function& fn, const std::vector<Type>& in, int* axis, Type* out);
std::string cat_type(const Function& fn, const std::vector<Type>& in, int* axis, Type* out);

// The type of any block-view op above from its operands (reshape and expand take their target
// from `target`, the written or requested result shape).
std::string block_view_type(const Function& fn, const Op& op, const std::vector<Dim>& target, Type* out);
bool is_block_view(OpKind k);

// A host view of `base`: its shape, and the offset and strides into its root's memory.
//   reshape  dims: the new shape (one -1 is inferred); refused when the base's strides cannot
//            describe it without copying (as torch.view)
//   permute  dims: a permutation (result dim i is base dim dims[i])
//   expand   dims: the new shape, right-aligned; -1 keeps a dim; size-1 dims and new leading
//            dims get stride 0
//   narrow   axis: the dim; dims = {start, length}
struct HostView {
  Shape shape, strides;
  int64_t offset = 0;
};
std::string host_view(const TensorInfo& base, ViewKind kind, std::vector<int64_t> dims, int axis, HostView* out);
std::string_view view_kind_name(ViewKind k);

// The memory a tensor's elements occupy in its root, [lo, hi] in elements (hi < lo: empty).
std::pair<int64_t, int64_t> element_span(const TensorInfo& t);
// The tensor whose memory `t` uses: itself unless it is a view.
inline int root_of(const Function& fn, int t) {
  return fn.tensors.at(t).origin == TensorInfo::View ? fn.tensors[t].root : t;
}

}  // namespace parhelion::ir

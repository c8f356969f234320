#include "ir/type_rules.h"

#include "ir/printer.h"

namespace parhelion::ir {

std::string dims_to_string(const Function& fn, const std::vector<Dim>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    s += i ? ", " : "";
    s += dims[i].kind == Dim::Tile ? tile_name(fn, dims[i].tile) : std::to_string(dims[i].size);
  }
  return s + "]";
}

std::string broadcast_shapes(const Function& fn, const std::vector<Dim>& a, const std::vector<Dim>& b,
                             std::vector<Dim>* out) {
  size_t n = std::max(a.size(), b.size());
  std::vector<Dim> r(n);
  for (size_t i = 0; i < n; ++i) {
    const Dim* da = i < n - a.size() ? nullptr : &a[i - (n - a.size())];
    const Dim* db = i < n - b.size() ? nullptr : &b[i - (n - b.size())];
    if (!da)
      r[i] = *db;
    else if (!db)
      r[i] = *da;
    else if (*da == *db || db->is_one())
      r[i] = *da;
    else if (da->is_one())
      r[i] = *db;
    else
      return "shapes " + dims_to_string(fn, a) + " and " + dims_to_string(fn, b) + " do not broadcast (dimension " +
             std::to_string(i) + ")";
  }
  *out = std::move(r);
  return "";
}

std::string load_type(const Function& fn, int tensor, const std::vector<IndexItem>& index, Type* out) {
  const TensorInfo& t = fn.tensors.at(tensor);
  if (index.size() != t.shape.size())
    return "tensor " + t.name + " has rank " + std::to_string(t.shape.size()) + " (shape " + shape_to_string(t.shape) +
           ") but is indexed with " + std::to_string(index.size()) + " indices";
  Type r;
  r.dtype = compute_dtype(t.dtype);
  std::vector<int> gathered;  // block dims that come from a gather index block
  for (size_t d = 0; d < index.size(); ++d) {
    const IndexItem& it = index[d];
    const BlockCount* count = nullptr;
    for (const BlockCount& c : t.counts)
      if (c.dim == static_cast<int>(d)) count = &c;
    if (count) {
      // Its size depends on the config: only a tile over the same count, or a scalar (t.id(),
      // checked at run time), indexes it.
      const TileInfo* ti = it.kind == IndexItem::Tile ? &fn.tiles.at(it.tile) : nullptr;
      while (ti && ti->parent >= 0) ti = &fn.tiles.at(ti->parent);
      const bool same_count = ti && ti->count_block == count->block && ti->count_extent == count->extent;
      if (!(it.kind == IndexItem::Scalar || same_count))
        return "dimension " + std::to_string(d) + " of " + t.name + " is a number of blocks of $b" +
               std::to_string(count->block) +
               " (ph::num_blocks), whose size the config decides: index it with a tile over the same "
               "ph::num_blocks(...) or with a block number (t.id()), not with " +
               (it.kind == IndexItem::All     ? "ph::all"
                : it.kind == IndexItem::Slice ? "a slice"
                                              : "another tile");
    }
    if (it.kind == IndexItem::All) {
      r.shape.push_back(Dim::constant(t.shape[d]));
    } else if (it.kind == IndexItem::Slice) {
      const Type& vt = fn.type_of(it.value);
      if (vt.rank() != 0 || vt.dtype != DType::i64)
        return "the start of slice " + std::to_string(d) + " of " + t.name + " must be an i64 scalar; got " +
               type_to_string(fn, vt);
      if (it.length < 1 || it.length > t.shape[d])
        return "a slice of length " + std::to_string(it.length) + " cannot index dimension " + std::to_string(d) +
               " of " + t.name + ", which has size " + std::to_string(t.shape[d]);
      r.shape.push_back(Dim::constant(it.length));
    } else if (it.kind == IndexItem::Tile) {
      const TileInfo& ti = fn.tiles.at(it.tile);
      // (A jagged tile's bound is the smallest dim it indexes, known once the trace is complete.)
      const bool unbounded = ti.end == kUnboundedRange;
      if (!unbounded && (ti.end > t.shape[d] || ti.begin < 0))
        return "tile " + tile_name(fn, it.tile) + " ranges over " + std::to_string(ti.begin) + ".." +
               std::to_string(ti.end) + " but indexes dimension " + std::to_string(d) + " of " + t.name +
               ", which has size " + std::to_string(t.shape[d]) + " (was the tile made for another dimension?)";
      if (ti.is_grid) continue;  // a grid index selects one element: the dimension drops
      r.shape.push_back(Dim::of_tile(it.tile));
    } else if (it.kind == IndexItem::Gather) {
      const Type& vt = fn.type_of(it.value);
      if (vt.rank() != 1 || vt.dtype != DType::i64)
        return "index " + std::to_string(d) + " of " + t.name +
               " gathers with a block of indices, which must be an i64 block of rank 1; got " + type_to_string(fn, vt);
      gathered.push_back(static_cast<int>(r.shape.size()));
      r.shape.push_back(vt.shape[0]);
    } else {
      const Type& vt = fn.type_of(it.value);
      if (vt.rank() != 0 || vt.dtype != DType::i64)
        return "index " + std::to_string(d) + " of " + t.name + " must be a tile, ph::all, or an integer scalar; got " +
               type_to_string(fn, vt);
    }
  }
  // Each gather index block contributes its dim in place; two items giving the block the same
  // tile dim would need a rule for which element pairs with which (a diagonal? a broadcast?):
  // refused, so that no reading is guessed.
  for (int g : gathered)
    for (size_t k = 0; k < r.shape.size(); ++k)
      if (static_cast<int>(k) != g && r.shape[g].kind == Dim::Tile && r.shape[k] == r.shape[g])
        return "the index block of dimension " + std::to_string(g) + " of " + t.name + " has dim " +
               tile_name(fn, r.shape[g].tile) + ", which another index of the subscript also gives the block (" +
               dims_to_string(fn, r.shape) +
               "); each dim of a gathered block must come from one index (index with the tile directly, or "
               "gather with a block over another tile)";
  *out = std::move(r);
  return "";
}

std::string mask_rule(const Function& fn, const Type& access, const Type& mask, const Type* other) {
  if (mask.dtype != DType::boolean)
    return "the mask of a masked access must be a boolean block (a comparison); got " + type_to_string(fn, mask);
  std::vector<Dim> b;
  std::string err = broadcast_shapes(fn, access.shape, mask.shape, &b);
  if (!err.empty() || !(b == access.shape))
    return "the mask's shape " + dims_to_string(fn, mask.shape) + " does not broadcast to the accessed block's " +
           dims_to_string(fn, access.shape);
  if (other) {
    if (other->dtype != access.dtype)
      return "the fill of a masked load must have the loaded block's dtype " + type_to_string(fn, access) + "; got " +
             type_to_string(fn, *other);
    err = broadcast_shapes(fn, access.shape, other->shape, &b);
    if (!err.empty() || !(b == access.shape))
      return "the fill's shape " + dims_to_string(fn, other->shape) + " does not broadcast to the loaded block's " +
             dims_to_string(fn, access.shape);
  }
  return "";
}

std::string reduce_type(const Function& fn, const Type& in, int* axis, bool keepdim, Type* out) {
  int rank = in.rank();
  int a = *axis < 0 ? *axis + rank : *axis;
  if (a < 0 || a >= rank)
    return "reduction over axis " + std::to_string(*axis) + " of a block with shape " + dims_to_string(fn, in.shape) +
           " (rank " + std::to_string(rank) + ")";
  if (in.dtype == DType::boolean) return "cannot reduce a boolean block; cast it first";
  *axis = a;
  Type r = in;
  if (keepdim)
    r.shape[a] = Dim::constant(1);
  else
    r.shape.erase(r.shape.begin() + a);
  *out = std::move(r);
  return "";
}

std::string dot_type(const Function& fn, const Type& a, const Type& b, Type* out) {
  if (a.rank() < 2 || b.rank() < 2)
    return "dot needs operands of rank 2 or more ([..., M, K] and [..., K, N]); got " + dims_to_string(fn, a.shape) +
           " and " + dims_to_string(fn, b.shape);
  if (a.dtype != DType::f32 || b.dtype != DType::f32) return "dot needs floating operands";
  const Dim& ka = a.shape[a.rank() - 1];
  const Dim& kb = b.shape[b.rank() - 2];
  if (!(ka == kb))
    return "dot: the contracted dimensions differ: " + dims_to_string(fn, {ka}) + " (last of " +
           dims_to_string(fn, a.shape) + ") and " + dims_to_string(fn, {kb}) + " (second to last of " +
           dims_to_string(fn, b.shape) + ")";
  std::vector<Dim> batch;
  std::vector<Dim> ba(a.shape.begin(), a.shape.end() - 2), bb(b.shape.begin(), b.shape.end() - 2);
  std::string err = broadcast_shapes(fn, ba, bb, &batch);
  if (!err.empty()) return "dot: batch dimensions: " + err;
  Type r;
  r.dtype = DType::f32;
  r.shape = batch;
  r.shape.push_back(a.shape[a.rank() - 2]);
  r.shape.push_back(b.shape[b.rank() - 1]);
  *out = std::move(r);
  return "";
}

std::string unary_dtype(UnaryFn f, DType a, DType* out) {
  const std::string name(unary_name(f));
  *out = a;
  switch (f) {
    case UnaryFn::logical_not:
      return a == DType::boolean ? "" : "logical not needs a boolean operand";
    case UnaryFn::bit_not:
      return a == DType::i64 ? "" : "bitwise not (~) needs an integer operand";
    case UnaryFn::neg:
    case UnaryFn::abs:
    case UnaryFn::round:
    case UnaryFn::floor:
    case UnaryFn::ceil:
    case UnaryFn::trunc:
      return a == DType::boolean ? name + " needs a numeric operand" : "";
    default:
      return a == DType::f32 ? "" : name + " needs an f32 operand";
  }
}

bool binary_operands_in_f32(BinaryFn f, DType result) {
  return result == DType::f32 && f != BinaryFn::rand && f != BinaryFn::randn;
}

std::string binary_dtype(BinaryFn f, DType a, DType b, DType* out) {
  if (f == BinaryFn::logical_and || f == BinaryFn::logical_or) {
    if (a != DType::boolean || b != DType::boolean) return "logical ops need boolean operands";
    *out = DType::boolean;
    return "";
  }
  if (f == BinaryFn::bit_and || f == BinaryFn::bit_or || f == BinaryFn::bit_xor) {
    if (a == b && (a == DType::i64 || a == DType::boolean)) {
      *out = a;
      return "";
    }
    return std::string("bitwise ") + std::string(binary_name(f)) + " needs two integer or two boolean operands (got " +
           std::string(dtype_name(a)) + " and " + std::string(dtype_name(b)) + "); cast the operands first";
  }
  if (f == BinaryFn::rand || f == BinaryFn::randn) {
    if (a != DType::i64 || b != DType::i64)
      return std::string(binary_name(f)) + " needs an integer seed and integer offsets (got " +
             std::string(dtype_name(a)) + " and " + std::string(dtype_name(b)) + "); cast them to i64 first";
    *out = DType::f32;
    return "";
  }
  if (f == BinaryFn::shl || f == BinaryFn::shr) {
    if (a != DType::i64 || b != DType::i64)
      return std::string("shift ") + std::string(binary_name(f)) + " needs integer operands (got " +
             std::string(dtype_name(a)) + " and " + std::string(dtype_name(b)) + ")";
    *out = DType::i64;
    return "";
  }
  if (a == DType::boolean || b == DType::boolean)
    return std::string("operator ") + std::string(binary_name(f)) +
           " needs numeric operands; cast the boolean block first";
  // True division, as in torch: i64 / i64 is f32.
  DType num =
      (a == DType::f32 || b == DType::f32 || f == BinaryFn::div || f == BinaryFn::pow) ? DType::f32 : DType::i64;
  *out = is_comparison(f) ? DType::boolean : num;
  return "";
}

}  // namespace parhelion::ir

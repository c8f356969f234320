// The DSL's operations: each checks its operands against the typing rules, reporting a
// violation at the user's line, and appends one op to the trace.
#include "parhelion/lang.h"

#include <optional>

#include "frontend/operands.h"
#include "frontend/tracer.h"
#include "ir/printer.h"
#include "ir/type_rules.h"
#include "parhelion/error.h"
#include "runtime/source_line.h"

namespace parhelion {

using frontend::Tracer;
using ir::BinaryFn;
using ir::Dim;
using ir::Op;
using ir::OpKind;
using ir::Type;
using ir::UnaryFn;

namespace {

Tracer& tracer(const Loc& loc) { return Tracer::current(loc); }

std::string describe(const Tracer& T, int value) {
  return ir::type_to_string(const_cast<Tracer&>(T).fn(), const_cast<Tracer&>(T).fn().type_of(value));
}

int emit_value(Tracer& T, Op op, Type t, const Loc& loc) {
  op.result = T.new_value(std::move(t));
  return T.emit(std::move(op), loc);
}

int constant(Tracer& T, double v, DType dtype, const Loc& loc) {
  Op op{OpKind::Constant};
  op.number = v;
  return emit_value(T, op, Type{dtype, {}}, loc);
}

// The value of an operand; a literal takes the dtype of its partner (`hint`).
int value_of(Tracer& T, const Operand& o, DType hint = DType::f32) {
  if (o.kind == Operand::TensorK) return o.value;
  DType dt = (o.is_int && hint == DType::i64) ? DType::i64 : DType::f32;
  return constant(T, o.number, dt, o.loc);
}

DType dtype_of(Tracer& T, const Operand& o) {
  if (o.kind == Operand::TensorK) return T.fn().type_of(o.value).dtype;
  return o.is_int ? DType::i64 : DType::f32;
}

// Ops that keep an integer operand integral (the others compute in f32, as torch does).
bool integral_unary(UnaryFn f) {
  switch (f) {
    case UnaryFn::neg:
    case UnaryFn::abs:
    case UnaryFn::bit_not:
    case UnaryFn::round:
    case UnaryFn::floor:
    case UnaryFn::ceil:
    case UnaryFn::trunc:
      return true;
    default:
      return false;
  }
}

Tensor unary(UnaryFn f, const Operand& x) {
  Tracer& T = tracer(x.loc);
  T.require_device(std::string(ir::unary_name(f)).c_str(), x.loc);
  int v = value_of(T, x, f == UnaryFn::bit_not ? DType::i64 : DType::f32);
  Type t = T.fn().type_of(v);
  // `~` on a boolean block is the logical not (bitwise ops on bools are logical, as in torch).
  if (f == UnaryFn::bit_not && t.dtype == DType::boolean) f = UnaryFn::logical_not;
  if (f == UnaryFn::logical_not) {
    if (t.dtype != DType::boolean) T.fail("logical not needs a boolean block, got " + describe(T, v), x.loc);
  } else if (t.dtype == DType::boolean) {
    T.fail(std::string(ir::unary_name(f)) + " needs a numeric block, got " + describe(T, v), x.loc);
  } else if (f == UnaryFn::bit_not && t.dtype != DType::i64) {
    T.fail("bitwise not (~) needs an integer or boolean block, got " + describe(T, v), x.loc);
  } else if (!integral_unary(f) && t.dtype == DType::i64) {
    // Transcendentals of integer blocks compute in f32, as torch does.
    Op c{OpKind::Cast};
    c.operands = {v};
    c.dtype = DType::f32;
    t.dtype = DType::f32;
    v = emit_value(T, c, t, x.loc);
  }
  std::string err = ir::unary_dtype(f, t.dtype, &t.dtype);
  if (!err.empty()) T.fail(err, x.loc);
  Op op{OpKind::Unary};
  op.fn = static_cast<int>(f);
  op.operands = {v};
  return Tensor::block(emit_value(T, op, t, x.loc));
}

// `literal_dtype`: the dtype a literal operand takes (by default, that of the other operand).
Tensor binary(BinaryFn f, const Operand& a, const Operand& b, std::optional<DType> literal_dtype = std::nullopt) {
  Tracer& T = tracer(a.loc);
  T.require_device(std::string(ir::binary_name(f)).c_str(), a.loc);
  int va = value_of(T, a, literal_dtype.value_or(dtype_of(T, b)));
  int vb = value_of(T, b, literal_dtype.value_or(dtype_of(T, a)));
  const Type &ta = T.fn().type_of(va), &tb = T.fn().type_of(vb);
  Type t;
  std::string err = ir::broadcast_shapes(T.fn(), ta.shape, tb.shape, &t.shape);
  if (!err.empty()) T.fail(std::string(ir::binary_name(f)) + ": " + err, a.loc);
  err = ir::binary_dtype(f, ta.dtype, tb.dtype, &t.dtype);
  if (!err.empty()) T.fail(err, a.loc);
  Op op{OpKind::Binary};
  op.fn = static_cast<int>(f);
  op.operands = {va, vb};
  return Tensor::block(emit_value(T, op, t, a.loc));
}

Tensor reduce(ir::ReduceFn f, const Operand& x, int axis, bool keepdim) {
  Tracer& T = tracer(x.loc);
  T.require_device(std::string(ir::reduce_name(f)).c_str(), x.loc);
  int v = value_of(T, x);
  Type t;
  int a = axis;
  std::string err = ir::reduce_type(T.fn(), T.fn().type_of(v), &a, keepdim, &t);
  if (!err.empty()) T.fail(std::string(ir::reduce_name(f)) + ": " + err, x.loc);
  if (f == ir::ReduceFn::mean && t.dtype == DType::i64) {
    Op c{OpKind::Cast};
    c.operands = {v};
    c.dtype = DType::f32;
    Type ct = T.fn().type_of(v);
    ct.dtype = DType::f32;
    v = emit_value(T, c, ct, x.loc);
    t.dtype = DType::f32;
  }
  Op op{OpKind::Reduce};
  op.fn = static_cast<int>(f);
  op.axis = a;
  op.keepdim = keepdim;
  op.operands = {v};
  return Tensor::block(emit_value(T, op, t, x.loc));
}

std::vector<Dim> block_dims(Tracer& T, const std::vector<DimSpec>& shape, const Loc& loc) {
  std::vector<Dim> dims;
  for (DimSpec d : shape) {
    if (d.count_block >= 0) T.fail("ph::num_blocks sizes host allocations, not blocks inside a tile loop", loc);
    if (d.block >= 0) {
      d.tile = T.innermost_tile_of_block(d.block);
      if (d.tile < 0)
        T.fail("a block dim given by the block size $b" + std::to_string(d.block) +
                   " needs an open tile loop of that block size (the dim is that tile's current block, ragged "
                   "last block included)",
               loc);
    }
    if (d.tile >= 0) {
      if (!T.tile_in_scope(d.tile))
        T.fail("tile " + ir::tile_name(T.fn(), d.tile) + " used outside the loop that defines it", loc);
      if (T.fn().tiles[d.tile].is_grid)
        T.fail("a grid index is a single element; it cannot size a block dimension", loc);
      dims.push_back(Dim::of_tile(d.tile));
    } else {
      if (d.size < 0) T.fail("negative block dimension " + std::to_string(d.size), loc);
      dims.push_back(Dim::constant(d.size));
    }
  }
  return dims;
}

Tensor device_full(Tracer& T, std::vector<Dim> dims, double value, DType dtype, const Loc& loc) {
  Op op{OpKind::Full};
  op.number = value;
  return Tensor::block(emit_value(T, op, Type{compute_dtype(dtype), std::move(dims)}, loc));
}

Tensor host_alloc(const Shape& shape, DType dtype, bool fill, double value, const Loc& loc) {
  Tracer& T = tracer(loc);
  return Tensor::host(T.add_alloc(shape, dtype, fill, value, loc));
}

// A host allocation from block-dim specs: sizes, and numbers of blocks (ph::num_blocks).
Tensor host_alloc(const std::vector<DimSpec>& shape, DType dtype, bool fill, double value, const Loc& loc) {
  Tracer& T = tracer(loc);
  Shape s;
  std::vector<ir::BlockCount> counts;
  for (const DimSpec& d : shape) {
    if (d.tile >= 0) T.fail("a tile dimension in host code (outside any tile loop)", loc);
    if (d.block >= 0)
      T.fail("a block size as a dimension in host code; size an allocation by ph::num_blocks(bs) or a number", loc);
    if (d.count_block >= 0) counts.push_back({static_cast<int>(s.size()), d.count_block, d.size});
    s.push_back(d.size);
  }
  int id = T.add_alloc(s, dtype, fill, value, loc);
  T.fn().tensors[id].counts = counts;
  return Tensor::host(id);
}

}  // namespace

// --- Tile -------------------------------------------------------------------------------------

static Tensor tile_op(OpKind kind, int tile, const Loc& loc) {
  Tracer& T = tracer(loc);
  T.require_device("a tile's begin/end/index", loc);
  if (!T.tile_in_scope(tile)) T.fail("tile used outside the loop that defines it", loc);
  Op op{kind};
  op.tile = tile;
  Type t{DType::i64, {}};
  if (kind == OpKind::TileIndex) {
    if (T.fn().tiles[tile].is_grid) T.fail("index() of a grid index; use it directly", loc);
    t.shape = {Dim::of_tile(tile)};
  }
  return Tensor::block(emit_value(T, op, t, loc));
}

Tensor Tile::begin(Loc loc) const { return tile_op(OpKind::TileBegin, id_, loc); }
Tensor Tile::id(Loc loc) const { return tile_op(OpKind::TileId, id_, loc); }

Extent::Extent(const Tile& outer) : parent(outer.ir_id()) {}

void when(const Operand& cond, const std::function<void()>& then, Loc loc) {
  Tracer& T = tracer(loc);
  T.require_device("ph::when", loc);
  const int c = value_of(T, cond);
  const Type& t = T.fn().type_of(c);
  if (t.rank() != 0 || t.dtype != DType::boolean)
    T.fail(
        "ph::when takes a bool scalar (a comparison of scalars; reduce a block's condition first, e.g. "
        "ph::amax(mask.to(DType::i64), 0) > 0); got " +
            describe(T, c),
        loc);
  T.open_if(c, loc);
  then();
  T.close_if();
}

void when(const Operand& cond, const std::function<void()>& then, const std::function<void()>& otherwise, Loc loc) {
  when(cond, then, loc);
  // The other branch: a region under the negated condition (cond is a value: the first branch
  // cannot change it).
  when(!Operand(cond), otherwise, loc);
}

Extent range(const Operand& begin, const Operand& end, Loc loc) {
  Tracer& T = tracer(loc);
  T.require_device("ph::range of computed bounds (a jagged loop)", loc);
  Extent e(int64_t{0}, int64_t{0});
  int* ends[2] = {&e.begin_value, &e.end_value};
  const Operand* given[2] = {&begin, &end};
  for (int k = 0; k < 2; ++k) {
    const int v = value_of(T, *given[k], DType::i64);
    const Type& t = T.fn().type_of(v);
    if (t.rank() != 0 || t.dtype != DType::i64)
      T.fail(std::string("the ") + (k == 0 ? "start" : "end") +
                 " of ph::range(start, end) must be an i64 scalar (a loaded offset, t.begin(), an integer "
                 "argument, ...); got " +
                 describe(T, v),
             loc);
    *ends[k] = v;
  }
  return e;
}

Extent jagged(const Tensor& offsets, const Tensor& group, Loc loc) {
  Tracer& T = tracer(loc);
  T.require_device("ph::jagged", loc);
  if (offsets.is_block() || offsets.rank() != 1 || !is_integer(offsets.dtype()))
    T.fail("ph::jagged(offsets, g) takes a host tensor of row offsets of rank 1 and an integer dtype", loc);
  const Tensor start = offsets[Index(group, loc)];
  const Tensor next = offsets[Index(group + Operand(1, loc), loc)];
  return range(Operand(start, loc), Operand(next, loc), loc);
}

Extent jagged(const Tensor& offsets, const Tile& group, Loc loc) {
  Tracer& T = tracer(loc);
  if (group.ir_id() < 0 || !T.fn().tiles[group.ir_id()].is_grid)
    T.fail("ph::jagged(offsets, g): g must be a grid index (ph::grid) or an i64 scalar, the group's number", loc);
  return jagged(offsets, group.begin(loc), loc);
}

NumBlocks num_blocks(BlockSizeRef b, Loc loc) {
  Tracer& T = tracer(loc);
  if (b.id < 0 || b.id >= static_cast<int>(T.fn().block_sizes.size()))
    T.fail("ph::num_blocks of an unknown block size (register it with ph::register_block_size in this kernel)", loc);
  return NumBlocks{b.id, T.fn().block_sizes[b.id].extent};
}

SliceSpec slice(const Tensor& start, Length n, Loc loc) {
  Tracer& T = tracer(loc);
  T.require_device("a slice with a computed start", loc);
  Operand o(start, loc);
  const Type& t = T.fn().type_of(o.value);
  if (t.rank() != 0 || t.dtype != DType::i64)
    T.fail("the start of ph::slice(start, ph::length(n)) must be an i64 scalar (t.begin(), a loaded index, ...); got " +
               describe(T, o.value),
           loc);
  if (n.n < 1) T.fail("ph::slice with ph::length(" + std::to_string(n.n) + "): the length must be at least 1", loc);
  return SliceSpec{0, 0, o.value, n.n};
}
Tensor Tile::end(Loc loc) const { return tile_op(OpKind::TileEnd, id_, loc); }
Tensor Tile::index(Loc loc) const { return tile_op(OpKind::TileIndex, id_, loc); }

BlockSizeRef register_block_size(int64_t extent, Loc loc) {
  Tracer& T = tracer(loc);
  if (T.in_device()) T.fail("register_block_size belongs in host code, before the loops", loc);
  if (extent < 0) T.fail("register_block_size of a negative extent", loc);
  return BlockSizeRef{T.new_block_size(std::max<int64_t>(1, extent), 0, loc)};
}

// --- Index / Operand --------------------------------------------------------------------------

Index::Index(const Var& var, Loc l) : kind(ScalarK), loc(l) {
  Tracer& T = tracer(l);
  T.require_device("indexing with a ph::Var", l);
  const Type& vt = T.fn().vars.at(var.slot()).type;
  if (vt.rank() != 0 || vt.dtype != DType::i64)
    T.fail("a ph::Var used as an index must hold an i64 scalar; this one is " + ir::type_to_string(T.fn(), vt), l);
  Op op{OpKind::VarGet};
  op.var = var.slot();
  value = emit_value(T, op, vt, l);
}

Index::Index(const Tensor& block, Loc l) : kind(ScalarK), loc(l) {
  Tracer& T = tracer(l);
  if (block.kind() == Tensor::BlockK && !T.value_in_scope(block.id()))
    T.fail("an index block is used outside the tile loop that computes it", l);
  const int rank = block.kind() == Tensor::BlockK ? T.fn().type_of(block.id()).rank() : -1;
  if (block.kind() != Tensor::BlockK || rank > 1 || T.fn().type_of(block.id()).dtype != DType::i64)
    T.fail(
        "a tensor index must be a tile, ph::all, an integer, an integer scalar, or an i64 block of rank 1 (a gather "
        "index block, e.g. ids[tile] or t.index() + 1)" +
            std::string(block.kind() == Tensor::BlockK
                            ? "; got " + ir::type_to_string(T.fn(), T.fn().type_of(block.id())) +
                                  (rank <= 1 ? " (cast it with .to(ph::i64))" : "")
                            : ""),
        l);
  if (rank == 1) kind = GatherK;
  value = block.id();
}

// Why a tensor handle cannot be read as a block value here, or "" if it can.
static std::string block_misuse(Tracer& T, const Tensor& t) {
  if (t.kind() == Tensor::NoneK) return "use of an uninitialized ph::Tensor";
  if (t.kind() == Tensor::HostK)
    return "a whole tensor (" + T.fn().tensors[t.id()].name +
           ") used as a value; index it with tiles to load a block (x[tile])";
  if (!T.value_in_scope(t.id()))
    return "a block is used outside the tile loop or ph::when that computes it (values do not escape their loop; carry "
           "state "
           "with a ph::Var, or store it to a tensor)";
  return "";
}

Operand::Operand(const Tensor& t, Loc l) : kind(TensorK), loc(l) {
  std::string misuse = t.kind() == Tensor::NoneK ? "use of an uninitialized ph::Tensor" : block_misuse(tracer(l), t);
  if (!misuse.empty()) throw UserError(misuse, l);
  value = t.id();
}

Operand::Operand(const Var& v, Loc l) : kind(TensorK), loc(l) {
  Tracer& T = tracer(l);
  T.require_device("reading a ph::Var", l);
  Op op{OpKind::VarGet};
  op.var = v.slot();
  value = emit_value(T, op, T.fn().vars.at(v.slot()).type, l);
}

namespace {
// A scalar argument read in device code: an f32 (ph::Scalar) or an i64 (ph::Int) scalar.
int scalar_param(const Scalar& s, DType dtype, const Loc& l) {
  Tracer& T = tracer(l);
  const bool integer = dtype == DType::i64;
  T.require_device(integer ? "using an integer argument" : "using a scalar argument", l);
  if (s.param() < 0) T.fail(integer ? "use of an uninitialized ph::Int" : "use of an uninitialized ph::Scalar", l);
  Op op{OpKind::ScalarParam};
  op.param = s.param();
  return emit_value(T, op, Type{dtype, {}}, l);
}
}  // namespace

Operand::Operand(const Scalar& s, Loc l) : kind(TensorK), value(scalar_param(s, DType::f32, l)), loc(l) {}
Operand::Operand(const Int& s, Loc l) : kind(TensorK), value(scalar_param(s, DType::i64, l)), loc(l) {}

// --- Tensor -----------------------------------------------------------------------------------

int Tensor::rank() const {
  Tracer& T = tracer(Loc::current());
  if (kind_ == HostK) return static_cast<int>(T.fn().tensors[id_].shape.size());
  if (kind_ == BlockK) return T.fn().type_of(id_).rank();
  throw UserError("rank() of an uninitialized ph::Tensor");
}

void Tensor::check_rank(int n, Loc loc) const {
  if (rank() != n)
    throw UserError("expected a rank-" + std::to_string(n) + " tensor, got rank " + std::to_string(rank()), loc);
}

Shape Tensor::sizes() const {
  Tracer& T = tracer(Loc::current());
  if (kind_ != HostK)
    throw UserError(
        "sizes() of a block inside a tile loop is symbolic; use the tensor's sizes "
        "in host code");
  return T.fn().tensors[id_].shape;
}

int64_t Tensor::size(int dim) const {
  Shape s = sizes();
  int d = dim < 0 ? dim + static_cast<int>(s.size()) : dim;
  if (d < 0 || d >= static_cast<int>(s.size()))
    throw UserError("size(" + std::to_string(dim) + ") of a rank-" + std::to_string(s.size()) + " tensor");
  return s[d];
}

DType Tensor::dtype() const {
  Tracer& T = tracer(Loc::current());
  if (kind_ == HostK) return T.fn().tensors[id_].dtype;
  if (kind_ == BlockK) return T.fn().type_of(id_).dtype;
  throw UserError("dtype() of an uninitialized ph::Tensor");
}

// The Tile IR items of a subscript of host tensor `id`, checked where they can be at trace time.
static std::vector<ir::IndexItem> index_items(Tracer& T, Tensor::Kind kind, int id, const std::vector<Index>& idx,
                                              const Loc& loc) {
  T.require_device("indexing a tensor", loc);
  if (kind != Tensor::HostK)
    T.fail(
        "only tensors (kernel arguments and allocations) can be indexed; a block inside a "
        "tile loop cannot",
        loc);
  const int id_ = id;
  std::vector<ir::IndexItem> items;
  for (const Index& i : idx) {
    if (i.kind == Index::TileK) {
      for (const Tile& t : i.tiles) {
        if (t.ir_id() < 0 || !T.tile_in_scope(t.ir_id())) T.fail("tile used outside the loop that defines it", loc);
        items.push_back({ir::IndexItem::Tile, t.ir_id(), -1, 0});
      }
    } else if (i.kind == Index::AllK) {
      items.push_back({ir::IndexItem::All, -1, -1, 0});
    } else if (i.kind == Index::SliceK) {
      const Shape& shape = T.fn().tensors[id_].shape;
      const size_t d = items.size();
      ir::IndexItem it{ir::IndexItem::Slice, -1, i.slice.start, i.slice.length};
      if (i.slice.start < 0) {  // static: checked here
        if (d < shape.size() && (i.slice.begin < 0 || i.slice.begin >= i.slice.end || i.slice.end > shape[d]))
          T.fail("ph::slice(" + std::to_string(i.slice.begin) + ", " + std::to_string(i.slice.end) +
                     ") is out of bounds for dimension " + std::to_string(d) + " of " + T.fn().tensors[id_].name +
                     " (size " + std::to_string(shape[d]) + "; a slice needs 0 <= begin < end <= size)",
                 loc);
        it.value = constant(T, static_cast<double>(i.slice.begin), DType::i64, loc);
      } else if (!T.value_in_scope(i.slice.start)) {
        T.fail("the start of this slice is used outside the tile loop that computes it", loc);
      }
      items.push_back(it);
    } else if (i.kind == Index::IntK) {
      const Shape& shape = T.fn().tensors[id_].shape;
      size_t d = items.size();
      if (d < shape.size() && (i.integer < 0 || i.integer >= shape[d]))
        T.fail("index " + std::to_string(i.integer) + " is out of bounds for dimension " + std::to_string(d) +
                   " of size " + std::to_string(shape[d]),
               loc);
      items.push_back({ir::IndexItem::Scalar, -1, constant(T, static_cast<double>(i.integer), DType::i64, loc)});
    } else if (i.kind == Index::GatherK) {
      items.push_back({ir::IndexItem::Gather, -1, i.value});
    } else {
      items.push_back({ir::IndexItem::Scalar, -1, i.value, 0});
    }
  }
  return items;
}

Tensor Tensor::subscript(const std::vector<Index>& idx) const {
  const Loc& loc = idx.front().loc;
  Tracer& T = tracer(loc);
  std::vector<ir::IndexItem> items = index_items(T, kind_, id_, idx, loc);
  Type t;
  std::string err = ir::load_type(T.fn(), id_, items, &t);
  if (!err.empty()) T.fail(err, loc);
  Op op{OpKind::Load};
  op.tensor = id_;
  op.index = items;
  Tensor r = Tensor::block(emit_value(T, op, t, loc));
  r.store_tensor_ = id_;
  for (const ir::IndexItem& it : items)
    r.store_index_.insert(r.store_index_.end(), {it.kind, it.tile, it.value, it.length});
  r.store_file_ = source_file(loc);
  r.store_line_ = source_line(loc);
  return r;
}

void Tensor::operator=(const Operand& value) && {
  Tracer& T = tracer(value.loc);
  if (store_tensor_ < 0)
    T.fail("assignment to a block value; only an indexed tensor (out[tile] = ...) can be stored to", value.loc);
  {
    const ir::TensorInfo& info = T.fn().tensors[store_tensor_];
    for (size_t d = 0; d < info.shape.size(); ++d)
      if (info.strides[d] == 0 && info.shape[d] > 1)
        T.fail("store through an expanded view (" + info.name + ", dim " + std::to_string(d) +
                   " has stride 0): its elements alias each other; store into the tensor it expands",
               value.loc);
  }
  Op op{OpKind::Store};
  op.tensor = store_tensor_;
  for (size_t i = 0; i + 3 < store_index_.size(); i += 4)
    op.index.push_back({static_cast<ir::IndexItem::Kind>(store_index_[i]), static_cast<int>(store_index_[i + 1]),
                        static_cast<int>(store_index_[i + 2]), store_index_[i + 3]});
  const Type target = T.fn().type_of(id_);  // a copy: value_of may add a value and move fn.values
  int v = value_of(T, value, target.dtype);
  std::vector<Dim> b;
  std::string err = ir::broadcast_shapes(T.fn(), target.shape, T.fn().type_of(v).shape, &b);
  if (!err.empty() || !(b == target.shape))
    T.fail("cannot store a block of shape " + ir::dims_to_string(T.fn(), T.fn().type_of(v).shape) + " into " +
               T.fn().tensors[store_tensor_].name + "[...] of shape " + ir::dims_to_string(T.fn(), target.shape),
           value.loc);
  op.operands = {v};
  T.emit(op, value.loc);
}

// --- masked access ------------------------------------------------------------------------------

// The mask operand of a masked access over a block of type `access`, checked at the user's line.
static int mask_value(Tracer& T, const Operand& mask, const Type& access, const Loc& loc) {
  if (mask.kind == Operand::NumberK) T.fail("the mask of a masked access must be a boolean block, not a number", loc);
  int m = mask.value;
  std::string err = ir::mask_rule(T.fn(), access, T.fn().type_of(m), nullptr);
  if (!err.empty()) T.fail(err, loc);
  return m;
}

Tensor load(const Tensor& x, std::initializer_list<Index> index, const Operand& mask, const Operand& other, Loc loc) {
  return load(x, std::vector<Index>(index), mask, other, loc);
}

Tensor load(const Tensor& x, const std::vector<Index>& index, const Operand& mask, const Operand& other, Loc loc) {
  Tracer& T = tracer(loc);
  if (index.empty()) T.fail("ph::load needs one index per dimension of the tensor", loc);
  std::vector<ir::IndexItem> items = index_items(T, x.kind(), x.id(), index, loc);
  Type t;
  std::string err = ir::load_type(T.fn(), x.id(), items, &t);
  if (!err.empty()) T.fail(err, loc);
  int m = mask_value(T, mask, t, loc);
  int o = value_of(T, other, t.dtype);
  if (T.fn().type_of(o).dtype != t.dtype) o = cast(Operand(Tensor::block(o), loc), t.dtype).id();
  err = ir::mask_rule(T.fn(), t, T.fn().type_of(m), &T.fn().type_of(o));
  if (!err.empty()) T.fail(err, loc);
  Op op{OpKind::Load};
  op.tensor = x.id();
  op.index = items;
  op.operands = {m, o};
  return Tensor::block(emit_value(T, op, t, loc));
}

// A store, masked (mask != nullptr) or not, or an atomic update (update != none).
static void store_at(const Tensor& x, const std::vector<Index>& index, const Operand& value, const Operand* mask,
                     ir::AtomicFn update, const Loc& loc) {
  Tracer& T = tracer(loc);
  const std::string what = "ph::" + std::string(update == ir::AtomicFn::none ? "store" : ir::atomic_name(update));
  if (index.empty()) T.fail(what + " needs one index per dimension of the tensor", loc);
  std::vector<ir::IndexItem> items = index_items(T, x.kind(), x.id(), index, loc);
  Type t;
  std::string err = ir::load_type(T.fn(), x.id(), items, &t);
  if (!err.empty()) T.fail(err, loc);
  if (update != ir::AtomicFn::none && t.dtype == DType::boolean)
    T.fail(what + " into a bool tensor (" + T.fn().tensors[x.id()].name +
               "): atomics take numbers (use an integer tensor as a flag)",
           loc);
  int v = value_of(T, value, t.dtype);
  std::vector<Dim> b;
  err = ir::broadcast_shapes(T.fn(), t.shape, T.fn().type_of(v).shape, &b);
  if (!err.empty() || !(b == t.shape))
    T.fail("cannot " + std::string(update == ir::AtomicFn::none ? "store" : "update with") + " a block of shape " +
               ir::dims_to_string(T.fn(), T.fn().type_of(v).shape) + " into " + T.fn().tensors[x.id()].name +
               "[...] of shape " + ir::dims_to_string(T.fn(), t.shape) + " (" + what + ")",
           loc);
  Op op{OpKind::Store};
  op.tensor = x.id();
  op.index = items;
  op.fn = static_cast<int>(update);
  op.operands = {v};
  if (mask) op.operands.push_back(mask_value(T, *mask, t, loc));
  T.emit(op, loc);
}

void store(const Tensor& x, std::initializer_list<Index> index, const Operand& value, const Operand& mask, Loc loc) {
  store_at(x, index, value, &mask, ir::AtomicFn::none, loc);
}
void store(const Tensor& x, const std::vector<Index>& index, const Operand& value, const Operand& mask, Loc loc) {
  store_at(x, index, value, &mask, ir::AtomicFn::none, loc);
}

// --- atomic updates ---------------------------------------------------------------------------

void atomic_add(const Tensor& x, std::initializer_list<Index> index, const Operand& value, Loc loc) {
  store_at(x, index, value, nullptr, ir::AtomicFn::add, loc);
}
void atomic_add(const Tensor& x, std::initializer_list<Index> index, const Operand& value, const Operand& mask,
                Loc loc) {
  store_at(x, index, value, &mask, ir::AtomicFn::add, loc);
}
void atomic_max(const Tensor& x, std::initializer_list<Index> index, const Operand& value, Loc loc) {
  store_at(x, index, value, nullptr, ir::AtomicFn::max, loc);
}
void atomic_max(const Tensor& x, std::initializer_list<Index> index, const Operand& value, const Operand& mask,
                Loc loc) {
  store_at(x, index, value, &mask, ir::AtomicFn::max, loc);
}
void atomic_min(const Tensor& x, std::initializer_list<Index> index, const Operand& value, Loc loc) {
  store_at(x, index, value, nullptr, ir::AtomicFn::min, loc);
}
void atomic_min(const Tensor& x, std::initializer_list<Index> index, const Operand& value, const Operand& mask,
                Loc loc) {
  store_at(x, index, value, &mask, ir::AtomicFn::min, loc);
}
void atomic_update(Atomic fn, const Tensor& x, const std::vector<Index>& index, const Operand& value,
                   const Operand* mask, Loc loc) {
  const ir::AtomicFn f = fn == Atomic::add   ? ir::AtomicFn::add
                         : fn == Atomic::max ? ir::AtomicFn::max
                                             : ir::AtomicFn::min;
  store_at(x, index, value, mask, f, loc);
}

Tensor Tensor::unsqueeze(int axis, Loc loc) const {
  if (kind_ == HostK) {  // a host view with a new size-1 dim
    Shape s = sizes();
    const int r = static_cast<int>(s.size());
    const int a = axis < 0 ? axis + r + 1 : axis;
    if (a < 0 || a > r)
      throw UserError("unsqueeze(" + std::to_string(axis) + ") of a tensor of rank " + std::to_string(r), loc);
    s.insert(s.begin() + a, 1);
    return view(s, loc);
  }
  return parhelion::unsqueeze(Operand(*this, loc), axis);
}
Tensor Tensor::to(DType dtype, Loc loc) const { return cast(Operand(*this, loc), dtype); }

// --- Var --------------------------------------------------------------------------------------

Var::Var(const Tensor& init, Loc loc) {
  Tracer& T = tracer(loc);
  T.require_device("a ph::Var", loc);
  Operand o(init, loc);
  ir::VarInfo info;
  info.id = static_cast<int>(T.fn().vars.size());
  info.type = T.fn().type_of(o.value);
  info.loc = frontend::to_loc(loc);
  T.fn().vars.push_back(info);
  slot_ = info.id;
  Op op{OpKind::VarDecl};
  op.var = slot_;
  op.operands = {o.value};
  T.emit(op, loc);
}

// The shape and dtype rules of `var = value`, a cast where the dtypes differ; `at` is the user's line.
static void assign_var(Tracer& T, int slot, int v, const ir::SourceLoc& at) {
  const Type& vt = T.fn().vars.at(slot).type;
  Type t = T.fn().type_of(v);
  std::vector<Dim> b;
  std::string err = ir::broadcast_shapes(T.fn(), vt.shape, t.shape, &b);
  if (!err.empty() || !(b == vt.shape))
    T.fail_at("cannot assign a block of shape " + ir::dims_to_string(T.fn(), t.shape) + " to a ph::Var of shape " +
                  ir::dims_to_string(T.fn(), vt.shape),
              at);
  if (t.dtype != vt.dtype) {
    if (t.dtype == DType::boolean || vt.dtype == DType::boolean)
      T.fail_at("cannot assign a " + std::string(dtype_name(t.dtype)) + " block to a " +
                    std::string(dtype_name(vt.dtype)) + " ph::Var",
                at);
    Op c{OpKind::Cast};
    c.operands = {v};
    c.dtype = vt.dtype;
    t.dtype = vt.dtype;
    c.result = T.new_value(t);
    v = T.emit_at(c, at);
  }
  Op op{OpKind::VarSet};
  op.var = slot;
  op.operands = {v};
  T.emit_at(op, at);
}

Var& Var::operator=(const Operand& value) {
  Tracer& T = tracer(value.loc);
  T.require_device("assigning a ph::Var", value.loc);
  int v = value_of(T, value, T.fn().vars.at(slot_).type.dtype);
  assign_var(T, slot_, v, frontend::to_loc(value.loc));
  return *this;
}

Var& Var::operator=(const Tensor& value) {
  Tracer& T = tracer(Loc::current());
  const ir::SourceLoc at = value.kind() == Tensor::BlockK ? T.value_loc(value.id()) : T.last_loc();
  if (!T.in_device())
    T.fail_at("assigning a ph::Var is device code: it must be inside a ph::tile or ph::grid loop", at);
  std::string misuse = block_misuse(T, value);
  if (!misuse.empty()) T.fail_at(misuse, at);
  assign_var(T, slot_, value.id(), at);
  return *this;
}

Var& Var::operator=(const Var& other) {
  Tracer& T = tracer(Loc::current());
  const ir::SourceLoc at = T.last_loc();
  if (!T.in_device())
    T.fail_at("assigning a ph::Var is device code: it must be inside a ph::tile or ph::grid loop", at);
  Op get{OpKind::VarGet};
  get.var = other.slot();
  get.result = T.new_value(T.fn().vars.at(other.slot()).type);
  assign_var(T, slot_, T.emit_at(get, at), at);
  return *this;
}

Tensor Var::unsqueeze(int axis, Loc loc) const { return parhelion::unsqueeze(Operand(*this, loc), axis); }

// --- host code --------------------------------------------------------------------------------

Tensor empty(const Shape& shape, DType dtype, Loc loc) { return host_alloc(shape, dtype, false, 0, loc); }
Tensor empty_like(const Tensor& t, Loc loc) { return empty_like(t, t.dtype(), loc); }
Tensor empty_like(const Tensor& t, DType dtype, Loc loc) {
  if (t.kind() != Tensor::HostK) throw UserError("empty_like needs a tensor argument, not a block", loc);
  return host_alloc(t.sizes(), dtype, false, 0, loc);
}
Tensor zeros_like(const Tensor& t, Loc loc) {
  if (t.kind() != Tensor::HostK) throw UserError("zeros_like needs a tensor argument, not a block", loc);
  return host_alloc(t.sizes(), t.dtype(), true, 0, loc);
}

Tensor full(std::initializer_list<DimSpec> shape, double value, DType dtype, Loc loc) {
  return full(std::vector<DimSpec>(shape), value, dtype, loc);
}
Tensor empty(std::initializer_list<DimSpec> shape, DType dtype, Loc loc) {
  return empty(std::vector<DimSpec>(shape), dtype, loc);
}
Tensor full(const Shape& shape, double value, DType dtype, Loc loc) {
  Tracer& T = tracer(loc);
  if (T.in_device()) {
    std::vector<Dim> dims;
    for (int64_t d : shape) dims.push_back(Dim::constant(d));
    return device_full(T, dims, value, dtype, loc);
  }
  return host_alloc(shape, dtype, true, value, loc);
}
Tensor zeros(std::initializer_list<DimSpec> shape, DType dtype, Loc loc) { return full(shape, 0.0, dtype, loc); }
Tensor full(const std::vector<DimSpec>& shape, double value, DType dtype, Loc loc) {
  Tracer& T = tracer(loc);
  if (T.in_device()) return device_full(T, block_dims(T, shape, loc), value, dtype, loc);
  return host_alloc(shape, dtype, true, value, loc);
}
Tensor empty(const std::vector<DimSpec>& shape, DType dtype, Loc loc) {
  return host_alloc(shape, dtype, false, 0, loc);
}
Tensor zeros(const Shape& shape, DType dtype, Loc loc) { return full(shape, 0.0, dtype, loc); }

void expect(bool ok, const std::string& what, Loc loc) {
  if (!ok) throw UserError(what, loc);
}

void expect_dtype(const Tensor& t, std::initializer_list<DType> allowed, Loc loc) {
  DType d = t.dtype();
  std::string names;
  for (DType a : allowed) {
    if (a == d) return;
    names += (names.empty() ? "" : ", ") + std::string(dtype_name(a));
  }
  throw UserError("unsupported dtype " + std::string(dtype_name(d)) + "; expected one of " + names, loc);
}

// --- loops ------------------------------------------------------------------------------------

namespace detail {
std::vector<Tile> open_loop(const std::vector<Extent>& dims, bool grid, Loc loc) {
  return tracer(loc).open_loop(dims, grid, loc);
}
void close_loop() {
  if (Tracer* T = Tracer::active()) T->close_loop();
}
}  // namespace detail

detail::LoopRange<Tile> tile(const Extent& a, Loc loc) { return {{a}, false, loc}; }
detail::LoopRange<std::array<Tile, 2>> tile(const Extent& a, const Extent& b, Loc loc) { return {{a, b}, false, loc}; }
detail::LoopRange<std::array<Tile, 3>> tile(const Extent& a, const Extent& b, const Extent& c, Loc loc) {
  return {{a, b, c}, false, loc};
}
detail::LoopRange<Tiles> tile(const Shape& sizes, Loc loc) {
  std::vector<Extent> dims(sizes.begin(), sizes.end());
  return {dims, false, loc};
}
detail::LoopRange<Tile> grid(const Extent& a, Loc loc) { return {{a}, true, loc}; }
detail::LoopRange<std::array<Tile, 2>> grid(const Extent& a, const Extent& b, Loc loc) { return {{a, b}, true, loc}; }

// --- device ops -------------------------------------------------------------------------------

Tensor operator+(const Operand& a, const Operand& b) { return binary(BinaryFn::add, a, b); }
Tensor operator-(const Operand& a, const Operand& b) { return binary(BinaryFn::sub, a, b); }
Tensor operator*(const Operand& a, const Operand& b) { return binary(BinaryFn::mul, a, b); }
Tensor operator/(const Operand& a, const Operand& b) { return binary(BinaryFn::div, a, b); }
Tensor operator-(const Operand& a) { return unary(UnaryFn::neg, a); }
Tensor operator<(const Operand& a, const Operand& b) { return binary(BinaryFn::lt, a, b); }
Tensor operator<=(const Operand& a, const Operand& b) { return binary(BinaryFn::le, a, b); }
Tensor operator>(const Operand& a, const Operand& b) { return binary(BinaryFn::gt, a, b); }
Tensor operator>=(const Operand& a, const Operand& b) { return binary(BinaryFn::ge, a, b); }
Tensor operator==(const Operand& a, const Operand& b) { return binary(BinaryFn::eq, a, b); }
Tensor operator!=(const Operand& a, const Operand& b) { return binary(BinaryFn::ne, a, b); }
Tensor operator&&(const Operand& a, const Operand& b) { return binary(BinaryFn::logical_and, a, b); }
Tensor operator||(const Operand& a, const Operand& b) { return binary(BinaryFn::logical_or, a, b); }
Tensor operator!(const Operand& a) { return unary(UnaryFn::logical_not, a); }
Tensor operator%(const Operand& a, const Operand& b) { return binary(BinaryFn::mod, a, b); }
Tensor operator&(const Operand& a, const Operand& b) { return binary(BinaryFn::bit_and, a, b); }
Tensor operator|(const Operand& a, const Operand& b) { return binary(BinaryFn::bit_or, a, b); }
Tensor operator^(const Operand& a, const Operand& b) { return binary(BinaryFn::bit_xor, a, b); }
Tensor operator~(const Operand& a) { return unary(UnaryFn::bit_not, a); }
Tensor operator<<(const Operand& a, const Operand& b) { return binary(BinaryFn::shl, a, b); }
Tensor operator>>(const Operand& a, const Operand& b) { return binary(BinaryFn::shr, a, b); }
Tensor floordiv(const Operand& a, const Operand& b) { return binary(BinaryFn::floordiv, a, b); }
// A literal seed (or offset) is an integer whatever the other operand is, so that a float
// operand is reported as the float it is.
Tensor rand(const Operand& seed, const Operand& offsets) { return binary(BinaryFn::rand, seed, offsets, DType::i64); }
Tensor randn(const Operand& seed, const Operand& offsets) { return binary(BinaryFn::randn, seed, offsets, DType::i64); }
Tensor remainder(const Operand& a, const Operand& b) { return binary(BinaryFn::mod, a, b); }

Tensor exp(const Operand& x) { return unary(UnaryFn::exp, x); }
Tensor exp2(const Operand& x) { return unary(UnaryFn::exp2, x); }
Tensor log(const Operand& x) { return unary(UnaryFn::log, x); }
Tensor sqrt(const Operand& x) { return unary(UnaryFn::sqrt, x); }
Tensor rsqrt(const Operand& x) { return unary(UnaryFn::rsqrt, x); }
Tensor tanh(const Operand& x) { return unary(UnaryFn::tanh, x); }
Tensor sigmoid(const Operand& x) { return unary(UnaryFn::sigmoid, x); }
Tensor silu(const Operand& x) { return unary(UnaryFn::silu, x); }
Tensor gelu(const Operand& x) { return unary(UnaryFn::gelu, x); }
Tensor gelu(const Operand& x, Gelu approximate) {
  return unary(approximate == Gelu::exact ? UnaryFn::gelu_exact : UnaryFn::gelu, x);
}
Tensor erf(const Operand& x) { return unary(UnaryFn::erf, x); }
Tensor round(const Operand& x) { return unary(UnaryFn::round, x); }
Tensor floor(const Operand& x) { return unary(UnaryFn::floor, x); }
Tensor ceil(const Operand& x) { return unary(UnaryFn::ceil, x); }
Tensor trunc(const Operand& x) { return unary(UnaryFn::trunc, x); }
// minimum(maximum(x, lo), hi): NaN-propagating maximum/minimum give torch.clamp's rules (a NaN
// in x or a bound gives NaN; lo > hi gives hi). All three operands at the caller's line.
Tensor clamp(const Operand& x, const Operand& lo, const Operand& hi) {
  return binary(BinaryFn::minimum, Operand(binary(BinaryFn::maximum, x, lo), x.loc), hi);
}
Tensor abs(const Operand& x) { return unary(UnaryFn::abs, x); }
Tensor maximum(const Operand& a, const Operand& b) { return binary(BinaryFn::maximum, a, b); }
Tensor minimum(const Operand& a, const Operand& b) { return binary(BinaryFn::minimum, a, b); }
Tensor pow(const Operand& a, const Operand& b) { return binary(BinaryFn::pow, a, b); }

Tensor where(const Operand& cond, const Operand& a, const Operand& b) {
  Tracer& T = tracer(cond.loc);
  T.require_device("where", cond.loc);
  int vc = value_of(T, cond);
  int va = value_of(T, a, dtype_of(T, b));
  int vb = value_of(T, b, dtype_of(T, a));
  const Type &tc = T.fn().type_of(vc), &ta = T.fn().type_of(va), &tb = T.fn().type_of(vb);
  if (tc.dtype != DType::boolean) T.fail("where: the condition must be a boolean block (a comparison)", cond.loc);
  if ((ta.dtype == DType::boolean) != (tb.dtype == DType::boolean))
    T.fail("where: cannot mix boolean and numeric branches", cond.loc);
  Type t;
  std::vector<Dim> ab;
  std::string err = ir::broadcast_shapes(T.fn(), ta.shape, tb.shape, &ab);
  if (err.empty()) err = ir::broadcast_shapes(T.fn(), tc.shape, ab, &t.shape);
  if (!err.empty()) T.fail("where: " + err, cond.loc);
  t.dtype = (ta.dtype == DType::f32 || tb.dtype == DType::f32) ? DType::f32 : ta.dtype;
  Op op{OpKind::Where};
  op.operands = {vc, va, vb};
  return Tensor::block(emit_value(T, op, t, cond.loc));
}

Tensor cast(const Operand& x, DType dtype) {
  Tracer& T = tracer(x.loc);
  T.require_device("cast", x.loc);
  int v = value_of(T, x);
  Type t = T.fn().type_of(v);
  t.dtype = compute_dtype(dtype);
  Op op{OpKind::Cast};
  op.operands = {v};
  op.dtype = dtype;
  return Tensor::block(emit_value(T, op, t, x.loc));
}

Tensor sum(const Operand& x, int axis, bool keepdim) { return reduce(ir::ReduceFn::sum, x, axis, keepdim); }
Tensor amax(const Operand& x, int axis, bool keepdim) { return reduce(ir::ReduceFn::max, x, axis, keepdim); }
Tensor amin(const Operand& x, int axis, bool keepdim) { return reduce(ir::ReduceFn::min, x, axis, keepdim); }
Tensor mean(const Operand& x, int axis, bool keepdim) { return reduce(ir::ReduceFn::mean, x, axis, keepdim); }

Tensor unsqueeze(const Operand& x, int axis) {
  Tracer& T = tracer(x.loc);
  T.require_device("unsqueeze", x.loc);
  int v = value_of(T, x);
  Type t = T.fn().type_of(v);
  int a = axis < 0 ? axis + t.rank() + 1 : axis;
  if (a < 0 || a > t.rank())
    T.fail("unsqueeze(" + std::to_string(axis) + ") of a block of rank " + std::to_string(t.rank()), x.loc);
  t.shape.insert(t.shape.begin() + a, Dim::constant(1));
  Op op{OpKind::Unsqueeze};
  op.axis = a;
  op.operands = {v};
  return Tensor::block(emit_value(T, op, t, x.loc));
}

Tensor transpose(const Operand& x) {
  Tracer& T = tracer(x.loc);
  T.require_device("transpose", x.loc);
  int v = value_of(T, x);
  Type t = T.fn().type_of(v);
  if (t.rank() < 2) T.fail("transpose needs a block of rank 2 or more, got " + describe(T, v), x.loc);
  std::swap(t.shape[t.rank() - 1], t.shape[t.rank() - 2]);
  Op op{OpKind::Transpose};
  op.operands = {v};
  return Tensor::block(emit_value(T, op, t, x.loc));
}

static Tensor dot_impl(const Operand& a, const Operand& b, const Operand* acc) {
  Tracer& T = tracer(a.loc);
  T.require_device("dot", a.loc);
  int va = value_of(T, a), vb = value_of(T, b);
  Type t;
  std::string err = ir::dot_type(T.fn(), T.fn().type_of(va), T.fn().type_of(vb), &t);
  if (!err.empty()) T.fail(err, a.loc);
  Op op{OpKind::Dot};
  op.operands = {va, vb};
  if (acc) {
    int vc = value_of(T, *acc);
    if (!(T.fn().type_of(vc) == t))
      T.fail("dot: the accumulator has type " + describe(T, vc) + "; expected " + ir::type_to_string(T.fn(), t),
             acc->loc);
    op.operands.push_back(vc);
  }
  return Tensor::block(emit_value(T, op, t, a.loc));
}

Tensor dot(const Operand& a, const Operand& b) { return dot_impl(a, b, nullptr); }
Tensor dot(const Operand& a, const Operand& b, const Operand& acc) { return dot_impl(a, b, &acc); }
Tensor dot(const Operand& a, const Operand& b, DType out_dtype) {
  return cast(Operand(dot_impl(a, b, nullptr), a.loc), out_dtype);
}

Tensor arange(int64_t n, Loc loc) {
  Tracer& T = tracer(loc);
  T.require_device("arange", loc);
  if (n < 0) T.fail("arange of a negative length", loc);
  Op op{OpKind::Arange};
  return Tensor::block(emit_value(T, op, Type{DType::i64, {Dim::constant(n)}}, loc));
}

namespace frontend {
int operand_value(Tracer& T, const Operand& o, DType hint) { return value_of(T, o, hint); }
std::vector<ir::IndexItem> subscript_items(Tracer& T, const Tensor& x, const std::vector<Index>& idx, const Loc& loc) {
  return index_items(T, x.kind(), x.id(), idx, loc);
}
}  // namespace frontend

}  // namespace parhelion

#include "frontend/tracer.h"

#include <algorithm>
#include <map>

#include "ir/dce.h"
#include "ir/printer.h"
#include "ir/views.h"
#include "parhelion/error.h"
#include "runtime/source_line.h"

namespace parhelion::frontend {
namespace {
thread_local Tracer* g_active = nullptr;
}

ir::SourceLoc to_loc(const std::source_location& loc) { return ir::SourceLoc{source_file(loc), source_line(loc)}; }

Tracer::Tracer(std::string kernel_name) : previous_(g_active) {
  fn_.name = std::move(kernel_name);
  g_active = this;
}

Tracer::~Tracer() { g_active = previous_; }

Tracer* Tracer::active() { return g_active; }

int Tracer::add_copy(ir::Op start) {
  start.channel = fn_.num_copies++;
  copies_.push_back(std::move(start));
  return copies_.back().channel;
}

Tracer& Tracer::current(const std::source_location& loc) {
  if (!g_active)
    throw UserError(
        "Parhelion DSL used outside a kernel trace: call the kernel through "
        "ph::Kernel, not directly",
        loc);
  return *g_active;
}

void Tracer::fail(const std::string& msg, const std::source_location& loc) { throw UserError(msg, loc); }

void Tracer::fail_at(const std::string& msg, const ir::SourceLoc& loc) { throw UserError(loc.str() + ": " + msg); }

ir::SourceLoc Tracer::value_loc(int value) const {
  if (value >= 0 && value < static_cast<int>(value_loc_.size()) && value_loc_[value].line > 0) return value_loc_[value];
  return last_loc_;
}

void Tracer::require_device(const char* what, const std::source_location& loc) {
  if (!in_device())
    fail(std::string(what) +
             " is device code: it must be inside a ph::tile or ph::grid loop "
             "(outside them is host code, which only allocates and checks)",
         loc);
}

Tensor Tracer::add_tensor_param(const ArgSpec& spec) {
  ir::TensorInfo t;
  t.name = "arg" + std::to_string(fn_.num_tensor_params + static_cast<int>(fn_.scalar_params.size()));
  t.shape = spec.shape;
  t.strides = spec.strides;
  t.dtype = spec.dtype;
  t.origin = ir::TensorInfo::Param;
  t.param_index = fn_.num_tensor_params++;
  fn_.tensors.push_back(t);
  return Tensor::host(static_cast<int>(fn_.tensors.size()) - 1);
}

Scalar Tracer::add_scalar_param() {
  int idx = static_cast<int>(fn_.scalar_params.size());
  fn_.scalar_params.push_back("arg" + std::to_string(fn_.num_tensor_params + idx));
  return Scalar(idx);
}

int Tracer::add_alloc(const Shape& shape, DType dtype, bool fill, double value, const std::source_location& loc) {
  if (in_device()) fail("allocating a tensor inside a tile loop; allocate outputs in host code, before the loop", loc);
  for (int64_t d : shape)
    if (d < 0) fail("negative size in shape " + shape_to_string(shape), loc);
  // The run allocates it (Array::empty); a size that overflows must fail here, at the user's line.
  try {
    shape_bytes(shape, dtype);
  } catch (const UserError& e) {
    fail(e.what(), loc);
  }
  ir::TensorInfo t;
  t.name = "buf" + std::to_string(fn_.tensors.size() - fn_.num_tensor_params);
  t.shape = shape;
  t.strides = contiguous_strides(shape);
  t.dtype = dtype;
  t.origin = ir::TensorInfo::Alloc;
  fn_.tensors.push_back(t);
  ir::Op op{ir::OpKind::Alloc};
  op.tensor = static_cast<int>(fn_.tensors.size()) - 1;
  op.has_fill = fill;
  op.number = value;
  op.loc = to_loc(loc);
  fn_.body.push_back(op);
  return op.tensor;
}

int Tracer::add_view(int base, ir::ViewKind kind, const std::vector<int64_t>& dims, int axis, const char* what,
                     const std::source_location& loc) {
  if (in_device())
    fail(std::string(what) +
             " of a tensor is host code (a view of its memory): write it before the tile loop, or use "
             "the block view ph::" +
             what + " on a loaded block",
         loc);
  ir::HostView v;
  std::string err = ir::host_view(fn_.tensors.at(base), kind, dims, axis, &v);
  if (!err.empty()) fail(err, loc);
  const ir::TensorInfo& b = fn_.tensors[base];
  ir::TensorInfo t;
  t.name = b.name + "_v" + std::to_string(fn_.tensors.size());
  t.shape = v.shape;
  t.strides = v.strides;
  t.offset = v.offset;
  t.dtype = b.dtype;
  t.origin = ir::TensorInfo::View;
  t.base = base;
  t.root = ir::root_of(fn_, base);
  fn_.tensors.push_back(t);
  ir::Op op{ir::OpKind::View};
  op.tensor = static_cast<int>(fn_.tensors.size()) - 1;
  op.view_kind = kind;
  op.dims = dims;
  op.axis = axis;
  op.loc = to_loc(loc);
  fn_.body.push_back(op);
  return op.tensor;
}

int Tracer::new_value(ir::Type t) {
  fn_.values.push_back(std::move(t));
  value_region_.push_back(open_region_ids_.empty() ? -1 : open_region_ids_.back());
  return static_cast<int>(fn_.values.size()) - 1;
}

int Tracer::emit(ir::Op op, const std::source_location& loc) { return emit_at(std::move(op), to_loc(loc)); }

int Tracer::emit_at(ir::Op op, const ir::SourceLoc& loc) {
  PH_CHECK(in_device(), "device op emitted in host code");
  op.loc = loc;
  last_loc_ = loc;
  int r = op.result;
  if (r >= 0) {
    if (static_cast<int>(value_loc_.size()) <= r) value_loc_.resize(r + 1);
    value_loc_[r] = loc;
  }
  regions_.back()->body.push_back(std::move(op));
  return r;
}

int Tracer::new_block_size(int64_t extent, int64_t fixed, const std::source_location& loc) {
  ir::BlockSize b;
  b.id = static_cast<int>(fn_.block_sizes.size());
  b.extent = extent;
  b.fixed = fixed;
  b.loc = to_loc(loc);
  fn_.block_sizes.push_back(b);
  return b.id;
}

std::vector<Tile> Tracer::open_loop(const std::vector<Extent>& dims, bool grid, const std::source_location& loc) {
  if (dims.empty()) fail("a tile loop needs at least one dimension", loc);
  ir::Op op{in_device() ? ir::OpKind::Loop : ir::OpKind::Launch};
  op.loc = to_loc(loc);
  last_loc_ = op.loc;
  std::vector<Tile> tiles;
  for (Extent e : dims) {
    int parent = -1;
    if (e.parent >= 0) {
      if (!tile_in_scope(e.parent)) fail("ph::tile(outer): the outer tile's loop is not open here", loc);
      const ir::TileInfo& p = fn_.tiles[e.parent];
      if (p.is_grid) fail("ph::tile(outer) of a grid index: a grid index has one element per step", loc);
      if (grid) fail("ph::grid over an enclosing tile's block; use ph::tile(outer)", loc);
      if (!in_device()) fail("ph::tile(outer) must be nested in the loop of outer", loc);
      parent = e.parent;
      e.begin = p.begin;
      e.end = p.end;
      if (e.block_id >= 0)
        fail("ph::tile(outer) takes its own block size (tunable, or fixed with .block(n)), not a registered one", loc);
    }
    const bool jagged = e.end_value >= 0;
    if (jagged) {
      if (!in_device())
        fail(
            "a tile over a range computed in the kernel (ph::range of scalars, ph::jagged) must be nested in a "
            "tile loop: a launch's grid is fixed when the kernel is specialized",
            loc);
      for (int v : {e.begin_value, e.end_value})
        if (!value_in_scope(v)) fail("ph::range(start, end): a bound is a value of a loop that is not open here", loc);
      e.begin = 0;
      e.end = ir::kUnboundedRange;  // bounded by the dims it indexes when the trace ends
    }
    if (e.count_block >= 0 && e.begin != 0) fail("a tile over ph::num_blocks starts at 0", loc);
    if (e.end < e.begin || e.begin < 0)
      fail("tile loop over an empty or negative range " + std::to_string(e.begin) + ".." + std::to_string(e.end), loc);
    ir::TileInfo t;
    t.id = static_cast<int>(fn_.tiles.size());
    t.begin = e.begin;
    t.end = e.end;
    t.is_grid = grid;
    t.loc = op.loc;
    t.parent = parent;
    if (e.count_block >= 0) {
      t.count_block = e.count_block;
      t.count_extent = e.end;
    }
    if (jagged) {
      t.begin_value = e.begin_value;
      t.end_value = e.end_value;
      op.operands.insert(op.operands.end(), {e.begin_value, e.end_value});
    }
    // A jagged range's length is known only at run time: its block-size choices span
    // ir::kJaggedBlockExtent (or its bound, when the trace ends, if smaller).
    int64_t extent = jagged ? ir::kJaggedBlockExtent : std::max<int64_t>(1, e.end - e.begin);
    // Over an enclosing tile's block: at most that block's length (the parent's symbol's extent).
    if (parent >= 0) {
      const ir::BlockSize& pb = fn_.block_sizes[fn_.tiles[parent].block];
      extent = std::min(extent, pb.fixed > 0 ? pb.fixed : pb.extent);
    }
    if (grid) {
      t.block = new_block_size(extent, 1, loc);
    } else if (e.block_id >= 0) {
      if (e.block_id >= static_cast<int>(fn_.block_sizes.size()))
        fail("unknown block size (register it with ph::register_block_size in this kernel)", loc);
      t.block = e.block_id;
      auto& b = fn_.block_sizes[e.block_id];
      b.extent = std::max(b.extent, extent);
    } else if (e.fixed_block > 0) {
      t.block = new_block_size(extent, e.fixed_block, loc);
    } else {
      t.block = new_block_size(extent, 0, loc);
    }
    fn_.tiles.push_back(t);
    op.loop_tiles.push_back(t.id);
    tiles.emplace_back(t.id);
  }
  std::vector<ir::Op>& parent = in_device() ? regions_.back()->body : fn_.body;
  parent.push_back(std::move(op));
  regions_.push_back(&parent.back());
  open_region_ids_.push_back(next_region_id_++);
  for (const Tile& t : tiles) open_tiles_.push_back(t.ir_id());
  return tiles;
}

void Tracer::open_if(int cond, const std::source_location& loc) {
  require_device("ph::when", loc);
  ir::Op op{ir::OpKind::If};
  op.loc = to_loc(loc);
  op.operands = {cond};
  last_loc_ = op.loc;
  std::vector<ir::Op>& parent = regions_.back()->body;
  parent.push_back(std::move(op));
  regions_.push_back(&parent.back());
  open_region_ids_.push_back(next_region_id_++);
}

void Tracer::close_if() {
  PH_CHECK(!regions_.empty() && regions_.back()->kind == ir::OpKind::If, "close_if without an open ph::when");
  regions_.pop_back();
  open_region_ids_.pop_back();
}

void Tracer::close_loop() {
  PH_CHECK(!regions_.empty(), "close_loop without an open loop");
  PH_CHECK(regions_.back()->kind != ir::OpKind::If, "a tile loop closed inside an open ph::when");
  for (size_t i = 0; i < regions_.back()->loop_tiles.size(); ++i) open_tiles_.pop_back();
  regions_.pop_back();
  open_region_ids_.pop_back();
}

std::vector<int> Tracer::open_combine(const std::vector<DType>& dtypes, const std::source_location& loc) {
  if (in_combine_) fail("a scan inside the combine function of another scan", loc);
  in_combine_ = true;
  combine_region_.body.clear();
  regions_.push_back(&combine_region_);
  open_region_ids_.push_back(next_region_id_++);
  std::vector<int> params;
  for (int half = 0; half < 2; ++half)
    for (DType d : dtypes) {
      params.push_back(new_value(ir::Type{d, {}}));
      if (static_cast<int>(value_loc_.size()) <= params.back()) value_loc_.resize(params.back() + 1);
      value_loc_[params.back()] = to_loc(loc);
    }
  return params;
}

ir::ScanCombine Tracer::close_combine(const std::vector<int>& params, const std::vector<int>& results) {
  PH_CHECK(in_combine_ && regions_.back() == &combine_region_, "close_combine without an open combine");
  regions_.pop_back();
  open_region_ids_.pop_back();
  in_combine_ = false;
  ir::ScanCombine c;
  c.params = params;
  c.ops = std::move(combine_region_.body);
  combine_region_.body.clear();
  c.results = results;
  return c;
}

ir::ScanCombine Tracer::clone_combine(const ir::ScanCombine& c) {
  std::map<int, int> fresh;
  auto copy = [&](int v) {
    const int r = new_value(fn_.type_of(v));
    if (static_cast<int>(value_loc_.size()) <= r) value_loc_.resize(r + 1);
    value_loc_[r] = value_loc(v);
    fresh[v] = r;
    return r;
  };
  auto map = [&](int v) { return fresh.at(v); };
  ir::ScanCombine out;
  for (int p : c.params) out.params.push_back(copy(p));
  for (const ir::Op& op : c.ops) {
    ir::Op o = op;
    for (int& v : o.operands) v = map(v);
    if (o.result >= 0) o.result = copy(op.result);
    out.ops.push_back(std::move(o));
  }
  for (int r : c.results) out.results.push_back(map(r));
  return out;
}

bool Tracer::value_in_scope(int value) const {
  int r = value_region_.at(value);
  return std::find(open_region_ids_.begin(), open_region_ids_.end(), r) != open_region_ids_.end();
}

int Tracer::innermost_tile_of_block(int block) const {
  for (auto it = open_tiles_.rbegin(); it != open_tiles_.rend(); ++it)
    if (fn_.tiles[*it].block == block && !fn_.tiles[*it].is_grid) return *it;
  return -1;
}

bool Tracer::tile_in_scope(int tile) const {
  return std::find(open_tiles_.begin(), open_tiles_.end(), tile) != open_tiles_.end();
}

ir::Function Tracer::finish(const std::vector<Tensor>& outputs) {
  PH_CHECK(regions_.empty(), "trace finished inside a loop");
  for (const Tensor& t : outputs) {
    if (t.kind() != Tensor::HostK)
      throw UserError("kernel " + fn_.name +
                      " returned a block value; a kernel returns tensors (allocate one with "
                      "ph::empty_like and store into it)");
    fn_.outputs.push_back(t.id());
  }
  ir::eliminate_dead_code(fn_);
  ir::bound_jagged_tiles(fn_);
  return std::move(fn_);
}

}  // namespace parhelion::frontend

#include "ir/verifier.h"

#include <algorithm>
#include <map>
#include <set>

#include "ir/collectives.h"
#include "ir/printer.h"
#include "ir/scan.h"
#include "ir/type_rules.h"
#include "ir/views.h"
#include "parhelion/error.h"

namespace parhelion::ir {
namespace {

class Verifier {
 public:
  explicit Verifier(const Function& fn) : fn_(fn), defined_(fn.values.size(), false), def_(fn.values.size()) {}

  void run() {
    for (const Op& op : fn_.body) {
      if (op.kind == OpKind::Alloc) {
        check(op.tensor >= 0 && op.tensor < static_cast<int>(fn_.tensors.size()), op, "bad tensor");
      } else if (op.kind == OpKind::View) {
        check_view(op);
      } else if (op.kind == OpKind::Launch) {
        std::vector<int> scope;
        std::set<int> vars;
        launch_ = &op;
        device(op, scope, vars);
        check_aliasing(op);
        check_atomics(op);
      } else {
        fail(op, std::string(op_name(op)) + " is device code: it must be inside a tile loop");
      }
    }
    for (int t : fn_.outputs)
      if (t < 0 || t >= static_cast<int>(fn_.tensors.size())) throw InternalError("bad output tensor");
  }

 private:
  [[noreturn]] void fail(const Op& op, const std::string& msg) { throw UserError(op.loc.str() + ": " + msg); }
  void check(bool ok, const Op& op, const std::string& msg) {
    if (!ok) fail(op, "IR verification failed: " + msg);
  }

  void use(const Op& op, int v, const std::vector<int>& scope) {
    check(v >= 0 && v < static_cast<int>(fn_.values.size()), op, "operand out of range");
    if (!defined_[v]) fail(op, "value %" + std::to_string(v) + " used before it is defined");
    for (int s : scope)
      if (s == v) return;
    fail(op, "value %" + std::to_string(v) +
                 " is used outside the tile loop that computes it (values do not escape their loop;"
                 " use a ph::Var or store it to a tensor)");
  }

  void define(const Op& op, int v, std::vector<int>& scope) {
    check(v >= 0 && v < static_cast<int>(fn_.values.size()), op, "result out of range");
    check(!defined_[v], op, "value %" + std::to_string(v) + " defined twice");
    defined_[v] = true;
    def_[v] = &op;
    scope.push_back(v);
  }

  void expect_type(const Op& op, const Type& t) {
    if (!(fn_.type_of(op.result) == t))
      fail(op, "IR verification failed: " + std::string(op_name(op)) + " has type " +
                   type_to_string(fn_, fn_.type_of(op.result)) + ", expected " + type_to_string(fn_, t));
  }

  void rule(const Op& op, const std::string& err) {
    if (!err.empty()) fail(op, err);
  }

  void device(const Op& loop, std::vector<int> scope, std::set<int> vars) {
    for (int t : loop.loop_tiles) check(t >= 0 && t < static_cast<int>(fn_.tiles.size()), loop, "bad tile");
    for (int t : loop.loop_tiles)
      if (fn_.tiles[t].parent >= 0 && loop.kind == OpKind::Launch)
        fail(loop, "a launch's tile cannot be within another tile");
    std::vector<int> bounds;  // a loop's operands: the ranges of its jagged tiles
    for (int t : loop.loop_tiles) {
      const TileInfo& ti = fn_.tiles[t];
      if (!ti.is_jagged()) continue;
      if (loop.kind == OpKind::Launch) fail(loop, "a launch's tile cannot have a computed (jagged) range");
      if (ti.parent >= 0 || ti.count_block >= 0 || ti.begin != 0)
        fail(loop, "jagged tile " + tile_name(fn_, t) + " has a range 0..bound of its own");
      for (int v : {ti.begin_value, ti.end_value}) {
        check(v >= 0 && v < static_cast<int>(fn_.values.size()), loop, "bad jagged bound");
        if (fn_.type_of(v).rank() != 0 || fn_.type_of(v).dtype != DType::i64)
          fail(loop, "the bounds of jagged tile " + tile_name(fn_, t) + " must be i64 scalars");
      }
      bounds.insert(bounds.end(), {ti.begin_value, ti.end_value});
    }
    if (loop.kind != OpKind::If && bounds != loop.operands)
      fail(loop, "a loop's operands are the {begin, end} bounds of its jagged tiles, in tile order");
    const size_t open_before = open_.size();
    open_.insert(open_.end(), loop.loop_tiles.begin(), loop.loop_tiles.end());
    struct Close {
      std::vector<int>& open;
      size_t n;
      ~Close() { open.resize(n); }
    } close{open_, open_before};
    for (const Op& op : loop.body) {
      for (int v : op.operands) use(op, v, scope);
      for (const IndexItem& it : op.index)
        if (it.has_value()) use(op, it.value, scope);
      switch (op.kind) {
        case OpKind::Alloc:
        case OpKind::Launch:
          fail(op, std::string(op_name(op)) + " must be in host code, not inside a tile loop");
        case OpKind::Loop:
          for (int t : op.loop_tiles) {
            check(t >= 0 && t < static_cast<int>(fn_.tiles.size()), op, "bad tile");
            const TileInfo& ti = fn_.tiles[t];
            if (ti.parent >= 0 && std::find(open_.begin(), open_.end(), ti.parent) == open_.end())
              fail(op, "tile " + tile_name(fn_, t) + " is within tile " + tile_name(fn_, ti.parent) +
                           ", which no enclosing loop opens");
          }
          device(op, scope, vars);
          continue;
        case OpKind::If:
          check(op.operands.size() == 1 && op.result < 0, op, "an if has one operand, its condition, and no result");
          if (fn_.type_of(op.operands[0]).rank() != 0 || fn_.type_of(op.operands[0]).dtype != DType::boolean)
            fail(op, "the condition of an if must be a bool scalar, got " +
                         type_to_string(fn_, fn_.type_of(op.operands[0])));
          device(op, scope, vars);
          continue;
        case OpKind::Load: {
          Type t;
          rule(op, load_type(fn_, op.tensor, op.index, &t));
          check(op.operands.empty() || op.operands.size() == 2, op, "a load has no operands, or {mask, other}");
          if (op.operands.size() == 2)
            rule(op, mask_rule(fn_, t, fn_.type_of(op.operands[0]), &fn_.type_of(op.operands[1])));
          define(op, op.result, scope);
          expect_type(op, t);
          continue;
        }
        case OpKind::Store: {
          Type t;
          rule(op, load_type(fn_, op.tensor, op.index, &t));
          std::vector<Dim> b;
          rule(op, broadcast_shapes(fn_, t.shape, fn_.type_of(op.operands[0]).shape, &b));
          if (!(b == t.shape))
            fail(op, "cannot store a block of shape " + dims_to_string(fn_, fn_.type_of(op.operands[0]).shape) +
                         " into " + fn_.tensors[op.tensor].name + " indexed as " + dims_to_string(fn_, t.shape));
          check(op.operands.size() == 1 || op.operands.size() == 2, op, "a store has a value and maybe a mask");
          if (op.operands.size() == 2) rule(op, mask_rule(fn_, t, fn_.type_of(op.operands[1]), nullptr));
          check(op.fn >= 0 && op.fn <= static_cast<int>(AtomicFn::min), op, "bad atomic function");
          if (!is_atomic(op)) check_store_covers_grid(op);  // atomic updates may meet: that is their point
          if (is_atomic(op) && fn_.tensors[op.tensor].dtype == DType::boolean)
            fail(op, std::string(atomic_name(atomic_fn(op))) + " into a bool tensor (" + fn_.tensors[op.tensor].name +
                         "): atomics take numbers (use an integer tensor as a flag)");
          continue;
        }
        case OpKind::DeviceIndex:
          if (op.axis < 0 || op.axis >= static_cast<int>(fn_.mesh.size()))
            fail(op, "device_index names no axis of the kernel's mesh (" + mesh_to_string(fn_.mesh) + ")");
          define(op, op.result, scope);
          expect_type(op, Type{DType::i64, {}});
          continue;
        case OpKind::CopyStart:
        case OpKind::CopyWait:
        case OpKind::Barrier:
        case OpKind::Signal:
        case OpKind::SemWait:
          check_collective(op);
          continue;
        case OpKind::VarDecl:
          check(op.var >= 0 && op.var < static_cast<int>(fn_.vars.size()), op, "bad var");
          vars.insert(op.var);
          continue;
        case OpKind::VarSet:
          if (!vars.count(op.var)) fail(op, "var v" + std::to_string(op.var) + " assigned outside its scope");
          continue;
        case OpKind::VarGet:
          if (!vars.count(op.var)) fail(op, "var v" + std::to_string(op.var) + " read outside its scope");
          define(op, op.result, scope);
          expect_type(op, fn_.vars[op.var].type);
          continue;
        case OpKind::Reduce: {
          Type t;
          int axis = op.axis;
          rule(op, reduce_type(fn_, fn_.type_of(op.operands[0]), &axis, op.keepdim, &t));
          check(axis == op.axis, op, "reduce axis not normalized");
          define(op, op.result, scope);
          expect_type(op, t);
          continue;
        }
        case OpKind::Unary: {
          Type t = fn_.type_of(op.operands[0]);
          rule(op, unary_dtype(static_cast<UnaryFn>(op.fn), t.dtype, &t.dtype));
          define(op, op.result, scope);
          expect_type(op, t);
          continue;
        }
        case OpKind::Binary: {
          Type t;
          const Type &a = fn_.type_of(op.operands[0]), &b = fn_.type_of(op.operands[1]);
          rule(op, broadcast_shapes(fn_, a.shape, b.shape, &t.shape));
          rule(op, binary_dtype(static_cast<BinaryFn>(op.fn), a.dtype, b.dtype, &t.dtype));
          define(op, op.result, scope);
          expect_type(op, t);
          continue;
        }
        case OpKind::Where: {
          Type t;
          std::vector<Dim> ab;
          const Type &c = fn_.type_of(op.operands[0]), &a = fn_.type_of(op.operands[1]),
                     &b = fn_.type_of(op.operands[2]);
          if (c.dtype != DType::boolean) fail(op, "where: the condition must be boolean");
          rule(op, broadcast_shapes(fn_, a.shape, b.shape, &ab));
          rule(op, broadcast_shapes(fn_, c.shape, ab, &t.shape));
          t.dtype = (a.dtype == DType::f32 || b.dtype == DType::f32) ? DType::f32 : a.dtype;
          define(op, op.result, scope);
          expect_type(op, t);
          continue;
        }
        case OpKind::Reshape:
        case OpKind::Permute:
        case OpKind::Expand:
        case OpKind::Squeeze:
        case OpKind::Split:
        case OpKind::Join:
        case OpKind::Stack:
        case OpKind::Cat: {
          Type t;
          rule(op, block_view_type(fn_, op, fn_.type_of(op.result).shape, &t));
          define(op, op.result, scope);
          expect_type(op, t);
          continue;
        }
        case OpKind::View:
          fail(op, "a host view must be in host code, not inside a tile loop");
        case OpKind::Scan: {
          std::vector<Type> in;
          std::vector<DType> dtypes;
          for (int v : op.operands) {
            in.push_back(fn_.type_of(v));
            dtypes.push_back(in.back().dtype);
          }
          Type t;
          int axis = op.axis;
          rule(op, scan_type(fn_, in, &axis, op.fn, &t));
          check(axis == op.axis, op, "scan axis not normalized");
          check(op.combine.size() == 1, op, "a scan has one combine function");
          rule(op, combine_rule(fn_, op.combine[0], dtypes));
          define(op, op.result, scope);
          expect_type(op, t);
          continue;
        }
        case OpKind::Dot: {
          Type t;
          rule(op, dot_type(fn_, fn_.type_of(op.operands[0]), fn_.type_of(op.operands[1]), &t));
          if (op.operands.size() > 2 && !(fn_.type_of(op.operands[2]) == t))
            fail(op, "dot: the accumulator must have the result's type " + type_to_string(fn_, t));
          check_contraction(op);
          define(op, op.result, scope);
          expect_type(op, t);
          continue;
        }
        default:
          if (op.result >= 0) define(op, op.result, scope);
      }
    }
  }

  // The operands and channels of a collective (src/ir/collectives.h).
  void check_collective(const Op& op) {
    check(op.result < 0, op, std::string(op_name(op)) + " has no result");
    if (fn_.mesh.empty()) fail(op, std::string(op_name(op)) + " needs a mesh: call the kernel on one (ph::Mesh)");
    auto peer = [&](size_t first) {
      std::vector<Type> coords;
      for (size_t i = first; i < op.operands.size(); ++i) coords.push_back(fn_.type_of(op.operands[i]));
      rule(op, peer_rule(fn_, coords));
    };
    const bool is_copy = op.kind == OpKind::CopyStart || op.kind == OpKind::CopyWait;
    if (op.kind != OpKind::Barrier)
      check(op.channel >= 0 && op.channel < (is_copy ? fn_.num_copies : fn_.num_semaphores), op,
            std::string("bad ") + (is_copy ? "copy" : "semaphore"));
    switch (op.kind) {
      case OpKind::CopyStart:
        check(op.operands.size() >= 2, op, "a copy has a block and a peer");
        rule(op, copy_rule(fn_, op.tensor, op.index, fn_.type_of(op.operands[0])));
        peer(1);
        return;
      case OpKind::CopyWait:
        check(op.operands.empty() && (op.fn == 0 || op.fn == 1), op, "a copy's wait is on its send or its receive");
        return;
      case OpKind::Barrier: {
        check(!op.dims.empty() && op.operands.empty(), op, "a barrier names its group's mesh axes");
        std::set<int64_t> axes;
        for (int64_t a : op.dims)
          check(a >= 0 && a < static_cast<int64_t>(fn_.mesh.size()) && axes.insert(a).second, op,
                "a barrier's axes are distinct axes of the mesh");
        return;
      }
      case OpKind::Signal:
        check(op.operands.size() >= 2, op, "a signal has a count and a peer");
        rule(op, count_rule(fn_, fn_.type_of(op.operands[0])));
        peer(1);
        return;
      case OpKind::SemWait:
        check(op.operands.size() == 1, op, "a wait has a count");
        rule(op, count_rule(fn_, fn_.type_of(op.operands[0])));
        return;
      default:
        throw InternalError("not a collective");
    }
  }

  // A View op defines its tensor from an earlier one, with the layout views.h gives.
  void check_view(const Op& op) {
    check(op.tensor >= 0 && op.tensor < static_cast<int>(fn_.tensors.size()), op, "bad tensor");
    const TensorInfo& t = fn_.tensors[op.tensor];
    check(t.origin == TensorInfo::View && t.base >= 0 && t.base < op.tensor, op, "a view of a later tensor");
    check(t.root == root_of(fn_, t.base) && fn_.tensors[t.root].origin != TensorInfo::View, op, "bad view root");
    HostView v;
    rule(op, host_view(fn_.tensors[t.base], op.view_kind, op.dims, op.axis, &v));
    check(v.shape == t.shape && v.strides == t.strides && v.offset == t.offset && t.dtype == fn_.tensors[t.base].dtype,
          op, "a view's layout differs from its rule's");
  }

  // Grid steps run in parallel and inner loops may stage blocks, so within one launch a tensor
  // written through one view must not be accessed through another that overlaps it in memory
  // (a step could read what another step writes, in any order). Identical views are one
  // tensor's accesses (the usual same-index rules apply). Also: no store through a broadcast
  // (stride-0) dim.
  void check_aliasing(const Op& launch) {
    std::vector<const Op*> access;
    walk(launch.body, [&](const Op& op) {
      if (op.kind == OpKind::Load || op.kind == OpKind::Store) access.push_back(&op);
    });
    auto same_layout = [&](int a, int b) {
      const TensorInfo &x = fn_.tensors[a], &y = fn_.tensors[b];
      const int64_t ox = x.origin == TensorInfo::View ? x.offset : 0, oy = y.origin == TensorInfo::View ? y.offset : 0;
      return x.shape == y.shape && x.strides == y.strides && ox == oy;
    };
    for (const Op* w : access) {
      if (w->kind != OpKind::Store) continue;
      const TensorInfo& wt = fn_.tensors[w->tensor];
      for (size_t d = 0; d < wt.shape.size(); ++d)
        if (wt.strides[d] == 0 && wt.shape[d] > 1)
          fail(*w, "store through an expanded view (" + wt.name + ", dim " + std::to_string(d) +
                       " has stride 0): its elements alias each other");
      for (const Op* o : access) {
        if (o == w || o->tensor == w->tensor || root_of(fn_, o->tensor) != root_of(fn_, w->tensor)) continue;
        if (same_layout(o->tensor, w->tensor)) continue;
        auto [lo, hi] = element_span(wt);
        auto [lo2, hi2] = element_span(fn_.tensors[o->tensor]);
        if (hi < lo || hi2 < lo2 || hi < lo2 || hi2 < lo) continue;  // disjoint memory
        fail(*w, "this store to " + wt.name + " writes memory that the same launch (" + launch.loc.str() + ") " +
                     (o->kind == OpKind::Load ? "reads" : "writes") + " through another view, " +
                     fn_.tensors[o->tensor].name + " (at " + o->loc.str() +
                     "): its grid steps run in parallel, so the result would depend on their order. Write into a "
                     "separate tensor, or split the launch");
      }
    }
  }

  // Atomic updates of one launch's grid steps and trips happen in no defined order, so within a
  // launch a tensor updated atomically is only updated, and by one function: a load of it
  // would see some of the updates, a plain store could land before or after them, and add
  // and max do not commute. (A backend may then keep per-thread partial results and combine
  // them when the launch ends: nothing in the launch can tell.)
  void check_atomics(const Op& launch) {
    std::map<int, const Op*> updated;  // root tensor -> its first atomic update
    walk(launch.body, [&](const Op& op) {
      if (is_atomic(op)) updated.emplace(root_of(fn_, op.tensor), &op);
    });
    if (updated.empty()) return;
    walk(launch.body, [&](const Op& op) {
      if (op.kind != OpKind::Load && op.kind != OpKind::Store) return;
      auto it = updated.find(root_of(fn_, op.tensor));
      if (it == updated.end() || &op == it->second) return;
      const Op& a = *it->second;
      const std::string first = std::string(atomic_name(atomic_fn(a))) + " at " + a.loc.str();
      if (op.kind == OpKind::Load)
        fail(op, "this load reads " + fn_.tensors[op.tensor].name + ", which the same launch updates atomically (" +
                     first +
                     "): the updates of its grid steps happen in no defined order, so the load would see "
                     "some of them. Read the result in a later launch");
      if (atomic_fn(op) != atomic_fn(a))
        fail(op, "this " + std::string(atomic_name(atomic_fn(op))) + " to " + fn_.tensors[op.tensor].name +
                     " meets the launch's " + first + ": a tensor updated atomically in a launch is only updated, " +
                     "and by one function (their order is not defined)");
    });
  }

  // Whether value `v` is computed from tile `tile`'s position (its begin, end or indices, or a
  // load indexed by it). A Var read counts as dependent (its value may come from anywhere in
  // the loop). Memoized: index expressions share subexpressions.
  bool depends_on_tile(int v, int tile) {
    auto key = std::make_pair(v, tile);
    if (auto m = depends_memo_.find(key); m != depends_memo_.end()) return m->second;
    const Op* d = def_.at(v);
    bool r = false;
    if (d) {
      r = d->kind == OpKind::VarGet || ((d->kind == OpKind::TileBegin || d->kind == OpKind::TileEnd ||
                                         d->kind == OpKind::TileIndex || d->kind == OpKind::TileId) &&
                                        within(d->tile, tile));
      for (const IndexItem& it : d->index)
        r = r || (it.kind == IndexItem::Tile && within(it.tile, tile)) ||
            (it.has_value() && depends_on_tile(it.value, tile));
      for (int o : d->operands) r = r || depends_on_tile(o, tile);
    }
    depends_memo_[key] = r;
    return r;
  }

  // Whether tile `t` is `tile` or ranges within its blocks (ph::tile(outer), at any depth): its
  // indices then differ between `tile`'s blocks as `tile`'s do.
  bool within(int t, int tile) const {
    for (; t >= 0; t = fn_.tiles[t].parent)
      if (t == tile) return true;
    return false;
  }

  // Every grid step of a launch may run in parallel with the others, so a store must select
  // different elements in different steps: it must index every tile of its launch that has
  // more than one step (directly, or through a scalar index computed from the tile). Otherwise
  // the steps race on the same elements (an atomic update is how steps combine into one).
  void check_store_covers_grid(const Op& store) {
    for (int tile : launch_->loop_tiles) {
      const TileInfo& t = fn_.tiles[tile];
      const int64_t fixed = fn_.block_sizes[t.block].fixed;
      if (t.extent() <= 1 || (fixed > 0 && fixed >= t.extent())) continue;  // one step only
      bool covered = false;
      for (const IndexItem& it : store.index) {
        covered |= (it.kind == IndexItem::Tile && within(it.tile, tile)) ||
                   (it.has_value() && depends_on_tile(it.value, tile));
        // A jagged tile whose range the grid step computes: each step its own rows (that the
        // ranges do not overlap is data; the interpreter checks it, as it does for scatters).
        const int jagged = it.kind == IndexItem::Tile ? jagged_root(fn_, it.tile) : -1;
        if (jagged >= 0)
          covered |= depends_on_tile(fn_.tiles[jagged].begin_value, tile) ||
                     depends_on_tile(fn_.tiles[jagged].end_value, tile);
      }
      if (!covered)
        fail(store, "this store to " + fn_.tensors[store.tensor].name + " does not index the launch's tile " +
                        tile_name(fn_, tile) + " (the loop at " + launch_->loc.str() +
                        "): its grid steps run in parallel and would all write the same elements. Index the "
                        "store with " +
                        tile_name(fn_, tile) +
                        ", reduce over that dimension in an inner loop inside the launch, or combine the steps with "
                        "an atomic update (ph::atomic_add)");
    }
  }

  // The tensor dimension that block dimension `axis` of value `v` reads, if it is a load of a
  // tensor (through transposes, casts and unary functions).
  struct TensorDim {
    int tensor = -1, dim = -1;
  };
  TensorDim source_dim(int v, int axis) const {
    const Op* d = def_.at(v);
    if (!d) return {};
    const int rank = fn_.type_of(v).rank();
    switch (d->kind) {
      case OpKind::Transpose:
        if (axis >= rank - 2) axis = axis == rank - 1 ? rank - 2 : rank - 1;
        return source_dim(d->operands[0], axis);
      case OpKind::Cast:
      case OpKind::Unary:
        return source_dim(d->operands[0], axis);
      case OpKind::Load: {
        int block_dim = 0;
        for (size_t k = 0; k < d->index.size(); ++k) {
          const IndexItem& it = d->index[k];
          if (it.kind == IndexItem::Scalar || (it.kind == IndexItem::Tile && fn_.tiles[it.tile].is_grid)) continue;
          // A gathered dim reads scattered positions: no extent to compare.
          if (block_dim++ == axis)
            return it.kind == IndexItem::Gather ? TensorDim{} : TensorDim{d->tensor, static_cast<int>(k)};
        }
        return {};
      }
      default:
        return {};
    }
  }

  // A dot contracts a tile over the dimension of each operand's tensor that the tile indexes.
  // When the tile spans the whole of one of those dimensions but the other is longer, the
  // product silently drops the other's extra rows (x [64,100] . y [110,32]): reject it.
  void check_contraction(const Op& dot) {
    const int ra = fn_.type_of(dot.operands[0]).rank(), rb = fn_.type_of(dot.operands[1]).rank();
    const Dim& k = fn_.type_of(dot.operands[0]).shape[ra - 1];
    if (k.kind != Dim::Tile) return;
    TensorDim a = source_dim(dot.operands[0], ra - 1), b = source_dim(dot.operands[1], rb - 2);
    if (a.tensor < 0 || b.tensor < 0) return;
    const TensorInfo &ta = fn_.tensors[a.tensor], &tb = fn_.tensors[b.tensor];
    const int64_t na = ta.shape[a.dim], nb = tb.shape[b.dim];
    const TileInfo& t = fn_.tiles[k.tile];
    const bool spans_one = t.begin == 0 && (t.end == na || t.end == nb);
    if (na == nb || !spans_one) return;
    fail(dot, "dot: the contracted extents differ: tile " + tile_name(fn_, k.tile) + " (" + std::to_string(t.begin) +
                  ".." + std::to_string(t.end) + ") contracts dimension " + std::to_string(a.dim) + " of " + ta.name +
                  " (size " + std::to_string(na) + ") with dimension " + std::to_string(b.dim) + " of " + tb.name +
                  " (size " + std::to_string(nb) + "); they must be equal");
  }

  const Function& fn_;
  std::vector<bool> defined_;
  std::vector<const Op*> def_;  // the op that defines each value (as far as verified)
  const Op* launch_ = nullptr;  // the launch being verified
  std::vector<int> open_;       // tiles of the loops enclosing the op being verified
  std::map<std::pair<int, int>, bool> depends_memo_;
};

}  // namespace

void verify(const Function& fn) { Verifier(fn).run(); }

}  // namespace parhelion::ir

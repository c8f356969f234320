#include "lower/fusion.h"

#include <algorithm>
#include <functional>

#include <map>
#include <vector>

#include "ir/collectives.h"
#include "ir/type_rules.h"
#include "ir/views.h"

namespace parhelion::lower {
namespace {

using ir::is_pointwise;
using ir::Op;
using ir::OpKind;

struct OpInfo {
  const Op* op;
  int pos;
  std::vector<int> loops;  // positions of the enclosing Loop ops, outermost first
};

bool is_transcendental(const Op& op) {
  if (op.kind == OpKind::Unary) {
    return !ir::is_cheap_unary(static_cast<ir::UnaryFn>(op.fn));
  }
  if (op.kind != OpKind::Binary) return false;
  auto f = static_cast<ir::BinaryFn>(op.fn);
  return f == ir::BinaryFn::pow || f == ir::BinaryFn::div || f == ir::BinaryFn::floordiv || f == ir::BinaryFn::mod ||
         f == ir::BinaryFn::rand || f == ir::BinaryFn::randn;  // ten rounds of Philox
}

class Fusion {
 public:
  Fusion(const ir::Function& fn, const Op& launch) : fn_(fn) {
    // (any launch's: a device ahead of this one may be copying into them already)
    ir::walk(fn.body, [&](const Op& op) {
      if (op.kind == OpKind::CopyStart) landing_roots_.insert(ir::root_of(fn, op.tensor));
    });
    std::vector<int> loops;
    collect(launch.body, loops);
  }

  std::set<int> run() {
    // Forward: the cost and the Vars/tensors read by each value's fused expression tree.
    for (const OpInfo& i : ops_) {
      const Op& op = *i.op;
      if (op.result < 0) continue;
      Tree& t = tree_[op.result];
      t.size = 1;
      t.transcendental = is_transcendental(op);
      if (op.kind == OpKind::VarGet) t.vars.insert(op.var);
      if (op.kind == OpKind::Load) {
        t.tensors.insert(ir::root_of(fn_, op.tensor));  // a view's loads read its root's memory
        t.loads.push_back(&op);
      }
      // Block views remap indices like a transpose: the element read is not the one stored.
      t.transposes = op.kind == OpKind::Transpose || ir::is_block_view(op.kind);
      if (!is_pointwise(op.kind)) continue;
      // A gather's index block is evaluated inside the load's expression: part of its tree.
      std::vector<int> inputs = op.operands;
      for (const auto& ix : op.index)
        if (ix.kind == ir::IndexItem::Gather) inputs.push_back(ix.value);
      for (int v : inputs) {
        if (!is_pointwise(ops_[def_.at(v)].op->kind) || rank(v) == 0) continue;
        const Tree& o = tree_[v];
        t.size += o.size;
        t.transcendental |= o.transcendental;
        t.transposes |= o.transposes;
        t.vars.insert(o.vars.begin(), o.vars.end());
        t.tensors.insert(o.tensors.begin(), o.tensors.end());
        t.loads.insert(t.loads.end(), o.loads.begin(), o.loads.end());
      }
    }
    // Backward: decide each value after all of its users are decided.
    for (auto it = ops_.rbegin(); it != ops_.rend(); ++it) {
      const Op& op = *it->op;
      if (op.result < 0 || rank(op.result) == 0) continue;
      // A scan's element depends on the whole line before it: it is computed once, into scratch.
      if (op.kind == OpKind::Reduce || op.kind == OpKind::Scan ||
          (op.kind == OpKind::Dot && !in_place_.count(op.result))) {
        chosen_.insert(op.result);
        continue;
      }
      if (!is_pointwise(op.kind)) continue;
      std::set<int> consumers = consumers_of(op.result);
      std::map<int, bool> once;
      evaluations(op.result, op.result, true, once);
      const Tree& t = tree_[op.result];
      bool expensive = t.transcendental || t.size > 6;
      bool materialize = false;
      for (int c : consumers) {
        if (hazard(*it, ops_[c], t)) materialize = true;
        if (expensive && (!once.at(c) || !encloses_same_loops(*it, ops_[c]))) materialize = true;
      }
      if (expensive && consumers.size() >= 2) materialize = true;
      if (materialize) chosen_.insert(op.result);
    }
    // A dot reads its operands from memory (it packs them): each must be a load, a Var, a
    // materialized value, or a transpose of one.
    for (const OpInfo& i : ops_)
      if (i.op->kind == OpKind::Dot)
        for (int k = 0; k < 2; ++k)
          if (!addressable(i.op->operands[k])) chosen_.insert(i.op->operands[k]);
    return chosen_;
  }

 private:
  struct Tree {
    int size = 0;
    bool transcendental = false;
    bool transposes = false;  // the tree reads some block through a transpose
    std::set<int> vars, tensors;
    std::vector<const Op*> loads;
  };

  static bool same_index(const std::vector<ir::IndexItem>& a, const std::vector<ir::IndexItem>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i].kind != b[i].kind || a[i].tile != b[i].tile || a[i].value != b[i].value) return false;
    return true;
  }

  void collect(const std::vector<Op>& body, std::vector<int>& loops) {
    for (const Op& op : body) {
      int pos = static_cast<int>(ops_.size());
      ops_.push_back({&op, pos, loops});
      if (op.result >= 0) def_[op.result] = pos;
      for (int v : op.operands) users_[v].push_back(pos);
      for (const auto& ix : op.index)
        if (ix.has_value()) users_[ix.value].push_back(pos);
      if (op.kind == OpKind::VarSet || op.kind == OpKind::VarDecl) var_writes_.push_back(pos);
      // (a copy writes its tensor on the peer: this device itself when it copies to itself)
      if (op.kind == OpKind::Store || op.kind == OpKind::CopyStart) tensor_writes_.push_back(pos);
      // Copies from other devices land in this device's tensors by the time a wait returns.
      if (ir::is_collective(op) && op.kind != OpKind::CopyStart && op.kind != OpKind::Signal)
        sync_points_.push_back(pos);
      if (op.kind == OpKind::Loop) {
        loops.push_back(pos);
        collect(op.body, loops);
        loops.pop_back();
      }
      if (op.kind == OpKind::If) collect(op.body, loops);  // (a region of the enclosing loop)
    }
  }

  int rank(int v) const { return fn_.type_of(v).rank(); }

  bool addressable(int v) const {
    if (chosen_.count(v)) return true;
    const Op& d = *ops_[def_.at(v)].op;
    // The GEMM packs f32, bf16 and f16 from memory; a load of another dtype (fp8) is
    // materialized first (lower.cpp gives it a bf16 buffer, in which fp8 values are exact, or an
    // f32 one where the dots' kernels widen bf16 anyway), and a
    // gathered or masked load has no strided address: a dot reads both from scratch.
    if (d.kind == OpKind::Load) {
      DType t = fn_.tensors[d.tensor].dtype;
      return (t == DType::f32 || t == DType::bf16 || t == DType::f16) && !ir::has_gather(d) && !ir::is_masked(d);
    }
    if (d.kind == OpKind::VarGet) return true;
    return d.kind == OpKind::Transpose && addressable(d.operands[0]);
  }

  std::set<int> consumers_of(int v) {
    std::set<int> out;
    auto u = users_.find(v);
    if (u == users_.end()) return out;
    for (int pos : u->second) {
      const Op& user = *ops_[pos].op;
      bool root = user.result < 0 || chosen_.count(user.result) || !is_pointwise(user.kind) || rank(user.result) == 0;
      if (root) {
        out.insert(pos);
      } else {
        std::set<int> c = consumers_of(user.result);
        out.insert(c.begin(), c.end());
      }
    }
    return out;
  }

  // The shape of the loop nest that evaluates a consumer.
  std::vector<ir::Dim> nest_shape(const OpInfo& c) const {
    const Op& op = *c.op;
    switch (op.kind) {
      case OpKind::Reduce:
        return fn_.type_of(op.operands[0]).shape;
      case OpKind::VarDecl:
      case OpKind::VarSet:
        return fn_.vars[op.var].type.shape;
      case OpKind::Store:
      case OpKind::CopyStart: {
        ir::Type t;  // the store (the copy) covers the indexed region
        ir::load_type(fn_, op.tensor, op.index, &t);
        return t.shape;
      }
      default:
        return op.result >= 0 ? fn_.type_of(op.result).shape : std::vector<ir::Dim>{};
    }
  }

  // Whether `user` puts each element of its operand `v` in an element of its own, with the other
  // operands' beside it along a new axis: a join, or a stack of a few blocks (the cpu emitter
  // unrolls that axis, the last, so each operand is computed once per element; a longer stack's
  // select chain, or one along another axis, could compute every operand at each element). A cat is not one:
  // its select runs along an axis the simd loop vectorizes, which computes both sides. Nor is a
  // join whose other operand also computes `of` (the value being decided): `of` would be
  // computed for each of them.
  bool selects(const Op& user, int v, int of) const {
    if (user.kind != OpKind::Join && user.kind != OpKind::Stack) return false;
    if (user.operands.size() > 4) return false;
    std::vector<ir::Dim> shape = fn_.type_of(user.result).shape;
    const size_t axis = user.kind == OpKind::Join ? shape.size() - 1 : static_cast<size_t>(user.axis);
    if (axis + 1 != shape.size()) return false;  // (the emitter unrolls only the innermost dim)
    shape.erase(shape.begin() + static_cast<std::ptrdiff_t>(axis));
    if (shape != fn_.type_of(v).shape) return false;  // v is broadcast into it
    int reached = 0;
    for (int operand : user.operands) reached += computes(operand, of) ? 1 : 0;
    return reached == 1;
  }

  // Whether evaluating `value` where it is used evaluates `of`'s tree: `of` is in its fused tree.
  bool computes(int value, int of) const {
    if (value == of) return true;
    if (chosen_.count(value) || rank(value) == 0) return false;  // read from scratch, or a scalar
    const Op& def = *ops_[def_.at(value)].op;
    if (!is_pointwise(def.kind)) return false;
    for (int operand : def.operands)
      if (computes(operand, of)) return true;
    for (const auto& ix : def.index)
      if (ix.kind == ir::IndexItem::Gather && computes(ix.value, of)) return true;
    return false;
  }

  // For each consumer of `of` (consumers_of), whether its loop nest evaluates of's fused tree
  // once per element of `of`: every op on the way from `v` (of, then its users) keeps v's shape
  // or selects it (a join of two rotated halves, stored as pairs), and the consumer's nest has
  // that shape. `ok`: so far along the way.
  void evaluations(int of, int v, bool ok, std::map<int, bool>& once) const {
    auto u = users_.find(v);
    if (u == users_.end()) return;
    std::set<int> seen;  // (`mul v, v` is one use: the compiler computes the tree once)
    for (int pos : u->second) {
      if (!seen.insert(pos).second) continue;
      const Op& user = *ops_[pos].op;
      const bool root =
          user.result < 0 || chosen_.count(user.result) || !is_pointwise(user.kind) || rank(user.result) == 0;
      const bool sel = selects(user, v, of);
      if (root) {
        const bool here = ok && (sel || nest_shape(ops_[pos]) == fn_.type_of(v).shape);
        auto [it, fresh] = once.emplace(pos, here);
        if (!fresh) it->second = it->second && here;
      } else {
        evaluations(of, user.result, ok && (sel || fn_.type_of(user.result).shape == fn_.type_of(v).shape), once);
      }
    }
  }

  static bool encloses_same_loops(const OpInfo& def, const OpInfo& c) { return def.loops == c.loops; }

  // Would evaluating the value at consumer `c` (instead of at its definition) observe a write?
  bool hazard(const OpInfo& def, const OpInfo& c, const Tree& t) const {
    auto between = [&](int w) {
      if (w > def.pos && w < c.pos) return true;
      // A write inside a loop that encloses the consumer but not the definition runs between
      // the definition and the consumer's next trip.
      for (int l : c.loops) {
        bool def_inside = false;
        for (int dl : def.loops) def_inside |= dl == l;
        if (!def_inside && w > l && inside(w, l)) return true;
      }
      return false;
    };
    for (int w : var_writes_)
      if (t.vars.count(ops_[w].op->var) && between(w)) return true;
    for (int w : tensor_writes_)
      if (t.tensors.count(ir::root_of(fn_, ops_[w].op->tensor)) && between(w)) return true;
    for (int w : sync_points_)
      for (int root : t.tensors)
        if (landing_roots_.count(root) && between(w)) return true;
    // A store that reads the tensor it writes, evaluated inside the store's own loop nest, sees
    // the elements it has already overwritten unless every element reads only itself (the same
    // index, no transpose): `x[all, all] = transpose(x[all, all])` must read x first.
    const Op& user = *c.op;
    if (user.kind == OpKind::Store || user.kind == OpKind::CopyStart)
      for (const Op* load : t.loads)
        if (ir::root_of(fn_, load->tensor) == ir::root_of(fn_, user.tensor) &&
            (load->tensor != user.tensor || t.transposes || !same_index(load->index, user.index)))
          return true;
    return false;
  }

  bool inside(int pos, int loop) const {
    for (int l : ops_[pos].loops)
      if (l == loop) return true;
    return false;
  }

  const ir::Function& fn_;
  std::vector<OpInfo> ops_;
  std::map<int, int> def_;  // value id -> position of its defining op
  std::map<int, std::vector<int>> users_;
  std::vector<int> var_writes_, tensor_writes_, sync_points_;
  std::set<int> landing_roots_;  // the tensors copies land in (roots)
  std::map<int, Tree> tree_;
  std::set<int> chosen_;

 public:
  std::map<int, AccumulatingDot> in_place_;  // dots accumulated into a Var (not materialized)
};

}  // namespace

namespace {

// The Vars and the tensors (roots) that value `v`'s definition reads, transitively.
void reads_of(int v, const std::map<int, const Op*>& def, const ir::Function& fn, std::set<int>* vars,
              std::set<int>* tensors) {
  auto it = def.find(v);
  if (it == def.end()) return;
  const Op& d = *it->second;
  if (d.kind == OpKind::VarGet) vars->insert(d.var);
  if (d.kind == OpKind::Load) tensors->insert(ir::root_of(fn, d.tensor));
  for (int u : d.operands) reads_of(u, def, fn, vars, tensors);
  for (const auto& ix : d.index)
    if (ix.has_value()) reads_of(ix.value, def, fn, vars, tensors);
}

// Whether copies (CopyStart) land in root tensor `root`.
bool lands_in(const ir::Function& fn, int root) {
  bool lands = false;
  ir::walk(fn.body, [&](const Op& op) { lands |= op.kind == OpKind::CopyStart && ir::root_of(fn, op.tensor) == root; });
  return lands;
}

// Whether an op of `ops` strictly between positions `from` and `to` (or inside one of them)
// assigns one of `vars` or stores to one of `tensors`.
bool writes_between(const ir::Function& fn, const std::vector<Op>& ops, size_t from, size_t to,
                    const std::set<int>& vars, const std::set<int>& tensors) {
  bool writes = false;
  auto check = [&](const Op& op) {
    writes |= (op.kind == OpKind::VarSet || op.kind == OpKind::VarDecl) && vars.count(op.var);
    writes |= (op.kind == OpKind::Store || op.kind == OpKind::CopyStart) && tensors.count(ir::root_of(fn, op.tensor));
    // (a wait may let other devices' copies land in any tensor a copy lands in)
    writes |= ir::is_collective(op) && op.kind != OpKind::CopyStart && op.kind != OpKind::Signal &&
              std::any_of(tensors.begin(), tensors.end(), [&](int t) { return lands_in(fn, t); });
  };
  for (size_t i = from + 1; i < to; ++i) {
    check(ops[i]);
    ir::walk(ops[i].body, check);
  }
  return writes;
}

// Whether an op of `ops` from position `from` up to (not including) `to`, other than those at
// `except`, assigns Var `var`, itself or inside its body; unless `writes_only`, also whether one
// reads it, directly or through the values it uses (a value read from the Var before `from` is
// fused into its consumers, which then read the Var where they are).
bool var_touched_between(const ir::Function& fn, const std::map<int, const Op*>& def, const std::vector<Op>& ops,
                         size_t from, size_t to, int var, const std::set<size_t>& except, bool writes_only) {
  bool touched = false;
  auto check = [&](const Op& op) {
    const bool writes = op.kind == OpKind::VarSet || op.kind == OpKind::VarDecl;
    touched |= op.var == var && (writes || (!writes_only && op.kind == OpKind::VarGet));
    if (writes_only || touched) return;
    std::set<int> vars, tensors;
    for (int u : op.operands) reads_of(u, def, fn, &vars, &tensors);
    for (const auto& ix : op.index)
      if (ix.has_value()) reads_of(ix.value, def, fn, &vars, &tensors);
    touched |= vars.count(var) > 0;
  };
  for (size_t i = from; i < to && !touched; ++i) {
    if (except.count(i)) continue;
    check(ops[i]);
    ir::walk(ops[i].body, check);
  }
  return touched;
}

// Whether `op`, or an op inside it, declares, reads or assigns Var `var`.
bool touches_var(const Op& op, int var) {
  bool touches = false;
  auto check = [&](const Op& o) {
    touches |= (o.kind == OpKind::VarDecl || o.kind == OpKind::VarGet || o.kind == OpKind::VarSet) && o.var == var;
  };
  check(op);
  ir::walk(op.body, check);
  return touches;
}

// The tensor whose memory `t` is (a view's root, else itself).
int memory_of(const ir::Function& fn, int t) {
  return fn.tensors[t].origin == ir::TensorInfo::View ? fn.tensors[t].root : t;
}

// Whether `store` writes `value`, a read of a Var, whole into a block that the Var's dot can
// write directly: AccumulatingDot::stored_whole.
bool stores_var_whole(const ir::Function& fn, const Op& launch, const Op& store, int value,
                      const std::map<int, int>& uses) {
  if (store.kind != OpKind::Store || store.operands.empty() || store.operands[0] != value || ir::is_masked(store) ||
      ir::is_atomic(store) || uses.at(value) != 1)
    return false;
  const ir::TensorInfo& t = fn.tensors[store.tensor];
  const ir::Type& v = fn.type_of(value);
  if (t.dtype != v.dtype || v.rank() < 2 || t.strides.empty() || t.strides.back() != 1 ||
      store.index.size() != t.strides.size())
    return false;
  // Tiles and whole dims only: a scalar or a slice's start may be computed after the dot.
  for (const ir::IndexItem& ix : store.index)
    if (ix.kind != ir::IndexItem::Tile && ix.kind != ir::IndexItem::All) return false;
  ir::Type region;
  if (!ir::load_type(fn, store.tensor, store.index, &region).empty() || region.shape != v.shape) return false;
  // The block's rows must be the tensor's last dim (its stride 1): the region's last dim is.
  if (store.index.back().kind == ir::IndexItem::Tile && fn.tiles[store.index.back().tile].is_grid) return false;
  // Each grid step its own block (steps that shared one, on two threads, would add into each
  // other's sums), and nothing else in the launch reads or writes its memory: the dot leaves
  // partial sums there.
  for (int tile : launch.loop_tiles)
    if (std::none_of(store.index.begin(), store.index.end(),
                     [&](const ir::IndexItem& ix) { return ix.kind == ir::IndexItem::Tile && ix.tile == tile; }))
      return false;
  const int memory = memory_of(fn, store.tensor);
  bool alone = true;
  ir::walk(launch.body, [&](const Op& o) {
    alone &= &o == &store || o.tensor < 0 || o.kind == OpKind::Alloc || memory_of(fn, o.tensor) != memory;
  });
  return alone;
}

// Sets AccumulatingDot::first_trip_writes for the in-place dots of `launch` (`dots`) whose Var
// starts as zeros and is first touched by a loop whose every trip runs the dot once, and
// AccumulatingDot::stored_whole where the Var then goes whole to an output block.
void first_trips_write(const ir::Function& fn, const Op& launch, const std::map<int, const Op*>& def,
                       const std::map<int, int>& uses, std::map<int, AccumulatingDot>* dots) {
  auto is_zeros = [&](int v) {
    auto it = def.find(v);
    return it != def.end() && it->second->kind == OpKind::Full && it->second->number == 0;
  };
  std::function<void(const std::vector<Op>&)> block = [&](const std::vector<Op>& ops) {
    for (size_t i = 0; i < ops.size(); ++i) {
      block(ops[i].body);
      const Op& decl = ops[i];
      if (decl.kind != OpKind::VarDecl || !is_zeros(decl.operands[0])) continue;
      size_t j = i + 1;
      while (j < ops.size() && !touches_var(ops[j], decl.var)) ++j;
      if (j == ops.size() || ops[j].kind != OpKind::Loop || ops[j].loop_tiles.size() != 1) continue;
      // A range with a first trip: a static one, or an enclosing tile's block (a jagged range
      // may run none).
      const ir::TileInfo& t = fn.tiles[ops[j].loop_tiles[0]];
      if (t.is_jagged() || t.is_grid || t.extent() <= 0) continue;
      // In the loop, the Var is read and assigned only by one `acc = acc + dot` whose dot is a
      // statement of the body itself (not inside a nested loop, which would run it again).
      int touching = 0;
      ir::walk(ops[j].body, [&](const Op& o) {
        touching += (o.kind == OpKind::VarGet || o.kind == OpKind::VarSet) && o.var == decl.var;
      });
      if (touching != 2) continue;  // (the assignment and its read of the Var)
      // After the loop: one read of the Var, stored whole by the next statement, and nothing
      // after that touches the Var.
      size_t k = j + 1;
      while (k < ops.size() && !touches_var(ops[k], decl.var)) ++k;
      int stored_whole = -1;
      if (k + 1 < ops.size() && ops[k].kind == OpKind::VarGet && ops[k].var == decl.var &&
          stores_var_whole(fn, launch, ops[k + 1], ops[k].result, uses) &&
          std::none_of(ops.begin() + static_cast<std::ptrdiff_t>(k) + 2, ops.end(),
                       [&](const Op& o) { return touches_var(o, decl.var); }))
        stored_whole = ops[k].result;
      for (const Op& s : ops[j].body) {
        if (s.result < 0 || s.kind != OpKind::Dot) continue;
        auto d = dots->find(s.result);
        if (d != dots->end() && d->second.var == decl.var && d->second.rescaled < 0) {
          d->second.first_trip_writes = t.id;
          d->second.stored_whole = stored_whole;
        }
      }
    }
  };
  block(launch.body);
}

}  // namespace

std::map<int, AccumulatingDot> accumulating_dots(const ir::Function& fn, const Op& launch, std::map<int, int>* sums) {
  std::map<int, int> uses;
  std::map<int, const Op*> def;
  ir::walk(launch.body, [&](const Op& op) {
    if (op.result >= 0) def[op.result] = &op;
    for (int v : op.operands) uses[v]++;
    for (const auto& ix : op.index)
      if (ix.has_value()) uses[ix.value]++;
  });
  auto defined = [&](int v, OpKind kind) -> const Op* {
    auto it = def.find(v);
    return it != def.end() && it->second->kind == kind && uses[v] == 1 ? it->second : nullptr;
  };
  auto binary = [&](int v, ir::BinaryFn f) -> const Op* {
    const Op* op = defined(v, OpKind::Binary);
    return op && static_cast<ir::BinaryFn>(op->fn) == f ? op : nullptr;
  };
  std::map<int, AccumulatingDot> out;
  // Statements are matched within each block, where the positions of a dot and its assignment
  // can be compared.
  std::function<void(const std::vector<Op>&)> block = [&](const std::vector<Op>& ops) {
    std::map<int, size_t> position;  // value id -> position in `ops` of the op defining it
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].result >= 0) position[ops[i].result] = i;
      block(ops[i].body);
    }
    for (size_t set = 0; set < ops.size(); ++set) {
      const Op& op = ops[set];
      if (op.kind != OpKind::VarSet) continue;
      const Op* add = binary(op.operands[0], ir::BinaryFn::add);
      if (!add) continue;
      for (int k = 0; k < 2; ++k) {
        const Op* summed = sums ? defined(add->operands[1 - k], OpKind::Reduce) : nullptr;
        if (summed && static_cast<ir::ReduceFn>(summed->fn) == ir::ReduceFn::sum &&
            fn.type_of(summed->result).rank() > 0 && fn.type_of(summed->result) == fn.vars[op.var].type) {
          // acc = acc + sum(x): as a plain in-place dot, nothing from the Var's read or the sum,
          // whichever is first, to the assignment may read the Var (the sum's operand included:
          // it would see partial sums) or assign it.
          const Op* get = defined(add->operands[k], OpKind::VarGet);
          auto at = position.find(summed->result), got = position.find(add->operands[k]),
               added = position.find(add->result);
          if (!get || get->var != op.var || at == position.end() || got == position.end() || added == position.end() ||
              var_touched_between(fn, def, ops, std::min(at->second, got->second), set, op.var,
                                  {got->second, added->second}, false))
            continue;
          (*sums)[summed->result] = op.var;
          break;
        }
        const Op* dot = defined(add->operands[1 - k], OpKind::Dot);
        if (!dot || dot->operands.size() != 2 || fn.type_of(dot->result) != fn.vars[op.var].type) continue;
        // The micro-kernels write the Var's buffer while they read the operands: neither may
        // read the Var (`acc = acc + dot(acc, w)` is computed into scratch, then added).
        std::set<int> vars, tensors;
        for (int operand : dot->operands) reads_of(operand, def, fn, &vars, &tensors);
        if (vars.count(op.var)) continue;
        const int acc = add->operands[k];
        if (const Op* get = defined(acc, OpKind::VarGet); get && get->var == op.var) {
          // acc = acc + dot: the dot adds into the Var where it is, so the assignment must run
          // whenever the dot does (the dot, the Var's read, the sum and the assignment all in
          // this block, not the assignment under a `when`), and nothing from the Var's read or
          // the dot, whichever is first, to the assignment may read the Var (even through a value
          // read from it earlier: fused, it reads the Var where it is used) or assign it: it
          // would see the sum early, or overwrite it.
          auto at = position.find(dot->result), got = position.find(acc), sum = position.find(add->result);
          if (at == position.end() || got == position.end() || sum == position.end() ||
              var_touched_between(fn, def, ops, std::min(at->second, got->second), set, op.var,
                                  {got->second, sum->second}, false))
            continue;
          out[dot->result] = {op.var, -1};
          break;
        }
        // acc = acc * s + dot: the product of the Var (read just for this) and a factor that
        // broadcasts to it and does not read the Var (the rescale is computed in place), the dot
        // in this block before the assignment, and nothing between them writing what the dot's
        // operands read.
        const Op* mul = binary(acc, ir::BinaryFn::mul);
        if (!mul || fn.type_of(mul->result) != fn.vars[op.var].type) continue;
        int factor = -1;
        for (int f = 0; f < 2; ++f)
          if (const Op* get = defined(mul->operands[f], OpKind::VarGet); get && get->var == op.var)
            factor = mul->operands[1 - f];
        // (the rescale reads the Var at the assignment: nothing after its read may assign it)
        auto at = position.find(dot->result);
        if (factor < 0 || at == position.end()) continue;
        auto got = position.find(mul->operands[0] == factor ? mul->operands[1] : mul->operands[0]);
        if (got == position.end() || var_touched_between(fn, def, ops, got->second, set, op.var, {got->second}, true))
          continue;
        std::set<int> factor_vars, factor_tensors;
        reads_of(factor, def, fn, &factor_vars, &factor_tensors);
        if (factor_vars.count(op.var) || writes_between(fn, ops, at->second, set, vars, tensors)) continue;
        out[dot->result] = {op.var, mul->result};
        break;
      }
    }
  };
  block(launch.body);
  first_trips_write(fn, launch, def, uses, &out);
  return out;
}

std::set<int> choose_materialized(const ir::Function& fn, const Op& launch,
                                  const std::map<int, AccumulatingDot>& in_place_dots) {
  Fusion f(fn, launch);
  f.in_place_ = in_place_dots;
  return f.run();
}

namespace {

void find_reduction_producers(const ir::Function& fn, const std::vector<ir::Op>& ops, const std::set<int>& materialized,
                              std::vector<ReductionProducer>& out) {
  for (size_t i = 0; i < ops.size(); ++i) {
    const ir::Op& op = ops[i];
    find_reduction_producers(fn, op.body, materialized, out);
    if (op.result < 0 || !ir::is_pointwise(op.kind) || !materialized.count(op.result) ||
        fn.type_of(op.result).rank() == 0)
      continue;
    for (size_t j = i + 1; j < ops.size(); ++j) {
      const ir::Op& next = ops[j];
      const bool uses = std::find(next.operands.begin(), next.operands.end(), op.result) != next.operands.end();
      if (next.kind == ir::OpKind::Reduce && uses) {
        const ir::Type& in = fn.type_of(op.result);
        if (next.axis == in.rank() - 1 && !in.shape.back().is_one()) out.push_back({next.result, op.result, op.result});
        break;
      }
      if (uses || !ir::is_pointwise(next.kind) || next.result < 0 || materialized.count(next.result)) break;
    }
  }
}

// The ops of `body` (any depth) that read value `v`, as an operand or in an index.
std::vector<const ir::Op*> readers_of(const std::vector<ir::Op>& body, int v) {
  std::vector<const ir::Op*> out;
  ir::walk(body, [&](const ir::Op& op) {
    bool reads = std::find(op.operands.begin(), op.operands.end(), v) != op.operands.end();
    for (const auto& ix : op.index) reads |= ix.has_value() && ix.value == v;
    if (reads) out.push_back(&op);
  });
  return out;
}

// Whether `op` is one of `ops` (not nested deeper).
bool in_block(const std::vector<ir::Op>& ops, const ir::Op* op) {
  return std::any_of(ops.begin(), ops.end(), [&](const ir::Op& o) { return &o == op; });
}

// The block (at any depth of `ops`) that holds `op`, or nullptr.
const std::vector<ir::Op>* block_of(const std::vector<ir::Op>& ops, const ir::Op* op) {
  if (in_block(ops, op)) return &ops;
  for (const ir::Op& o : ops)
    if (const auto* b = block_of(o.body, op)) return b;
  return nullptr;
}

}  // namespace

std::vector<ReductionProducer> producers_computed_by_reductions(const ir::Function& fn, const ir::Op& launch,
                                                                std::set<int>* materialized) {
  std::vector<ReductionProducer> out;
  find_reduction_producers(fn, launch.body, *materialized, out);
  std::set<int> producers;  // (a cast that is one, another reduction's loop computes from p's buffer)
  for (const ReductionProducer& r : out) producers.insert(r.producer);
  for (ReductionProducer& r : out) {
    // The producer read by the reduction and by one materialized cast after it in its block.
    std::vector<const ir::Op*> readers = readers_of(launch.body, r.producer);
    if (readers.size() != 2) continue;
    const ir::Op* reduce = readers[0]->result == r.reduction ? readers[0] : readers[1];
    const ir::Op* cast = readers[0] == reduce ? readers[1] : readers[0];
    if (reduce->result != r.reduction || cast->kind != ir::OpKind::Cast || !materialized->count(cast->result) ||
        producers.count(cast->result) || std::count(reduce->operands.begin(), reduce->operands.end(), r.producer) != 1)
      continue;
    const std::vector<ir::Op>* block = block_of(launch.body, reduce);
    if (!block || !in_block(*block, cast) || cast - reduce < 0) continue;  // (both in `block`)
    r.stored = cast->result;
    materialized->erase(r.producer);
  }
  return out;
}

}  // namespace parhelion::lower

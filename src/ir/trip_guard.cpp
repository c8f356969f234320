#include "ir/trip_guard.h"

#include <algorithm>
#include <map>

namespace parhelion::ir {
namespace {

using Node = TripBound::Node;

bool bound_fn(BinaryFn f) {
  return f == BinaryFn::add || f == BinaryFn::sub || f == BinaryFn::mul || f == BinaryFn::minimum ||
         f == BinaryFn::maximum;
}

struct Builder {
  const Function& fn;
  const std::map<int, const Op*>& defs;
  const std::vector<int>& launch_tiles;

  std::optional<Node> build(int v) const {
    auto it = defs.find(v);
    if (it == defs.end()) return std::nullopt;
    const Op& d = *it->second;
    // (integers only: a bound written as an integer must be one)
    const DType dt = fn.type_of(v).dtype;
    if (fn.type_of(v).rank() != 0 || (dt != DType::i64 && dt != DType::i32)) return std::nullopt;
    Node n;
    if (d.kind == OpKind::Constant) {
      n.value = static_cast<int64_t>(d.number);
      return n;
    }
    if (d.kind == OpKind::TileBegin || d.kind == OpKind::TileEnd) {
      if (std::find(launch_tiles.begin(), launch_tiles.end(), d.tile) == launch_tiles.end()) return std::nullopt;
      n.kind = d.kind == OpKind::TileBegin ? Node::Begin : Node::End;
      n.tile = d.tile;
      return n;
    }
    if (d.kind != OpKind::Binary || !bound_fn(static_cast<BinaryFn>(d.fn))) return std::nullopt;
    n.kind = Node::Binary;
    n.fn = static_cast<BinaryFn>(d.fn);
    for (int operand : d.operands) {
      std::optional<Node> a = build(operand);
      if (!a) return std::nullopt;
      n.args.push_back(std::move(*a));
    }
    return n;
  }
};

std::string write(const Node& n, const ScalarSyntax& syntax) {
  switch (n.kind) {
    case Node::Constant:
      return std::to_string(n.value);
    case Node::Begin:
      return syntax.begin(n.tile);
    case Node::End:
      return syntax.end(n.tile);
    case Node::Binary:
      break;
  }
  const std::string a = write(n.args[0], syntax), b = write(n.args[1], syntax);
  if (n.fn == BinaryFn::minimum || n.fn == BinaryFn::maximum)
    return (n.fn == BinaryFn::minimum ? syntax.min : syntax.max) + "(" + a + ", " + b + ")";
  return "(" + a + (n.fn == BinaryFn::add ? " + " : n.fn == BinaryFn::sub ? " - " : " * ") + b + ")";
}

int64_t evaluate(const Node& n, const std::function<int64_t(int tile, bool end)>& tile_at) {
  switch (n.kind) {
    case Node::Constant:
      return n.value;
    case Node::Begin:
    case Node::End:
      return tile_at(n.tile, n.kind == Node::End);
    case Node::Binary:
      break;
  }
  const int64_t x = evaluate(n.args[0], tile_at), y = evaluate(n.args[1], tile_at);
  switch (n.fn) {
    case BinaryFn::add:
      return x + y;
    case BinaryFn::sub:
      return x - y;
    case BinaryFn::mul:
      return x * y;
    case BinaryFn::minimum:
      return std::min(x, y);
    default:
      return std::max(x, y);
  }
}

void collect_tiles(const Node& n, std::set<int>* out) {
  if (n.kind == Node::Begin || n.kind == Node::End) out->insert(n.tile);
  for (const Node& a : n.args) collect_tiles(a, out);
}

}  // namespace

std::optional<TripBound> TripBound::of(const Function& fn, const Op& loop, const std::vector<int>& launch_tiles) {
  if (loop.kind != OpKind::Loop || loop.loop_tiles.size() != 1 || loop.body.empty() ||
      loop.body.back().kind != OpKind::If)
    return std::nullopt;
  // The ops before the when: scalar arithmetic only (no memory, no regions).
  std::map<int, const Op*> defs;
  for (size_t i = 0; i + 1 < loop.body.size(); ++i) {
    const Op& o = loop.body[i];
    if (o.result < 0 || o.kind == OpKind::Load || o.kind == OpKind::Store || !o.body.empty()) return std::nullopt;
    if (fn.type_of(o.result).rank() != 0) return std::nullopt;
    defs[o.result] = &o;
  }
  // (constants and tile offsets traced before the loop may be read too)
  walk(fn.body, [&](const Op& o) {
    if (o.result >= 0 && !defs.count(o.result) &&
        (o.kind == OpKind::Constant || o.kind == OpKind::TileBegin || o.kind == OpKind::TileEnd ||
         (o.kind == OpKind::Binary && fn.type_of(o.result).rank() == 0)))
      defs[o.result] = &o;
  });
  auto it = defs.find(loop.body.back().operands[0]);
  if (it == defs.end()) return std::nullopt;
  const Op& cond = *it->second;
  if (cond.kind != OpKind::Binary || static_cast<BinaryFn>(cond.fn) != BinaryFn::lt) return std::nullopt;
  auto begin = defs.find(cond.operands[0]);
  if (begin == defs.end() || begin->second->kind != OpKind::TileBegin || begin->second->tile != loop.loop_tiles[0])
    return std::nullopt;
  std::optional<Node> e = Builder{fn, defs, launch_tiles}.build(cond.operands[1]);
  if (!e) return std::nullopt;
  return TripBound(std::move(*e));
}

std::string TripBound::write(const ScalarSyntax& syntax) const { return parhelion::ir::write(root_, syntax); }

int64_t TripBound::evaluate(const std::function<int64_t(int tile, bool end)>& tile_at) const {
  return parhelion::ir::evaluate(root_, tile_at);
}

std::set<int> TripBound::tiles() const {
  std::set<int> out;
  collect_tiles(root_, &out);
  return out;
}

std::string trip_guard_bound(const Function& fn, const Op& loop, const std::vector<int>& launch_tiles,
                             const ScalarSyntax& syntax) {
  const std::optional<TripBound> e = TripBound::of(fn, loop, launch_tiles);
  return e ? e->write(syntax) : "";
}

}  // namespace parhelion::ir

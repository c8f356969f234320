#include "ir/trip_guard.h"

#include <algorithm>
#include <map>
#include <optional>

namespace parhelion::ir {
namespace {

// e as a tree over the launch tiles' offsets and ends and integer constants.
struct Bound {
  enum Kind { Constant, Begin, End, Add, Sub, Mul, Min, Max } kind = Constant;
  int64_t value = 0;  // Constant
  int tile = -1;      // Begin, End
  std::vector<Bound> args;
};

struct Builder {
  const Function& fn;
  const std::map<int, const Op*>& defs;
  const std::vector<int>& launch_tiles;

  bool launch_tile(int t) const { return std::find(launch_tiles.begin(), launch_tiles.end(), t) != launch_tiles.end(); }

  std::optional<Bound> build(int v) const {
    auto it = defs.find(v);
    if (it == defs.end()) return std::nullopt;
    const Op& d = *it->second;
    // (integers only: a bound written as an integer must be one)
    const DType dt = fn.type_of(v).dtype;
    if (fn.type_of(v).rank() != 0 || (dt != DType::i64 && dt != DType::i32)) return std::nullopt;
    Bound b;
    switch (d.kind) {
      case OpKind::Constant:
        b.value = static_cast<int64_t>(d.number);
        return b;
      case OpKind::TileBegin:
      case OpKind::TileEnd:
        if (!launch_tile(d.tile)) return std::nullopt;
        b.kind = d.kind == OpKind::TileBegin ? Bound::Begin : Bound::End;
        b.tile = d.tile;
        return b;
      case OpKind::Binary: {
        switch (static_cast<BinaryFn>(d.fn)) {
          case BinaryFn::add:
            b.kind = Bound::Add;
            break;
          case BinaryFn::sub:
            b.kind = Bound::Sub;
            break;
          case BinaryFn::mul:
            b.kind = Bound::Mul;
            break;
          case BinaryFn::minimum:
            b.kind = Bound::Min;
            break;
          case BinaryFn::maximum:
            b.kind = Bound::Max;
            break;
          default:
            return std::nullopt;
        }
        for (int operand : d.operands) {
          std::optional<Bound> a = build(operand);
          if (!a) return std::nullopt;
          b.args.push_back(std::move(*a));
        }
        return b;
      }
      default:
        return std::nullopt;
    }
  }
};

std::string write(const Bound& b, const ScalarSyntax& syntax) {
  switch (b.kind) {
    case Bound::Constant:
      return std::to_string(b.value);
    case Bound::Begin:
      return syntax.begin(b.tile);
    case Bound::End:
      return syntax.end(b.tile);
    case Bound::Min:
    case Bound::Max:
      return (b.kind == Bound::Min ? syntax.min : syntax.max) + "(" + write(b.args[0], syntax) + ", " +
             write(b.args[1], syntax) + ")";
    default: {
      const char* op = b.kind == Bound::Add ? " + " : b.kind == Bound::Sub ? " - " : " * ";
      return "(" + write(b.args[0], syntax) + op + write(b.args[1], syntax) + ")";
    }
  }
}

int64_t evaluate(const Bound& b, const std::function<int64_t(int tile, bool end)>& tile_at) {
  switch (b.kind) {
    case Bound::Constant:
      return b.value;
    case Bound::Begin:
    case Bound::End:
      return tile_at(b.tile, b.kind == Bound::End);
    default: {
      const int64_t x = evaluate(b.args[0], tile_at), y = evaluate(b.args[1], tile_at);
      switch (b.kind) {
        case Bound::Add:
          return x + y;
        case Bound::Sub:
          return x - y;
        case Bound::Mul:
          return x * y;
        case Bound::Min:
          return std::min(x, y);
        default:
          return std::max(x, y);
      }
    }
  }
}

// e of `loop`'s guard as a tree; none when the loop has no such guard or e reads anything else.
std::optional<Bound> guard_bound(const Function& fn, const Op& loop, const std::vector<int>& launch_tiles) {
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
  return Builder{fn, defs, launch_tiles}.build(cond.operands[1]);
}

}  // namespace

std::string trip_guard_bound(const Function& fn, const Op& loop, const std::vector<int>& launch_tiles,
                             const ScalarSyntax& syntax) {
  const std::optional<Bound> e = guard_bound(fn, loop, launch_tiles);
  return e ? write(*e, syntax) : "";
}

bool trip_guard_value(const Function& fn, const Op& loop, const std::vector<int>& launch_tiles,
                      const std::function<int64_t(int tile, bool end)>& tile_at, int64_t* value) {
  const std::optional<Bound> e = guard_bound(fn, loop, launch_tiles);
  if (e) *value = evaluate(*e, tile_at);
  return e.has_value();
}

}  // namespace parhelion::ir

#include "ir/trip_guard.h"

#include <algorithm>
#include <map>

namespace parhelion::ir {
namespace {

struct Writer {
  const Function& fn;
  const std::map<int, const Op*>& defs;
  const std::vector<int>& launch_tiles;
  const ScalarSyntax& syntax;

  bool launch_tile(int t) const { return std::find(launch_tiles.begin(), launch_tiles.end(), t) != launch_tiles.end(); }

  std::string write(int v) const {
    auto it = defs.find(v);
    if (it == defs.end()) return "";
    const Op& d = *it->second;
    // (integers only: a bound written as an integer must be one)
    const DType dt = fn.type_of(v).dtype;
    if (fn.type_of(v).rank() != 0 || (dt != DType::i64 && dt != DType::i32)) return "";
    switch (d.kind) {
      case OpKind::Constant:
        return std::to_string(static_cast<int64_t>(d.number));
      case OpKind::TileBegin:
        return launch_tile(d.tile) ? syntax.begin(d.tile) : "";
      case OpKind::TileEnd:
        return launch_tile(d.tile) ? syntax.end(d.tile) : "";
      case OpKind::Binary: {
        const std::string a = write(d.operands[0]), b = write(d.operands[1]);
        if (a.empty() || b.empty()) return "";
        switch (static_cast<BinaryFn>(d.fn)) {
          case BinaryFn::add:
            return "(" + a + " + " + b + ")";
          case BinaryFn::sub:
            return "(" + a + " - " + b + ")";
          case BinaryFn::mul:
            return "(" + a + " * " + b + ")";
          case BinaryFn::minimum:
            return syntax.min + "(" + a + ", " + b + ")";
          case BinaryFn::maximum:
            return syntax.max + "(" + a + ", " + b + ")";
          default:
            return "";
        }
      }
      default:
        return "";
    }
  }
};

}  // namespace

std::string trip_guard_bound(const Function& fn, const Op& loop, const std::vector<int>& launch_tiles,
                             const ScalarSyntax& syntax) {
  if (loop.kind != OpKind::Loop || loop.loop_tiles.size() != 1 || loop.body.empty() ||
      loop.body.back().kind != OpKind::If)
    return "";
  // The ops before the when: scalar arithmetic only (no memory, no regions).
  std::map<int, const Op*> defs;
  for (size_t i = 0; i + 1 < loop.body.size(); ++i) {
    const Op& o = loop.body[i];
    if (o.result < 0 || o.kind == OpKind::Load || o.kind == OpKind::Store || !o.body.empty()) return "";
    if (fn.type_of(o.result).rank() != 0) return "";
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
  if (it == defs.end()) return "";
  const Op& cond = *it->second;
  if (cond.kind != OpKind::Binary || static_cast<BinaryFn>(cond.fn) != BinaryFn::lt) return "";
  auto begin = defs.find(cond.operands[0]);
  if (begin == defs.end() || begin->second->kind != OpKind::TileBegin || begin->second->tile != loop.loop_tiles[0])
    return "";
  return Writer{fn, defs, launch_tiles, syntax}.write(cond.operands[1]);
}

}  // namespace parhelion::ir

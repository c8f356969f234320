#include "lower/fusion_printer.h"

#include <sstream>

#include "ir/printer.h"
#include "lower/fusion.h"

namespace parhelion::lower {
namespace {

using ir::Op;
using ir::OpKind;

class FusionPrinter {
 public:
  FusionPrinter(const ir::Function& fn, const Op& launch, std::ostringstream& os)
      : fn_(fn),
        os_(os),
        in_place_(accumulating_dots(fn, launch)),
        materialized_(choose_materialized(fn, launch, in_place_)) {
    for (const ReductionProducer& r : producers_computed_by_reductions(fn, launch, &materialized_)) {
      computed_by_[r.producer] = r;
      if (r.stored != r.producer) computed_by_[r.stored] = r;
    }
  }

  void body(const std::vector<Op>& ops, int depth) {
    const std::string indent(2 * depth, ' ');
    for (const Op& op : ops) {
      if (op.kind == OpKind::Loop) {
        os_ << indent << "loop";
        for (size_t i = 0; i < op.loop_tiles.size(); ++i)
          os_ << (i ? ", " : " ") << ir::tile_name(fn_, op.loop_tiles[i]);
        os_ << "\n";
        body(op.body, depth + 1);
        continue;
      }
      if (op.result < 0) continue;
      const ir::Type& t = fn_.type_of(op.result);
      os_ << indent << "%" << op.result << " " << ir::op_name(op) << " " << ir::type_to_string(fn_, t) << ": "
          << verdict(op, t) << "\n";
    }
  }

 private:
  std::string verdict(const Op& op, const ir::Type& t) const {
    if (auto it = in_place_.find(op.result); it != in_place_.end())
      return "in place into v" + std::to_string(it->second.var) +
             (it->second.rescaled >= 0 ? " after its rescale %" + std::to_string(it->second.rescaled) : "");
    if (auto it = computed_by_.find(op.result); it != computed_by_.end()) {
      const ReductionProducer& r = it->second;
      const std::string loop = "the loop of %" + std::to_string(r.reduction);
      if (op.result == r.stored && r.stored == r.producer) return "materialized, computed in " + loop;
      if (op.result == r.stored) return "materialized, stored by " + loop;
      return "computed in " + loop + ", which stores its cast %" + std::to_string(r.stored);
    }
    if (materialized_.count(op.result)) {
      if (op.kind == OpKind::Reduce) return "materialized (reduction)";
      if (op.kind == OpKind::Scan) return "materialized (scan)";
      if (op.kind == OpKind::Dot) return "materialized (dot)";
      return "materialized";
    }
    return t.rank() == 0 ? "scalar" : "fused";
  }

  const ir::Function& fn_;
  std::ostringstream& os_;
  std::map<int, AccumulatingDot> in_place_;
  std::set<int> materialized_;
  std::map<int, ReductionProducer> computed_by_;  // a producer or a cast a reduction's loop stores
};

}  // namespace

std::string print_fusion(const ir::Function& fn) {
  std::ostringstream os;
  os << "fusion " << fn.name << "\n";
  int index = 0;
  for (const Op& launch : fn.body) {
    if (launch.kind != OpKind::Launch) continue;
    os << "launch " << index++ << " over";
    for (size_t i = 0; i < launch.loop_tiles.size(); ++i)
      os << (i ? ", " : " ") << ir::tile_name(fn, launch.loop_tiles[i]);
    os << "\n";
    FusionPrinter(fn, launch, os).body(launch.body, 1);
  }
  return os.str();
}

}  // namespace parhelion::lower

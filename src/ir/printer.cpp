#include "ir/printer.h"

#include <sstream>

#include "ir/collectives.h"
#include "ir/views.h"

namespace parhelion::ir {
namespace {

std::string number_str(double v) {
  std::ostringstream os;
  os.precision(9);
  os << v;
  return os.str();
}

class Printer {
 public:
  Printer(const Function& fn, const PrintOptions& options) : fn_(fn), options_(options) {}

  std::string run() {
    os_ << "kernel " << fn_.name << "(";
    bool first = true;
    for (const TensorInfo& t : fn_.tensors) {
      if (t.origin != TensorInfo::Param) continue;
      os_ << (first ? "" : ", ") << t.name << ": " << dtype_name(t.dtype) << shape_to_string(t.shape);
      if (t.strides != contiguous_strides(t.shape)) os_ << " strides=" << shape_to_string(t.strides);
      first = false;
    }
    for (const std::string& s : fn_.scalar_params) {
      os_ << (first ? "" : ", ") << s << ": scalar";
      first = false;
    }
    os_ << ") -> (";
    for (size_t i = 0; i < fn_.outputs.size(); ++i) os_ << (i ? ", " : "") << fn_.tensors[fn_.outputs[i]].name;
    os_ << ")\n";
    if (!fn_.mesh.empty())  // mesh x=4, y=2 copies=1 semaphores=0
      os_ << "  mesh " << mesh_to_string(fn_.mesh) << " copies=" << fn_.num_copies
          << " semaphores=" << fn_.num_semaphores << "\n";
    for (const BlockSize& b : fn_.block_sizes) {
      os_ << "  $b" << b.id << " = block_size(extent=" << b.extent;
      if (b.fixed) os_ << ", fixed=" << b.fixed;
      os_ << ")" << loc(b.loc) << "\n";
    }
    ops(fn_.body, 1);
    os_ << "  return";
    for (size_t i = 0; i < fn_.outputs.size(); ++i) os_ << (i ? ", " : " ") << fn_.tensors[fn_.outputs[i]].name;
    os_ << "\n";
    return os_.str();
  }

 private:
  void ops(const std::vector<Op>& body, int depth) {
    for (const Op& op : body) one(op, depth);
  }

  std::string val(int v) { return "%" + std::to_string(v); }

  // " %a, %b": a peer's coordinates, the operands from `first` on.
  std::string peer(const Op& op, size_t first) {
    std::string s;
    for (size_t i = first; i < op.operands.size(); ++i) s += (i > first ? ", " : " ") + val(op.operands[i]);
    return s;
  }

  std::string loc(const SourceLoc& l) const { return options_.locations ? loc_suffix(l) : ""; }

  std::string index_str(const Op& op) {
    std::string s = fn_.tensors[op.tensor].name + "[";
    for (size_t i = 0; i < op.index.size(); ++i) {
      const IndexItem& it = op.index[i];
      s += i ? ", " : "";
      if (it.kind == IndexItem::Tile)
        s += tile_name(fn_, it.tile);
      else if (it.kind == IndexItem::All)
        s += ":";
      else if (it.kind == IndexItem::Slice)
        s += "slice(" + val(it.value) + ", " + std::to_string(it.length) + ")";
      else
        s += val(it.value);
    }
    return s + "]";
  }

  void one(const Op& op, int depth) {
    std::string ind(depth * 2, ' ');
    os_ << ind;
    if (op.result >= 0) os_ << val(op.result) << " = ";
    switch (op.kind) {
      case OpKind::Alloc: {
        const TensorInfo& t = fn_.tensors[op.tensor];
        os_ << t.name << " = " << op_name(op) << " " << dtype_name(t.dtype) << shape_to_string(t.shape);
        if (op.has_fill) os_ << " fill=" << number_str(op.number);
        for (const BlockCount& c : t.counts)
          os_ << " num_blocks(" << c.dim << ", $b" << c.block << ", " << c.extent << ")";
        os_ << loc(op.loc) << "\n";
        return;
      }
      case OpKind::View: {
        const TensorInfo& t = fn_.tensors[op.tensor];
        os_ << t.name << " = view " << fn_.tensors[t.base].name << " " << view_kind_name(op.view_kind) << " "
            << shape_to_string(op.dims);
        if (op.view_kind == ViewKind::narrow) os_ << " axis=" << op.axis;
        os_ << loc(op.loc) << "\n";
        return;
      }
      case OpKind::Launch:
      case OpKind::Loop: {
        os_ << op_name(op) << " ";
        for (size_t i = 0; i < op.loop_tiles.size(); ++i) {
          const TileInfo& t = fn_.tiles[op.loop_tiles[i]];
          os_ << (i ? ", " : "") << tile_name(fn_, t.id) << " in " << t.begin << ".." << t.end << " by $b" << t.block;
          if (t.parent >= 0) os_ << " within " << tile_name(fn_, t.parent);
          if (t.is_jagged()) os_ << " over " << val(t.begin_value) << ".." << val(t.end_value);
          if (t.count_block >= 0) os_ << " num_blocks($b" << t.count_block << ", " << t.count_extent << ")";
        }
        os_ << loc(op.loc) << " {\n";
        ops(op.body, depth + 1);
        os_ << ind << "}\n";
        return;
      }
      case OpKind::If:
        os_ << "if " << val(op.operands[0]) << loc(op.loc) << " {\n";
        ops(op.body, depth + 1);
        os_ << ind << "}\n";
        return;
      case OpKind::Load:
        os_ << "load " << index_str(op);
        if (op.operands.size() == 2) os_ << " mask " << val(op.operands[0]) << " else " << val(op.operands[1]);
        break;
      case OpKind::Store:
        os_ << atomic_name(atomic_fn(op)) << " " << index_str(op) << ", " << val(op.operands[0]);
        if (op.operands.size() == 2) os_ << " mask " << val(op.operands[1]);
        os_ << loc(op.loc) << "\n";
        return;
      case OpKind::Constant:
        os_ << "const " << number_str(op.number);
        break;
      case OpKind::ScalarParam:
        os_ << "scalar_param " << fn_.scalar_params[op.param];
        break;
      case OpKind::TileBegin:
      case OpKind::TileEnd:
      case OpKind::TileIndex:
      case OpKind::TileId:
        os_ << op_name(op) << " " << tile_name(fn_, op.tile);
        break;
      case OpKind::Arange:
        os_ << "arange";
        break;
      case OpKind::Full:
        os_ << "full " << number_str(op.number);
        break;
      case OpKind::Cast:
        os_ << "cast " << val(op.operands[0]) << " to " << dtype_name(op.dtype);
        break;
      case OpKind::Reduce:
        os_ << op_name(op) << " " << val(op.operands[0]) << " axis=" << op.axis << (op.keepdim ? " keepdim" : "");
        break;
      case OpKind::Unsqueeze:
        os_ << "unsqueeze " << val(op.operands[0]) << " axis=" << op.axis;
        break;
      case OpKind::Dot:
        os_ << "dot " << val(op.operands[0]) << ", " << val(op.operands[1]);
        if (op.operands.size() > 2) os_ << " acc=" << val(op.operands[2]);
        break;
      case OpKind::Permute:
        os_ << "permute " << val(op.operands[0]) << " perm=" << shape_to_string(op.dims);
        break;
      case OpKind::Squeeze:
      case OpKind::Split:
      case OpKind::Stack:
      case OpKind::Cat:
        os_ << op_name(op);
        for (size_t i = 0; i < op.operands.size(); ++i) os_ << (i ? ", " : " ") << val(op.operands[i]);
        os_ << (op.kind == OpKind::Split ? " half=" : " axis=") << op.axis;
        break;
      case OpKind::VarDecl:
        os_ << "var v" << op.var << " = " << val(op.operands[0]) << loc(op.loc) << "\n";
        return;
      case OpKind::VarGet:
        os_ << "var_get v" << op.var;
        break;
      case OpKind::Scan: {
        // scan %x, %y axis=A [reverse] result=K combine(%a0, %a1, %b0, %b1) {
        //   ...ops of the combine...
        //   yield %r0, %r1
        // } : TYPE
        const ScanCombine& c = op.combine.at(0);
        os_ << "scan";
        for (size_t i = 0; i < op.operands.size(); ++i) os_ << (i ? ", " : " ") << val(op.operands[i]);
        os_ << " axis=" << op.axis << (op.reverse ? " reverse" : "") << " result=" << op.fn << " combine(";
        for (size_t i = 0; i < c.params.size(); ++i) os_ << (i ? ", " : "") << val(c.params[i]);
        os_ << ") {\n";
        ops(c.ops, depth + 1);
        os_ << std::string((depth + 1) * 2, ' ') << "yield";
        for (size_t i = 0; i < c.results.size(); ++i) os_ << (i ? ", " : " ") << val(c.results[i]);
        os_ << "\n" << ind << "}";
        break;
      }
      case OpKind::VarSet:
        os_ << "var_set v" << op.var << ", " << val(op.operands[0]) << loc(op.loc) << "\n";
        return;
      case OpKind::DeviceIndex:
        os_ << "device_index " << fn_.mesh.at(op.axis).name;
        break;
      case OpKind::CopyStart:  // copy_start c0 buf0[...], %v to %peer
        os_ << "copy_start c" << op.channel << " " << index_str(op) << ", " << val(op.operands[0]) << " to"
            << peer(op, 1) << loc(op.loc) << "\n";
        return;
      case OpKind::CopyWait:
        os_ << op_name(op) << " c" << op.channel << loc(op.loc) << "\n";
        return;
      case OpKind::Barrier:
        os_ << "barrier";
        for (size_t i = 0; i < op.dims.size(); ++i) os_ << (i ? ", " : " ") << fn_.mesh.at(op.dims[i]).name;
        os_ << loc(op.loc) << "\n";
        return;
      case OpKind::Signal:  // signal s0, %count to %peer
        os_ << "signal s" << op.channel << ", " << val(op.operands[0]) << " to" << peer(op, 1) << loc(op.loc) << "\n";
        return;
      case OpKind::SemWait:
        os_ << "wait s" << op.channel << ", " << val(op.operands[0]) << loc(op.loc) << "\n";
        return;
      default: {
        os_ << op_name(op);
        for (size_t i = 0; i < op.operands.size(); ++i) os_ << (i ? ", " : " ") << val(op.operands[i]);
      }
    }
    if (op.result >= 0) os_ << " : " << type_to_string(fn_, fn_.type_of(op.result));
    os_ << loc(op.loc) << "\n";
  }

  const Function& fn_;
  const PrintOptions& options_;
  std::ostringstream os_;
};

}  // namespace

std::string tile_name(const Function& fn, int tile) {
  return (fn.tiles.at(tile).is_grid ? "g" : "t") + std::to_string(tile);
}

std::string type_to_string(const Function& fn, const Type& t) {
  std::string s(dtype_name(t.dtype));
  s += "[";
  for (size_t i = 0; i < t.shape.size(); ++i) {
    s += i ? "," : "";
    s += t.shape[i].kind == Dim::Tile ? tile_name(fn, t.shape[i].tile) : std::to_string(t.shape[i].size);
  }
  return s + "]";
}

std::string loc_suffix(const SourceLoc& loc) {
  if (loc.file.empty() && loc.line == 0) return "";
  std::string s = " loc(\"";
  for (char c : loc.file) {
    if (c == '"' || c == '\\') s += '\\';
    s += c;
  }
  return s + "\":" + std::to_string(loc.line) + ")";
}

std::string print(const Function& fn, const PrintOptions& options) { return Printer(fn, options).run(); }

}  // namespace parhelion::ir

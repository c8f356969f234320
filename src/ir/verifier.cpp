#include "ir/verifier.h"

#include <set>

#include "ir/printer.h"
#include "ir/type_rules.h"
#include "parhelion/error.h"

namespace parhelion::ir {
namespace {

class Verifier {
 public:
  explicit Verifier(const Function& fn) : fn_(fn), defined_(fn.values.size(), false) {}

  void run() {
    for (const Op& op : fn_.body) {
      if (op.kind == OpKind::Alloc) {
        check(op.tensor >= 0 && op.tensor < static_cast<int>(fn_.tensors.size()), op, "bad tensor");
      } else if (op.kind == OpKind::Launch) {
        std::vector<int> scope;
        std::set<int> vars;
        device(op, scope, vars);
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
    for (const Op& op : loop.body) {
      for (int v : op.operands) use(op, v, scope);
      for (const IndexItem& it : op.index)
        if (it.kind == IndexItem::Scalar) use(op, it.value, scope);
      switch (op.kind) {
        case OpKind::Alloc:
        case OpKind::Launch:
          fail(op, std::string(op_name(op)) + " must be in host code, not inside a tile loop");
        case OpKind::Loop:
          device(op, scope, vars);
          continue;
        case OpKind::Load: {
          Type t;
          rule(op, load_type(fn_, op.tensor, op.index, &t));
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
          continue;
        }
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
        case OpKind::Dot: {
          Type t;
          rule(op, dot_type(fn_, fn_.type_of(op.operands[0]), fn_.type_of(op.operands[1]), &t));
          if (op.operands.size() > 2 && !(fn_.type_of(op.operands[2]) == t))
            fail(op, "dot: the accumulator must have the result's type " + type_to_string(fn_, t));
          define(op, op.result, scope);
          expect_type(op, t);
          continue;
        }
        default:
          if (op.result >= 0) define(op, op.result, scope);
      }
    }
  }

  const Function& fn_;
  std::vector<bool> defined_;
};

}  // namespace

void verify(const Function& fn) { Verifier(fn).run(); }

}  // namespace parhelion::ir

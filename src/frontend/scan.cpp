// The DSL's scans (cumsum, cumprod, associative_scan): the operands broadcast to one shape,
// the combine function traced once on rank-0 placeholders into a region of its own, and one
// Scan op per component of the scanned tuples (src/ir/scan.h states the semantics).
#include <string>

#include "frontend/tracer.h"
#include "ir/printer.h"
#include "ir/scan.h"
#include "ir/type_rules.h"
#include "parhelion/error.h"
#include "parhelion/lang.h"

namespace parhelion {

using frontend::Tracer;
using ir::Dim;
using ir::Op;
using ir::OpKind;
using ir::Type;

namespace {

int emit_value(Tracer& T, Op op, Type t, const Loc& loc) {
  op.result = T.new_value(std::move(t));
  return T.emit(std::move(op), loc);
}

// The value of an operand of a scan (a number is a rank-0 block, which has no axis to scan).
int value_of(Tracer& T, const Operand& o) {
  if (o.kind == Operand::TensorK) return o.value;
  Op op{OpKind::Constant};
  op.number = o.number;
  return emit_value(T, op, Type{o.is_int ? DType::i64 : DType::f32, {}}, o.loc);
}

// Scans `inputs` together along `axis`; `combine` is called once, on placeholders.
std::vector<Tensor> scan(const char* what, std::vector<int> inputs, int axis, bool reverse, const ScanCombineN& combine,
                         const Loc& loc) {
  Tracer& T = Tracer::current(loc);
  T.require_device(what, loc);
  if (inputs.empty()) T.fail(std::string(what) + " needs at least one block to scan", loc);
  // Broadcast the blocks to one shape (numpy's rules), so that a per-row segment id [tn, 1]
  // scans beside values [tn, td].
  std::vector<Dim> shape = T.fn().type_of(inputs[0]).shape;
  for (int v : inputs) {
    std::string err = ir::broadcast_shapes(T.fn(), shape, T.fn().type_of(v).shape, &shape);
    if (!err.empty()) T.fail(std::string(what) + ": the blocks scanned together must broadcast: " + err, loc);
  }
  for (int& v : inputs) {
    const Type& t = T.fn().type_of(v);
    if (t.shape == shape) continue;
    Op e{OpKind::Expand};
    e.operands = {v};
    v = emit_value(T, e, Type{t.dtype, shape}, loc);
  }
  std::vector<Type> types;
  std::vector<DType> dtypes;
  for (int v : inputs) {
    types.push_back(T.fn().type_of(v));
    dtypes.push_back(types.back().dtype);
  }
  Type first;
  int a = axis;
  std::string err = ir::scan_type(T.fn(), types, &a, 0, &first);
  if (!err.empty()) T.fail(std::string(what) + ": " + err, loc);

  const std::vector<int> params = T.open_combine(dtypes, loc);
  std::vector<Tensor> pa, pb;
  for (size_t k = 0; k < inputs.size(); ++k) {
    pa.push_back(Tensor::block(params[k]));
    pb.push_back(Tensor::block(params[inputs.size() + k]));
  }
  std::vector<Tensor> out = combine(pa, pb);
  std::vector<int> results;
  for (const Tensor& r : out) {
    if (r.kind() != Tensor::BlockK) {
      T.close_combine(params, {});
      T.fail(std::string(what) + ": the combine function must return blocks computed from its arguments", loc);
    }
    results.push_back(r.id());
  }
  ir::ScanCombine c = T.close_combine(params, results);
  err = ir::combine_rule(T.fn(), c, dtypes);
  if (!err.empty()) T.fail(std::string(what) + ": " + err, loc);

  std::vector<Tensor> components;
  for (size_t k = 0; k < inputs.size(); ++k) {
    Op op{OpKind::Scan};
    op.operands = inputs;
    op.axis = a;
    op.reverse = reverse;
    op.fn = static_cast<int>(k);
    op.combine.push_back(k == 0 ? c : T.clone_combine(c));
    components.push_back(Tensor::block(emit_value(T, std::move(op), Type{dtypes[k], shape}, loc)));
  }
  return components;
}

// cumsum/cumprod: a bool block scans as i64 (torch.cumsum of a bool tensor is int64).
Tensor builtin_scan(const char* what, const Operand& x, int axis, bool reverse, bool product) {
  Tracer& T = Tracer::current(x.loc);
  T.require_device(what, x.loc);
  int v = value_of(T, x);
  if (T.fn().type_of(v).dtype == DType::boolean) {
    Op c{OpKind::Cast};
    c.operands = {v};
    c.dtype = DType::i64;
    v = emit_value(T, c, Type{DType::i64, T.fn().type_of(v).shape}, x.loc);
  }
  const Loc loc = x.loc;
  auto combine = [&](const std::vector<Tensor>& a, const std::vector<Tensor>& b) -> std::vector<Tensor> {
    return {product ? operator*(Operand(a[0], loc), Operand(b[0], loc)) :
                    operator+(Operand(a[0], loc), Operand(b[0], loc))};
  };
  return scan(what, {v}, axis, reverse, combine, loc)[0];
}

}  // namespace

Tensor cumsum(const Operand& x, int axis, bool reverse) { return builtin_scan("cumsum", x, axis, reverse, false); }
Tensor cumprod(const Operand& x, int axis, bool reverse) { return builtin_scan("cumprod", x, axis, reverse, true); }

Tensor associative_scan(const Operand& x, int axis, const ScanCombine1& combine, bool reverse) {
  Tracer& T = Tracer::current(x.loc);
  T.require_device("associative_scan", x.loc);
  const int v = value_of(T, x);
  auto one = [&](const std::vector<Tensor>& a, const std::vector<Tensor>& b) -> std::vector<Tensor> {
    return {combine(a[0], b[0])};
  };
  return scan("associative_scan", {v}, axis, reverse, one, x.loc)[0];
}

std::vector<Tensor> associative_scan(const std::vector<Tensor>& xs, int axis, const ScanCombineN& combine, bool reverse,
                                     Loc loc) {
  std::vector<int> inputs;
  for (const Tensor& t : xs) inputs.push_back(Operand(t, loc).value);
  auto checked = [&](const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
    std::vector<Tensor> r = combine(a, b);
    if (r.size() != xs.size())
      throw UserError("associative_scan: the combine function of a scan of " + std::to_string(xs.size()) +
                          " blocks must return " + std::to_string(xs.size()) + " values, got " +
                          std::to_string(r.size()),
                      loc);
    return r;
  };
  return scan("associative_scan", inputs, axis, reverse, checked, loc);
}

std::pair<Tensor, Tensor> associative_scan(const std::pair<Tensor, Tensor>& xs, int axis, const ScanCombine2& combine,
                                           bool reverse, Loc loc) {
  auto pairwise = [&](const std::vector<Tensor>& a, const std::vector<Tensor>& b) -> std::vector<Tensor> {
    auto [r0, r1] = combine(a[0], a[1], b[0], b[1]);
    return {r0, r1};
  };
  std::vector<Tensor> r = associative_scan(std::vector<Tensor>{xs.first, xs.second}, axis, pairwise, reverse, loc);
  return {r[0], r[1]};
}

}  // namespace parhelion

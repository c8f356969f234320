#include "fuzz/program.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "ir/ir.h"
#include "parhelion/collectives.h"
#include "parhelion/error.h"
#include "parhelion/lang.h"

namespace parhelion::fuzz {

using ir::BinaryFn;
using ir::ReduceFn;
using ir::UnaryFn;

int Program::num_inputs() const {
  int n = 0;
  for (const TensorDecl& t : tensors) n += !t.is_output && !t.is_view();
  return n;
}

std::vector<int> Program::outputs() const {
  std::vector<int> out;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].is_output && !tensors[i].is_view()) out.push_back(static_cast<int>(i));
  return out;
}

std::vector<int> Program::returned() const { return returns.empty() ? outputs() : returns; }

// The index values of an integer input (a formula that the printed program repeats).
static int64_t index_value(int64_t i, uint64_t seed, int64_t bound) {
  return static_cast<int64_t>((static_cast<uint64_t>(i) * 7 + 3 + seed) % static_cast<uint64_t>(bound));
}
static uint64_t data_seed(uint64_t seed, size_t tensor) { return seed * 131 + tensor; }
// The range of an input's random data: [-1, 1] for floats; 8-bit integers over their whole
// range (the bit patterns are what integer ops are about).
static std::pair<double, double> data_range(DType d) {
  if (d == DType::i8) return {-128, 128};
  if (d == DType::u8) return {0, 256};
  return {-1, 1};
}

std::vector<Array> make_inputs(const Program& p, uint64_t seed) {
  std::vector<Array> in;
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const TensorDecl& t = p.tensors[i];
    if (t.is_output || t.is_view()) continue;
    if (!t.values.empty()) {
      Array a = Array::empty(t.shape, t.dtype);
      for (int64_t k = 0; k < a.numel(); ++k) a.set(k, static_cast<double>(t.values.at(static_cast<size_t>(k))));
      in.push_back(a);
    } else if (t.index_bound > 0) {
      Array a = Array::empty(t.shape, t.dtype);
      for (int64_t k = 0; k < a.numel(); ++k)
        a.set(k, static_cast<double>(index_value(k, data_seed(seed, i), t.index_bound)));
      in.push_back(a);
    } else {
      auto [lo, hi] = data_range(t.dtype);
      in.push_back(Array::random(t.shape, t.dtype, data_seed(seed, i), lo, hi));
    }
  }
  return in;
}

uint64_t device_seed(uint64_t seed, int64_t device) { return seed + 1000003ull * static_cast<uint64_t>(device); }

std::vector<Arg> make_args(const Program& p, const std::vector<Array>& inputs) {
  std::vector<Arg> args(inputs.begin(), inputs.end());
  if (p.has_scalar) args.emplace_back(p.scalar_value);
  return args;
}

// --- tracing: the program played through the DSL ------------------------------------------------

namespace {

class Player {
 public:
  Player(const Program& p, const std::vector<KernelBase::TraceArg>& args) : p_(p), tiles_(p.num_tiles) {
    for (int64_t e : p.block_refs) refs_.push_back(register_block_size(e));
    size_t a = 0;
    for (const TensorDecl& t : p.tensors)
      tensors_.push_back(t.is_view()   ? host_view(tensors_.at(t.view_of), t.view)
                         : t.is_output ? allocate(t)
                                       : args[a++].tensor);
    if (p.has_scalar) scalar_ = args[a].scalar;
    vars_.resize(p.num_vars);
  }

  std::vector<Tensor> run() {
    for (const Stmt& s : p_.body) stmt(s);
    std::vector<Tensor> out;
    for (int t : p_.returned()) out.push_back(tensors_[t]);
    return out;
  }

 private:
  static Tensor host_view(const Tensor& b, const HostViewOp& v) {
    switch (v.kind) {
      case HostViewOp::View:
        return b.view(v.dims);
      case HostViewOp::Reshape:
        return b.reshape(v.dims);
      case HostViewOp::Permute:
        return b.permute(v.dims);
      case HostViewOp::Transpose:
        return b.transpose(v.axis, v.axis2);
      case HostViewOp::Expand:
        return b.expand(v.dims);
      case HostViewOp::Squeeze:
        return b.squeeze(v.axis);
      case HostViewOp::Unsqueeze:
        return b.unsqueeze(v.axis);
      case HostViewOp::Narrow:
        return b.narrow(v.axis, v.dims.at(0), v.dims.at(1));
    }
    throw InternalError("bad host view op");
  }

  void atomic(const Stmt& s) {
    std::vector<Index> ix = subscript(s.index);
    const Tensor& t = tensors_.at(s.tensor);
    using Fn = void (*)(const Tensor&, std::initializer_list<Index>, const Operand&, Loc);
    using MaskedFn = void (*)(const Tensor&, std::initializer_list<Index>, const Operand&, const Operand&, Loc);
    const auto f = static_cast<ir::AtomicFn>(s.atomic);
    const Fn plain = f == ir::AtomicFn::add ? Fn(atomic_add) : f == ir::AtomicFn::max ? Fn(atomic_max) : Fn(atomic_min);
    const MaskedFn masked = f == ir::AtomicFn::add   ? MaskedFn(atomic_add)
                            : f == ir::AtomicFn::max ? MaskedFn(atomic_max)
                                                     : MaskedFn(atomic_min);
    const Loc loc = Loc::current();
    const Operand v = expr(s.expr);
    auto run = [&](std::initializer_list<Index> i) {
      if (s.mask >= 0)
        masked(t, i, v, expr(s.mask), loc);
      else
        plain(t, i, v, loc);
    };
    if (ix.size() == 1)
      run({ix[0]});
    else if (ix.size() == 2)
      run({ix[0], ix[1]});
    else if (ix.size() == 3)
      run({ix[0], ix[1], ix[2]});
    else
      throw InternalError("fuzz: an atomic update of rank " + std::to_string(ix.size()));
  }

  Tensor allocate(const TensorDecl& t) {
    if (t.filled) return full(t.shape, t.fill, t.dtype);
    if (t.count_ref < 0) return empty(t.shape, t.dtype);
    const NumBlocks nb = num_blocks(refs_.at(t.count_ref));
    switch (t.shape.size()) {
      case 1:
        return empty({nb}, t.dtype);
      case 2:
        return empty({nb, t.shape[1]}, t.dtype);
      case 3:
        return empty({nb, t.shape[1], t.shape[2]}, t.dtype);
    }
    throw InternalError("fuzz: per-block partials of rank " + std::to_string(t.shape.size()));
  }

  Tensor block(const Operand& o) {
    if (o.kind == Operand::TensorK) return Tensor::block(o.value);
    return full({}, o.number);  // a number where a block is needed (a Var's initial value)
  }

  std::vector<Index> subscript(const std::vector<Subscript>& items) {
    std::vector<Index> ix;
    for (const Subscript& s : items) {
      if (s.kind == Subscript::Tile)
        ix.push_back(Index(tiles_.at(s.tile)));
      else if (s.kind == Subscript::All)
        ix.push_back(Index(all));
      else if (s.kind == Subscript::Slice && s.expr < 0)
        ix.push_back(Index(slice(s.begin, s.begin + s.length)));
      else if (s.kind == Subscript::Slice)
        ix.push_back(Index(slice(block(expr(s.expr)), length(s.length))));
      else if (s.expr < 0)
        ix.push_back(Index(s.begin));
      else
        ix.push_back(Index(block(expr(s.expr))));
    }
    return ix;
  }

  static Tensor subscripted(const Tensor& t, const std::vector<Index>& ix) {
    switch (ix.size()) {
      case 1:
        return t(ix[0]);
      case 2:
        return t(ix[0], ix[1]);
      case 3:
        return t(ix[0], ix[1], ix[2]);
      case 4:
        return t(ix[0], ix[1], ix[2], ix[3]);
    }
    throw InternalError("fuzz: a subscript of " + std::to_string(ix.size()) + " indices");
  }

  Operand unary(UnaryFn f, const Operand& x) {
    switch (f) {
      case UnaryFn::neg:
        return -x;
      case UnaryFn::exp:
        return exp(x);
      case UnaryFn::exp2:
        return exp2(x);
      case UnaryFn::log:
        return log(x);
      case UnaryFn::sqrt:
        return sqrt(x);
      case UnaryFn::rsqrt:
        return rsqrt(x);
      case UnaryFn::tanh:
        return tanh(x);
      case UnaryFn::sigmoid:
        return sigmoid(x);
      case UnaryFn::silu:
        return silu(x);
      case UnaryFn::gelu:
        return gelu(x);
      case UnaryFn::abs:
        return abs(x);
      case UnaryFn::logical_not:
        return !x;
      case UnaryFn::bit_not:
        return ~x;
      case UnaryFn::round:
        return round(x);
      case UnaryFn::floor:
        return floor(x);
      case UnaryFn::ceil:
        return ceil(x);
      case UnaryFn::trunc:
        return trunc(x);
      case UnaryFn::erf:
        return erf(x);
      case UnaryFn::gelu_exact:
        return gelu(x, Gelu::exact);
    }
    throw InternalError("fuzz: unary");
  }

  Operand binary(BinaryFn f, const Operand& a, const Operand& b) {
    switch (f) {
      case BinaryFn::add:
        return a + b;
      case BinaryFn::sub:
        return a - b;
      case BinaryFn::mul:
        return a * b;
      case BinaryFn::div:
        return a / b;
      case BinaryFn::maximum:
        return maximum(a, b);
      case BinaryFn::minimum:
        return minimum(a, b);
      case BinaryFn::pow:
        return pow(a, b);
      case BinaryFn::lt:
        return a < b;
      case BinaryFn::le:
        return a <= b;
      case BinaryFn::gt:
        return a > b;
      case BinaryFn::ge:
        return a >= b;
      case BinaryFn::eq:
        return a == b;
      case BinaryFn::ne:
        return a != b;
      case BinaryFn::logical_and:
        return a && b;
      case BinaryFn::logical_or:
        return a || b;
      case BinaryFn::floordiv:
        return floordiv(a, b);
      case BinaryFn::mod:
        return a % b;
      case BinaryFn::bit_and:
        return a & b;
      case BinaryFn::bit_or:
        return a | b;
      case BinaryFn::bit_xor:
        return a ^ b;
      case BinaryFn::shl:
        return a << b;
      case BinaryFn::shr:
        return a >> b;
      case BinaryFn::rand:
        return rand(a, b);
      case BinaryFn::randn:
        return randn(a, b);
    }
    throw InternalError("fuzz: binary");
  }

  // A scan (Expr::Scan); its operands are blocks (the generator anchors them to a load).
  static Operand scan(const Expr& e, const Operand& a, const Operand& b) {
    switch (e.fn) {
      case 0:
        return cumsum(a, e.axis, e.reverse);
      case 1:
        return cumprod(a, e.axis, e.reverse);
      case 2:
        return associative_scan(
            a, e.axis, [](const Tensor& x, const Tensor& y) { return maximum(x, y); }, e.reverse);
      default: {
        PH_CHECK(a.kind == Operand::TensorK && b.kind == Operand::TensorK, "fuzz: a segmented scan of a number");
        auto [sums, flags] = associative_scan(
            std::pair{Tensor::block(a.value), Tensor::block(b.value)}, e.axis,
            [](const Tensor& av, const Tensor& af, const Tensor& bv, const Tensor& bf) {
              return std::pair{where(bf, bv, av + bv), af || bf};
            },
            e.reverse);
        (void)flags;
        return sums;
      }
    }
  }

  Operand expr(int id) {
    if (auto b = bound_.find(id); b != bound_.end()) return b->second;  // (a Let's value)
    const Expr& e = p_.exprs.at(id);
    auto arg = [&](int k) { return expr(e.args.at(k)); };
    switch (e.kind) {
      case Expr::Load:
        return subscripted(tensors_.at(e.tensor), subscript(e.index));
      case Expr::Number:
        if (e.dtype == DType::i64) return Operand(static_cast<int64_t>(e.number));
        return Operand(e.number);
      case Expr::ScalarArg:
        return Operand(scalar_);
      case Expr::TileIndex:
        return e.scalar ? tiles_.at(e.tile).begin() : tiles_.at(e.tile).index();
      case Expr::TileId:
        return tiles_.at(e.tile).id();
      case Expr::DeviceIndex:
        return device_index(p_.mesh.at(e.axis).name);
      case Expr::Unary:
        return unary(static_cast<UnaryFn>(e.fn), arg(0));
      case Expr::Binary:
        return binary(static_cast<BinaryFn>(e.fn), arg(0), arg(1));
      case Expr::Where:
        return where(arg(0), arg(1), arg(2));
      case Expr::Cast:
        return cast(arg(0), e.dtype);
      case Expr::Reduce:
        switch (static_cast<ReduceFn>(e.fn)) {
          case ReduceFn::sum:
            return sum(arg(0), e.axis, e.keepdim);
          case ReduceFn::max:
            return amax(arg(0), e.axis, e.keepdim);
          case ReduceFn::min:
            return amin(arg(0), e.axis, e.keepdim);
          case ReduceFn::mean:
            return mean(arg(0), e.axis, e.keepdim);
        }
        break;
      case Expr::Scan:
        return scan(e, arg(0), e.args.size() > 1 ? arg(1) : arg(0));
      case Expr::Unsqueeze:
        return unsqueeze(arg(0), e.axis);
      case Expr::Transpose:
        return transpose(arg(0));
      case Expr::Expand:
      case Expr::Reshape: {
        std::vector<DimSpec> d;
        for (const Subscript& sub : e.index) d.push_back(tiles_.at(sub.tile));
        for (int64_t n : e.dims) d.push_back(n);
        return e.kind == Expr::Expand ? expand(arg(0), d) : reshape(arg(0), d);
      }
      case Expr::Stack:
      case Expr::Cat: {
        if (e.args.size() != 2) throw InternalError("fuzz: stack/cat of two blocks");
        return e.kind == Expr::Stack ? stack({arg(0), arg(1)}, e.axis) : cat({arg(0), arg(1)}, e.axis);
      }
      case Expr::Permute: {
        if (e.dims.size() > 5) throw InternalError("fuzz: permute of rank > 5");
        std::vector<int> p(e.dims.begin(), e.dims.end());
        switch (p.size()) {
          case 2:
            return permute(arg(0), {p[0], p[1]});
          case 3:
            return permute(arg(0), {p[0], p[1], p[2]});
          case 4:
            return permute(arg(0), {p[0], p[1], p[2], p[3]});
          default:
            return permute(arg(0), {p[0], p[1], p[2], p[3], p[4]});
        }
      }
      case Expr::Split: {
        auto halves = split(arg(0));
        return e.axis == 0 ? Operand(halves.first) : Operand(halves.second);
      }
      case Expr::Squeeze:
        return squeeze(arg(0), e.axis);
      case Expr::Dot:
        if (e.args.size() > 2) return dot(arg(0), arg(1), arg(2));
        if (e.dtype != DType::f32) return dot(arg(0), arg(1), e.dtype);
        return dot(arg(0), arg(1));
      case Expr::VarRead:
        return Operand(*vars_.at(e.var));
      case Expr::MaskedLoad: {
        std::vector<Index> ix = subscript(e.index);
        const Tensor& t = tensors_.at(e.tensor);
        switch (ix.size()) {
          case 1:
            return load(t, {ix[0]}, arg(0), arg(1));
          case 2:
            return load(t, {ix[0], ix[1]}, arg(0), arg(1));
          case 3:
            return load(t, {ix[0], ix[1], ix[2]}, arg(0), arg(1));
        }
        throw InternalError("fuzz: a masked load of rank " + std::to_string(ix.size()));
      }
      case Expr::Full: {
        std::vector<DimSpec> t;
        for (const Subscript& s : e.index)
          t.push_back(s.block_ref >= 0 ? DimSpec(refs_.at(s.block_ref)) : DimSpec(tiles_.at(s.tile)));
        switch (t.size()) {
          case 1:
            return full({t[0]}, e.number);
          case 2:
            return full({t[0], t[1]}, e.number);
          case 3:
            return full({t[0], t[1], t[2]}, e.number);
        }
        throw InternalError("fuzz: a full block of rank " + std::to_string(t.size()));
      }
    }
    throw InternalError("fuzz: expression kind");
  }

  void stmt(const Stmt& s) {
    switch (s.kind) {
      case Stmt::Loop: {
        std::vector<Extent> dims;
        for (const LoopDim& d : s.dims) {
          Extent x(d.begin, d.extent);
          if (d.parent >= 0) x = Extent(tiles_.at(d.parent));
          if (d.count_ref >= 0) x = Extent(num_blocks(refs_.at(d.count_ref)));
          if (d.jagged_offsets >= 0) x = jagged(tensors_.at(d.jagged_offsets), tiles_.at(d.jagged_group).begin());
          if (d.block_ref >= 0) x = x.block(refs_.at(d.block_ref));
          dims.push_back(d.fixed_block > 0 ? x.block(d.fixed_block) : x);
        }
        std::vector<Tile> opened = detail::open_loop(dims, s.grid, Loc::current());
        for (size_t i = 0; i < opened.size(); ++i) tiles_.at(s.tiles[i]) = opened[i];
        body(s.body);
        detail::close_loop();
        return;
      }
      case Stmt::Let:
        bound_.emplace(s.expr, expr(s.expr));  // (bound already: expr() returns that value)
        return;
      case Stmt::VarDecl:
        vars_.at(s.var) = std::make_unique<Var>(block(expr(s.expr)));
        return;
      case Stmt::VarSet:
        *vars_.at(s.var) = expr(s.expr);
        return;
      case Stmt::Store:
        if (s.atomic != 0) return atomic(s);
        if (s.mask >= 0) {
          std::vector<Index> ix = subscript(s.index);
          const Tensor& t = tensors_.at(s.tensor);
          if (ix.size() == 1)
            store(t, {ix[0]}, expr(s.expr), expr(s.mask));
          else if (ix.size() == 2)
            store(t, {ix[0], ix[1]}, expr(s.expr), expr(s.mask));
          else if (ix.size() == 3)
            store(t, {ix[0], ix[1], ix[2]}, expr(s.expr), expr(s.mask));
          else
            throw InternalError("fuzz: a masked store of rank " + std::to_string(ix.size()));
          return;
        }
        subscripted(tensors_.at(s.tensor), subscript(s.index)) = expr(s.expr);
        return;
      case Stmt::When:
        when(expr(s.expr), [&] { body(s.body); });
        return;
      case Stmt::Copy: {
        const MeshAxis& a = p_.mesh.at(s.axis);
        Peer to = peer(a.name, remainder(device_index(a.name) + s.shift, a.size));
        copies_.at(s.copy) = remote_copy(tensors_.at(s.tensor), subscript(s.index), expr(s.expr), to);
        copies_.at(s.copy).start();
        return;
      }
      case Stmt::CopyWait:
        copies_.at(s.copy).wait();
        return;
      case Stmt::Barrier: {
        std::vector<std::string> axes;
        for (int a : s.axes) axes.push_back(p_.mesh.at(a).name);
        barrier(axes);
        return;
      }
    }
  }

  // A body's statements; the values its Lets bind are its own.
  void body(const std::vector<Stmt>& stmts) {
    const std::map<int, Operand> outer = bound_;
    for (const Stmt& b : stmts) stmt(b);
    bound_ = outer;
  }

  const Program& p_;
  std::map<int, Operand> bound_;  // expression -> the value a Let traced for it
  std::vector<Tensor> tensors_;
  Scalar scalar_;
  std::vector<Tile> tiles_;
  std::vector<std::unique_ptr<Var>> vars_;
  std::vector<BlockSizeRef> refs_;
  std::vector<RemoteCopy> copies_ = std::vector<RemoteCopy>(static_cast<size_t>(p_.num_copies));
};

}  // namespace

std::unique_ptr<KernelBase> make_kernel(const Program& p) {
  std::vector<bool> is_tensor(p.num_inputs(), true);
  if (p.has_scalar) is_tensor.push_back(false);
  auto program = std::make_shared<Program>(p);
  return std::make_unique<KernelBase>(p.name, is_tensor, [program](const std::vector<KernelBase::TraceArg>& args) {
    return Player(*program, args).run();
  });
}

// --- printing: the program as the C++ a user would write -------------------------------------------

namespace {

std::string dtype_expr(DType d) { return "ph::DType::" + std::string(dtype_name(d)); }

std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "INFINITY" : "-INFINITY";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s + "f";
}

class Printer {
 public:
  explicit Printer(const Program& p) : p_(p) {}

  std::string kernel() {
    std::ostringstream os;
    std::vector<int> outs = p_.returned();
    std::string ret = outs.size() == 1 ? "ph::Tensor" : "std::tuple<" + repeat("ph::Tensor", outs.size()) + ">";
    os << ret << " " << p_.name << "(";
    bool first = true;
    for (size_t i = 0; i < p_.tensors.size(); ++i)
      if (!p_.tensors[i].is_output && !p_.tensors[i].is_view())
        os << (first ? "" : ", ") << "ph::Tensor " << tensor(i), first = false;
    if (p_.has_scalar) os << (first ? "" : ", ") << "ph::Scalar s";
    os << ") {\n";
    for (size_t i = 0; i < p_.block_refs.size(); ++i)
      os << "  auto bs" << i << " = ph::register_block_size(" << p_.block_refs[i] << ");\n";
    for (size_t i = 0; i < p_.tensors.size(); ++i) {  // in order: a view follows its base
      const TensorDecl& t = p_.tensors[i];
      if (t.is_view()) {
        os << "  auto " << tensor(i) << " = " << tensor(t.view_of) << "." << host_view(t.view) << ";\n";
      } else if (t.is_output) {
        std::string sh = shape(t.shape);
        if (t.count_ref >= 0) {
          sh = "{ph::num_blocks(bs" + std::to_string(t.count_ref) + ")";
          for (size_t d = 1; d < t.shape.size(); ++d) sh += ", " + std::to_string(t.shape[d]);
          sh += "}";
        }
        if (t.filled)
          os << "  auto " << tensor(i) << " = ph::full(" << sh << ", " << number(t.fill) << ", " << dtype_expr(t.dtype)
             << ");\n";
        else
          os << "  auto " << tensor(i) << " = ph::empty(" << sh << ", " << dtype_expr(t.dtype) << ");\n";
      }
    }
    for (int c = 0; c < p_.num_copies; ++c) os << "  ph::RemoteCopy c" << c << ";\n";
    for (const Stmt& s : p_.body) stmt(os, s, 1);
    if (outs.size() == 1)
      os << "  return " << tensor(outs[0]) << ";\n";
    else {
      os << "  return {";
      for (size_t i = 0; i < outs.size(); ++i) os << (i ? ", " : "") << tensor(outs[i]);
      os << "};\n";
    }
    os << "}\n";
    return os.str();
  }

  std::string tensor(size_t i) const {
    int in = 0, out = 0, view = 0;
    for (size_t k = 0; k < i; ++k) (p_.tensors[k].is_view() ? view : p_.tensors[k].is_output ? out : in)++;
    return p_.tensors[i].is_view()   ? "v" + std::to_string(view)
           : p_.tensors[i].is_output ? "out" + std::to_string(out)
                                     : "x" + std::to_string(in);
  }

  static std::string host_view(const HostViewOp& v) {
    switch (v.kind) {
      case HostViewOp::View:
        return "view(" + shape(v.dims) + ")";
      case HostViewOp::Reshape:
        return "reshape(" + shape(v.dims) + ")";
      case HostViewOp::Permute:
        return "permute(" + shape(v.dims) + ")";
      case HostViewOp::Transpose:
        return "transpose(" + std::to_string(v.axis) + ", " + std::to_string(v.axis2) + ")";
      case HostViewOp::Expand:
        return "expand(" + shape(v.dims) + ")";
      case HostViewOp::Squeeze:
        return "squeeze(" + std::to_string(v.axis) + ")";
      case HostViewOp::Unsqueeze:
        return "unsqueeze(" + std::to_string(v.axis) + ")";
      case HostViewOp::Narrow:
        return "narrow(" + std::to_string(v.axis) + ", " + std::to_string(v.dims.at(0)) + ", " +
               std::to_string(v.dims.at(1)) + ")";
    }
    return "?";
  }

  static std::string shape(const Shape& s) {
    std::string r = "{";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "}";
  }

 private:
  static std::string repeat(const std::string& s, size_t n) {
    std::string r;
    for (size_t i = 0; i < n; ++i) r += (i ? ", " : "") + s;
    return r;
  }

  std::string subscript(const std::vector<Subscript>& items) {
    std::string r;
    for (size_t i = 0; i < items.size(); ++i) {
      const Subscript& s = items[i];
      r += i ? ", " : "";
      if (s.kind == Subscript::Slice)
        r += s.expr < 0 ? "ph::slice(" + std::to_string(s.begin) + ", " + std::to_string(s.begin + s.length) + ")"
                        : "ph::slice(" + expr(s.expr) + ", ph::length(" + std::to_string(s.length) + "))";
      else
        r += s.kind == Subscript::Tile  ? "t" + std::to_string(s.tile)
             : s.kind == Subscript::All ? "ph::all"
             : s.expr < 0               ? std::to_string(s.begin)
                                        : expr(s.expr);
    }
    return r;
  }

  std::string expr(int id) {
    if (auto b = names_.find(id); b != names_.end()) return b->second;  // (a Let's name)
    const Expr& e = p_.exprs.at(id);
    auto arg = [&](int k) { return expr(e.args.at(k)); };
    switch (e.kind) {
      case Expr::Load:
        return tensor(e.tensor) + "[" + subscript(e.index) + "]";
      case Expr::Number:
        if (e.dtype == DType::i64) return "int64_t(" + std::to_string(static_cast<long long>(e.number)) + ")";
        return number(e.number);
      case Expr::ScalarArg:
        return "s";
      case Expr::TileIndex:
        return "t" + std::to_string(e.tile) + (e.scalar ? ".begin()" : ".index()");
      case Expr::TileId:
        return "t" + std::to_string(e.tile) + ".id()";
      case Expr::DeviceIndex:
        return "ph::device_index(\"" + p_.mesh.at(e.axis).name + "\")";
      case Expr::Unary: {
        auto f = static_cast<UnaryFn>(e.fn);
        if (f == UnaryFn::neg) return "(-" + arg(0) + ")";
        if (f == UnaryFn::logical_not) return "(!" + arg(0) + ")";
        if (f == UnaryFn::bit_not) return "(~" + arg(0) + ")";
        if (f == UnaryFn::gelu_exact) return "ph::gelu(" + arg(0) + ", ph::Gelu::exact)";
        return "ph::" + std::string(ir::unary_name(f)) + "(" + arg(0) + ")";
      }
      case Expr::Binary: {
        auto f = static_cast<BinaryFn>(e.fn);
        static const char* ops[] = {"+",  "-", "*",  "/",  nullptr, nullptr, nullptr, "<",
                                    "<=", ">", ">=", "==", "!=",    "&&",    "||",    nullptr,
                                    "%",  "&", "|",  "^",  "<<",    ">>",    nullptr, nullptr};  // rand, randn
        static_assert(sizeof(ops) / sizeof(ops[0]) == static_cast<size_t>(BinaryFn::randn) + 1);
        const char* op = ops[static_cast<int>(f)];
        if (op) return "(" + arg(0) + " " + op + " " + arg(1) + ")";
        return "ph::" + std::string(ir::binary_name(f)) + "(" + arg(0) + ", " + arg(1) + ")";
      }
      case Expr::Where:
        return "ph::where(" + arg(0) + ", " + arg(1) + ", " + arg(2) + ")";
      case Expr::Cast:
        return "ph::cast(" + arg(0) + ", " + dtype_expr(e.dtype) + ")";
      case Expr::Reduce: {
        static const char* names[] = {"sum", "amax", "amin", "mean"};
        return "ph::" + std::string(names[e.fn]) + "(" + arg(0) + ", " + std::to_string(e.axis) +
               (e.keepdim ? ", true" : "") + ")";
      }
      case Expr::Scan: {
        const std::string ax = std::to_string(e.axis), rev = e.reverse ? ", true" : "";
        switch (e.fn) {
          case 0:
            return "ph::cumsum(" + arg(0) + ", " + ax + rev + ")";
          case 1:
            return "ph::cumprod(" + arg(0) + ", " + ax + rev + ")";
          case 2:
            return "ph::associative_scan(" + arg(0) + ", " + ax +
                   ", [](const ph::Tensor& a, const ph::Tensor& b) { return ph::maximum(a, b); }" + rev + ")";
          default:
            return "ph::associative_scan(std::pair{ph::Tensor(" + arg(0) + "), ph::Tensor(" + arg(1) + ")}, " + ax +
                   ", [](const ph::Tensor& av, const ph::Tensor& af, const ph::Tensor& bv, const ph::Tensor& bf) "
                   "{ return std::pair{ph::where(bf, bv, av + bv), af || bf}; }" +
                   rev + ").first";
        }
      }
      case Expr::Unsqueeze:
        return "ph::unsqueeze(" + arg(0) + ", " + std::to_string(e.axis) + ")";
      case Expr::Transpose:
        return "ph::transpose(" + arg(0) + ")";
      case Expr::Expand:
      case Expr::Reshape: {
        std::string d;
        for (const Subscript& sub : e.index) d += (d.empty() ? "" : ", ") + std::string("t") + std::to_string(sub.tile);
        for (int64_t n : e.dims) d += (d.empty() ? "" : ", ") + std::to_string(n);
        return std::string(e.kind == Expr::Expand ? "ph::expand(" : "ph::reshape(") + arg(0) + ", {" + d + "})";
      }
      case Expr::Stack:
      case Expr::Cat:
        return std::string(e.kind == Expr::Stack ? "ph::stack({" : "ph::cat({") + arg(0) + ", " + arg(1) + "}, " +
               std::to_string(e.axis) + ")";
      case Expr::Permute: {
        std::string d;
        for (int64_t n : e.dims) d += (d.empty() ? "" : ", ") + std::to_string(n);
        return "ph::permute(" + arg(0) + ", {" + d + "})";
      }
      case Expr::Split:
        return "ph::split(" + arg(0) + ")." + (e.axis == 0 ? "first" : "second");
      case Expr::Squeeze:
        return "ph::squeeze(" + arg(0) + ", " + std::to_string(e.axis) + ")";
      case Expr::Dot:
        if (e.args.size() > 2) return "ph::dot(" + arg(0) + ", " + arg(1) + ", " + arg(2) + ")";
        if (e.dtype != DType::f32) return "ph::dot(" + arg(0) + ", " + arg(1) + ", " + dtype_expr(e.dtype) + ")";
        return "ph::dot(" + arg(0) + ", " + arg(1) + ")";
      case Expr::VarRead:
        return "v" + std::to_string(e.var);
      case Expr::Full: {
        std::string dims;
        for (const Subscript& s : e.index)
          dims += (dims.empty() ? "" : ", ") +
                  (s.block_ref >= 0 ? "bs" + std::to_string(s.block_ref) : "t" + std::to_string(s.tile));
        return "ph::full({" + dims + "}, " + number(e.number) + ")";
      }
      case Expr::MaskedLoad:
        return "ph::load(" + tensor(e.tensor) + ", {" + subscript(e.index) + "}, " + arg(0) + ", " + arg(1) + ")";
    }
    throw InternalError("fuzz: expression kind");
  }

  // A body's statements; the names its Lets bind are its own.
  void body(std::ostringstream& os, const std::vector<Stmt>& stmts, int depth) {
    const std::map<int, std::string> outer = names_;
    for (const Stmt& b : stmts) stmt(os, b, depth);
    names_ = outer;
  }

  // A Var's initial value must be a block: a bare number becomes ph::full({}, n).
  std::string block_expr(int id) {
    const Expr& e = p_.exprs.at(id);
    return e.kind == Expr::Number ? "ph::full({}, " + number(e.number) + ")" : expr(id);
  }

  void stmt(std::ostringstream& os, const Stmt& s, int depth) {
    std::string pad(depth * 2, ' ');
    switch (s.kind) {
      case Stmt::Loop: {
        std::string dims;
        for (size_t i = 0; i < s.dims.size(); ++i) {
          const LoopDim& d = s.dims[i];
          std::string x = std::to_string(d.extent);
          if (d.begin != 0) x = "ph::range(" + std::to_string(d.begin) + ", " + x + ")";
          if (d.parent >= 0) x = "ph::Extent(t" + std::to_string(d.parent) + ")";
          if (d.count_ref >= 0) x = "ph::Extent(ph::num_blocks(bs" + std::to_string(d.count_ref) + "))";
          if (d.jagged_offsets >= 0)
            x = "ph::jagged(" + tensor(d.jagged_offsets) + ", t" + std::to_string(d.jagged_group) + ".begin())";
          if (d.block_ref >= 0)
            x = (x.rfind("ph::", 0) == 0 ? x : "ph::Extent(" + x + ")") + ".block(bs" + std::to_string(d.block_ref) +
                ")";
          if (d.fixed_block > 0)
            x = (x.rfind("ph::", 0) == 0 ? x : "ph::range(" + x + ")") + ".block(" + std::to_string(d.fixed_block) +
                ")";
          dims += (i ? ", " : "") + x;
        }
        std::string names;
        for (size_t i = 0; i < s.tiles.size(); ++i) names += (i ? ", " : "") + ("t" + std::to_string(s.tiles[i]));
        std::string bind = s.tiles.size() == 1 ? names : "[" + names + "]";
        os << pad << "for (auto " << bind << " : ph::" << (s.grid ? "grid" : "tile") << "(" << dims << ")) {\n";
        body(os, s.body, depth + 1);
        os << pad << "}\n";
        return;
      }
      case Stmt::Let:
        if (names_.count(s.expr)) return;  // (bound already: the Player reuses its value too)
        os << pad << "auto e" << s.expr << " = " << expr(s.expr) << ";\n";
        names_[s.expr] = "e" + std::to_string(s.expr);
        return;
      case Stmt::VarDecl:
        os << pad << "ph::Var v" << s.var << " = " << block_expr(s.expr) << ";\n";
        return;
      case Stmt::VarSet:
        os << pad << "v" << s.var << " = " << expr(s.expr) << ";\n";
        return;
      case Stmt::Store:
        if (s.atomic != 0) {
          os << pad << "ph::" << ir::atomic_name(static_cast<ir::AtomicFn>(s.atomic)) << "(" << tensor(s.tensor)
             << ", {" << subscript(s.index) << "}, " << expr(s.expr);
          if (s.mask >= 0) os << ", " << expr(s.mask);
          os << ");\n";
          return;
        }
        if (s.mask >= 0) {
          os << pad << "ph::store(" << tensor(s.tensor) << ", {" << subscript(s.index) << "}, " << expr(s.expr) << ", "
             << expr(s.mask) << ");\n";
          return;
        }
        os << pad << tensor(s.tensor) << "[" << subscript(s.index) << "] = " << expr(s.expr) << ";\n";
        return;
      case Stmt::When:
        os << pad << "ph::when(" << expr(s.expr) << ", [&] {\n";
        body(os, s.body, depth + 1);
        os << pad << "});\n";
        return;
      case Stmt::Copy: {
        const MeshAxis& a = p_.mesh.at(s.axis);
        const std::string c = "c" + std::to_string(s.copy), axis = "\"" + a.name + "\"";
        os << pad << c << " = ph::remote_copy(" << tensor(s.tensor) << ", {" << subscript(s.index) << "}, "
           << expr(s.expr) << ", ph::peer(" << axis << ", ph::remainder(ph::device_index(" << axis << ") + " << s.shift
           << ", " << a.size << ")));\n"
           << pad << c << ".start();\n";
        return;
      }
      case Stmt::CopyWait:
        os << pad << "c" << s.copy << ".wait();\n";
        return;
      case Stmt::Barrier: {
        std::string axes;
        for (int a : s.axes) axes += (axes.empty() ? "\"" : ", \"") + p_.mesh.at(a).name + "\"";
        os << pad << "ph::barrier({" << axes << "});\n";
        return;
      }
    }
  }

  const Program& p_;
  std::map<int, std::string> names_;  // expression -> the name a Let gave its value
};

}  // namespace

std::string to_cpp(const Program& p, const std::string& config_json, uint64_t seed) {
  Printer pr(p);
  std::ostringstream os;
  os << "// A kernel found by `parhelion fuzz` (family " << p.family << "). Build it against Parhelion\n"
     << "// (C++23) and run it: it prints the largest difference between the compiled kernel and\n"
     << "// the reference interpreter.\n"
     << "#include <parhelion/parhelion.h>\n\n#include <cmath>\n#include <cstdio>\n#include <tuple>\n\nnamespace ph = "
        "parhelion;\n\n"
     << pr.kernel() << "\nint main() {\n";
  if (!p.mesh.empty()) {  // every device's inputs, then the kernel on the mesh, compiled and interpreted
    std::string axes;
    for (const MeshAxis& a : p.mesh)
      axes += (axes.empty() ? "{\"" : ", {\"") + a.name + "\", " + std::to_string(a.size) + "}";
    os << "  ph::Mesh mesh{" << axes << "};\n"
       << "  std::vector<std::vector<ph::Array>> inputs;\n"
       << "  std::vector<std::vector<ph::Arg>> args;\n"
       << "  for (int64_t d = 0; d < mesh.devices(); ++d) {\n"
       << "    const uint64_t seed = " << seed << "ull + 1000003ull * static_cast<uint64_t>(d);\n"
       << "    inputs.emplace_back();\n";
    for (size_t i = 0; i < p.tensors.size(); ++i) {
      const TensorDecl& t = p.tensors[i];
      if (t.is_output || t.is_view()) continue;
      auto [lo, hi] = data_range(t.dtype);
      os << "    inputs.back().push_back(ph::Array::random(" << Printer::shape(t.shape) << ", " << dtype_expr(t.dtype)
         << ", seed * 131 + " << i << ", " << lo << ", " << hi << "));\n";
    }
    os << "  }\n"
       << "  for (auto& in : inputs) {\n"
       << "    args.emplace_back(in.begin(), in.end());\n";
    if (p.has_scalar) os << "    args.back().emplace_back(" << number(p.scalar_value) << ");\n";
    os << "  }\n"
       << "  ph::Kernel kernel(\"" << p.name << "\", " << p.name << ");\n";
    if (!config_json.empty()) {
      std::string escaped;
      for (char c : config_json) escaped += c == '"' ? std::string("\\\"") : std::string(1, c);
      os << "  ph::Config config = ph::Config::from_json(\"" << escaped << "\");\n"
         << "  auto got = kernel.run_on(mesh, args, &config);\n";
    } else {
      os << "  auto got = kernel.run_on(mesh, args);\n";
    }
    os << "  auto want = kernel.interpret_on(mesh, args);\n"
       << "  for (size_t d = 0; d < got.size(); ++d)\n"
       << "    for (size_t i = 0; i < got[d].size(); ++i)\n"
       << "      std::printf(\"device %zu, output %zu: max |compiled - interpreted| = %g\\n\", d, i,\n"
       << "                  ph::max_abs_diff(got[d][i], want[d][i]));\n"
       << "}\n";
    return os.str();
  }
  std::string args;
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const TensorDecl& t = p.tensors[i];
    if (t.is_output || t.is_view()) continue;
    std::string name = pr.tensor(i);
    if (!t.values.empty()) {
      std::string values;
      for (int64_t v : t.values) values += (values.empty() ? "" : ", ") + std::to_string(v);
      os << "  ph::Array " << name << " = ph::Array::empty(" << Printer::shape(t.shape) << ", " << dtype_expr(t.dtype)
         << ");\n"
         << "  {\n    const int64_t v[] = {" << values << "};\n"
         << "    for (int64_t i = 0; i < " << name << ".numel(); ++i) " << name
         << ".set(i, static_cast<double>(v[i]));\n"
         << "  }\n";
    } else if (t.index_bound > 0) {
      os << "  ph::Array " << name << " = ph::Array::empty(" << Printer::shape(t.shape) << ", " << dtype_expr(t.dtype)
         << ");\n"
         << "  for (int64_t i = 0; i < " << name << ".numel(); ++i) " << name << ".set(i, static_cast<double>((i * 7 + "
         << 3 + data_seed(seed, i) << ") % " << t.index_bound << "));\n";
    } else {
      auto [lo, hi] = data_range(t.dtype);
      os << "  ph::Array " << name << " = ph::Array::random(" << Printer::shape(t.shape) << ", " << dtype_expr(t.dtype)
         << ", " << data_seed(seed, i) << ", " << lo << ", " << hi << ");\n";
    }
    args += (args.empty() ? "" : ", ") + name;
  }
  if (p.has_scalar) args += (args.empty() ? "" : ", ") + number(p.scalar_value);
  os << "  ph::Kernel kernel(\"" << p.name << "\", " << p.name << ");\n";
  if (!config_json.empty()) {
    std::string escaped;
    for (char c : config_json) escaped += c == '"' ? std::string("\\\"") : std::string(1, c);
    os << "  ph::Config config = ph::Config::from_json(\"" << escaped << "\");\n"
       << "  std::vector<ph::Array> got = kernel.compile({" << args << "}, &config).run({" << args << "});\n";
  } else {
    os << "  std::vector<ph::Array> got = kernel.run({" << args << "});\n";
  }
  os << "  std::vector<ph::Array> want = kernel.interpret({" << args << "});\n"
     << "  for (size_t i = 0; i < got.size(); ++i)\n"
     << "    std::printf(\"output %zu: max |compiled - interpreted| = %g\\n\", i, ph::max_abs_diff(got[i], want[i]));\n"
     << "}\n";
  return os.str();
}

}  // namespace parhelion::fuzz

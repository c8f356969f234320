// The reference interpreter (semantics: interpreter.h). Deliberately naive: every op makes a
// new dense Value, loops are plain loops over whole blocks; nothing is fused, staged,
// vectorized or shared with src/lower and src/backend, so that the two can disagree.
#include "interp/interpreter.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "interp/conversions.h"
#include "interp/mesh_world.h"
#include "interp/value.h"
#include "interp/views.h"
#include "ir/collectives.h"
#include "ir/printer.h"
#include "ir/type_rules.h"
#include "ir/views.h"
#include "parhelion/error.h"

namespace parhelion::interp {
namespace {

using ir::BinaryFn;
using ir::Dim;
using ir::IndexItem;
using ir::Op;
using ir::OpKind;
using ir::ReduceFn;
using ir::UnaryFn;

[[noreturn]] void fail(const ir::SourceLoc& loc, const std::string& msg) { throw UserError(loc.str() + ": " + msg); }

std::string integer(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

// The block size a tile is cut into: a fixed one as given, a tunable one as its whole extent.
// A tile over an enclosing tile's block cuts at most that block.
int64_t block_of(const ir::Function& fn, int tile) {
  const ir::TileInfo& t = fn.tiles.at(tile);
  const ir::BlockSize& b = fn.block_sizes.at(t.block);
  const int64_t own = std::max<int64_t>(1, b.fixed > 0 ? b.fixed : b.extent);
  return t.parent >= 0 ? std::min(own, block_of(fn, t.parent)) : own;
}

// `fn` with its numbers of blocks (ph::num_blocks) bound to the interpreter's own block choice.
ir::Function bind_counts(const ir::Function& fn) {
  ir::Function bound = fn;
  std::vector<int64_t> blocks(fn.block_sizes.size());
  for (const ir::BlockSize& b : fn.block_sizes) blocks[b.id] = std::max<int64_t>(1, b.fixed > 0 ? b.fixed : b.extent);
  ir::resolve_block_counts(bound, blocks);
  return bound;
}

// A host tensor's contents, logical row-major (strides are a memory layout; they do not change
// what an index reads), each element already rounded to the tensor's dtype.
struct TensorState {
  DType dtype = DType::f32;
  Shape shape;
  std::vector<double> data;
};

double unary(UnaryFn f, DType dt, double x, const ir::SourceLoc& loc) {
  switch (f) {
    case UnaryFn::neg:
      return dt == DType::i64 ? exact_i64(-x, loc) : -x;
    case UnaryFn::exp:
      return std::exp(x);
    case UnaryFn::exp2:
      return std::exp2(x);
    case UnaryFn::log:
      return std::log(x);
    case UnaryFn::sqrt:
      return std::sqrt(x);
    case UnaryFn::rsqrt:
      return 1.0 / std::sqrt(x);
    case UnaryFn::tanh:
      return std::tanh(x);
    case UnaryFn::sigmoid:
      return 1.0 / (1.0 + std::exp(-x));
    case UnaryFn::silu:
      // x * sigmoid(x); its limit at -inf is -0 (the product form would give -inf * 0 = NaN).
      return x == -INFINITY ? -0.0 : x / (1.0 + std::exp(-x));
    case UnaryFn::gelu: {
      // The tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
      if (x == -INFINITY) return -0.0;
      const double k = std::sqrt(2.0 / M_PI);
      return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
    }
    case UnaryFn::abs:
      return std::abs(x);
    case UnaryFn::logical_not:
      return x != 0 ? 0.0 : 1.0;
    case UnaryFn::bit_not:
      return std::isnan(x) ? x : static_cast<double>(~static_cast<int64_t>(x));
    case UnaryFn::round:
      return std::nearbyint(x);  // the default rounding mode: ties to even
    case UnaryFn::floor:
      return std::floor(x);
    case UnaryFn::ceil:
      return std::ceil(x);
    case UnaryFn::trunc:
      return std::trunc(x);
    case UnaryFn::erf:
      return std::erf(x);
    case UnaryFn::gelu_exact:
      // 0.5 x erfc(-x / sqrt 2) = 0.5 x (1 + erf(x / sqrt 2)), without cancellation for x < 0.
      if (x == -INFINITY) return -0.0;
      return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
  }
  throw InternalError("unknown unary fn");
}

// The integer ops' definitions (include/parhelion/lang.h), on exact integers.
int64_t floordiv_i64(int64_t a, int64_t b) {
  if (b == 0) return 0;
  if (b == -1) return static_cast<int64_t>(0 - static_cast<uint64_t>(a));  // wraps at INT64_MIN
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
int64_t mod_i64(int64_t a, int64_t b) {
  if (b == 0 || b == -1) return 0;
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
int64_t shl_i64(int64_t a, int64_t n) {
  return (n < 0 || n > 63) ? 0 : static_cast<int64_t>(static_cast<uint64_t>(a) << n);
}
int64_t shr_i64(int64_t a, int64_t n) { return a >> ((n < 0 || n > 63) ? 63 : n); }

// Philox-4x32-10 (Salmon et al., SC'11) as lang.h defines ph::rand: the four words of
// counter (offset lo, offset hi, 0, 0) under key (seed lo, seed hi), with 64-bit products.
std::array<uint32_t, 4> philox(int64_t seed, int64_t offset) {
  uint32_t c[4] = {static_cast<uint32_t>(offset), static_cast<uint32_t>(static_cast<uint64_t>(offset) >> 32), 0, 0};
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(static_cast<uint64_t>(seed) >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{0xD2511F53} * c[0], p1 = uint64_t{0xCD9E8D57} * c[2];
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k0, n2 = static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k1;
    c[1] = static_cast<uint32_t>(p1);
    c[3] = static_cast<uint32_t>(p0);
    c[0] = n0;
    c[2] = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {c[0], c[1], c[2], c[3]};
}

// A Philox word as a uniform f32 in [0, 1): as a signed 32-bit value, negatives folded onto
// [0, 2^31) by ~w, times the largest scale that keeps the top value below 1 in f32.
float uniform_of(uint32_t w) {
  int32_t s = static_cast<int32_t>(w);
  if (s < 0) s = ~s;
  return static_cast<float>(s) * 4.6566127342e-10f;
}

double random_number(BinaryFn f, int64_t seed, int64_t offset) {
  const std::array<uint32_t, 4> w = philox(seed, offset);
  if (f == BinaryFn::rand) return uniform_of(w[0]);
  const double u1 = std::max(1.0e-7, static_cast<double>(uniform_of(w[0])));
  const double u2 = uniform_of(w[1]);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

// NaN-propagating max/min (torch.maximum / amax semantics).
double nan_max(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }
double nan_min(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); }

double binary(BinaryFn f, DType result, double a, double b, const ir::SourceLoc& loc) {
  auto arith = [&](double r) { return result == DType::i64 ? exact_i64(r, loc) : r; };
  // An integer operand read from memory the kernel never wrote (NaN) stays "never written".
  if (result != DType::f32 && f >= BinaryFn::floordiv && (std::isnan(a) || std::isnan(b))) return NAN;
  switch (f) {
    case BinaryFn::add:
      return arith(a + b);
    case BinaryFn::sub:
      return arith(a - b);
    case BinaryFn::mul:
      return arith(a * b);
    case BinaryFn::div:
      return a / b;  // true division: the result is f32 even for i64 operands
    case BinaryFn::maximum:
      return nan_max(a, b);
    case BinaryFn::minimum:
      return nan_min(a, b);
    case BinaryFn::pow:
      return std::pow(a, b);
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
      return a != 0 && b != 0;
    case BinaryFn::logical_or:
      return a != 0 || b != 0;
    case BinaryFn::floordiv:
      if (result == DType::f32) return std::floor(a / b);
      return static_cast<double>(floordiv_i64(static_cast<int64_t>(a), static_cast<int64_t>(b)));
    case BinaryFn::mod:
      if (result == DType::f32) {
        double r = std::fmod(a, b);
        return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
      }
      return static_cast<double>(mod_i64(static_cast<int64_t>(a), static_cast<int64_t>(b)));
    case BinaryFn::bit_and:
      return static_cast<double>(static_cast<int64_t>(a) & static_cast<int64_t>(b));
    case BinaryFn::bit_or:
      return static_cast<double>(static_cast<int64_t>(a) | static_cast<int64_t>(b));
    case BinaryFn::bit_xor:
      return static_cast<double>(static_cast<int64_t>(a) ^ static_cast<int64_t>(b));
    case BinaryFn::shl:
      return arith(static_cast<double>(shl_i64(static_cast<int64_t>(a), static_cast<int64_t>(b))));
    case BinaryFn::shr:
      return static_cast<double>(shr_i64(static_cast<int64_t>(a), static_cast<int64_t>(b)));
    case BinaryFn::rand:
    case BinaryFn::randn:
      if (std::isnan(a) || std::isnan(b)) return NAN;  // a seed or offset never written
      return random_number(f, static_cast<int64_t>(a), static_cast<int64_t>(b));
  }
  throw InternalError("unknown binary fn");
}

class Interpreter {
 public:
  Interpreter(const ir::Function& fn, const std::vector<Arg>& args) : fn_(fn) {
    bind_args(args);
    tile_off_.assign(fn.tiles.size(), 0);
    tile_len_.assign(fn.tiles.size(), -1);
    tile_num_.assign(fn.tiles.size(), 0);
    tile_block_.assign(fn.tiles.size(), 1);
    values_.resize(fn.values.size());
    vars_.resize(fn.vars.size());
  }

  Interpretation run() {
    execute();
    return result();
  }

  // On a mesh: this is device `device` of `world`, whose other devices are `devices` (copies
  // land in their tensors).
  void join_mesh(MeshWorld* world, int device, std::vector<Interpreter*>* devices) {
    world_ = world;
    device_ = device;
    devices_ = devices;
    coords_ = world->mesh().coords(device);
    // Every device's tensors exist before any device runs: a copy may land in a peer's
    // allocation before the peer reaches its own code.
    for (const Op& op : fn_.body)
      if (op.kind == OpKind::Alloc) alloc(op);
    ir::walk(fn_.body, [&](const Op& op) {
      if (op.kind != OpKind::CopyStart) return;
      if (const Op* load = ir::copy_block_load(fn_, op))
        copy_sources_.insert(load->result);
      else
        staged_copies_.insert(&op);
    });
  }

  // The host body, in order.
  void execute() {
    for (const Op& op : fn_.body) {
      if (op.kind == OpKind::Alloc && !world_)
        alloc(op);
      else if (op.kind == OpKind::Alloc)
        continue;  // (allocated when the device joined the mesh)
      else if (op.kind == OpKind::View)
        continue;  // a view has no state of its own: accesses go to its root (region)
      else if (op.kind == OpKind::Launch)
        loop(op, 0);
      else
        throw InternalError("host op " + std::string(ir::op_name(op)) + " in the host body");
    }
  }

  // The outputs and the final state of the arguments (on a mesh: once every device has finished,
  // since copies land in a device's tensors until then).
  Interpretation result() const {
    Interpretation r;
    for (int t : fn_.outputs) r.outputs.push_back(to_array(view_state(t)));
    for (int i = 0; i < fn_.num_tensor_params; ++i) r.params.push_back(to_array(tensors_[i]));
    return r;
  }

 private:
  // --- arguments and host ops ---
  void bind_args(const std::vector<Arg>& args) {
    size_t want = static_cast<size_t>(fn_.num_tensor_params) + fn_.scalar_params.size();
    if (args.size() != want)
      throw UserError("kernel " + fn_.name + " takes " + std::to_string(want) + " arguments, got " +
                      std::to_string(args.size()));
    tensors_.resize(fn_.tensors.size());
    int ti = 0;
    for (size_t i = 0; i < args.size(); ++i) {
      if (!args[i].is_tensor()) {
        scalars_.push_back(args[i].scalar);
        continue;
      }
      if (ti >= fn_.num_tensor_params)
        throw UserError("kernel " + fn_.name + ": argument " + std::to_string(i) + " is a tensor; the kernel takes " +
                        std::to_string(fn_.num_tensor_params) + " tensors");
      const Array& a = *args[i].array;
      const ir::TensorInfo& t = fn_.tensors[ti];
      PH_CHECK(t.origin == ir::TensorInfo::Param && t.param_index == ti, "tensor params come first, in order");
      if (a.shape() != t.shape || a.dtype() != t.dtype)
        throw UserError("kernel " + fn_.name + ": argument " + std::to_string(i) + " is " +
                        std::string(dtype_name(a.dtype())) + shape_to_string(a.shape()) +
                        " but the kernel was traced for " + std::string(dtype_name(t.dtype)) +
                        shape_to_string(t.shape));
      TensorState& s = tensors_[ti++];
      s.dtype = t.dtype;
      s.shape = t.shape;
      s.data.resize(static_cast<size_t>(a.numel()));
      for (int64_t k = 0; k < a.numel(); ++k) s.data[static_cast<size_t>(k)] = a.get(k);  // a copy: args stay intact
    }
    if (ti != fn_.num_tensor_params || scalars_.size() != fn_.scalar_params.size())
      throw UserError("kernel " + fn_.name + " takes " + std::to_string(fn_.num_tensor_params) + " tensors and " +
                      std::to_string(fn_.scalar_params.size()) + " scalars");
  }

  void alloc(const Op& op) {
    const ir::TensorInfo& t = fn_.tensors.at(op.tensor);
    TensorState& s = tensors_.at(op.tensor);
    s.dtype = t.dtype;
    s.shape = t.shape;
    // Unwritten memory is NaN (integers too: NaN is the "never written" marker; see to_array).
    double fill = op.has_fill ? to_storage(op.number, DType::f32, t.dtype, op.loc, "fill of " + t.name) : NAN;
    s.data.assign(static_cast<size_t>(shape_numel(t.shape)), fill);
  }

  // The contents of tensor `t` (a view: gathered from its root).
  TensorState view_state(int t) const {
    const ir::TensorInfo& info = fn_.tensors.at(t);
    if (info.origin != ir::TensorInfo::View) return tensors_.at(t);
    TensorState s;
    const TensorState& R = tensors_.at(info.root);
    s.dtype = info.dtype;
    s.shape = info.shape;
    s.data.resize(static_cast<size_t>(shape_numel(info.shape)));
    for (size_t i = 0; i < s.data.size(); ++i) {
      int64_t mem = info.offset, f = static_cast<int64_t>(i);
      for (size_t k = info.shape.size(); k-- > 0;) {
        mem += (f % info.shape[k]) * info.strides[k];
        f /= info.shape[k];
      }
      s.data[i] = R.data.at(static_cast<size_t>(flat_of(info.root, mem)));
    }
    return s;
  }

  // The logical (row-major) position in root tensor `root` of its memory element `mem`: views
  // address memory with the root's strides, the interpreter keeps logical contents.
  int64_t flat_of(int root, int64_t mem) const {
    const ir::TensorInfo& r = fn_.tensors.at(root);
    if (r.strides == contiguous_strides(r.shape)) return mem;
    auto& m = mem_to_flat_[root];
    if (m.empty()) {
      const int64_t n = shape_numel(r.shape);
      int64_t span = 1;
      for (size_t k = 0; k < r.shape.size(); ++k) span += (r.shape[k] - 1) * r.strides[k];
      m.assign(static_cast<size_t>(std::max<int64_t>(span, 1)), -1);
      for (int64_t f = 0; f < n; ++f) {
        int64_t p = 0, g = f;
        for (size_t k = r.shape.size(); k-- > 0;) {
          p += (g % r.shape[k]) * r.strides[k];
          g /= r.shape[k];
        }
        m[static_cast<size_t>(p)] = f;
      }
    }
    PH_CHECK(mem >= 0 && mem < static_cast<int64_t>(m.size()) && m[static_cast<size_t>(mem)] >= 0,
             "a view addresses memory outside its root " + r.name);
    return m[static_cast<size_t>(mem)];
  }

  static Array to_array(const TensorState& s) {
    Array a = Array::empty(s.shape, s.dtype);
    double unwritten = s.dtype == DType::i32   ? INT32_MIN
                       : s.dtype == DType::i64 ? -9223372036854775808.0
                       : s.dtype == DType::i8  ? -128.0
                       : s.dtype == DType::u8  ? 0.0
                                               : 1.0;
    bool integral = !is_floating(s.dtype);
    for (size_t i = 0; i < s.data.size(); ++i) {
      double v = s.data[i];
      a.set(static_cast<int64_t>(i), integral && std::isnan(v) ? unwritten : v);
    }
    return a;
  }

  // --- loops ---
  // Iterates the blocks of op.loop_tiles[k..], row-major, then runs the body.
  void loop(const Op& op, size_t k) {
    if (op.kind == OpKind::Launch && k == 0) scattered_.clear();  // races are within a launch
    if (k == op.loop_tiles.size()) {
      if (op.kind == OpKind::Launch) ++step_;  // a new grid step
      for (const Op& o : op.body) exec(o);
      return;
    }
    int tile = op.loop_tiles[k];
    const ir::TileInfo& t = fn_.tiles.at(tile);
    int64_t block = block_of(fn_, tile);
    int64_t begin = t.begin, end = t.end;
    if (t.parent >= 0) {  // the enclosing tile's current block
      begin = tile_off_.at(t.parent);
      end = begin + tile_len_.at(t.parent);
      block = std::min(block, tile_block_.at(t.parent));
    }
    if (t.is_jagged()) {  // this entry's range; a tunable block is all of it
      begin = static_cast<int64_t>(val(t.begin_value).data.at(0));
      end = static_cast<int64_t>(val(t.end_value).data.at(0));
      if (begin < end && (begin < 0 || end > t.end))
        fail(op.loc, "the range " + std::to_string(begin) + ".." + std::to_string(end) + " of jagged tile " +
                         ir::tile_name(fn_, tile) + " is outside 0.." + std::to_string(t.end) +
                         ", the dimensions it indexes");
      if (fn_.block_sizes.at(t.block).fixed == 0) block = std::max<int64_t>(1, end - begin);
    }
    tile_block_[tile] = block;
    for (int64_t off = begin; off < end; off += block) {
      tile_off_[tile] = off;
      tile_len_[tile] = std::min(block, end - off);
      tile_num_[tile] = (off - begin) / block;
      loop(op, k + 1);
    }
    tile_len_[tile] = -1;  // out of scope
  }

  // --- values ---
  Shape concrete(const ir::Type& t) const {
    Shape s;
    for (const Dim& d : t.shape) {
      if (d.kind == Dim::Const) {
        s.push_back(d.size);
      } else {
        PH_CHECK(tile_len_.at(d.tile) >= 0, "a value's tile dim outside its loop");
        s.push_back(tile_len_[d.tile]);
      }
    }
    return s;
  }

  const Value& val(int v) const { return values_.at(v); }
  const Value& operand(const Op& op, int k) const { return val(op.operands.at(k)); }

  void define(const Op& op, Value v) {
    const ir::Type& t = fn_.type_of(op.result);
    PH_CHECK(v.dtype == t.dtype && v.shape == concrete(t),
             std::string(ir::op_name(op)) + " at " + op.loc.str() + " made " + std::string(dtype_name(v.dtype)) +
                 shape_to_string(v.shape) + ", its type says " + ir::type_to_string(fn_, t));
    values_[op.result] = std::move(v);
  }

  void exec(const Op& op) {
    switch (op.kind) {
      case OpKind::Loop:
        return loop(op, 0);
      case OpKind::If:
        if (operand(op, 0).scalar() != 0)
          for (const Op& o : op.body) exec(o);
        return;
      case OpKind::Store:
        return store(op);
      case OpKind::CopyStart:
        return copy_start(op);
      case OpKind::CopyWait:
        if (static_cast<ir::CopyEnd>(op.fn) == ir::CopyEnd::send) return world_->wait_send(device_, op.channel, op.loc);
        return world_->wait_recv(device_, op.channel, op.loc);
      case OpKind::Barrier:
        return world_->barrier(device_, op.dims, op.loc);
      case OpKind::Signal:
        return world_->signal(device_, peer_of(op, 1), op.channel, static_cast<int64_t>(operand(op, 0).scalar()),
                              op.loc);
      case OpKind::SemWait:
        return world_->wait(device_, op.channel, static_cast<int64_t>(operand(op, 0).scalar()), op.loc);
      case OpKind::VarDecl:
      case OpKind::VarSet: {
        const ir::VarInfo& info = fn_.vars.at(op.var);
        Value v = broadcast_to(operand(op, 0), concrete(info.type));
        PH_CHECK(v.dtype == info.type.dtype, "Var assigned a value of another dtype");
        vars_[op.var] = std::move(v);
        return;
      }
      case OpKind::Alloc:
      case OpKind::Launch:
        throw InternalError(std::string(ir::op_name(op)) + " in device code");
      default:
        return define(op, evaluate(op));
    }
  }

  Value evaluate(const Op& op) {
    const ir::Type& t = fn_.type_of(op.result);
    const Shape shape = concrete(t);
    switch (op.kind) {
      case OpKind::Load:
        return load(op, shape);
      // Literals and scalar arguments are f32 values in the language (the backends compute
      // with the float nearest the number): round them, so that `x > 0.1` compares with 0.1f.
      case OpKind::Constant:
      case OpKind::Full: {
        const double number = t.dtype == DType::f32 ? static_cast<double>(static_cast<float>(op.number)) : op.number;
        return Value::filled(t.dtype, shape, cast_to(number, DType::f32, t.dtype, op.loc));
      }
      case OpKind::DeviceIndex:
        return Value::filled(DType::i64, {}, static_cast<double>(coords_.at(op.axis)));
      case OpKind::ScalarParam: {
        const double v = scalars_.at(op.param);
        if (fn_.type_of(op.result).dtype != DType::i64)
          return Value::filled(DType::f32, {}, static_cast<double>(static_cast<float>(v)));
        if (std::nearbyint(v) != v || std::abs(v) >= 9007199254740992.0)  // a ph::Int
          fail(op.loc,
               "integer argument " + fn_.scalar_params.at(op.param) + " is " + std::to_string(v) + ", not an integer");
        return Value::filled(DType::i64, {}, v);
      }
      case OpKind::TileBegin:
        return Value::filled(DType::i64, {}, static_cast<double>(tile_off_.at(op.tile)));
      case OpKind::TileEnd:
        return Value::filled(DType::i64, {}, static_cast<double>(tile_off_.at(op.tile) + tile_len_.at(op.tile)));
      case OpKind::TileId:
        return Value::filled(DType::i64, {}, static_cast<double>(tile_num_.at(op.tile)));
      case OpKind::TileIndex:
      case OpKind::Arange: {
        Value r = Value::filled(DType::i64, shape, 0);
        double base = op.kind == OpKind::TileIndex ? static_cast<double>(tile_off_.at(op.tile)) : 0;
        for (size_t i = 0; i < r.data.size(); ++i) r.data[i] = base + static_cast<double>(i);
        return r;
      }
      case OpKind::VarGet:
        return vars_.at(op.var);
      case OpKind::Unary: {
        const Value& a = operand(op, 0);
        Value r = Value::filled(t.dtype, shape, 0);
        for (size_t i = 0; i < r.data.size(); ++i)
          r.data[i] = unary(static_cast<UnaryFn>(op.fn), a.dtype, a.data[i], op.loc);
        return r;
      }
      case OpKind::Binary: {
        const Value &a = operand(op, 0), &b = operand(op, 1);
        Broadcast ma(a.shape, shape), mb(b.shape, shape);
        Value r = Value::filled(t.dtype, shape, 0);
        for (size_t i = 0; i < r.data.size(); ++i)
          r.data[i] = binary(static_cast<BinaryFn>(op.fn), t.dtype, a.data[ma[i]], b.data[mb[i]], op.loc);
        return r;
      }
      case OpKind::Where: {
        const Value &c = operand(op, 0), &a = operand(op, 1), &b = operand(op, 2);
        Broadcast mc(c.shape, shape), ma(a.shape, shape), mb(b.shape, shape);
        Value r = Value::filled(t.dtype, shape, 0);
        for (size_t i = 0; i < r.data.size(); ++i) r.data[i] = c.data[mc[i]] != 0 ? a.data[ma[i]] : b.data[mb[i]];
        return r;
      }
      case OpKind::Cast: {
        const Value& a = operand(op, 0);
        Value r = Value::filled(t.dtype, shape, 0);
        for (size_t i = 0; i < r.data.size(); ++i) r.data[i] = cast_to(a.data[i], a.dtype, op.dtype, op.loc);
        return r;
      }
      case OpKind::Reduce:
        return reduce(op, shape);
      case OpKind::Scan:
        return scan(op, shape);
      case OpKind::Unsqueeze: {
        Value r = operand(op, 0);
        r.shape = shape;  // inserting a size-1 dim does not move any element
        return r;
      }
      case OpKind::Transpose:
        return transpose(operand(op, 0), shape);
      case OpKind::Dot:
        return dot(op, shape);
      case OpKind::Reshape:
      case OpKind::Permute:
      case OpKind::Expand:
      case OpKind::Squeeze:
      case OpKind::Split:
      case OpKind::Join:
      case OpKind::Stack:
      case OpKind::Cat: {
        std::vector<const Value*> in;
        for (int v : op.operands) in.push_back(&val(v));
        return block_view(op, in, shape);
      }
      default:
        throw InternalError("the interpreter has no rule for " + std::string(ir::op_name(op)));
    }
  }

  // --- memory ---
  // The flat position in tensor op.tensor of every element of the block op.index selects (in
  // the block's row-major order), or -1 for an element `active` (the mask) leaves out. Scalar
  // and gathered indices are checked against their dimension here, for active elements only.
  std::vector<int64_t> region(const Op& op, const Shape& block, const char* verb,
                              const std::vector<bool>* active = nullptr) const {
    const ir::TensorInfo& info = fn_.tensors.at(op.tensor);
    // A view addresses its root's memory with its own strides and offset (mapped back to the
    // root's logical positions at the end).
    const bool is_view = info.origin == ir::TensorInfo::View;
    const Shape& tshape = info.shape;
    Shape strides = is_view ? info.strides : contiguous_strides(tshape);
    auto checked = [&](double v, size_t d) {
      if (std::isnan(v))
        fail(op.loc, std::string(verb) + " " + info.name + ": the index for dimension " + std::to_string(d) +
                         " was read from memory the kernel never wrote");
      if (v < 0 || v >= static_cast<double>(tshape[d]))
        fail(op.loc, std::string(verb) + " " + info.name + ": index " + integer(v) +
                         " is out of bounds for dimension " + std::to_string(d) + " of " + info.name +
                         ", which has size " + std::to_string(tshape[d]));
      return static_cast<int64_t>(v);
    };
    // Per tensor dim: which block dim it follows (-1: none), and its fixed part.
    std::vector<int> block_dim(op.index.size(), -1);
    int64_t base = is_view ? info.offset : 0;
    int j = 0;
    for (size_t d = 0; d < op.index.size(); ++d) {
      const IndexItem& it = op.index[d];
      if (it.kind == IndexItem::All || it.kind == IndexItem::Gather) {
        block_dim[d] = j++;
      } else if (it.kind == IndexItem::Tile) {
        base += tile_off_.at(it.tile) * strides[d];
        if (!fn_.tiles.at(it.tile).is_grid) block_dim[d] = j++;  // a grid index drops the dim
      } else if (it.kind == IndexItem::Slice) {
        double v = val(it.value).scalar();
        if (std::isnan(v))
          fail(op.loc, std::string(verb) + " " + info.name + ": the start of the slice of dimension " +
                           std::to_string(d) + " was read from memory the kernel never wrote");
        if (v < 0 || v + static_cast<double>(it.length) > static_cast<double>(tshape[d]))
          fail(op.loc, std::string(verb) + " " + info.name + ": a slice of length " + std::to_string(it.length) +
                           " starting at " + integer(v) + " is out of bounds for dimension " + std::to_string(d) +
                           " of " + info.name + ", which has size " + std::to_string(tshape[d]));
        base += static_cast<int64_t>(v) * strides[d];
        block_dim[d] = j++;
      } else if (!active) {
        base += checked(val(it.value).scalar(), d) * strides[d];
      }
    }
    PH_CHECK(j == static_cast<int>(block.size()), "a region's rank differs from its block's");
    std::vector<int64_t> pos(static_cast<size_t>(shape_numel(block)));
    std::vector<int64_t> idx(block.size(), 0);
    for (size_t i = 0; i < pos.size(); ++i) {
      if (!active || (*active)[i]) {
        int64_t p = base;
        for (size_t d = 0; d < op.index.size(); ++d) {
          const IndexItem& it = op.index[d];
          if (it.kind == IndexItem::Gather)
            p += checked(val(it.value).data.at(static_cast<size_t>(idx[block_dim[d]])), d) * strides[d];
          else if (it.kind == IndexItem::Scalar && active)
            p += checked(val(it.value).scalar(), d) * strides[d];
          else if (block_dim[d] >= 0)
            p += idx[block_dim[d]] * strides[d];
        }
        pos[i] = p;
      } else {
        pos[i] = -1;
      }
      for (size_t k = block.size(); k-- > 0;) {  // odometer step
        if (++idx[k] < block[k]) break;
        idx[k] = 0;
      }
    }
    if (is_view)
      for (int64_t& q : pos)
        if (q >= 0) q = flat_of(info.root, q);
    return pos;
  }

  // The mask of a masked access (operand k), broadcast to the block: which elements are active.
  std::vector<bool> mask_of(const Op& op, int k, const Shape& shape) const {
    Value m = broadcast_to(operand(op, k), shape);
    std::vector<bool> a(m.data.size());
    for (size_t i = 0; i < a.size(); ++i) a[i] = m.data[i] != 0;
    return a;
  }

  Value load(const Op& op, const Shape& shape) {
    const int root = ir::root_of(fn_, op.tensor);
    const TensorState& T = tensors_.at(root);
    const bool masked = op.operands.size() == 2;
    std::vector<bool> active;
    if (masked) active = mask_of(op, 0, shape);
    std::vector<int64_t> pos = region(op, shape, "load from", masked ? &active : nullptr);
    if (world_) {
      world_->access(device_, {root, pos}, false, op.loc);
      if (copy_sources_.count(op.result)) {
        copy_source_regions_[op.result] = {root, pos};
        copy_source_locs_[op.result] = &op.loc;
      }
    }
    // Stored elements are already values of the storage dtype; widening them to the compute
    // dtype (bf16/f16 -> f32, i32 -> i64, bool -> bool) is exact.
    Value r = masked ? broadcast_to(operand(op, 1), shape) : Value::filled(compute_dtype(T.dtype), shape, 0);
    for (size_t i = 0; i < pos.size(); ++i)
      if (pos[i] >= 0) {
        r.data[i] = T.data[static_cast<size_t>(pos[i])];
        // An i64 argument beyond 2^53 was already rounded when it became a double: refuse it.
        if (T.dtype == DType::i64) exact_i64(r.data[i], op.loc);
      }
    return r;
  }

  void store(const Op& op) {
    ir::Type rt;
    std::string err = ir::load_type(fn_, op.tensor, op.index, &rt);
    PH_CHECK(err.empty(), err);
    Shape shape = concrete(rt);
    const bool masked = op.operands.size() == 2;
    std::vector<bool> active;
    if (masked) active = mask_of(op, 1, shape);
    std::vector<int64_t> pos = region(op, shape, "store to", masked ? &active : nullptr);
    // (A jagged tile's rows are data too: ranges of different grid steps must not overlap.)
    const ir::AtomicFn update = ir::atomic_fn(op);
    if (update == ir::AtomicFn::none && (ir::has_gather(op) || ir::indexes_jagged_tile(fn_, op)))
      check_scatter_race(op, pos);
    Value v = broadcast_to(operand(op, 0), shape);
    const int root = ir::root_of(fn_, op.tensor);
    if (world_) world_->access(device_, {root, pos}, true, op.loc);
    TensorState& T = tensors_.at(root);
    const std::string what = std::string(ir::atomic_name(update)) + " to " + fn_.tensors[op.tensor].name;
    // An atomic update combines each element in turn (a repeated index counts each time); the
    // sum of two values of a dtype is exact in a double, so one rounding gives the dtype's sum.
    for (size_t i = 0; i < pos.size(); ++i) {
      if (pos[i] < 0) continue;
      double& e = T.data[static_cast<size_t>(pos[i])];
      double x = v.data[i];
      if (update == ir::AtomicFn::add) x = e + x;
      if (update == ir::AtomicFn::max) x = nan_max(e, x);
      if (update == ir::AtomicFn::min) x = nan_min(e, x);
      e = to_storage(x, v.dtype, T.dtype, op.loc, what);
    }
  }

  // The device a peer's coordinates (operands from `first` on) name, checked against the mesh.
  int peer_of(const Op& op, size_t first) const {
    std::vector<int64_t> c;
    for (size_t i = first; i < op.operands.size(); ++i) {
      const double v = val(op.operands[i]).scalar();
      const ir::MeshAxis& axis = fn_.mesh.at(i - first);
      if (std::isnan(v) || v < 0 || v >= static_cast<double>(axis.size))
        fail(op.loc, std::string(ir::op_name(op)) + ": the peer's coordinate along " + axis.name + " is " +
                         (std::isnan(v) ? "a value never written" : integer(v)) + ", outside the mesh's 0.." +
                         std::to_string(axis.size - 1));
      c.push_back(static_cast<int64_t>(v));
    }
    return static_cast<int>(world_->mesh().device_at(c));
  }

  // A remote copy lands when it starts: the block, rounded to the destination's dtype, is
  // written into the peer's tensor (MeshWorld checks that no schedule could tell).
  void copy_start(const Op& op) {
    const int receiver = peer_of(op, 1);
    ir::Type rt;
    std::string err = ir::load_type(fn_, op.tensor, op.index, &rt);
    PH_CHECK(err.empty(), err);
    const Shape shape = concrete(rt);
    const std::vector<int64_t> pos = region(op, shape, "copy to", nullptr);
    const int root = ir::root_of(fn_, op.tensor);
    auto source = copy_source_regions_.find(op.operands[0]);
    if (source != copy_source_regions_.end()) check_unchanged_since_load(op, source->second);
    world_->start_copy(device_, receiver, op.channel, {root, pos},
                       source == copy_source_regions_.end() ? MeshWorld::Region{} : source->second,
                       staged_copies_.count(&op) ? &op : nullptr, op.loc);
    const Value v = broadcast_to(operand(op, 0), shape);
    TensorState& T = devices_->at(receiver)->tensors_.at(root);
    const std::string what = "copy to " + fn_.tensors[op.tensor].name;
    for (size_t i = 0; i < pos.size(); ++i)
      T.data[static_cast<size_t>(pos[i])] = to_storage(v.data[i], v.dtype, T.dtype, op.loc, what);
  }

  // A block sent in place (ir::copy_block_load) is read from its region when the copy starts, as a
  // backend sends it: the region must still hold what was loaded (nobody wrote it in between).
  void check_unchanged_since_load(const Op& start, const MeshWorld::Region& source) {
    const TensorState& S = tensors_.at(source.root);
    const Value& loaded = operand(start, 0);
    for (size_t i = 0; i < source.positions.size() && i < loaded.data.size(); ++i) {
      const int64_t p = source.positions[i];
      if (p < 0) continue;
      const double now = S.data[static_cast<size_t>(p)], then = loaded.data[i];
      if (now == then || (std::isnan(now) && std::isnan(then))) continue;
      fail(start.loc, "copy c" + std::to_string(start.channel) + " sends its block in place from " +
                          fn_.tensors[source.root].name + ", loaded at " +
                          copy_source_locs_.at(start.operands[0])->str() +
                          ", but that region was written between the load and this start (a backend sends what "
                          "the region holds when the copy starts): start the copy before writing the region, or "
                          "copy a computed block (staged)");
    }
  }

  // A scatter that writes one position twice in one block, or that a different (parallel) grid
  // step of the launch also scattered to, has no defined result: refused.
  void check_scatter_race(const Op& op, const std::vector<int64_t>& pos) {
    const int root = ir::root_of(fn_, op.tensor);  // positions are the root's (views included)
    std::map<int64_t, int64_t>& seen = scattered_[root];
    std::set<int64_t> here;
    for (int64_t p : pos) {
      if (p < 0) continue;
      auto it = seen.find(p);
      const bool twice_here = !here.insert(p).second, other_step = it != seen.end() && it->second != step_;
      if (twice_here || other_step) {
        const Shape& shape = tensors_.at(root).shape;
        Shape at(shape.size());
        int64_t q = p;
        for (size_t d = shape.size(); d-- > 0;) {
          at[d] = q % shape[d];
          q /= shape[d];
        }
        fail(op.loc, "scatter to " + fn_.tensors[root].name + ": element " + shape_to_string(at) +
                         " is written twice (a repeated index" +
                         (twice_here ? " in one block" : " in two parallel grid steps") +
                         "): the writes race and the result is undefined");
      }
      seen[p] = step_;
    }
  }

  // --- structure ---
  Value reduce(const Op& op, const Shape& shape) const {
    const Value& a = operand(op, 0);
    auto f = static_cast<ReduceFn>(op.fn);
    const int axis = op.axis;
    int64_t outer = 1, inner = 1, n = a.shape.at(axis);
    for (int k = 0; k < axis; ++k) outer *= a.shape[k];
    for (size_t k = axis + 1; k < a.shape.size(); ++k) inner *= a.shape[k];
    const bool i64 = a.dtype == DType::i64;
    // The identity of max/min over no elements: what the CPU backend starts from.
    double init = f == ReduceFn::max   ? (i64 ? -9223372036854775808.0 : -INFINITY)
                  : f == ReduceFn::min ? (i64 ? 9223372036854775807.0 : INFINITY)
                                       : 0.0;
    Value r = Value::filled(fn_.type_of(op.result).dtype, shape, 0);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        double acc = init;
        for (int64_t k = 0; k < n; ++k) {
          double x = a.data[static_cast<size_t>((o * n + k) * inner + i)];
          if (f == ReduceFn::max)
            acc = nan_max(acc, x);
          else if (f == ReduceFn::min)
            acc = nan_min(acc, x);
          else
            acc += x;
        }
        if (f == ReduceFn::mean) acc /= static_cast<double>(n);
        if (i64 && (f == ReduceFn::sum)) acc = exact_i64(acc, op.loc);
        r.data[static_cast<size_t>(o * inner + i)] = acc;
      }
    return r;
  }

  // A scan (src/ir/scan.h): each line along the axis in scan order, through the combine
  // function evaluated by this interpreter's own rules on rank-0 values. Lines hold the
  // block's valid elements only (a ragged block's shape is its valid count).
  Value scan(const Op& op, const Shape& shape) {
    const ir::ScanCombine& c = op.combine.at(0);
    const size_t n = op.operands.size();
    std::vector<const Value*> in;
    for (size_t k = 0; k < n; ++k) in.push_back(&operand(op, static_cast<int>(k)));
    const int axis = op.axis;
    int64_t outer = 1, inner = 1;
    const int64_t len = shape.at(axis);
    for (int k = 0; k < axis; ++k) outer *= shape[k];
    for (size_t k = axis + 1; k < shape.size(); ++k) inner *= shape[k];
    Value r = Value::filled(fn_.type_of(op.result).dtype, shape, 0);
    std::vector<double> acc(n), next(n);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i)
        for (int64_t s = 0; s < len; ++s) {
          const int64_t k = op.reverse ? len - 1 - s : s;
          const auto at = static_cast<size_t>((o * len + k) * inner + i);
          for (size_t j = 0; j < n; ++j) next[j] = in[j]->data[at];
          if (s == 0)
            acc = next;
          else
            acc = combine(c, acc, next);
          r.data[at] = acc[static_cast<size_t>(op.fn)];
        }
    return r;
  }

  // The combine function applied to the running tuple `a` and the next element `b`.
  std::vector<double> combine(const ir::ScanCombine& c, const std::vector<double>& a, const std::vector<double>& b) {
    const size_t n = a.size();
    for (size_t j = 0; j < 2 * n; ++j) {
      const int p = c.params[j];
      values_[p] = Value::filled(fn_.type_of(p).dtype, {}, j < n ? a[j] : b[j - n]);
    }
    for (const Op& op : c.ops) define(op, evaluate(op));
    std::vector<double> r;
    for (int v : c.results) r.push_back(values_.at(v).scalar());
    return r;
  }

  static Value transpose(const Value& a, const Shape& shape) {
    const size_t r = a.shape.size();
    const int64_t rows = a.shape[r - 2], cols = a.shape[r - 1], mat = rows * cols;
    const int64_t batch = mat ? static_cast<int64_t>(a.data.size()) / mat : 0;
    Value out = Value::filled(a.dtype, shape, 0);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) out.data[b * mat + j * rows + i] = a.data[b * mat + i * cols + j];
    return out;
  }

  Value dot(const Op& op, const Shape& shape) const {
    const Value &a = operand(op, 0), &b = operand(op, 1);
    const size_t ra = a.shape.size(), rb = b.shape.size(), rr = shape.size();
    const int64_t M = a.shape[ra - 2], K = a.shape[ra - 1], N = b.shape[rb - 1];
    PH_CHECK(b.shape[rb - 2] == K && shape[rr - 2] == M && shape[rr - 1] == N, "dot shapes");
    Shape batch(shape.begin(), shape.end() - 2);
    Broadcast ba(Shape(a.shape.begin(), a.shape.end() - 2), batch),
        bb(Shape(b.shape.begin(), b.shape.end() - 2), batch);
    Value r = Value::filled(DType::f32, shape, 0);
    if (op.operands.size() > 2) r = broadcast_to(operand(op, 2), shape);
    const auto batches = static_cast<size_t>(shape_numel(batch));
    for (size_t p = 0; p < batches; ++p) {
      const double* A = a.data.data() + ba[p] * M * K;
      const double* B = b.data.data() + bb[p] * K * N;
      double* C = r.data.data() + static_cast<int64_t>(p) * M * N;
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k) s += A[i * K + k] * B[k * N + j];
          C[i * N + j] += s;
        }
    }
    return r;
  }

  const ir::Function& fn_;
  std::vector<TensorState> tensors_;
  std::vector<double> scalars_;
  std::vector<int64_t> tile_off_, tile_len_;                 // the current block of each tile (len -1: not in a loop)
  std::vector<int64_t> tile_num_;                            // its number within its loop (TileId)
  std::vector<int64_t> tile_block_;                          // the block it is cut into (a jagged one's varies)
  std::vector<Value> values_;                                // by value id: the latest definition
  std::vector<Value> vars_;                                  // by var id
  mutable std::map<int, std::vector<int64_t>> mem_to_flat_;  // strided roots of views: memory -> logical
  int64_t step_ = 0;                                         // the current grid step (a counter over launches)
  std::map<int, std::map<int64_t, int64_t>> scattered_;      // root tensor -> position -> step that scattered it
  // On a mesh (join_mesh): the world, this device, its coordinates, every device; the loads that
  // copies send (value ids) and the region each last read.
  MeshWorld* world_ = nullptr;
  int device_ = 0;
  std::vector<int64_t> coords_;
  std::vector<Interpreter*>* devices_ = nullptr;
  std::set<int> copy_sources_;         // loads that copies send in place (ir::copy_block_load)
  std::set<const Op*> staged_copies_;  // copies whose blocks are staged
  std::map<int, MeshWorld::Region> copy_source_regions_;
  std::map<int, const ir::SourceLoc*> copy_source_locs_;  // (the loads' ops outlive the run)
};

// Work of `ops` run `trips` times (see work_estimate).
double work(const ir::Function& fn, const std::vector<Op>& ops, double trips) {
  auto len = [&](const Dim& d) {
    if (d.kind == Dim::Const) return static_cast<double>(d.size);
    const ir::TileInfo& t = fn.tiles[d.tile];
    return static_cast<double>(std::min(block_of(fn, d.tile), t.extent()));
  };
  auto numel = [&](const ir::Type& t) {
    double n = 1;
    for (const Dim& d : t.shape) n *= len(d);
    return n;
  };
  double w = 0;
  for (const Op& op : ops) {
    if (op.kind == OpKind::Alloc) {
      w += static_cast<double>(shape_numel(fn.tensors[op.tensor].shape));
    } else if (op.kind == OpKind::Launch || op.kind == OpKind::Loop) {
      double blocks = 1;
      for (int t : op.loop_tiles) {
        double e = static_cast<double>(fn.tiles[t].extent()), b = static_cast<double>(block_of(fn, t));
        blocks *= std::ceil(e / b);
      }
      w += work(fn, op.body, trips * blocks);
    } else if (op.kind == OpKind::Dot) {
      const ir::Type& a = fn.type_of(op.operands[0]);
      w += trips * numel(fn.type_of(op.result)) * len(a.shape.back());
    } else if (op.kind == OpKind::Reduce || op.kind == OpKind::Store || op.kind == OpKind::VarSet ||
               op.kind == OpKind::VarDecl) {
      w += trips * numel(fn.type_of(op.operands[0])) * (op.kind == OpKind::Store ? 2 : 1);
    } else if (op.result >= 0) {
      w += trips * numel(fn.type_of(op.result));
    }
  }
  return w;
}

}  // namespace

Interpretation interpret(const ir::Function& fn, const std::vector<Arg>& args) {
  if (!fn.mesh.empty())
    throw UserError("kernel " + fn.name + " runs on a mesh (" + Mesh(fn.mesh).to_string() +
                    "): interpret it on one (interpret_on_mesh, KernelBase::interpret_on)");
  if (ir::has_block_counts(fn)) {
    const ir::Function bound = bind_counts(fn);
    return Interpreter(bound, args).run();
  }
  return Interpreter(fn, args).run();
}

std::vector<Interpretation> interpret_on_mesh(const ir::Function& traced, const std::vector<std::vector<Arg>>& args) {
  if (traced.mesh.empty()) throw UserError("kernel " + traced.name + " was not traced on a mesh");
  const ir::Function fn = ir::has_block_counts(traced) ? bind_counts(traced) : traced;
  MeshWorld world(fn);
  if (static_cast<int>(args.size()) != world.devices())
    throw UserError("kernel " + fn.name + " on mesh " + world.mesh().to_string() + " takes the arguments of " +
                    std::to_string(world.devices()) + " devices, got " + std::to_string(args.size()));
  std::vector<std::unique_ptr<Interpreter>> owned;
  std::vector<Interpreter*> devices;
  for (const std::vector<Arg>& a : args) {
    owned.push_back(std::make_unique<Interpreter>(fn, a));
    devices.push_back(owned.back().get());
  }
  for (int d = 0; d < world.devices(); ++d) devices[d]->join_mesh(&world, d, &devices);
  world.run([&](int d) { devices[d]->execute(); });
  std::vector<Interpretation> results;
  for (Interpreter* d : devices) results.push_back(d->result());
  return results;
}

double work_estimate(const ir::Function& fn) { return work(fn, fn.body, 1); }

}  // namespace parhelion::interp

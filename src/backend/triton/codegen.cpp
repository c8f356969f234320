#include "backend/triton/codegen.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "backend/triton/layout.h"
#include "ir/printer.h"
#include "ir/trip_guard.h"
#include "ir/type_rules.h"
#include "parhelion/dtype.h"
#include "parhelion/error.h"

namespace parhelion::backend::triton {

namespace {

using ir::BinaryFn;
using ir::Dim;
using ir::Op;
using ir::OpKind;
using ir::ReduceFn;
using ir::UnaryFn;

// How a storage dtype is spelled: Triton's element type, the pointer type of triton.compile's
// signature, and torch's dtype.
struct DTypeNames {
  DType dtype;
  const char *tl, *signature, *torch;
};
constexpr DTypeNames kDTypeNames[] = {
    {DType::f32, "tl.float32", "*fp32", "torch.float32"},
    {DType::bf16, "tl.bfloat16", "*bf16", "torch.bfloat16"},
    {DType::f16, "tl.float16", "*fp16", "torch.float16"},
    {DType::f8e4m3, "tl.float8e4nv", "*fp8e4nv", "torch.float8_e4m3fn"},
    {DType::f8e5m2, "tl.float8e5", "*fp8e5", "torch.float8_e5m2"},
    {DType::i64, "tl.int64", "*i64", "torch.int64"},
    {DType::i32, "tl.int32", "*i32", "torch.int32"},
    {DType::i8, "tl.int8", "*i8", "torch.int8"},
    {DType::u8, "tl.uint8", "*u8", "torch.uint8"},
    {DType::boolean, "tl.int1", "*i1", "torch.bool"},
};
const DTypeNames& names_of(DType d) {
  for (const DTypeNames& n : kDTypeNames)
    if (n.dtype == d) return n;
  throw InternalError("the triton emitter has no names for dtype " + std::string(dtype_name(d)));
}
std::string tl_dtype(DType d) { return names_of(d).tl; }
std::string signature_type(DType d) { return names_of(d).signature; }
std::string torch_dtype(DType d) { return names_of(d).torch; }

bool is_float_storage(DType d) { return d == DType::f32 || d == DType::bf16 || d == DType::f16 || is_fp8(d); }

// A Python literal of a number in a compute dtype.
std::string literal(double v, DType compute) {
  if (compute == DType::boolean) return v != 0 ? "True" : "False";
  if (compute == DType::i64) return std::to_string(static_cast<int64_t>(v));
  if (std::isnan(v)) return "float(\"nan\")";
  if (std::isinf(v)) return v > 0 ? "float(\"inf\")" : "float(\"-inf\")";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  std::string s = buf;
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

std::string join(const std::vector<std::string>& v, const std::string& sep = ", ") {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

std::string shape_list(const std::vector<int64_t>& s) {
  std::vector<std::string> v;
  for (int64_t x : s) v.push_back(std::to_string(x));
  return "[" + join(v) + "]";
}

std::string py_tuple(const std::vector<int64_t>& s) {
  std::vector<std::string> v;
  for (int64_t x : s) v.push_back(std::to_string(x));
  return "(" + join(v) + (v.size() == 1 ? ",)" : ")");
}

// Helpers the kernels call: integer and float semantics of the Tile IR (include/parhelion/
// lang.h) that Triton's operators do not have (its // and % truncate), and the
// transcendentals the interpreter lacks (libdevice), from tl primitives.
const char* kHelpers = R"PY(
@triton.jit
def _floordiv_i(a, b):
    q = a // tl.where(b == 0, 1, b)
    q = tl.where((a % tl.where(b == 0, 1, b) != 0) & ((a < 0) != (b < 0)), q - 1, q)
    return tl.where(b == 0, 0, q)


@triton.jit
def _mod_i(a, b):
    safe = tl.where((b == 0) | (b == -1), 1, b)
    r = a % safe
    r = tl.where((r != 0) & ((r < 0) != (safe < 0)), r + safe, r)
    return tl.where((b == 0) | (b == -1), 0, r)


@triton.jit
def _mod_f(a, b):
    return a - tl.floor(a / b) * b


@triton.jit
def _shl(a, n):
    return tl.where((n < 0) | (n > 63), 0, a << tl.where((n < 0) | (n > 63), 0, n))


@triton.jit
def _shr(a, n):
    return a >> tl.where((n < 0) | (n > 63), 63, n)


@triton.jit
def _tanh(x):
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    t = tl.where(tl.abs(x) < 0.0004, x * (1.0 - x * x / 3.0), tl.where(x < 0, -t, t))
    return tl.where(x != x, x, t)


@triton.jit
def _rint(x):
    f = tl.floor(x)
    d = x - f
    even = (f - 2.0 * tl.floor(f * 0.5)) == 0.0
    return tl.where(d > 0.5, f + 1.0, tl.where(d < 0.5, f, tl.where(even, f, f + 1.0)))


@triton.jit
def _trunc(x):
    return tl.where(x < 0, tl.ceil(x), tl.floor(x))


@triton.jit
def _pow(a, b):
    m = tl.exp2(b * tl.log2(tl.abs(a)))
    odd = (tl.abs(b) - 2.0 * tl.floor(tl.abs(b) * 0.5)) == 1.0
    whole = tl.floor(b) == b
    r = tl.where(a < 0, tl.where(whole, tl.where(odd, -m, m), float("nan")), m)
    return tl.where(b == 0, 1.0, tl.where(a == 1.0, 1.0, r))


@triton.jit
def _round_bf16(x):
    # x (f32) rounded to the nearest bf16, ties to even, as an f32: what a GPU's conversion does,
    # spelled out because Triton's interpreter truncates.
    bits = x.to(tl.uint32, bitcast=True)
    bits = (bits + (0x7FFF + ((bits >> 16) & 1))) & 0xFFFF0000
    return tl.where(x != x, x, bits.to(tl.float32, bitcast=True))


@triton.jit
def _round_f8(x, M: tl.constexpr, BIAS: tl.constexpr, MAXF: tl.constexpr, HAS_INF: tl.constexpr):
    # x (f32) rounded to an fp8 format of M mantissa bits, ties to even, finite values saturated
    # to MAXF (the language's fp8 casts), as an f32: the ulp of |x|'s binade (or of the
    # subnormals), built from exponent bits, so the division and the rounding are exact.
    a = tl.minimum(tl.abs(x), MAXF)
    e = ((a.to(tl.uint32, bitcast=True) >> 23) & 0xFF).to(tl.int32) - 127
    e = tl.maximum(e, 1 - BIAS)
    ulp = ((e - M + 127).to(tl.uint32) << 23).to(tl.float32, bitcast=True)
    r = _rint(a / ulp) * ulp
    r = tl.where(x < 0, -r, r)
    if HAS_INF:
        r = tl.where(tl.abs(x) == float("inf"), x, r)
    return tl.where(x != x, x, r)


@triton.jit
def _flag(perr, bad, site, index):
    # An index out of its dim: records (site, index) for the host to raise (any one of them).
    zero = tl.zeros_like(bad.to(tl.int64))
    tl.store(perr + zero, site + zero, mask=bad)
    tl.store(perr + 1 + zero, index + zero, mask=bad)


@triton.jit
def _silu(x):
    return tl.where(x == float("-inf"), -0.0, x / (1.0 + tl.exp(-x)))


@triton.jit
def _gelu(x):
    g = 0.5 * x * (1.0 + _tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    return tl.where(x == float("-inf"), -0.0, g)


@triton.jit
def _gelu_exact(x):
    g = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    return tl.where(x == float("-inf"), -0.0, g)
)PY";

// ph::rand and ph::randn (include/parhelion/lang.h): Philox-4x32-10 at counter (offset lo,
// offset hi, 0, 0) under key (seed lo, seed hi), the 64-bit values split into words, as the
// interpreter computes it (Triton's tl.rand takes 64-bit offsets as Philox-4x64, another
// stream). The uniform map is bit for bit the interpreter's; the normal one takes cos(2 pi u)
// as the pallas backend does (reduced exactly in u, then polynomials), in f32.
const char* kRandomHelpers = R"PY(
@triton.jit
def _philox(seed, offset):
    s = tl.full([], 0, tl.int64) + seed
    o = tl.full([], 0, tl.int64) + offset
    c0 = (o & 0xFFFFFFFF).to(tl.uint32)
    c1 = ((o >> 32) & 0xFFFFFFFF).to(tl.uint32)
    c2 = c0 * 0
    c3 = c2
    k0 = (s & 0xFFFFFFFF).to(tl.uint32)
    k1 = ((s >> 32) & 0xFFFFFFFF).to(tl.uint32)
    for _ in tl.static_range(10):
        n0 = tl.umulhi(c2, 0xCD9E8D57) ^ c1 ^ k0
        n2 = tl.umulhi(c0, 0xD2511F53) ^ c3 ^ k1
        c1 = c2 * 0xCD9E8D57
        c3 = c0 * 0xD2511F53
        c0 = n0
        c2 = n2
        k0 = k0 + 0x9E3779B9
        k1 = k1 + 0xBB67AE85
    return c0, c1


@triton.jit
def _uniform_of(w):
    s = w.to(tl.int32, bitcast=True)
    s = tl.where(s < 0, -s - 1, s)
    return s.to(tl.float32) * 4.6566127342e-10


@triton.jit
def _cos_2pi(u):
    a = tl.abs(u - _rint(u))
    flip = a > 0.25
    b = tl.where(flip, 0.5 - a, a)
    use_sin = b > 0.125
    x = tl.where(use_sin, 0.25 - b, b) * 6.28318530717958648
    x2 = x * x
    c = 1.0 + x2 * (-0.5 + x2 * (4.16666667e-2 + x2 * (-1.38888889e-3 + x2 * (2.48015873e-5 + x2 * -2.75573192e-7))))
    s = x * (1.0 + x2 * (-0.166666667 + x2 * (8.33333333e-3 + x2 * (-1.98412698e-4 + x2 * 2.75573192e-6))))
    r = tl.where(use_sin, s, c)
    return tl.where(flip, -r, r)


@triton.jit
def _philox_uniform(seed, offset):
    w0, w1 = _philox(seed, offset)
    return _uniform_of(w0)


@triton.jit
def _philox_normal(seed, offset):
    w0, w1 = _philox(seed, offset)
    u1 = tl.maximum(_uniform_of(w0), 1.0e-7)
    return tl.sqrt(-2.0 * tl.log(u1)) * _cos_2pi(_uniform_of(w1))
)PY";

class Emitter {
 public:
  Emitter(const lower::BlockProgram& p, const GpuModel& gpu) : p_(p), fn_(*p.fn), gpu_(gpu) {}

  std::string run() {
    header();
    for (const lower::LaunchPlan& L : p_.launches) kernel(L);
    host();
    return os_.str();
  }

 private:
  // --- output ---
  void line(const std::string& s) { *out_ << std::string(depth_ * 4, ' ') << s << "\n"; }
  std::string tname(int tile) const { return ir::tile_name(fn_, tile); }
  const ir::Type& type(int v) const { return fn_.type_of(v); }
  std::string v(int id) const { return "v" + std::to_string(id); }
  int64_t block(int tile) const { return p_.block_of_tile(tile); }
  bool unit(int tile) const { return unit_tile(p_, tile); }
  int root(int tensor) const {
    const ir::TensorInfo& t = fn_.tensors[tensor];
    return t.origin == ir::TensorInfo::View ? t.root : tensor;
  }

  // `e`, a 1-D index of kept axis `axis`, broadcast to a value of rank `rank`.
  static std::string along(const std::string& e, int axis, int rank) {
    if (rank <= 1) return e;
    std::vector<std::string> s;
    for (int i = 0; i < rank; ++i) s.push_back(i == axis ? ":" : "None");
    return "(" + e + ")[" + join(s) + "]";
  }
  // The kept axis of IR axis `axis` of a shape (unit tiles before it are squeezed out).
  int kept_axis(const std::vector<Dim>& shape, int axis) const {
    int a = 0;
    for (int i = 0; i < axis; ++i)
      if (!(shape[i].kind == Dim::Tile && unit(shape[i].tile))) ++a;
    return a;
  }
  std::vector<int64_t> kept_sizes(const std::vector<Dim>& shape) const {
    std::vector<int64_t> s;
    for (const KeptDim& k : kept_dims(p_, shape)) s.push_back(k.size);
    return s;
  }
  // The valid-element mask of a kept dim (a 1-D expression), "" when it has no padding.
  std::string dim_mask(const KeptDim& k) const {
    if (!k.masked) return "";
    if (k.dim.kind == Dim::Tile) return "m_" + tname(k.dim.tile);
    return "(tl.arange(0, " + std::to_string(k.size) + ") < " + std::to_string(k.dim.size) + ")";
  }
  // The number of valid elements along a kept dim (a scalar expression).
  std::string dim_valid(const KeptDim& k) const {
    if (k.dim.kind != Dim::Tile) return std::to_string(k.dim.size);
    return "tl.minimum(" + range_end(k.dim.tile) + " - o_" + tname(k.dim.tile) + ", " + std::to_string(k.size) + ")";
  }
  // A tile's range as the generated code knows it: its static bounds, a jagged loop's lo_t..hi_t
  // for the current entry, or the enclosing tile's current block (ph::tile(outer)).
  std::string range_begin(int tile) const {
    const ir::TileInfo& t = fn_.tiles[tile];
    if (t.parent >= 0) return "o_" + tname(t.parent);
    return t.is_jagged() ? "lo_" + tname(tile) : std::to_string(t.begin);
  }
  std::string range_end(int tile) const {
    const ir::TileInfo& t = fn_.tiles[tile];
    if (t.parent >= 0) {
      const std::string o = "o_" + tname(t.parent);
      return unit(t.parent)
                 ? "(" + o + " + 1)"
                 : "tl.minimum(" + o + " + " + std::to_string(block(t.parent)) + ", " + range_end(t.parent) + ")";
    }
    return t.is_jagged() ? "hi_" + tname(tile) : std::to_string(t.end);
  }

  void header() {
    line("# Generated by Parhelion: kernel " + fn_.name + " for NVIDIA " + gpu_.name + " (sm_" +
         std::to_string(gpu_.arch) + "), Triton.");
    line("# Config: " + p_.config.to_json());
    line("import os");
    line("");
    line("import torch");
    line("import triton");
    line("import triton.language as tl");
    line("");
    line("# Triton's interpreter multiplies bf16 dot operands wrongly: there they go in as f32 (the same");
    line("# values, exactly; products and sums in f32 as on a GPU's tensor cores).");
    line("_INTERPRETED = tl.constexpr(os.environ.get(\"TRITON_INTERPRET\", \"0\") == \"1\")");
    line("");
    line("KERNEL = \"" + fn_.name + "\"");
    line("CONFIG = '" + p_.config.to_json() + "'");
    line("GPU = \"" + gpu_.name + "\"");
    line("ARCH = " + std::to_string(gpu_.arch));
    std::vector<std::string> sig;
    for (int i = 0; i < fn_.num_tensor_params; ++i)
      sig.push_back("(" + py_tuple(fn_.tensors[i].shape) + ", \"" + std::string(dtype_name(fn_.tensors[i].dtype)) +
                    "\")");
    line("SIGNATURE = [" + join(sig) + "]");
    os_ << kHelpers;
    if (ir::uses_random(fn_)) os_ << kRandomHelpers;
  }

  // --- a launch's kernel ---
  struct LaunchArgs {
    std::vector<int> tensors;  // root tensor ids, ascending
    std::vector<int> scalars;  // scalar parameter indices, ascending
  };
  LaunchArgs args_of(const Op& launch) const {
    std::set<int> t, s;
    ir::walk(launch.body, [&](const Op& op) {
      if (op.kind == OpKind::Load || op.kind == OpKind::Store) t.insert(root(op.tensor));
      if (op.kind == OpKind::ScalarParam) s.insert(op.param);
    });
    return {{t.begin(), t.end()}, {s.begin(), s.end()}};
  }
  bool integer_param(int param) const {
    bool integral = false;
    ir::walk(fn_.body, [&](const Op& op) {
      if (op.kind == OpKind::ScalarParam && op.param == param && type(op.result).dtype == DType::i64) integral = true;
    });
    return integral;
  }

  void kernel(const lower::LaunchPlan& L) {
    L_ = &L;
    const LaunchArgs a = args_of(*L.op);
    std::vector<std::string> params, sig;
    for (int t : a.tensors) {
      params.push_back("p" + std::to_string(t));
      sig.push_back("\"p" + std::to_string(t) + "\": \"" + signature_type(fn_.tensors[t].dtype) + "\"");
    }
    for (int s : a.scalars) {
      params.push_back("s" + std::to_string(s));
      sig.push_back("\"s" + std::to_string(s) + "\": \"" + (integer_param(s) ? "i64" : "fp32") + "\"");
    }
    const bool checked = launch_checks(*L.op);
    if (checked) {  // (where an out-of-range computed index is recorded: checked_index)
      params.push_back("perr");
      sig.push_back("\"perr\": \"*i64\"");
    }
    const std::string name = "_kernel_" + std::to_string(L.index);
    kernels_.push_back({name, "{" + join(sig) + "}", L.total_steps, a, checked});
    line("");
    line("");
    line("@triton.jit");
    line("def " + name + "(" + join(params) + "):");
    ++depth_;
    line("\"\"\"Launch " + std::to_string(L.index) + " of " + fn_.name + " (" + L.op->loc.str() +
         "): " + std::to_string(L.total_steps) + " programs.\"\"\"");
    // The program's grid position, the innermost dim fastest; with a grouped order
    // (Config::launch_groups, G > 1) the last two dims A, B are walked in groups of G blocks of
    // A, A fastest within a group, so that the programs running together share operand blocks
    // in the L2 cache (a matmul's rows of x and columns of y).
    line("i = tl.program_id(0)");
    size_t decoded = L.grid.size();
    if (L.group > 1 && L.grid.size() >= 2) {
      const lower::GridDim &da = L.grid[L.grid.size() - 2], &db = L.grid.back();
      const std::string ka = "k_" + tname(da.tile), kb = "k_" + tname(db.tile), na = std::to_string(da.steps),
                        w = std::to_string(L.group * db.steps);
      line("# programs in groups of " + std::to_string(L.group) + " blocks of " + tname(da.tile) + ", " +
           tname(da.tile) + " fastest within a group (launch_groups)");
      line("j = i % " + std::to_string(da.steps * db.steps));
      line("i = i // " + std::to_string(da.steps * db.steps));
      line("first = (j // " + w + ") * " + std::to_string(L.group));
      line("rows = tl.minimum(" + na + " - first, " + std::to_string(L.group) + ")");
      line(ka + " = first + (j % " + w + ") % rows");
      line(kb + " = (j % " + w + ") // rows");
      decoded -= 2;
    }
    for (size_t g = decoded; g-- > 0;) {
      const lower::GridDim& d = L.grid[g];
      const std::string t = tname(d.tile);
      line("k_" + t + " = i % " + std::to_string(d.steps));
      if (g > 0) line("i = i // " + std::to_string(d.steps));
    }
    for (const lower::GridDim& d : L.grid)
      tile_offsets(d.tile, "k_" + tname(d.tile) + " * " + std::to_string(block(d.tile)) + " + " +
                               std::to_string(fn_.tiles[d.tile].begin));
    body(L.op->body);
    --depth_;
    os_ << combines_.str();
    combines_.str("");
  }

  // o_t (the block's first index), and for a block of more than one: r_t (its indices) and
  // m_t (the valid ones) when its last block is ragged.
  void tile_offsets(int tile, const std::string& first) {
    const std::string t = tname(tile);
    line("o_" + t + " = " + first);
    if (unit(tile)) return;
    line("r_" + t + " = o_" + t + " + tl.arange(0, " + std::to_string(block(tile)) + ")");
    if (tile_masked(p_, tile)) line("m_" + t + " = r_" + t + " < " + std::to_string(fn_.tiles[tile].end));
  }

  void body(const std::vector<Op>& ops) {
    for (const Op& op : ops) statement(op);
  }

  void statement(const Op& op) {
    switch (op.kind) {
      case OpKind::Loop:
        return inner_loop(op);
      case OpKind::If:
        line("if " + operand(op.operands[0]) + ":  # " + op.loc.str());
        ++depth_;
        line("pass");
        body(op.body);
        --depth_;
        return;
      case OpKind::Load:
        return load(op);
      case OpKind::Store:
        return store(op);
      case OpKind::Constant:
        line(v(op.result) + " = " + literal(op.number, type(op.result).dtype));
        return;
      case OpKind::Full: {
        const ir::Type& t = type(op.result);
        line(v(op.result) + " = tl.full(" + shape_list(kept_sizes(t.shape)) + ", " + literal(op.number, t.dtype) +
             ", " + tl_dtype(t.dtype) + ")");
        return;
      }
      case OpKind::ScalarParam:
        line(v(op.result) + " = s" + std::to_string(op.param));
        return;
      case OpKind::TileBegin:
        line(v(op.result) + " = o_" + tname(op.tile));
        return;
      case OpKind::TileEnd:
        line(v(op.result) + " = tl.minimum(o_" + tname(op.tile) + " + " + std::to_string(block(op.tile)) + ", " +
             range_end(op.tile) + ")");
        return;
      case OpKind::TileId:  // (the block's number from its range's start: a jagged one's lo)
        line(v(op.result) + " = (o_" + tname(op.tile) + " - " + range_begin(op.tile) + ") // " +
             std::to_string(block(op.tile)));
        return;
      case OpKind::TileIndex:
        line(v(op.result) + " = " + (unit(op.tile) ? "o_" + tname(op.tile) : "r_" + tname(op.tile) + ".to(tl.int64)"));
        return;
      case OpKind::Arange: {
        const ir::Type& t = type(op.result);
        line(v(op.result) + " = tl.arange(0, " + std::to_string(next_pow2(t.shape[0].size)) + ").to(tl.int64)");
        return;
      }
      case OpKind::Unary:
        line(v(op.result) + " = " + unary(op));
        return;
      case OpKind::Binary:
        line(v(op.result) + " = " + binary(op));
        return;
      case OpKind::Where: {
        const ir::Type& r = type(op.result);
        line(v(op.result) + " = tl.where(" + aligned(op.operands[0], r) + ", " + aligned(op.operands[1], r) + ", " +
             aligned(op.operands[2], r) + ")");
        return;
      }
      case OpKind::Cast:
        line(v(op.result) + " = " + cast(op));
        return;
      case OpKind::Reduce:
        return reduce(op);
      case OpKind::Scan:
        return scan(op);
      case OpKind::Unsqueeze: {
        const ir::Type& r = type(op.result);
        const int axis = kept_axis(r.shape, op.axis);
        std::string x = operand(op.operands[0]);
        if (type(op.operands[0]).rank() == 0 || kept_dims(p_, type(op.operands[0]).shape).empty())
          x = "tl.full([], " + x + ", " + tl_dtype(r.dtype) + ")";
        line(v(op.result) + " = tl.expand_dims(" + x + ", " + std::to_string(axis) + ")");
        return;
      }
      case OpKind::Transpose:
        return transpose(op);
      case OpKind::Reshape:
      case OpKind::Permute:
      case OpKind::Expand:
      case OpKind::Squeeze:
      case OpKind::Split:
      case OpKind::Join:
        return block_view(op);
      case OpKind::Dot:
        return dot(op);
      case OpKind::VarDecl:
      case OpKind::VarSet: {
        std::string x = operand(op.operands[0]);
        const ir::Type& t = fn_.vars[op.var].type;
        // (a loop-carried value keeps one type: a literal becomes a tensor of the Var's dtype)
        if (kept_dims(p_, t.shape).empty()) x = "(tl.full([], 0, " + tl_dtype(t.dtype) + ") + " + x + ")";
        line("x" + std::to_string(op.var) + " = " + x);
        return;
      }
      case OpKind::VarGet:
        line(v(op.result) + " = x" + std::to_string(op.var));
        return;
      default:
        throw InternalError("the triton emitter has no rule for op " + std::string(ir::op_name(op)) + " at " +
                            op.loc.str() + " (support.cpp should have refused it)");
    }
  }

  std::string operand(int id) const { return v(id); }
  // An elementwise op's operand laid out as its result: the IR broadcasts dims of equal rank,
  // but squeezing the unit tiles can misalign them (a [t0, t2] block, t2 a grid dim, is [B];
  // a [t0, 1] one is [B, 1]): reshaped to the result's kept dims, 1 where it has none.
  std::string aligned(int id, const ir::Type& result) const {
    const ir::Type& t = type(id);
    if (t.rank() == 0 || t.rank() != result.rank()) return operand(id);
    std::vector<int64_t> target;
    bool same = true;
    for (int i = 0; i < result.rank(); ++i) {
      const bool rk = !(result.shape[i].kind == Dim::Tile && unit(result.shape[i].tile));
      const bool ok = !(t.shape[i].kind == Dim::Tile && unit(t.shape[i].tile));
      if (ok && !rk) same = false;  // (a size-1 dim of the operand where the result has a grid dim)
      if (!rk) continue;
      if (ok) {
        target.push_back(kept_dims(p_, {t.shape[i]})[0].size);
      } else {
        target.push_back(1);
        same = false;
      }
    }
    if (same || kept_dims(p_, t.shape).empty()) return operand(id);
    return reshaped(operand(id), t.dtype, target);
  }
  // x reshaped to `shape`. A boolean block reshaped to 0-d goes through int32: Triton's
  // interpreter keeps such a value in a form its bitwise ops refuse (found by the fuzzer:
  // `tl.reshape(b, []) ^ c` raised TypeError); compiled, the conversions cancel.
  static std::string reshaped(const std::string& x, DType dtype, const std::vector<int64_t>& shape) {
    if (dtype == DType::boolean && shape.empty()) return "(tl.reshape(" + x + ".to(tl.int32), []) != 0)";
    return "tl.reshape(" + x + ", " + shape_list(shape) + ")";
  }
  // An operand as f32 (an integer or boolean converted), laid out as `result` when given.
  std::string as_f32(int id, const ir::Type* result = nullptr) const {
    const std::string x = result ? aligned(id, *result) : v(id);
    if (type(id).dtype == DType::f32) return x;
    auto d = defs_.find(id);
    if (d != defs_.end() && d->second->kind == OpKind::Constant) return literal(d->second->number, DType::f32);
    return "(" + x + ").to(tl.float32)";
  }
  std::string as_f32(int id, const ir::Type& result) const { return as_f32(id, &result); }

  // --- loops ---
  void inner_loop(const Op& op) {
    const int tile = op.loop_tiles[0];
    const ir::TileInfo& t = fn_.tiles[tile];
    const lower::InnerLoop* il = L_->inner_loop(tile);
    std::string stages = il && il->knob >= 0 ? ", num_stages=" + std::to_string(il->buffers) : "";
    // A loop whose body is one ph::when(t.begin() < e) (causal attention's key loop) stops at e:
    // the trips past it would do nothing (ir/trip_guard.h).
    ir::ScalarSyntax syntax;
    syntax.begin = [&](int g) { return "o_" + tname(g); };
    syntax.end = [&](int g) {
      return unit(g) ? "(o_" + tname(g) + " + 1)"
                     : "tl.minimum(o_" + tname(g) + " + " + std::to_string(block(g)) + ", " +
                           std::to_string(fn_.tiles[g].end) + ")";
    };
    syntax.min = "tl.minimum";
    syntax.max = "tl.maximum";
    std::string begin = range_begin(tile), end = range_end(tile);
    if (t.is_jagged()) jagged_range(op, &begin, &end);
    if (const std::string e = t.parent >= 0 ? "" : ir::trip_guard_bound(fn_, op, L_->op->loop_tiles, syntax);
        !e.empty()) {
      line("# the trips from " + e + " on do nothing (" + op.body.back().loc.str() + ")");
      end = "tl.minimum(" + end + ", " + e + ")";
    }
    line("for o_" + tname(tile) + " in tl.range(" + begin + ", " + end + ", " + std::to_string(block(tile)) + stages +
         "):  # " + op.loc.str());
    ++depth_;
    if (!unit(tile)) {
      line("r_" + tname(tile) + " = o_" + tname(tile) + " + tl.arange(0, " + std::to_string(block(tile)) + ")");
      // (valid below the range's end; a trip bound only says which trips run)
      if (tile_masked(p_, tile)) line("m_" + tname(tile) + " = r_" + tname(tile) + " < " + range_end(tile));
    }
    body(op.body);
    --depth_;
  }

  // A jagged loop's range for this entry, lo_t..hi_t (its operands): a non-empty one must lie
  // within 0..bound (the dims the tile indexes), checked before any trip (an empty range
  // otherwise, and the host raises), as on the cpu.
  void jagged_range(const Op& op, std::string* begin, std::string* end) {
    const int tile = op.loop_tiles[0];
    const ir::TileInfo& t = fn_.tiles[tile];
    const std::string n = tname(tile), lo = "lo_" + n, hi = "hi_" + n;
    line(lo + " = " + operand(op.operands[0]));
    line(hi + " = " + operand(op.operands[1]));
    if (p_.config.index_checks && t.end < ir::kUnboundedRange) {
      sites_.push_back({t.loc.str(), "the range of jagged tile " + n + ", which must lie within 0.." +
                                         std::to_string(t.end) + " (the dimensions it indexes)"});
      const std::string k = std::to_string(sites_.size());
      line("b" + k + " = (" + lo + " < " + hi + ") & ((" + lo + " < 0) | (" + hi + " > " + std::to_string(t.end) +
           "))");
      line("_flag(perr, b" + k + ", " + k + ", tl.where(" + lo + " < 0, " + lo + ", " + hi + "))");
      line(hi + " = tl.where(b" + k + ", " + lo + ", " + hi + ")");
    }
    *begin = lo;
    *end = hi;
  }

  // A scan: tl.associative_scan of the operands' tuple under the combine function, a
  // @triton.jit function of its own after the kernel. Padding along the axis (a ragged block, a
  // whole dim rounded up, a jagged trip's rows past its end) would enter a reverse scan's valid
  // elements, and a forward one's in no order the language fixes: so a masked axis scans a
  // validity flag with the tuple, and the combine keeps the valid side where only one is (an
  // invalid element is the identity of the extended combine, which stays associative).
  void scan(const Op& op) {
    const ir::ScanCombine& c = op.combine.at(0);
    const ir::Type& in = type(op.operands[0]);
    const Dim& d = in.shape[op.axis];
    line("# scan (component " + std::to_string(op.fn) + ") over axis " + std::to_string(op.axis) +
         (op.reverse ? ", reversed," : "") + " at " + op.loc.str());
    if (d.kind == Dim::Tile && unit(d.tile)) {  // one element (squeezed out of the value): itself
      line(v(op.result) + " = " + operand(op.operands[op.fn]));
      return;
    }
    const std::vector<KeptDim> kept = kept_dims(p_, in.shape);
    const int axis = kept_axis(in.shape, op.axis);
    const std::string valid_mask = dim_mask(kept[axis]);
    const bool masked = !valid_mask.empty();
    const size_t n = op.operands.size();
    const std::string fn = "_combine" + std::to_string(op.result);
    std::vector<std::string> params, xs, results;
    if (masked) params.push_back("ok_a");
    for (size_t i = 0; i < n; ++i) params.push_back(v(c.params[i]));
    if (masked) params.push_back("ok_b");
    for (size_t i = 0; i < n; ++i) params.push_back(v(c.params[n + i]));
    // (the operands as the result is laid out; a literal broadcast to the block)
    const std::string shape = shape_list(kept_sizes(in.shape));
    if (masked)
      xs.push_back("tl.broadcast_to(" + along(valid_mask, axis, static_cast<int>(kept.size())) + ", " + shape +
                   ").to(tl.int32)");
    for (int x : op.operands) {
      std::string e = aligned(x, in);
      if (kept_dims(p_, type(x).shape).size() != kept.size())
        e = "tl.broadcast_to(tl.full([], 0, " + tl_dtype(type(x).dtype) + ") + " + e + ", " + shape + ")";
      xs.push_back(e);
    }
    // The combine function, after the kernel (Triton compiles no nested functions).
    std::ostringstream* saved = out_;
    const int saved_depth = depth_;
    out_ = &combines_;
    depth_ = 0;
    line("");
    line("");
    line("@triton.jit");
    line("def " + fn + "(" + join(params) + "):");
    ++depth_;
    line("\"\"\"The combine of the scan at " + op.loc.str() + (masked ? ", extended by validity flags" : "") +
         ".\"\"\"");
    for (const Op& f : c.ops) statement(f);
    for (size_t i = 0; i < n; ++i) {
      const int r = c.results[i];
      if (!masked) {
        results.push_back(v(r));
        continue;
      }
      const std::string a = v(c.params[i]), b = v(c.params[n + i]);
      results.push_back("tl.where((ok_a != 0) & (ok_b != 0), " + v(r) + ", tl.where(ok_a != 0, " + a + ", " + b +
                        ")).to(" + a + ".dtype)");
    }
    if (masked) results.insert(results.begin(), "tl.maximum(ok_a, ok_b)");
    line("return " + join(results));
    out_ = saved;
    depth_ = saved_depth;
    const std::string call = "tl.associative_scan((" + join(xs) + ",), " + std::to_string(axis) + ", " + fn +
                             (op.reverse ? ", reverse=True" : "") + ")";
    line(v(op.result) + " = " + call + "[" + std::to_string(op.fn + (masked ? 1 : 0)) + "]");
  }

  // --- memory ---
  // The pointer offsets and the mask of a load's or store's block: per tensor dim, its index
  // (a tile's indices, a whole dim's, a scalar) times its stride; the masks of its padded dims.
  struct Access {
    std::string offsets, mask;
  };
  Access access(const Op& op) {
    const ir::TensorInfo& t = fn_.tensors[op.tensor];
    const ir::TensorInfo& r = fn_.tensors[root(op.tensor)];
    int64_t numel = 1;
    for (int64_t d : r.shape) numel *= d;
    const bool wide = numel >= (int64_t{1} << 31);  // (offsets past int32)
    // The kept dims of the accessed block, in index order.
    struct Item {
      std::string index, mask;  // 1-D expressions (or a scalar index)
      bool vector;
    };
    std::vector<Item> items;
    for (size_t d = 0; d < op.index.size(); ++d) {
      const ir::IndexItem& ix = op.index[d];
      switch (ix.kind) {
        case ir::IndexItem::Tile:
          if (unit(ix.tile))
            items.push_back({"o_" + tname(ix.tile), "", false});
          else
            items.push_back({"r_" + tname(ix.tile), tile_masked(p_, ix.tile) ? "m_" + tname(ix.tile) : "", true});
          break;
        case ir::IndexItem::All: {
          const int64_t n = t.shape[d], pn = next_pow2(n);
          const std::string ar = "tl.arange(0, " + std::to_string(pn) + ")";
          items.push_back({ar, pn != n ? "(" + ar + " < " + std::to_string(n) + ")" : "", true});
          break;
        }
        case ir::IndexItem::Scalar:
          items.push_back({checked_index(op, d, operand(ix.value), ""), "", false});
          break;
        case ir::IndexItem::Slice: {
          const int64_t pn = next_pow2(ix.length);
          const std::string ar = "tl.arange(0, " + std::to_string(pn) + ")";
          items.push_back({"(" + checked_index(op, d, operand(ix.value), "") + " + " + ar + ")",
                           pn != ix.length ? "(" + ar + " < " + std::to_string(ix.length) + ")" : "", true});
          break;
        }
        case ir::IndexItem::Gather: {
          // The rows of an index block: its valid elements (the block's own mask) index the dim.
          const std::vector<KeptDim> kd = kept_dims(p_, type(ix.value).shape);
          const std::string m = kd.empty() ? "" : dim_mask(kd[0]);
          items.push_back({checked_index(op, d, operand(ix.value), m), m, !kd.empty()});
          break;
        }
      }
    }
    int rank = 0;
    for (const Item& it : items) rank += it.vector;
    std::vector<std::string> terms, masks;
    if (t.offset != 0) terms.push_back(std::to_string(t.offset));
    int axis = 0;
    for (size_t d = 0; d < items.size(); ++d) {
      std::string idx = items[d].index;
      if (wide) idx = "(" + idx + ").to(tl.int64)";
      if (items[d].vector) {
        idx = along(idx, axis, rank);
        if (!items[d].mask.empty()) masks.push_back(along(items[d].mask, axis, rank));
        ++axis;
      }
      // (a broadcast dim of an expanded view has stride 0: its index still shapes the block)
      if (t.strides[d] != 0 || items[d].vector)
        terms.push_back(idx + (t.strides[d] == 1 ? "" : " * " + std::to_string(t.strides[d])));
    }
    Access a;
    a.offsets = terms.empty() ? "0" : join(terms, " + ");
    a.mask = join(masks, " & ");
    return a;
  }

  // A masked load's or store's mask as a boolean of its block's shape (a scalar mask broadcast
  // by arithmetic: Triton's interpreter refuses a 0-d comparison result combined with a block).
  std::string user_mask(int mask, const ir::Type& block) const {
    const std::string m = aligned(mask, block);
    if (kept_dims(p_, type(mask).shape).empty() && !kept_dims(p_, block.shape).empty())
      return "((tl.zeros(" + shape_list(kept_sizes(block.shape)) + ", tl.int32) + (" + m + ").to(tl.int32)) != 0)";
    return "(" + m + " != 0)";
  }

  // Whether an index item of a load or store is checked against its dim: a value computed in
  // the kernel (a constant was checked when traced), unless the config opts out.
  bool checks(const Op& op, size_t d) const {
    const ir::IndexItem& ix = op.index[d];
    if (!p_.config.index_checks || !ix.has_value()) return false;
    auto def = defs_.find(ix.value);
    return ix.kind == ir::IndexItem::Gather || def == defs_.end() || def->second->kind != OpKind::Constant;
  }
  bool launch_checks(const Op& launch) const {
    bool any = false;
    ir::walk(launch.body, [&](const Op& o) {
      if (o.kind == OpKind::Load || o.kind == OpKind::Store)
        for (size_t d = 0; d < o.index.size(); ++d) any |= checks(o, d);
      if (o.kind == OpKind::Loop && fn_.tiles[o.loop_tiles[0]].is_jagged())
        any |= p_.config.index_checks && fn_.tiles[o.loop_tiles[0]].end < ir::kUnboundedRange;
    });
    return any;
  }
  // `index` (a scalar, or a 1-D block whose valid elements are `valid`) checked against dim d of
  // the op's tensor: an out-of-range one is recorded for the host (`_flag`, a site of SITES)
  // and replaced by 0, so that nothing reads or writes outside the tensor. For a slice start:
  // 0 <= start <= size - length. For a masked op, only its active elements count.
  std::string checked_index(const Op& op, size_t d, const std::string& index, const std::string& valid) {
    if (!checks(op, d)) return index;
    const ir::TensorInfo& t = fn_.tensors[op.tensor];
    const ir::IndexItem& ix = op.index[d];
    const int64_t bound = ix.kind == ir::IndexItem::Slice ? t.shape[d] - ix.length + 1 : t.shape[d];
    const std::string what =
        ix.kind == ir::IndexItem::Slice
            ? "the start of a slice of length " + std::to_string(ix.length) + " of dimension " + std::to_string(d) +
                  " of " + t.name + " (size " + std::to_string(t.shape[d]) + ")"
            : "dimension " + std::to_string(d) + " of " + t.name + " (size " + std::to_string(t.shape[d]) + ")";
    sites_.push_back({op.loc.str(), what});
    const std::string k = std::to_string(sites_.size());
    line("b" + k + " = (" + index + " < 0) | (" + index + " >= " + std::to_string(bound) + ")" +
         (valid.empty() ? "" : " & " + valid));
    std::string active = "b" + k, recorded = index;
    if (ir::is_masked(op)) {  // (a load's mask is its first operand, a store's its second)
      ir::Type block;
      ir::load_type(fn_, op.tensor, op.index, &block);
      // (by arithmetic: a 0-d check and a block mask, see user_mask)
      active = "((" + along_block(op, d, "b" + k) + ").to(tl.int32) * " +
               user_mask(op.operands[op.kind == OpKind::Load ? 0 : 1], block) + ".to(tl.int32) != 0)";
      recorded = along_block(op, d, index);
    }
    line("_flag(perr, " + active + ", " + k + ", " + recorded + ")");
    line("c" + k + " = tl.where(b" + k + ", 0, " + index + ")");
    return "c" + k;
  }
  // A 1-D check of index item d broadcast over the op's block (for a masked op's active elements).
  std::string along_block(const Op& op, size_t d, const std::string& e) const {
    const ir::IndexItem& ix = op.index[d];
    const bool vector = ix.kind == ir::IndexItem::Slice ||
                        (ix.kind == ir::IndexItem::Gather && !kept_dims(p_, type(ix.value).shape).empty());
    if (!vector) return e;
    int axis = 0, rank = 0;
    for (size_t i = 0; i < op.index.size(); ++i) {
      const ir::IndexItem& it = op.index[i];
      const bool v = it.kind == ir::IndexItem::All || it.kind == ir::IndexItem::Slice ||
                     (it.kind == ir::IndexItem::Tile && !unit(it.tile)) ||
                     (it.kind == ir::IndexItem::Gather && !kept_dims(p_, type(it.value).shape).empty());
      if (i < d && v) ++axis;
      rank += v;
    }
    return along(e, axis, rank);
  }

  void load(const Op& op) {
    const DType storage = fn_.tensors[op.tensor].dtype;
    const std::string base = "p" + std::to_string(root(op.tensor));
    Access a = access(op);
    std::string mask = a.mask, other = "0", user;
    // A 16-bit or fp8 load converts its fill (tl.load's `other`) to the element type, rounding
    // an f32 fill such as 0.1 where the program does not: such a load reads nothing under the
    // user's mask and takes the fill in f32 afterwards, and is no raw 16-bit block for a dot.
    const bool narrow_float = is_float_storage(storage) && storage != DType::f32;
    const bool fill_after = op.operands.size() >= 2 && narrow_float;
    if (op.operands.size() >= 2) {  // a masked load: the user's mask and fill
      ir::Type block;
      ir::load_type(fn_, op.tensor, op.index, &block);
      user = user_mask(op.operands[0], block);
      mask = mask.empty() ? user : "(" + mask + ") & " + user;
      other = operand(op.operands[1]);
    }
    std::string call = "tl.load(" + base + " + " + a.offsets;
    // (padding reads nothing: its value is replaced before any reduction or contraction that
    // would see it; fp8 takes no integer fill)
    if (!mask.empty())
      call += ", mask=" + mask + ((is_fp8(storage) && op.operands.size() < 2) || fill_after ? "" : ", other=" + other);
    call += ")";
    const std::string r = v(op.result);
    line(r + "_raw = " + call + "  # " + op.loc.str());
    if ((storage == DType::bf16 || storage == DType::f16) && !fill_after) raw_[op.result] = storage;
    if (fill_after)
      line(r + " = tl.where(" + user + ", " + r + "_raw.to(tl.float32), " + other + ")");
    else if (is_float_storage(storage))
      line(r + " = " + r + "_raw.to(tl.float32)");
    else if (storage == DType::boolean)
      line(r + " = " + r + "_raw != 0");
    else
      line(r + " = " + r + "_raw.to(tl.int64)");
  }

  void store(const Op& op) {
    const DType storage = fn_.tensors[op.tensor].dtype;
    const std::string base = "p" + std::to_string(root(op.tensor));
    Access a = access(op);
    // (the value and the mask laid out as the block it is stored into)
    ir::Type block;
    ir::load_type(fn_, op.tensor, op.index, &block);
    std::string mask = a.mask;
    if (op.operands.size() >= 2) {
      const std::string user = user_mask(op.operands[1], block);
      mask = mask.empty() ? user : "(" + mask + ") & " + user;
    }
    std::string value = aligned(op.operands[0], block);
    const ir::Type& vt = type(op.operands[0]);
    // A scalar stored into a block broadcasts; every value takes the tensor's dtype.
    if (vt.rank() == 0 || kept_dims(p_, vt.shape).empty())
      value = "tl.full([], 0, " + tl_dtype(vt.dtype) + ") + " + value;
    if (storage == DType::boolean)
      value = "(" + value + ") != 0";
    else if (storage == DType::bf16 || is_fp8(storage))
      value = round_to(storage, value) + ".to(" + tl_dtype(storage) + ")";
    else
      value = "(" + value + ").to(" + tl_dtype(storage) + ")";
    // (a stored block of fewer kept dims than the access, e.g. a row value broadcast over a
    // whole dim, is broadcast by Triton's rules)
    // An atomic update (ph::atomic_add/max/min): every element with respect to every other
    // program's, in no order (float sums may round differently from run to run).
    const std::string call = "tl." + std::string(ir::atomic_name(ir::atomic_fn(op)));  // tl.store, tl.atomic_add, ...
    line(call + "(" + base + " + " + a.offsets + ", " + value + (mask.empty() ? "" : ", mask=" + mask) + ")  # " +
         op.loc.str());
  }

  // --- values ---
  std::string unary(const Op& op) {
    const std::string a = operand(op.operands[0]);
    const bool integral = type(op.operands[0]).dtype != DType::f32;
    switch (static_cast<UnaryFn>(op.fn)) {
      case UnaryFn::neg:
        return "-" + a;
      case UnaryFn::exp:
        return "tl.exp(" + as_f32(op.operands[0]) + ")";
      case UnaryFn::exp2:
        return "tl.exp2(" + as_f32(op.operands[0]) + ")";
      case UnaryFn::log:
        return "tl.log(" + as_f32(op.operands[0]) + ")";
      case UnaryFn::sqrt:
        return "tl.sqrt_rn(" + as_f32(op.operands[0]) + ")";
      case UnaryFn::rsqrt:
        return "(1.0 / tl.sqrt_rn(" + as_f32(op.operands[0]) + "))";
      case UnaryFn::tanh:
        return "_tanh(" + as_f32(op.operands[0]) + ")";
      case UnaryFn::sigmoid:
        return "(1.0 / (1.0 + tl.exp(-" + as_f32(op.operands[0]) + ")))";
      case UnaryFn::silu:
        return "_silu(" + as_f32(op.operands[0]) + ")";
      case UnaryFn::gelu:
        return "_gelu(" + as_f32(op.operands[0]) + ")";
      case UnaryFn::gelu_exact:
        return "_gelu_exact(" + as_f32(op.operands[0]) + ")";
      case UnaryFn::erf:
        return "tl.math.erf(" + as_f32(op.operands[0]) + ")";
      case UnaryFn::abs:
        return "tl.abs(" + a + ")";
      case UnaryFn::logical_not:
        return "(" + a + " == 0)";
      case UnaryFn::bit_not:
        return "(~" + a + ")";
      case UnaryFn::round:
        return integral ? a : "_rint(" + a + ")";
      case UnaryFn::floor:
        return integral ? a : "tl.floor(" + a + ")";
      case UnaryFn::ceil:
        return integral ? a : "tl.ceil(" + a + ")";
      case UnaryFn::trunc:
        return integral ? a : "_trunc(" + a + ")";
    }
    return "?";
  }

  std::string binary(const Op& op) {
    const DType r = type(op.result).dtype;
    const auto f = static_cast<BinaryFn>(op.fn);
    const ir::Type& rt = type(op.result);
    std::string a = aligned(op.operands[0], rt), b = aligned(op.operands[1], rt);
    if (ir::binary_operands_in_f32(f, r)) {
      if (type(op.operands[0]).dtype != DType::f32) a = as_f32(op.operands[0], rt);
      if (type(op.operands[1]).dtype != DType::f32) b = as_f32(op.operands[1], rt);
    }
    const bool floats = type(op.operands[0]).dtype == DType::f32 || type(op.operands[1]).dtype == DType::f32;
    // An integer compared with a float: both as f32, as torch promotes (Triton's interpreter
    // gives such a comparison a type its & and masks then refuse).
    if (ir::is_comparison(f) && floats && type(op.operands[0]).dtype != type(op.operands[1]).dtype) {
      a = as_f32(op.operands[0], rt);
      b = as_f32(op.operands[1], rt);
    }
    auto infix = [&](const char* o) { return "(" + a + " " + o + " " + b + ")"; };
    switch (f) {
      case BinaryFn::add:
        return infix("+");
      case BinaryFn::sub:
        return infix("-");
      case BinaryFn::mul:
        return infix("*");
      case BinaryFn::div:
        return infix("/");
      case BinaryFn::maximum:
        return floats ? "tl.maximum(" + a + ", " + b + ", propagate_nan=tl.PropagateNan.ALL)"
                      : "tl.maximum(" + a + ", " + b + ")";
      case BinaryFn::minimum:
        return floats ? "tl.minimum(" + a + ", " + b + ", propagate_nan=tl.PropagateNan.ALL)"
                      : "tl.minimum(" + a + ", " + b + ")";
      case BinaryFn::pow:
        return "_pow(" + a + ", " + b + ")";
      case BinaryFn::lt:
        return infix("<");
      case BinaryFn::le:
        return infix("<=");
      case BinaryFn::gt:
        return infix(">");
      case BinaryFn::ge:
        return infix(">=");
      case BinaryFn::eq:
        return infix("==");
      case BinaryFn::ne:
        return infix("!=");
      case BinaryFn::logical_and:
        return "((" + a + " != 0) & (" + b + " != 0))";
      case BinaryFn::logical_or:
        return "((" + a + " != 0) | (" + b + " != 0))";
      case BinaryFn::floordiv:
        return r == DType::f32 ? "tl.floor(" + a + " / " + b + ")" : "_floordiv_i(" + a + ", " + b + ")";
      case BinaryFn::mod:
        return r == DType::f32 ? "_mod_f(" + a + ", " + b + ")" : "_mod_i(" + a + ", " + b + ")";
      case BinaryFn::bit_and:
        return infix("&");
      case BinaryFn::bit_or:
        return infix("|");
      case BinaryFn::bit_xor:
        return infix("^");
      case BinaryFn::shl:
        return "_shl(" + a + ", " + b + ")";
      case BinaryFn::shr:
        return "_shr(" + a + ", " + b + ")";
      case BinaryFn::rand:
        return "_philox_uniform(" + a + ", " + b + ")";
      case BinaryFn::randn:
        return "_philox_normal(" + a + ", " + b + ")";
    }
    throw InternalError("triton emitter: binary op at " + op.loc.str());
  }

  std::string cast(const Op& op) {
    const std::string a = operand(op.operands[0]);
    const DType from = type(op.operands[0]).dtype;
    switch (op.dtype) {
      case DType::f32:
        return as_f32(op.operands[0]);
      case DType::bf16:
      case DType::f8e4m3:
      case DType::f8e5m2:
        return round_to(op.dtype, as_f32(op.operands[0]));
      case DType::f16:  // rounds through f16 (to nearest even), computes on in f32
        return as_f32(op.operands[0]) + ".to(tl.float16).to(tl.float32)";
      case DType::boolean:
        return "(" + a + " != 0)";
      case DType::i64:
        return from == DType::i64 ? a : "(" + a + ").to(tl.int64)";
      case DType::i32:
      case DType::i8:
      case DType::u8: {  // an integer wraps through the narrow type; a float truncates first
        const std::string whole = from == DType::i64 ? a : "(" + a + ").to(tl.int64)";
        return "(" + whole + ").to(" + tl_dtype(op.dtype) + ").to(tl.int64)";
      }
    }
    return "?";
  }

  // An f32 expression rounded to a narrow float dtype, as an f32 (bf16 and fp8: helpers that do
  // what a GPU's conversions do, where Triton's interpreter truncates).
  static std::string round_to(DType d, const std::string& x) {
    if (d == DType::bf16) return "_round_bf16(" + x + ")";
    if (d == DType::f8e4m3) return "_round_f8(" + x + ", 3, 7, 448.0, False)";
    if (d == DType::f8e5m2) return "_round_f8(" + x + ", 2, 15, 57344.0, True)";
    return x;
  }

  void reduce(const Op& op) {
    const ir::Type& in = type(op.operands[0]);
    const ir::Type& out = type(op.result);
    const Dim& d = in.shape[op.axis];
    const auto f = static_cast<ReduceFn>(op.fn);
    std::string x = operand(op.operands[0]);
    if (d.kind == Dim::Tile && unit(d.tile)) {  // one element (squeezed out): itself
      const bool kept_out = op.keepdim && !kept_dims(p_, out.shape).empty() &&
                            kept_dims(p_, out.shape).size() > kept_dims(p_, in.shape).size();
      line(v(op.result) + " = " +
           (kept_out ? "tl.expand_dims(" + x + ", " + std::to_string(kept_axis(in.shape, op.axis)) + ")" : x));
      return;
    }
    const std::vector<KeptDim> kd = kept_dims(p_, in.shape);
    const int axis = kept_axis(in.shape, op.axis);
    const int rank = static_cast<int>(kd.size());
    const KeptDim& k = kd[axis];
    const bool integral = in.dtype == DType::i64;
    std::string identity;
    switch (f) {
      case ReduceFn::sum:
      case ReduceFn::mean:
        identity = integral ? "0" : "0.0";
        break;
      case ReduceFn::max:
        identity = integral ? "-9223372036854775808" : "float(\"-inf\")";
        break;
      case ReduceFn::min:
        identity = integral ? "9223372036854775807" : "float(\"inf\")";
        break;
    }
    if (const std::string m = dim_mask(k); !m.empty())
      x = "tl.where(" + along(m, axis, rank) + ", " + x + ", " + identity + ")";
    const std::string keep = op.keepdim ? ", keep_dims=True" : "";
    const std::string ax = std::to_string(axis);
    switch (f) {
      case ReduceFn::sum:
        line(v(op.result) + " = tl.sum(" + x + ", axis=" + ax + keep + ")");
        return;
      case ReduceFn::mean:
        line(v(op.result) + " = tl.sum(" + x + ", axis=" + ax + keep + ") / " + dim_valid(k));
        return;
      case ReduceFn::max:
        line(v(op.result) + " = tl.max(" + x + ", axis=" + ax + keep + ")");
        return;
      case ReduceFn::min:
        line(v(op.result) + " = tl.min(" + x + ", axis=" + ax + keep + ")");
        return;
    }
  }

  // Block views (src/ir/views.h): index remaps of a block, as Triton's reshape, permute,
  // broadcast, split and join on the kept dims (support.cpp refuses a reshape of a padded dim).
  void block_view(const Op& op) {
    const ir::Type& rt = type(op.result);
    const ir::Type& in = type(op.operands[0]);
    const std::string a = operand(op.operands[0]), r = v(op.result);
    auto squeezed = [&](const Dim& d) { return d.kind == Dim::Tile && unit(d.tile); };
    const std::vector<int64_t> out = kept_sizes(rt.shape);
    switch (op.kind) {
      case OpKind::Reshape:
      case OpKind::Squeeze:
        line(r + " = " + reshaped(a, rt.dtype, out));
        return;
      case OpKind::Permute: {
        std::vector<int> kept_pos(in.shape.size(), -1);
        int k = 0;
        for (size_t d = 0; d < in.shape.size(); ++d)
          if (!squeezed(in.shape[d])) kept_pos[d] = k++;
        std::vector<int64_t> perm;
        for (size_t i = 0; i < op.dims.size(); ++i)
          if (!squeezed(rt.shape[i])) perm.push_back(kept_pos[static_cast<size_t>(op.dims[i])]);
        line(r + " = " + (perm.size() < 2 ? a : "tl.permute(" + a + ", " + py_tuple(perm) + ")"));
        return;
      }
      case OpKind::Expand: {
        // The operand's dims laid out as the result's (size 1 where it broadcasts), then broadcast.
        std::vector<int64_t> aligned_shape;
        const size_t lead = rt.shape.size() - in.shape.size();
        for (size_t i = 0; i < lead; ++i)
          if (!squeezed(rt.shape[i])) aligned_shape.push_back(1);
        for (size_t d = 0; d < in.shape.size(); ++d)
          if (!squeezed(rt.shape[lead + d]))
            aligned_shape.push_back(squeezed(in.shape[d]) ? 1 : kept_dims(p_, {in.shape[d]})[0].size);
        std::string x = a;
        if (kept_dims(p_, in.shape).empty()) x = "tl.full([], 0, " + tl_dtype(in.dtype) + ") + " + a;
        line(r + " = tl.broadcast_to(tl.reshape(" + x + ", " + shape_list(aligned_shape) + "), " + shape_list(out) +
             ")");
        return;
      }
      case OpKind::Split:
        line(r + "_0, " + r + "_1 = tl.split(" + a + ")");
        line(r + " = " + r + "_" + std::to_string(op.axis));
        return;
      case OpKind::Join: {
        std::vector<int64_t> each(out.begin(), out.end() - 1);
        line(r + " = tl.join(tl.broadcast_to(" + aligned(op.operands[0], in) + ", " + shape_list(each) +
             "), tl.broadcast_to(" + operand(op.operands[1]) + ", " + shape_list(each) + "))");
        return;
      }
      default:
        throw InternalError("triton emitter: not a block view at " + op.loc.str());
    }
  }

  // The permutation that swaps the last two kept dims, or none when one of them is squeezed.
  void transpose(const Op& op) {
    const ir::Type& in = type(op.operands[0]);
    const int n = in.rank();
    const bool both = !(in.shape[n - 1].kind == Dim::Tile && unit(in.shape[n - 1].tile)) &&
                      !(in.shape[n - 2].kind == Dim::Tile && unit(in.shape[n - 2].tile));
    const int rank = static_cast<int>(kept_dims(p_, in.shape).size());
    auto t = [&](const std::string& x) {
      if (!both) return x;
      if (rank == 2) return "tl.trans(" + x + ")";
      std::vector<int64_t> perm;
      for (int i = 0; i < rank - 2; ++i) perm.push_back(i);
      perm.push_back(rank - 1);
      perm.push_back(rank - 2);
      return "tl.permute(" + x + ", " + py_tuple(perm) + ")";
    };
    line(v(op.result) + " = " + t(operand(op.operands[0])));
    if (auto r = raw_.find(op.operands[0]); r != raw_.end()) {
      line(v(op.result) + "_raw = " + t(operand(op.operands[0]) + "_raw"));
      raw_[op.result] = r->second;
    }
  }

  // tl.dot with f32 accumulation. A 16-bit load feeds it as stored and its partner is rounded
  // to match (the pallas backend's rule); two f32 operands multiply in IEEE precision. Padding
  // along the contraction is zeroed in both operands.
  void dot(const Op& op) {
    const int a = op.operands[0], b = op.operands[1];
    DType low = DType::f32;
    if (raw_.count(a)) low = raw_.at(a);
    if (raw_.count(b)) low = raw_.at(b);
    const std::vector<KeptDim> ka = kept_dims(p_, type(a).shape), kb = kept_dims(p_, type(b).shape);
    const ir::Type& at = type(a);
    const Dim& kdim = at.shape.back();
    const bool k_kept = !(kdim.kind == Dim::Tile && unit(kdim.tile));
    bool small = ka.size() < 2 || kb.size() < 2 || !k_kept;
    for (const std::vector<KeptDim>* kd : {&ka, &kb})
      for (size_t i = kd->size() >= 2 ? kd->size() - 2 : 0; i < kd->size(); ++i) small |= (*kd)[i].size < 16;
    if (small) return small_dot(op, low);
    const int ra = static_cast<int>(ka.size()), rb = static_cast<int>(kb.size());
    const KeptDim& k = ka.back();
    auto operand_expr = [&](int id) {
      if (low == DType::f32) return v(id);
      if (raw_.count(id) && raw_.at(id) == low) return v(id) + "_raw";
      return v(id) + ".to(" + tl_dtype(low) + ")";
    };
    std::string x = operand_expr(a), y = operand_expr(b);
    if (const std::string m = dim_mask(k); !m.empty()) {
      x = "tl.where(" + along(m, ra - 1, ra) + ", " + x + ", 0.0)";
      y = "tl.where(" + along(m, rb - 2, rb) + ", " + y + ", 0.0)";
    }
    // A batched operand against one without the batch dims (a broadcast matmul): the other is
    // broadcast over them (tl.dot takes operands of one rank).
    auto broadcast = [&](const std::string& e, int rank, const std::vector<KeptDim>& own,
                         const std::vector<KeptDim>& other) {
      std::string out = e;
      for (int i = rank; i < static_cast<int>(other.size()); ++i) out = "tl.expand_dims(" + out + ", 0)";
      std::vector<int64_t> shape;
      for (size_t i = 0; i + 2 < other.size(); ++i) shape.push_back(other[i].size);
      for (size_t i = own.size() - 2; i < own.size(); ++i) shape.push_back(own[i].size);
      return "tl.broadcast_to(" + out + ", " + py_tuple(shape) + ")";
    };
    if (rb < ra) y = broadcast(y, rb, kb, ka);
    if (ra < rb) x = broadcast(x, ra, ka, kb);
    std::string acc = op.operands.size() > 2 ? ", " + operand(op.operands[2]) : "";
    std::string precision = low == DType::f32 ? ", input_precision=\"ieee\"" : "";
    const std::string call = v(op.result) + " = tl.dot(" + x + ", " + y + acc + precision + ", out_dtype=tl.float32)";
    if (low != DType::bf16) {
      line(call + "  # " + op.loc.str());
      return;
    }
    line("if _INTERPRETED:");
    line("    " + v(op.result) + " = tl.dot((" + x + ").to(tl.float32), (" + y + ").to(tl.float32)" + acc +
         ", input_precision=\"ieee\", out_dtype=tl.float32)");
    line("else:");
    line("    " + call + "  # " + op.loc.str());
  }

  // A dot with a dim under 16 (tl.dot's smallest) or a squeezed one (a block of 1): the
  // products broadcast over [batch..., M, K, N] and summed over K, in f32 (a 16-bit operand's
  // partner rounded to its dtype first, as for tl.dot).
  void small_dot(const Op& op, DType low) {
    const int a = op.operands[0], b = op.operands[1];
    const ir::Type& at = type(a);
    const ir::Type& bt = type(b);
    const ir::Type& rt = type(op.result);
    auto kept = [&](const Dim& d) { return !(d.kind == Dim::Tile && unit(d.tile)); };
    const int nr = rt.rank();
    int batch = 0;  // kept batch dims of the result
    for (int i = 0; i + 2 < nr; ++i) batch += kept(rt.shape[i]);
    const bool m = kept(rt.shape[nr - 2]), n = kept(rt.shape[nr - 1]), k = kept(at.shape.back());
    auto f32 = [&](int id) {
      if (low != DType::f32 && !(raw_.count(id) && raw_.at(id) == low))
        return low == DType::bf16 ? "_round_bf16(" + v(id) + ")" : v(id) + ".to(" + tl_dtype(low) + ").to(tl.float32)";
      return v(id);
    };
    std::string x = f32(a), y = f32(b);
    // Padding along K: zeros in both.
    const std::vector<KeptDim> ka = kept_dims(p_, at.shape), kb = kept_dims(p_, bt.shape);
    if (k) {
      const KeptDim& kd = ka.back();
      if (const std::string mk = dim_mask(kd); !mk.empty()) {
        const int ra = static_cast<int>(ka.size()), rb = static_cast<int>(kb.size());
        x = "tl.where(" + along(mk, ra - 1, ra) + ", " + x + ", 0.0)";
        y = "tl.where(" + along(mk, rb - 1 - n, rb) + ", " + y + ", 0.0)";
      }
    }
    // a: [batch_a..., M?, K?] -> [batch..., M?, K?, N?]; b: [batch_b..., K?, N?] -> [batch..., M?, K?, N?]
    int batch_a = 0, batch_b = 0;
    for (int i = 0; i + 2 < at.rank(); ++i) batch_a += kept(at.shape[i]);
    for (int i = 0; i + 2 < bt.rank(); ++i) batch_b += kept(bt.shape[i]);
    for (int i = batch_a; i < batch; ++i) x = "tl.expand_dims(" + x + ", 0)";
    for (int i = batch_b; i < batch; ++i) y = "tl.expand_dims(" + y + ", 0)";
    if (n) x = "tl.expand_dims(" + x + ", " + std::to_string(batch + m + k) + ")";
    if (m) y = "tl.expand_dims(" + y + ", " + std::to_string(batch) + ")";
    std::string e = "(" + x + " * " + y + ")";
    if (k) e = "tl.sum(" + e + ", axis=" + std::to_string(batch + m) + ")";
    if (op.operands.size() > 2) e = operand(op.operands[2]) + " + " + e;
    line(v(op.result) + " = " + e + "  # " + op.loc.str() + " (a dim under 16: products summed)");
  }

  // --- the host function ---
  void host() {
    line("");
    line("");
    std::vector<std::string> kernels;
    for (const KernelInfo& k : kernels_)
      kernels.push_back("{\"fn\": " + k.name + ", \"name\": \"" + k.name + "\", \"signature\": " + k.signature +
                        ", \"grid\": " + std::to_string(k.programs) +
                        ", \"num_warps\": " + std::to_string(p_.config.num_warps) + "}");
    std::vector<std::string> sites;
    for (size_t k = 0; k < sites_.size(); ++k)
      sites.push_back(std::to_string(k + 1) + ": (\"" + sites_[k].first + "\", \"" + sites_[k].second + "\")");
    line("# The indices computed in the kernels that are checked against their dims: site -> (where, what).");
    line("SITES = {" + join(sites, ",\n         ") + "}");
    line("");
    line("# Per launch: the jit function, its argument types (triton.compile's signature), its programs, its warps.");
    line("KERNELS = [" + join(kernels, ",\n           ") + "]");
    line("");
    line("");
    std::vector<std::string> args;
    for (int i = 0; i < fn_.num_tensor_params; ++i) args.push_back(fn_.tensors[i].name);
    for (const std::string& s : fn_.scalar_params) args.push_back(s);
    line("def " + fn_.name + "(" + join(args) + "):");
    ++depth_;
    line("\"\"\"" + fn_.name + " on torch tensors of the shapes and dtypes in SIGNATURE (on a GPU, or on the CPU");
    line("under TRITON_INTERPRET=1); returns its output(s) on the inputs' device.\"\"\"");
    for (int i = 0; i < fn_.num_tensor_params; ++i) {
      const ir::TensorInfo& t = fn_.tensors[i];
      const std::string n = t.name;
      line("if tuple(" + n + ".shape) != " + py_tuple(t.shape) + " or " + n + ".dtype != " + torch_dtype(t.dtype) +
           ":");
      line("    raise ValueError(f\"" + fn_.name + ": " + n + " must be " + py_tuple(t.shape) + " " +
           std::string(dtype_name(t.dtype)) + " (SIGNATURE), got {tuple(" + n + ".shape)} {" + n + ".dtype}\")");
      line("t" + std::to_string(i) + " = " + n + ".contiguous()");
    }
    const std::string device = fn_.num_tensor_params > 0 ? "t0.device" : "\"cuda\"";
    // (Triton specializes a launch on its scalars' Python types: an integer parameter passed
    // as 3.0 would compile as fp32, a float one passed as 1 as i32 or i64.)
    for (int i = 0; i < static_cast<int>(fn_.scalar_params.size()); ++i) {
      const std::string s = "s" + std::to_string(i), n = fn_.scalar_params[i];
      if (!integer_param(i)) {
        line(s + " = float(" + n + ")");
        continue;
      }
      line(s + " = int(" + n + ")");
      line("if " + s + " != " + n + ":");
      line("    raise TypeError(f\"" + fn_.name + ": " + n + " must be an integer, got {" + n + "!r}\")");
    }
    if (!sites_.empty()) line("err = torch.zeros(2, dtype=torch.int64, device=" + device + ")");
    size_t launch = 0;
    for (const Op& op : fn_.body) {
      if (op.kind == OpKind::Alloc) {
        const ir::TensorInfo& t = fn_.tensors[op.tensor];
        const std::string tn = "t" + std::to_string(op.tensor);
        if (op.has_fill)
          line(tn + " = torch.full(" + py_tuple(t.shape) + ", " + literal(op.number, DType::f32) +
               ", dtype=" + torch_dtype(t.dtype) + ", device=" + device + ")");
        else
          line(tn + " = torch.empty(" + py_tuple(t.shape) + ", dtype=" + torch_dtype(t.dtype) + ", device=" + device +
               ")");
      } else if (op.kind == OpKind::Launch) {
        const KernelInfo& k = kernels_[launch++];
        std::vector<std::string> call;
        for (int t : k.args.tensors) call.push_back("t" + std::to_string(t));
        for (int s : k.args.scalars) call.push_back("s" + std::to_string(s));
        if (k.checks_indices) call.push_back("err");
        line(k.name + "[(" + std::to_string(k.programs) + ",)](" + join(call) +
             ", num_warps=" + std::to_string(p_.config.num_warps) + ")");
      }
    }
    if (!sites_.empty()) {  // (one synchronization per call: config "index_checks":false skips it)
      line("if int(err[0]) != 0:");
      line("    where, what = SITES[int(err[0])]");
      line(
          "    raise IndexError(f\"{where}: index {int(err[1])} is out of bounds for {what} (computed indices are "
          "checked; the config's \\\"index_checks\\\":false turns the check off)\")");
    }
    std::vector<std::string> outs;
    for (int t : fn_.outputs) {
      const ir::TensorInfo& ti = fn_.tensors[t];
      if (ti.origin == ir::TensorInfo::View)
        outs.push_back("torch.as_strided(t" + std::to_string(ti.root) + ", " + py_tuple(ti.shape) + ", " +
                       py_tuple(ti.strides) + ", " + std::to_string(ti.offset) + ")");
      else
        outs.push_back("t" + std::to_string(t));
    }
    line("return " + (outs.size() == 1 ? outs[0] : "(" + join(outs) + ")"));
    --depth_;
  }

  struct KernelInfo {
    std::string name, signature;
    int64_t programs;
    LaunchArgs args;
    bool checks_indices;
  };

  const lower::BlockProgram& p_;
  const ir::Function& fn_;
  const GpuModel& gpu_;
  const lower::LaunchPlan* L_ = nullptr;
  std::vector<KernelInfo> kernels_;
  std::map<int, DType> raw_;  // a value with a 16-bit copy as stored (`vN_raw`): its dtype
  std::vector<std::pair<std::string, std::string>> sites_;  // index checks: (where, what), site k at k-1
  std::map<int, const Op*> defs_;
  std::ostringstream os_;
  std::ostringstream combines_;  // the launch's scan combine functions, written after its kernel
  std::ostringstream* out_ = &os_;
  int depth_ = 0;

 public:
  // (values' defining ops, for literals: filled before emitting)
  void index_defs() {
    ir::walk(fn_.body, [&](const Op& op) {
      if (op.result >= 0) defs_[op.result] = &op;
    });
  }
};

}  // namespace

std::string generate_module(const lower::BlockProgram& p, const GpuModel& gpu) {
  Emitter e(p, gpu);
  e.index_defs();
  return e.run();
}

}  // namespace parhelion::backend::triton

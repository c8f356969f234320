#include "ir/parser.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>

#include "ir/collectives.h"
#include "ir/lexer.h"
#include "ir/printer.h"
#include "ir/scan.h"
#include "ir/type_rules.h"
#include "ir/verifier.h"
#include "ir/views.h"
#include "parhelion/error.h"

namespace parhelion::ir {
namespace {

// The functions of one op kind by the name the printer gives them (`%N = exp %a`,
// `%N = add %a, %b`, `%N = amax %a axis=1`): every value of the enum up to `last`.
template <class Fn>
std::map<std::string, Fn> functions_by_name(Fn last, std::string_view (*name)(Fn)) {
  std::map<std::string, Fn> m;
  for (int f = 0; f <= static_cast<int>(last); ++f) m[std::string(name(static_cast<Fn>(f)))] = static_cast<Fn>(f);
  return m;
}

const std::map<std::string, UnaryFn>& unary_fns() {
  static const auto m = functions_by_name(UnaryFn::exp2, unary_name);
  return m;
}

const std::map<std::string, BinaryFn>& binary_fns() {
  static const auto m = functions_by_name(BinaryFn::randn, binary_name);
  return m;
}

const std::map<std::string, ReduceFn>& reduce_fns() {
  static const auto m = functions_by_name(ReduceFn::mean, reduce_name);
  return m;
}

class Parser {
 public:
  Parser(const std::string& text, const std::string& file) : toks_(tokenize(text, file)), file_(file) {}

  Function run() {
    header();
    if (peek().is(Token::Ident, "mesh")) mesh();
    while (peek().kind == Token::Symbol) block_size();
    while (!peek().is(Token::Ident, "return")) {
      if (peek().kind == Token::EndOfFile) expected("'return' (the end of the kernel)", "");
      host_statement();
    }
    returns();
    check_block_extents();
    verify(fn_);
    return std::move(fn_);
  }

 private:
  // --- tokens -----------------------------------------------------------------------------

  const Token& peek() const { return toks_[pos_]; }
  const Token& next() {
    const Token& t = toks_[pos_];
    if (t.kind != Token::EndOfFile) ++pos_;
    return t;
  }

  std::string where(const Token& t) const {
    return file_ + ":" + std::to_string(t.line) + ":" + std::to_string(t.col) + ": ";
  }
  [[noreturn]] void fail(const Token& at, const std::string& msg) const { throw UserError(where(at) + msg); }
  // "expected WHAT CONTEXT, got TOKEN" at the next token.
  [[noreturn]] void expected(const std::string& what, const std::string& context) const {
    fail(peek(), "expected " + what + (context.empty() ? "" : " " + context) + ", got " + peek().describe());
  }

  bool accept_punct(const std::string& p) {
    if (!peek().is_punct(p)) return false;
    next();
    return true;
  }
  bool accept_word(const std::string& w) {
    if (!peek().is(Token::Ident, w)) return false;
    next();
    return true;
  }
  const Token& expect_punct(const std::string& p, const std::string& context) {
    if (!peek().is_punct(p)) expected("'" + p + "'", context);
    return next();
  }
  const Token& expect_word(const std::string& w, const std::string& context) {
    if (!peek().is(Token::Ident, w)) expected("'" + w + "'", context);
    return next();
  }
  const Token& expect_ident(const std::string& what, const std::string& context) {
    if (peek().kind != Token::Ident) expected(what, context);
    return next();
  }
  void end_of_line(const std::string& context) {
    if (peek().kind != Token::EndOfLine) expected("the end of the line", context);
    next();
  }

  int64_t integer(const std::string& what, const std::string& context, int64_t lo = INT64_MIN, int64_t hi = INT64_MAX) {
    const Token& t = peek();
    int64_t v = 0;
    if (t.kind != Token::Number) expected(what, context);
    auto [end, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
    if (ec != std::errc() || end != t.text.data() + t.text.size())
      fail(t, "expected " + what + " (an integer) " + context + ", got " + t.describe());
    if (v < lo || v > hi)
      fail(t, what + " " + context + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                  t.text);
    next();
    return v;
  }

  // A number as the printer writes doubles: 0.5, -3, 1e-05, inf, -inf, nan.
  double number(const std::string& context) {
    bool negative = peek().is_punct("-");
    if (negative) next();
    const Token& t = peek();
    if (t.kind == Token::Ident && (t.text == "inf" || t.text == "nan")) {
      next();
      double v = t.text == "inf" ? INFINITY : NAN;
      return negative ? -v : v;
    }
    if (negative || t.kind != Token::Number) expected("a number", context);
    double v = 0;
    auto [end, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
    if (ec != std::errc() || end != t.text.data() + t.text.size())
      fail(t, "expected a number " + context + ", got " + t.describe());
    next();
    return v;
  }

  // The N of a name PREFIX<N> (arg3, t2, v0, b1), or -1.
  static int numbered(const std::string& text, const std::string& prefix) {
    if (text.size() <= prefix.size() || text.compare(0, prefix.size(), prefix) != 0) return -1;
    int v = 0;
    auto [end, ec] = std::from_chars(text.data() + prefix.size(), text.data() + text.size(), v);
    return ec == std::errc() && end == text.data() + text.size() ? v : -1;
  }

  // The AtomicFn a store statement's keyword names ("store", "atomic_add", ...), or -1.
  static int store_keyword(const Token& t) {
    if (t.kind != Token::Ident) return -1;
    for (AtomicFn f : {AtomicFn::none, AtomicFn::add, AtomicFn::max, AtomicFn::min})
      if (t.text == atomic_name(f)) return static_cast<int>(f);
    return -1;
  }

  // --- names ------------------------------------------------------------------------------

  DType dtype(const std::string& context, bool compute_only) {
    const Token& t = peek();
    auto d = t.kind == Token::Ident ? parse_dtype(t.text) : std::nullopt;
    if (!d || (compute_only && compute_dtype(*d) != *d))
      expected(compute_only ? "a value dtype (f32, i64 or bool)"
                            : "a dtype (f32, bf16, f16, f8e4m3, f8e5m2, i64, i32, i8, u8 or bool)",
               context);
    next();
    return *d;
  }

  Shape shape(const std::string& context, bool allow_negative) {
    expect_punct("[", context);
    Shape s;
    if (!peek().is_punct("]")) {
      do {
        s.push_back(integer("a dimension", context, allow_negative ? INT64_MIN : 0));
      } while (accept_punct(","));
    }
    expect_punct("]", "after the dimensions " + context);
    return s;
  }

  int tensor_ref(const std::string& context) {
    const Token& t = expect_ident("a tensor name", context);
    auto it = tensor_ids_.find(t.text);
    if (it == tensor_ids_.end()) fail(t, "unknown tensor '" + t.text + "' " + context);
    return it->second;
  }

  // A tile of an open loop: tN, or gN for a grid index.
  int tile_ref(const std::string& context) {
    const Token& t = expect_ident("a tile (tN or gN)", context);
    int id = tile_id(t);
    if (id < 0) fail(t, "expected a tile (tN or gN) " + context + ", got " + t.describe());
    return id;
  }

  // -1 if the token is not a tile name; else the id of a tile in scope (or a UserError).
  int tile_id(const Token& t) const {
    const bool grid = t.text[0] == 'g';
    int id = numbered(t.text, grid ? "g" : "t");
    if (id < 0) return -1;
    if (id >= static_cast<int>(fn_.tiles.size())) fail(t, "unknown tile " + t.text + " (no loop defines it)");
    if (fn_.tiles[id].is_grid != grid)
      fail(t, "tile " + std::to_string(id) + " is " + (grid ? "not a grid index: write t" : "a grid index: write g") +
                  std::to_string(id));
    bool open = false;
    for (int o : open_tiles_) open |= o == id;
    if (!open) fail(t, "tile " + t.text + " is used outside the loop that defines it");
    return id;
  }

  int value_ref(const std::string& context) {
    const Token& t = peek();
    if (t.kind != Token::Value) expected("a value (%N)", context);
    int v = numbered("%" + t.text, "%");
    if (v < 0) fail(t, "expected a value number after '%', got '" + t.text + "'");
    if (v >= static_cast<int>(visible_.size()) || !ever_defined_[v])
      fail(t, "value %" + t.text + " is not defined before this use " + context);
    if (!visible_[v])
      fail(t, "value %" + t.text +
                  " is used outside the loop that computes it (values do not escape their loop; use a var)");
    next();
    return v;
  }

  int var_ref(const std::string& context) {
    const Token& t = expect_ident("a var (vN)", context);
    int id = numbered(t.text, "v");
    if (id < 0) fail(t, "expected a var (vN) " + context + ", got " + t.describe());
    if (id >= static_cast<int>(var_visible_.size()) || !var_visible_[id])
      fail(t, "var " + t.text + " is not declared in an enclosing loop before this use");
    return id;
  }

  int block_size_ref(const std::string& context) {
    const Token& t = peek();
    int id = t.kind == Token::Symbol ? numbered(t.text, "b") : -1;
    if (id < 0) expected("a block size ($bN)", context);
    if (id >= static_cast<int>(fn_.block_sizes.size())) fail(t, "unknown block size $" + t.text);
    next();
    return id;
  }

  // An optional ` loc("file":line)`; else the statement's own line in this text.
  SourceLoc location(const Token& first) {
    if (!accept_word("loc")) return {file_, first.line};
    expect_punct("(", "after 'loc'");
    if (peek().kind != Token::String) expected("a file name in quotes", "in loc(...)");
    SourceLoc l{next().text, 0};
    expect_punct(":", "after the file name in loc(...)");
    l.line = static_cast<int>(integer("a line number", "in loc(...)", 0, INT32_MAX));
    expect_punct(")", "after the line in loc(...)");
    return l;
  }

  // --- the kernel's signature and block sizes ---------------------------------------------

  void header() {
    expect_word("kernel", "at the start of a Tile IR function");
    fn_.name = expect_ident("the kernel's name", "after 'kernel'").text;
    expect_punct("(", "after the kernel's name");
    if (!peek().is_punct(")")) {
      do parameter();
      while (accept_punct(","));
    }
    expect_punct(")", "after the kernel's parameters");
    expect_punct("->", "after the kernel's parameters");
    expect_punct("(", "before the kernel's outputs");
    if (!peek().is_punct(")")) {
      do {
        // Allocations are declared later, in the body: resolved at `return`.
        header_outputs_.push_back(&expect_ident("a tensor name", "among the kernel's outputs"));
      } while (accept_punct(","));
    }
    expect_punct(")", "after the kernel's outputs");
    end_of_line("after the kernel's signature");
  }

  void declare_name(const Token& name) {
    if (tensor_ids_.count(name.text) || scalar_ids_.count(name.text))
      fail(name, "'" + name.text + "' is already declared");
  }

  void parameter() {
    const Token& name = expect_ident("a parameter name", "in the kernel's signature");
    declare_name(name);
    expect_punct(":", "after parameter " + name.text);
    if (accept_word("scalar")) {
      scalar_ids_[name.text] = static_cast<int>(fn_.scalar_params.size());
      fn_.scalar_params.push_back(name.text);
      return;
    }
    if (!fn_.scalar_params.empty())
      fail(name, "tensor parameter " + name.text + " after a scalar one (the printer lists tensors first)");
    TensorInfo t;
    t.name = name.text;
    t.dtype = dtype("for parameter " + name.text, false);
    t.shape = shape("of parameter " + name.text, false);
    t.strides = contiguous_strides(t.shape);
    if (accept_word("strides")) {
      expect_punct("=", "after 'strides'");
      const Token& at = peek();
      t.strides = shape("of the strides of " + name.text, true);
      if (t.strides.size() != t.shape.size())
        fail(at, "parameter " + name.text + " has " + std::to_string(t.shape.size()) + " dimensions but " +
                     std::to_string(t.strides.size()) + " strides");
    }
    t.origin = TensorInfo::Param;
    t.param_index = fn_.num_tensor_params++;
    tensor_ids_[t.name] = static_cast<int>(fn_.tensors.size());
    fn_.tensors.push_back(t);
  }

  void block_size() {
    const Token& first = peek();
    const int id = static_cast<int>(fn_.block_sizes.size());
    if (numbered(first.text, "b") != id)
      fail(first,
           "expected block size $b" + std::to_string(id) + " (block sizes are numbered in order), got $" + first.text);
    next();
    expect_punct("=", "after $b" + std::to_string(id));
    expect_word("block_size", "after '$b" + std::to_string(id) + " ='");
    expect_punct("(", "after 'block_size'");
    expect_word("extent", "in block_size(...)");
    expect_punct("=", "after 'extent'");
    BlockSize b;
    b.id = id;
    b.extent = integer("the extent", "of $b" + std::to_string(id), 1);
    if (accept_punct(",")) {
      expect_word("fixed", "after ',' in block_size(...)");
      expect_punct("=", "after 'fixed'");
      b.fixed = integer("the fixed block", "of $b" + std::to_string(id), 1);
    }
    expect_punct(")", "after the block size's extent");
    b.loc = location(first);
    end_of_line("after the block size");
    fn_.block_sizes.push_back(b);
  }

  // `mesh x=4, y=2 copies=C semaphores=S`: the devices the kernel runs on, and how many copies
  // and semaphores it declares.
  void mesh() {
    next();
    do {
      const Token& name = expect_ident("a mesh axis name", "in the mesh");
      if (mesh_axis(fn_, name.text) >= 0) fail(name, "mesh axis '" + name.text + "' is named twice");
      expect_punct("=", "after mesh axis " + name.text);
      fn_.mesh.push_back({name.text, integer("the axis size", "of mesh axis " + name.text, 1)});
    } while (accept_punct(","));
    expect_word("copies", "after the mesh's axes");
    expect_punct("=", "after 'copies'");
    fn_.num_copies = static_cast<int>(integer("the number of copies", "of the mesh line", 0, 1 << 20));
    expect_word("semaphores", "after the number of copies");
    expect_punct("=", "after 'semaphores'");
    fn_.num_semaphores = static_cast<int>(integer("the number of semaphores", "of the mesh line", 0, 1 << 20));
    end_of_line("after the mesh");
  }

  // cN (a copy) or sN (a semaphore), declared by the mesh line.
  int channel_ref(const std::string& prefix, int count, const std::string& context) {
    const Token& t = expect_ident(prefix == "c" ? "a copy (cN)" : "a semaphore (sN)", context);
    const int id = numbered(t.text, prefix);
    if (id < 0 || id >= count)
      fail(t, "expected " + std::string(prefix == "c" ? "a copy c0.." : "a semaphore s0..") + prefix +
                  std::to_string(count - 1) + " (the mesh line declares " + std::to_string(count) + "), got " +
                  t.describe());
    return id;
  }

  int mesh_axis_ref(const std::string& context) {
    const Token& t = expect_ident("a mesh axis", context);
    if (fn_.mesh.empty()) fail(t, "'" + t.text + "' names a mesh axis, but the kernel has no mesh line (mesh x=N ...)");
    const int a = mesh_axis(fn_, t.text);
    if (a < 0) fail(t, "'" + t.text + "' is not an axis of the mesh (" + mesh_to_string(fn_.mesh) + ")");
    return a;
  }

  // `to %a, %b`: a peer, one coordinate per mesh axis, appended to the op's operands.
  void peer(Op& op, const Token& first) {
    expect_word("to", "before the peer");
    std::vector<Type> coords;
    do {
      op.operands.push_back(value_ref("as a peer's coordinate"));
      coords.push_back(fn_.type_of(op.operands.back()));
    } while (accept_punct(","));
    if (std::string err = peer_rule(fn_, coords); !err.empty()) fail(first, err);
  }

  // The statements of a kernel on a mesh (src/ir/collectives.h), or false.
  bool collective_statement(std::vector<Op>& body) {
    const Token& first = peek();
    if (first.kind != Token::Ident) return false;
    const std::string& n = first.text;
    if (n == "copy_start") {  // copy_start cN TENSOR[...], %value to %peer...
      next();
      Op op{OpKind::CopyStart};
      op.channel = channel_ref("c", fn_.num_copies, "after 'copy_start'");
      index(op, "of the copy's destination");
      expect_punct(",", "after the copy's destination");
      op.operands = {value_ref("as the copied block")};
      if (std::string err = copy_rule(fn_, op.tensor, op.index, fn_.type_of(op.operands[0])); !err.empty())
        fail(first, err);
      peer(op, first);
      finish(op, first, body, "after the copy's peer");
    } else if (n == "copy_wait_send" || n == "copy_wait_recv") {
      next();
      Op op{OpKind::CopyWait};
      op.fn = static_cast<int>(n == "copy_wait_send" ? CopyEnd::send : CopyEnd::recv);
      op.channel = channel_ref("c", fn_.num_copies, "after '" + n + "'");
      finish(op, first, body, "after the copy");
    } else if (n == "barrier") {  // barrier x, y
      next();
      Op op{OpKind::Barrier};
      do op.dims.push_back(mesh_axis_ref("after 'barrier'"));
      while (accept_punct(","));
      finish(op, first, body, "after the barrier's axes");
    } else if (n == "signal" || n == "wait") {  // signal sN, %count to %peer...; wait sN, %count
      next();
      Op op{n == "signal" ? OpKind::Signal : OpKind::SemWait};
      op.channel = channel_ref("s", fn_.num_semaphores, "after '" + n + "'");
      expect_punct(",", "after the semaphore");
      op.operands = {value_ref("as the count")};
      if (std::string err = count_rule(fn_, fn_.type_of(op.operands[0])); !err.empty()) fail(first, err);
      if (n == "signal") peer(op, first);
      finish(op, first, body, "after the " + n);
    } else {
      return false;
    }
    return true;
  }

  // --- host code ----------------------------------------------------------------------------

  void host_statement() {
    const Token& first = peek();
    if (first.is(Token::Ident, "launch")) {
      Op op{OpKind::Launch};
      loop(op);
      fn_.body.push_back(std::move(op));
      return;
    }
    if (first.kind == Token::Ident && peek_at(1).is_punct("=") && peek_at(2).is(Token::Ident, "view")) {
      view();
      return;
    }
    if (first.kind == Token::Ident && peek_at(1).is_punct("=")) {
      alloc();
      return;
    }
    if (first.kind == Token::Value || first.kind == Token::Ident)
      fail(first, "expected 'launch', an allocation (NAME = empty|full ...) or 'return' in host code, got " +
                      first.describe() + " (device code must be inside a launch)");
    expected("a host statement", "");
  }

  const Token& peek_at(int k) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }

  void alloc() {
    const Token& name = next();
    declare_name(name);
    next();  // '='
    Op op{OpKind::Alloc};
    if (accept_word("full"))
      op.has_fill = true;
    else
      expect_word("empty", "or 'full' after '" + name.text + " ='");
    TensorInfo t;
    t.name = name.text;
    t.dtype = dtype("for allocation " + name.text, false);
    t.shape = shape("of allocation " + name.text, false);
    t.strides = contiguous_strides(t.shape);
    t.origin = TensorInfo::Alloc;
    if (op.has_fill) {
      expect_word("fill", "after the shape of a filled allocation");
      expect_punct("=", "after 'fill'");
      op.number = number("after 'fill='");
    }
    while (accept_word("num_blocks")) {  // num_blocks(DIM, $bK, EXTENT): a dim sized by a block count
      BlockCount c;
      expect_punct("(", "after 'num_blocks'");
      const Token& dim_at = peek();
      c.dim = static_cast<int>(integer("a dimension", "in num_blocks(...)", 0, 64));
      if (c.dim >= static_cast<int>(t.shape.size())) fail(dim_at, "num_blocks of a dimension the allocation lacks");
      expect_punct(",", "after the dimension in num_blocks(...)");
      c.block = block_size_ref("in num_blocks(...)");
      expect_punct(",", "after the block size in num_blocks(...)");
      c.extent = integer("the extent", "in num_blocks(...)", 0);
      expect_punct(")", "after num_blocks(...)");
      t.counts.push_back(c);
    }
    op.loc = location(name);
    end_of_line("after allocation " + name.text);
    op.tensor = static_cast<int>(fn_.tensors.size());
    tensor_ids_[t.name] = op.tensor;
    fn_.tensors.push_back(t);
    fn_.body.push_back(std::move(op));
  }

  // NAME = view BASE KIND [dims] (axis=N): a host view (views.h), its layout recomputed.
  void view() {
    const Token& name = next();
    declare_name(name);
    next();  // '='
    next();  // 'view'
    Op op{OpKind::View};
    const int base = tensor_ref("after 'view'");
    const Token& kind = expect_ident("a view kind (view, permute, expand or narrow)", "after the base of a view");
    if (kind.text == "view")
      op.view_kind = ViewKind::reshape;
    else if (kind.text == "permute")
      op.view_kind = ViewKind::permute;
    else if (kind.text == "expand")
      op.view_kind = ViewKind::expand;
    else if (kind.text == "narrow")
      op.view_kind = ViewKind::narrow;
    else
      fail(kind, "expected a view kind (view, permute, expand or narrow), got " + kind.describe());
    op.dims = shape("of the view " + name.text, true);
    if (op.view_kind == ViewKind::narrow) {
      expect_word("axis", "after the range of a narrow view");
      expect_punct("=", "after 'axis'");
      op.axis = static_cast<int>(integer("the axis", "of a narrow view", 0, 64));
    }
    op.loc = location(name);
    end_of_line("after view " + name.text);
    HostView v;
    std::string err = host_view(fn_.tensors[base], op.view_kind, op.dims, op.axis, &v);
    if (!err.empty()) fail(kind, err);
    TensorInfo t;
    t.name = name.text;
    t.dtype = fn_.tensors[base].dtype;
    t.shape = v.shape;
    t.strides = v.strides;
    t.offset = v.offset;
    t.origin = TensorInfo::View;
    t.base = base;
    t.root = root_of(fn_, base);
    op.tensor = static_cast<int>(fn_.tensors.size());
    tensor_ids_[t.name] = op.tensor;
    fn_.tensors.push_back(t);
    fn_.body.push_back(std::move(op));
  }

  void returns() {
    const Token& ret = next();
    std::vector<int> outs;
    if (peek().kind != Token::EndOfLine) {
      do {
        outs.push_back(tensor_ref("after 'return'"));
      } while (accept_punct(","));
    }
    std::vector<int> declared;
    for (const Token* t : header_outputs_) {
      auto it = tensor_ids_.find(t->text);
      if (it == tensor_ids_.end()) fail(*t, "unknown tensor '" + t->text + "' among the kernel's outputs");
      declared.push_back(it->second);
    }
    if (outs != declared) fail(ret, "the return list differs from the outputs in the kernel's signature");
    fn_.outputs = outs;
    end_of_line("after the return list");
    if (peek().kind != Token::EndOfFile) expected("the end of the file", "after 'return'");
  }

  // --- loops and device code ----------------------------------------------------------------

  // `launch|loop tN in B..E by $bK, ... {`, the body, `}`.
  void loop(Op& op) {
    const Token& first = next();
    const std::string kind = first.text;
    const size_t tiles_before_loop = open_tiles_.size();
    do {
      const Token& name = expect_ident("a tile (tN or gN)", "after '" + kind + "'");
      const bool grid = name.text[0] == 'g';
      const int id = static_cast<int>(fn_.tiles.size());
      if (numbered(name.text, grid ? "g" : "t") != id)
        fail(name, "expected tile t" + std::to_string(id) + " or g" + std::to_string(id) +
                       " (tiles are numbered in the order their loops appear), got " + name.describe());
      TileInfo t;
      t.id = id;
      t.is_grid = grid;
      expect_word("in", "after tile " + name.text);
      t.begin = integer("the first index", "of tile " + name.text, 0);
      expect_punct("..", "after the first index of tile " + name.text);
      const Token& end_at = peek();
      t.end = integer("the end index", "of tile " + name.text, 0);
      if (t.end < t.begin) fail(end_at, "tile " + name.text + " has an empty or negative range");
      expect_word("by", "after the range of tile " + name.text);
      const Token& block_at = peek();
      t.block = block_size_ref("after 'by'");
      if (grid && fn_.block_sizes[t.block].fixed != 1)
        fail(block_at, "grid index " + name.text + " needs a block size fixed at 1 (block_size(..., fixed=1))");
      if (accept_word("within")) {  // a tile over an enclosing tile's current block
        const Token& parent_at = peek();
        t.parent = tile_ref("after 'within'");
        if (std::find(open_tiles_.begin(), open_tiles_.end(), t.parent) == open_tiles_.end() ||
            fn_.tiles[t.parent].is_grid)
          fail(parent_at, "'within' names an enclosing loop's tile (not a grid index)");
        if (t.begin != fn_.tiles[t.parent].begin || t.end != fn_.tiles[t.parent].end)
          fail(parent_at, "a tile within " + parent_at.text + " has its range");
      }
      if (accept_word("over")) {  // a jagged tile: over %START..%END, within its bound 0..END
        const Token& over_at = peek();
        t.begin_value = value_ref("as the start of a jagged range");
        expect_punct("..", "between the bounds of a jagged range");
        t.end_value = value_ref("as the end of a jagged range");
        for (int v : {t.begin_value, t.end_value})
          if (fn_.values[v].rank() != 0 || fn_.values[v].dtype != DType::i64)
            fail(over_at, "the bounds of a jagged range are i64 scalars");
        if (kind != "loop") fail(over_at, "a jagged range is a nested loop's, not a launch's");
        op.operands.insert(op.operands.end(), {t.begin_value, t.end_value});
      }
      if (accept_word("num_blocks")) {  // num_blocks($bK, EXTENT): 0..the number of blocks
        expect_punct("(", "after 'num_blocks'");
        t.count_block = block_size_ref("in num_blocks(...)");
        expect_punct(",", "after the block size in num_blocks(...)");
        t.count_extent = integer("the extent", "in num_blocks(...)", 0);
        expect_punct(")", "after num_blocks(...)");
      }
      tile_tokens_.push_back(&name);
      fn_.tiles.push_back(t);
      op.loop_tiles.push_back(id);
    } while (accept_punct(","));
    op.loc = location(first);
    for (int t : op.loop_tiles) {
      fn_.tiles[t].loc = op.loc;
      open_tiles_.push_back(t);
    }
    expect_punct("{", "after the tiles of the " + kind);
    region(op.body, kind, first);
    open_tiles_.resize(tiles_before_loop);  // (and its tiles)
  }

  // The statements of a region (a loop's or an if's body) after its '{', through its '}': the
  // values and vars it defines go out of scope at its end.
  void region(std::vector<Op>& body, const std::string& kind, const Token& first) {
    end_of_line("after '{'");
    const size_t values_before = scope_values_.size(), vars_before = scope_vars_.size();
    while (!peek().is_punct("}")) {
      if (peek().kind == Token::EndOfFile)
        expected("'}'", "closing the " + kind + " at line " + std::to_string(first.line));
      device_statement(body);
    }
    next();
    end_of_line("after '}'");
    for (size_t i = values_before; i < scope_values_.size(); ++i) visible_[scope_values_[i]] = false;
    scope_values_.resize(values_before);
    for (size_t i = vars_before; i < scope_vars_.size(); ++i) var_visible_[scope_vars_[i]] = false;
    scope_vars_.resize(vars_before);
  }

  void device_statement(std::vector<Op>& body) {
    if (collective_statement(body)) return;
    const Token& first = peek();
    if (first.is(Token::Ident, "loop")) {
      Op op{OpKind::Loop};
      loop(op);
      body.push_back(std::move(op));
    } else if (first.is(Token::Ident, "if")) {  // if %COND { ... }
      next();
      Op op{OpKind::If};
      const Token& cond_at = peek();
      op.operands = {value_ref("as the condition of the if")};
      if (fn_.type_of(op.operands[0]).rank() != 0 || fn_.type_of(op.operands[0]).dtype != DType::boolean)
        fail(cond_at, "the condition of an if must be a bool scalar");
      op.loc = location(first);
      expect_punct("{", "after the condition of the if");
      region(op.body, "if", first);
      body.push_back(std::move(op));
    } else if (first.is(Token::Ident, "launch")) {
      fail(first, "a launch is host code: it cannot be nested in a loop (use 'loop')");
    } else if (const int update = store_keyword(first); update >= 0) {
      next();
      Op op{OpKind::Store};
      op.fn = update;
      index(op, "of the store");
      expect_punct(",", "after the store's index");
      op.operands = {value_ref("as the stored value")};
      if (peek().is(Token::Ident, "mask")) {
        next();
        op.operands.push_back(value_ref("as the store's mask"));
        Type t;
        std::string err = load_type(fn_, op.tensor, op.index, &t);
        if (err.empty()) err = mask_rule(fn_, t, fn_.type_of(op.operands[1]), nullptr);
        if (!err.empty()) fail(first, err);
      }
      finish(op, first, body, "after the store");
    } else if (first.is(Token::Ident, "var")) {
      next();
      Op op{OpKind::VarDecl};
      const Token& name = expect_ident("a var (vN)", "after 'var'");
      op.var = static_cast<int>(fn_.vars.size());
      if (numbered(name.text, "v") != op.var)
        fail(name, "expected var v" + std::to_string(op.var) +
                       " (vars are numbered in the order they are declared), got " + name.describe());
      expect_punct("=", "after var " + name.text);
      op.operands = {value_ref("as the initial value of " + name.text)};
      VarInfo info;
      info.id = op.var;
      info.type = fn_.type_of(op.operands[0]);
      fn_.vars.push_back(info);
      var_visible_.push_back(true);
      scope_vars_.push_back(op.var);
      finish(op, first, body, "after the var's initial value");
      fn_.vars.back().loc = body.back().loc;
    } else if (first.is(Token::Ident, "var_set")) {
      next();
      Op op{OpKind::VarSet};
      op.var = var_ref("after 'var_set'");
      expect_punct(",", "after the var of var_set");
      op.operands = {value_ref("as the value of var_set")};
      finish(op, first, body, "after var_set");
    } else if (first.kind == Token::Value) {
      value_statement(body);
    } else if (first.kind == Token::Ident && peek_at(1).is_punct("=")) {
      fail(first, "an allocation is host code: allocate before the launch");
    } else {
      expected("a device statement (%N = ..., store, var, var_set, loop, if or '}')", "");
    }
  }

  // The location suffix and the line end; appends the op.
  void finish(Op& op, const Token& first, std::vector<Op>& body, const std::string& context) {
    op.loc = location(first);
    end_of_line(context);
    body.push_back(std::move(op));
  }

  // TENSOR[item, ...]: each item a tile, ':' or an i64 scalar value.
  void index(Op& op, const std::string& context) {
    op.tensor = tensor_ref(context);
    const std::string& name = fn_.tensors[op.tensor].name;
    expect_punct("[", "after tensor " + name);
    if (!peek().is_punct("]")) {
      do {
        IndexItem it;
        if (accept_punct(":")) {
          it.kind = IndexItem::All;
        } else if (accept_word("slice")) {  // slice(%START, LENGTH)
          it.kind = IndexItem::Slice;
          expect_punct("(", "after 'slice'");
          it.value = value_ref("as the start of a slice of " + name);
          expect_punct(",", "after the start of a slice");
          it.length = integer("the length", "of a slice of " + name, 1);
          expect_punct(")", "after the length of a slice");
        } else if (peek().kind == Token::Value) {
          it.value = value_ref("in the index of " + name);
          // A value of rank 1 is a gather index block (its type says which; the printer
          // writes both as %N).
          it.kind = fn_.type_of(it.value).rank() == 1 ? IndexItem::Gather : IndexItem::Scalar;
        } else {
          it.kind = IndexItem::Tile;
          it.tile = tile_ref("in the index of " + name);
        }
        op.index.push_back(it);
      } while (accept_punct(","));
    }
    expect_punct("]", "after the index of " + name);
  }

  // dtype[dim, ...] with each dim a tile or a size.
  Type value_type(const std::string& context) {
    Type t;
    t.dtype = dtype(context, true);
    expect_punct("[", "after the dtype " + context);
    if (!peek().is_punct("]")) {
      do {
        if (peek().kind == Token::Ident) {
          const Token& at = peek();
          int tile = tile_ref(context);
          if (fn_.tiles[tile].is_grid)
            fail(at, "a grid index (" + at.text + ") is one element: it cannot size a dimension");
          t.shape.push_back(Dim::of_tile(tile));
        } else {
          t.shape.push_back(Dim::constant(integer("a dimension (a tile or a size)", context, 0)));
        }
      } while (accept_punct(","));
    }
    expect_punct("]", "after the dimensions " + context);
    return t;
  }

  // %N = OP ... : TYPE
  void value_statement(std::vector<Op>& body) {
    const Token& first = peek();
    int result = numbered("%" + first.text, "%");
    if (result < 0) fail(first, "expected a value number after '%', got '" + first.text + "'");
    if (result < static_cast<int>(ever_defined_.size()) && ever_defined_[result])
      fail(first, "value %" + first.text + " is defined twice");
    next();
    expect_punct("=", "after %" + first.text);
    const Token& op_at = peek();
    const Token& name = expect_ident("an op name", "after '%" + first.text + " ='");
    const std::string& n = name.text;
    Op op{OpKind::Constant};
    op.result = result;
    if (n == "load") {
      op.kind = OpKind::Load;
      index(op, "of the load");
      if (peek().is(Token::Ident, "mask")) {  // load X[...] mask %m else %o: a masked load
        next();
        op.operands.push_back(value_ref("as the load's mask"));
        if (!peek().is(Token::Ident, "else")) expected("'else' and the fill of the masked load", "");
        next();
        op.operands.push_back(value_ref("as the masked load's fill"));
      }
    } else if (n == "const") {
      op.number = number("after 'const'");
    } else if (n == "full") {
      op.kind = OpKind::Full;
      op.number = number("after 'full'");
    } else if (n == "scalar_param") {
      op.kind = OpKind::ScalarParam;
      const Token& p = expect_ident("a scalar parameter", "after 'scalar_param'");
      auto it = scalar_ids_.find(p.text);
      if (it == scalar_ids_.end()) fail(p, "unknown scalar parameter '" + p.text + "'");
      op.param = it->second;
    } else if (n == "tile_begin" || n == "tile_end" || n == "tile_index") {
      op.kind = n == "tile_begin" ? OpKind::TileBegin : n == "tile_end" ? OpKind::TileEnd : OpKind::TileIndex;
      op.tile = tile_ref("after '" + n + "'");
    } else if (n == "tile_id") {
      op.kind = OpKind::TileId;
      op.tile = tile_ref("after 'tile_id'");
    } else if (n == "arange") {
      op.kind = OpKind::Arange;
    } else if (n == "device_index") {
      op.kind = OpKind::DeviceIndex;
      op.axis = mesh_axis_ref("after 'device_index'");
    } else if (n == "cast") {
      op.kind = OpKind::Cast;
      op.operands = {value_ref("after 'cast'")};
      expect_word("to", "after the value of the cast");
      op.dtype = dtype("after 'to'", false);
    } else if (reduce_fns().count(n)) {
      op.kind = OpKind::Reduce;
      op.fn = static_cast<int>(reduce_fns().at(n));
      op.operands = {value_ref("after '" + n + "'")};
      expect_word("axis", "after the value of " + n);
      expect_punct("=", "after 'axis'");
      op.axis = static_cast<int>(integer("the axis", "of " + n, 0, 64));
      op.keepdim = accept_word("keepdim");
    } else if (n == "unsqueeze") {
      op.kind = OpKind::Unsqueeze;
      op.operands = {value_ref("after 'unsqueeze'")};
      expect_word("axis", "after the value of unsqueeze");
      expect_punct("=", "after 'axis'");
      op.axis = static_cast<int>(integer("the axis", "of unsqueeze", 0, 64));
    } else if (n == "dot") {
      op.kind = OpKind::Dot;
      op.operands = {value_ref("after 'dot'")};
      expect_punct(",", "after the first operand of dot");
      op.operands.push_back(value_ref("as the second operand of dot"));
      if (accept_word("acc")) {
        expect_punct("=", "after 'acc'");
        op.operands.push_back(value_ref("as the accumulator of dot"));
      }
    } else if (n == "var_get") {
      op.kind = OpKind::VarGet;
      op.var = var_ref("after 'var_get'");
    } else if (n == "where") {
      op.kind = OpKind::Where;
      op.operands = {value_ref("as the condition of where")};
      for (const char* what : {"as the value where true", "as the value where false"}) {
        expect_punct(",", "after an operand of where");
        op.operands.push_back(value_ref(what));
      }
    } else if (n == "transpose") {
      op.kind = OpKind::Transpose;
      op.operands = {value_ref("after 'transpose'")};
    } else if (n == "reshape" || n == "expand" || n == "join") {
      op.kind = n == "reshape" ? OpKind::Reshape : n == "expand" ? OpKind::Expand : OpKind::Join;
      op.operands = {value_ref("after '" + n + "'")};
      if (n == "join") {
        expect_punct(",", "after the first operand of join");
        op.operands.push_back(value_ref("as the second operand of join"));
      }
    } else if (n == "permute") {
      op.kind = OpKind::Permute;
      op.operands = {value_ref("after 'permute'")};
      expect_word("perm", "after the value of permute");
      expect_punct("=", "after 'perm'");
      op.dims = shape("of the permutation", false);
    } else if (n == "squeeze" || n == "split" || n == "stack" || n == "cat") {
      op.kind = n == "squeeze" ? OpKind::Squeeze
                : n == "split" ? OpKind::Split
                : n == "stack" ? OpKind::Stack
                               : OpKind::Cat;
      op.operands = {value_ref("after '" + n + "'")};
      while ((n == "stack" || n == "cat") && accept_punct(","))
        op.operands.push_back(value_ref("as an operand of " + n));
      const char* key = n == "split" ? "half" : "axis";
      expect_word(key, "after the operands of " + n);
      expect_punct("=", "after '" + std::string(key) + "'");
      op.axis = static_cast<int>(integer(std::string("the ") + key, "of " + n, 0, 64));
    } else if (n == "scan") {
      op.kind = OpKind::Scan;
      op.operands = {value_ref("after 'scan'")};
      while (accept_punct(",")) op.operands.push_back(value_ref("as an operand of scan"));
      expect_word("axis", "after the operands of scan");
      expect_punct("=", "after 'axis'");
      op.axis = static_cast<int>(integer("the axis", "of scan", 0, 64));
      op.reverse = accept_word("reverse");
      expect_word("result", "after the axis of scan");
      expect_punct("=", "after 'result'");
      op.fn = static_cast<int>(integer("the result component", "of scan", 0, 64));
      combine(op);
    } else if (unary_fns().count(n)) {
      op.kind = OpKind::Unary;
      op.fn = static_cast<int>(unary_fns().at(n));
      op.operands = {value_ref("after '" + n + "'")};
    } else if (binary_fns().count(n)) {
      op.kind = OpKind::Binary;
      op.fn = static_cast<int>(binary_fns().at(n));
      op.operands = {value_ref("after '" + n + "'")};
      expect_punct(",", "after the first operand of " + n);
      op.operands.push_back(value_ref("as the second operand of " + n));
    } else {
      fail(name, "unknown op '" + n + "'");
    }
    expect_punct(":", "before the result type of " + n);
    const Token& type_at = peek();
    Type t = value_type("in the result type of " + n);
    check_result_type(op, t, op_at, type_at);
    if (static_cast<int>(fn_.values.size()) <= result) {
      fn_.values.resize(result + 1);
      ever_defined_.resize(result + 1, false);
      visible_.resize(result + 1, false);
    }
    fn_.values[result] = t;
    ever_defined_[result] = true;
    visible_[result] = true;
    scope_values_.push_back(result);
    finish(op, first, body, "after the result type");
  }

  // `combine(%a0, ..., %b0, ...) {` the combine's value statements, `yield %r, ...`, `}`: the
  // params take their operands' dtypes (a's then b's); the combine's values are visible only
  // inside it.
  void combine(Op& op) {
    expect_word("combine", "after the result component of scan");
    expect_punct("(", "after 'combine'");
    ScanCombine c;
    const size_t values_before = scope_values_.size();
    const size_t n = op.operands.size();
    for (size_t k = 0; k < 2 * n; ++k) {
      if (k) expect_punct(",", "between the parameters of the combine");
      const Token& p = peek();
      if (p.kind != Token::Value) expected("a parameter %N of the combine", "");
      next();
      const int id = numbered("%" + p.text, "%");
      if (id < 0) fail(p, "expected a value number after '%', got '" + p.text + "'");
      if (id < static_cast<int>(ever_defined_.size()) && ever_defined_[id])
        fail(p, "value %" + p.text + " is defined twice");
      if (static_cast<int>(fn_.values.size()) <= id) {
        fn_.values.resize(id + 1);
        ever_defined_.resize(id + 1, false);
        visible_.resize(id + 1, false);
      }
      fn_.values[id] = Type{fn_.type_of(op.operands[k % n]).dtype, {}};
      ever_defined_[id] = true;
      visible_[id] = true;
      scope_values_.push_back(id);
      c.params.push_back(id);
    }
    expect_punct(")", "after the parameters of the combine");
    expect_punct("{", "after the parameters of the combine");
    end_of_line("after '{'");
    while (!peek().is(Token::Ident, "yield")) {
      if (peek().kind != Token::Value) expected("a value statement of the combine, or 'yield'", "");
      value_statement(c.ops);
    }
    next();
    c.results = {value_ref("after 'yield'")};
    while (accept_punct(",")) c.results.push_back(value_ref("as a result of the combine"));
    end_of_line("after the results of the combine");
    expect_punct("}", "closing the combine");
    for (size_t i = values_before; i < scope_values_.size(); ++i) visible_[scope_values_[i]] = false;
    scope_values_.resize(values_before);
    op.combine.push_back(std::move(c));
  }

  // The type the op's rule gives (the tracer's rules, lang.cpp and type_rules.h), where it
  // determines one; `written` must equal it. Full, const and arange take the written type.
  void check_result_type(Op& op, const Type& written, const Token& op_at, const Token& type_at) {
    auto rule = [&](const std::string& err) {
      if (!err.empty()) fail(op_at, err);
    };
    auto operand = [&](int k) { return fn_.type_of(op.operands[k]); };
    const std::string name(op_name(op));
    std::optional<Type> want;
    switch (op.kind) {
      case OpKind::Load: {
        Type t;
        rule(load_type(fn_, op.tensor, op.index, &t));
        if (op.operands.size() == 2) rule(mask_rule(fn_, t, operand(0), &fn_.type_of(op.operands[1])));
        want = t;
        break;
      }
      case OpKind::Constant:
        if (written.rank() != 0 || written.dtype == DType::boolean)
          fail(type_at, "expected type f32[] or i64[] for a const (a scalar), got " + type_to_string(fn_, written));
        break;
      case OpKind::Arange:
        if (written.rank() != 1 || written.dtype != DType::i64 || written.shape[0].kind != Dim::Const)
          fail(type_at, "expected type i64[N] for arange, got " + type_to_string(fn_, written));
        break;
      case OpKind::Full:
        break;
      case OpKind::ScalarParam:  // f32 (ph::Scalar) or i64 (ph::Int)
        if (!(written.rank() == 0 && (written.dtype == DType::f32 || written.dtype == DType::i64)))
          fail(type_at, "expected type f32 or i64 for scalar_param, got " + type_to_string(fn_, written));
        break;
      case OpKind::TileBegin:
      case OpKind::TileEnd:
      case OpKind::TileId:
      case OpKind::DeviceIndex:
        want = Type{DType::i64, {}};
        break;
      case OpKind::TileIndex:
        want = Type{DType::i64, {Dim::of_tile(op.tile)}};
        break;
      case OpKind::Unary: {
        Type t = operand(0);
        rule(unary_dtype(static_cast<UnaryFn>(op.fn), operand(0).dtype, &t.dtype));
        want = t;
        break;
      }
      case OpKind::Binary: {
        Type t;
        rule(broadcast_shapes(fn_, operand(0).shape, operand(1).shape, &t.shape));
        rule(binary_dtype(static_cast<BinaryFn>(op.fn), operand(0).dtype, operand(1).dtype, &t.dtype));
        want = t;
        break;
      }
      case OpKind::Where: {
        Type t;
        std::vector<Dim> ab;
        if (operand(0).dtype != DType::boolean) fail(op_at, "where: the condition must be boolean");
        rule(broadcast_shapes(fn_, operand(1).shape, operand(2).shape, &ab));
        rule(broadcast_shapes(fn_, operand(0).shape, ab, &t.shape));
        t.dtype = (operand(1).dtype == DType::f32 || operand(2).dtype == DType::f32) ? DType::f32 : operand(1).dtype;
        want = t;
        break;
      }
      case OpKind::Cast:
        want = Type{compute_dtype(op.dtype), operand(0).shape};
        break;
      case OpKind::Reduce: {
        Type t;
        int axis = op.axis;
        rule(reduce_type(fn_, operand(0), &axis, op.keepdim, &t));
        want = t;
        break;
      }
      case OpKind::Scan: {
        Type t;
        std::vector<Type> in;
        std::vector<DType> dtypes;
        for (size_t k = 0; k < op.operands.size(); ++k) {
          in.push_back(operand(static_cast<int>(k)));
          dtypes.push_back(in.back().dtype);
        }
        int axis = op.axis;
        rule(scan_type(fn_, in, &axis, op.fn, &t));
        if (axis != op.axis) fail(op_at, "scan axis=" + std::to_string(op.axis) + " is not a dim of its operands");
        rule(combine_rule(fn_, op.combine.at(0), dtypes));
        want = t;
        break;
      }
      case OpKind::Unsqueeze: {
        Type t = operand(0);
        if (op.axis > t.rank())
          fail(op_at, "unsqueeze axis=" + std::to_string(op.axis) + " of a value of rank " + std::to_string(t.rank()));
        t.shape.insert(t.shape.begin() + op.axis, Dim::constant(1));
        want = t;
        break;
      }
      case OpKind::Transpose: {
        Type t = operand(0);
        if (t.rank() < 2) fail(op_at, "transpose needs a value of rank 2 or more");
        std::swap(t.shape[t.rank() - 1], t.shape[t.rank() - 2]);
        want = t;
        break;
      }
      case OpKind::Dot: {
        Type t;
        rule(dot_type(fn_, operand(0), operand(1), &t));
        if (op.operands.size() > 2 && !(operand(2) == t))
          fail(op_at, "dot: the accumulator must have the result's type " + type_to_string(fn_, t));
        want = t;
        break;
      }
      case OpKind::VarGet:
        want = fn_.vars[op.var].type;
        break;
      case OpKind::Reshape:
      case OpKind::Permute:
      case OpKind::Expand:
      case OpKind::Squeeze:
      case OpKind::Split:
      case OpKind::Join:
      case OpKind::Stack:
      case OpKind::Cat: {
        Type t;
        rule(block_view_type(fn_, op, written.shape, &t));
        want = t;
        break;
      }
      default:
        break;
    }
    if (want && !(*want == written))
      fail(type_at, "expected type " + type_to_string(fn_, *want) + " for this " + name + ", got " +
                        type_to_string(fn_, written));
  }

  // The tracer keeps a block size's extent the longest range of its tiles; the config space
  // (its choices) is derived from it.
  void check_block_extents() {
    for (const TileInfo& t : fn_.tiles) {
      const BlockSize& b = fn_.block_sizes[t.block];
      if (t.parent >= 0) continue;  // its blocks cut the parent's block: the tracer bounds it by that
      if (t.is_jagged()) continue;  // its ranges' lengths are known at run time only
      if (t.extent() > b.extent)
        fail(*tile_tokens_[t.id], "tile " + tile_name(fn_, t.id) + " ranges over " + std::to_string(t.extent()) +
                                      " indices but its block size $b" + std::to_string(b.id) +
                                      " has extent=" + std::to_string(b.extent) + " (the longest range of its tiles)");
    }
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  const std::string file_;
  Function fn_;
  std::map<std::string, int> tensor_ids_, scalar_ids_;
  std::vector<const Token*> header_outputs_;  // the signature's `-> (...)`
  std::vector<const Token*> tile_tokens_;     // where each tile is declared
  std::vector<int> open_tiles_;               // tiles of the open loops, outermost first
  // Values: defined anywhere so far (no redefinition), and visible (defined in an open loop).
  std::vector<bool> ever_defined_, visible_;
  std::vector<int> scope_values_;  // visible values in definition order (popped when a loop closes)
  std::vector<bool> var_visible_;
  std::vector<int> scope_vars_;
};

}  // namespace

Function parse(const std::string& text, const std::string& file_name) { return Parser(text, file_name).run(); }

}  // namespace parhelion::ir

// The Tile IR parser (src/ir/parser.h): every library kernel and a few hundred fuzzer programs
// survive print -> parse -> print unchanged, the parsed Function is the traced one field by
// field (so later stages see the same kernel), and malformed text gives a positioned error.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "driver/compiled_kernel_impl.h"
#include "fuzz/generate.h"
#include "fuzz/program.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "kernels/registry.h"
#include "lower/config_space.h"
#include "lower/lower.h"
#include "tests/user_error.h"

namespace ph = parhelion;
namespace ir = parhelion::ir;

namespace {

// Where two Functions differ ("" if nowhere): every field the compiler reads. Numbers are
// printed with 9 significant digits, so they agree to that.
class Compare {
 public:
  std::string run(const ir::Function& a, const ir::Function& b) {
    field("name", a.name == b.name);
    field("num_tensor_params", a.num_tensor_params == b.num_tensor_params);
    field("scalar_params", a.scalar_params == b.scalar_params);
    field("outputs", a.outputs == b.outputs);
    field("tensor count", a.tensors.size() == b.tensors.size());
    for (size_t i = 0; i < a.tensors.size() && i < b.tensors.size(); ++i) {
      const ir::TensorInfo &x = a.tensors[i], &y = b.tensors[i];
      field("tensor " + x.name, x.name == y.name && x.shape == y.shape && x.strides == y.strides &&
                                    x.dtype == y.dtype && x.origin == y.origin && x.param_index == y.param_index);
    }
    field("block size count", a.block_sizes.size() == b.block_sizes.size());
    for (size_t i = 0; i < a.block_sizes.size() && i < b.block_sizes.size(); ++i) {
      const ir::BlockSize &x = a.block_sizes[i], &y = b.block_sizes[i];
      field("$b" + std::to_string(i),
            x.id == y.id && x.extent == y.extent && x.fixed == y.fixed && same_loc(x.loc, y.loc));
    }
    field("tile count", a.tiles.size() == b.tiles.size());
    for (size_t i = 0; i < a.tiles.size() && i < b.tiles.size(); ++i) {
      const ir::TileInfo &x = a.tiles[i], &y = b.tiles[i];
      field("tile " + std::to_string(i), x.id == y.id && x.block == y.block && x.begin == y.begin && x.end == y.end &&
                                             x.is_grid == y.is_grid && same_loc(x.loc, y.loc));
    }
    field("var count", a.vars.size() == b.vars.size());
    for (size_t i = 0; i < a.vars.size() && i < b.vars.size(); ++i)
      field("var " + std::to_string(i),
            a.vars[i].id == b.vars[i].id && a.vars[i].type == b.vars[i].type && same_loc(a.vars[i].loc, b.vars[i].loc));
    a_ = &a;
    b_ = &b;
    ops(a.body, b.body, "host");
    return diff_;
  }

 private:
  static bool same_loc(const ir::SourceLoc& x, const ir::SourceLoc& y) { return x.file == y.file && x.line == y.line; }
  static bool same_number(double x, double y) {
    if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
    return x == y || std::abs(x - y) <= 1e-8 * std::abs(x);
  }

  void field(const std::string& what, bool same) {
    if (!same && diff_.empty()) diff_ = what + " differs";
  }

  void ops(const std::vector<ir::Op>& a, const std::vector<ir::Op>& b, const std::string& where) {
    field("op count in " + where, a.size() == b.size());
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      const ir::Op &x = a[i], &y = b[i];
      const std::string at = where + " op " + std::to_string(i) + " (" + std::string(ir::op_name(x)) + ")";
      bool numbered =
          x.kind == ir::OpKind::Constant || x.kind == ir::OpKind::Full || (x.kind == ir::OpKind::Alloc && x.has_fill);
      field(at, x.kind == y.kind && x.result == y.result && x.operands == y.operands && x.fn == y.fn &&
                    x.axis == y.axis && x.keepdim == y.keepdim && x.has_fill == y.has_fill &&
                    (!numbered || same_number(x.number, y.number)) && x.dtype == y.dtype && x.tensor == y.tensor &&
                    x.var == y.var && x.param == y.param && x.tile == y.tile && x.loop_tiles == y.loop_tiles &&
                    same_loc(x.loc, y.loc));
      field(at + " index", x.index.size() == y.index.size());
      for (size_t k = 0; k < x.index.size() && k < y.index.size(); ++k)
        field(at + " index " + std::to_string(k), x.index[k].kind == y.index[k].kind &&
                                                      x.index[k].tile == y.index[k].tile &&
                                                      x.index[k].value == y.index[k].value);
      if (x.result >= 0 && y.result == x.result)
        field(at + " result type", a_->type_of(x.result) == b_->type_of(y.result));
      ops(x.body, y.body, at);
    }
  }

  const ir::Function *a_ = nullptr, *b_ = nullptr;
  std::string diff_;
};

// A machine-independent cpu target, so that the Block IR comparison means the same everywhere.
const ph::backend::Backend& fixed_cpu() {
  static const ph::backend::cpu::CpuBackend backend([] {
    ph::backend::cpu::Host h = ph::backend::cpu::Host::detect();
    h.fast_memory_bytes = 1 << 20;
    h.threads = 2;
    return h;
  }());
  return backend;
}

// The round trip of one traced function, with and without source locations; and the same
// Block IR from the parsed function as from the traced one.
void expect_round_trip(const ir::Function& fn, const std::string& what) {
  SCOPED_TRACE(what);
  const std::string text = ir::print(fn);
  ir::Function plain;
  ASSERT_NO_THROW(plain = ir::parse(text, what + ".tir")) << text;
  EXPECT_EQ(ir::print(plain), text);

  const ir::PrintOptions with_locations{.locations = true};
  const std::string located = ir::print(fn, with_locations);
  ir::Function parsed;
  ASSERT_NO_THROW(parsed = ir::parse(located, what + ".tir")) << located;
  EXPECT_EQ(ir::print(parsed, with_locations), located);
  EXPECT_EQ(Compare().run(fn, parsed), "") << located;

  const ph::backend::Backend& target = fixed_cpu();
  const ph::ConfigSpec spec = ph::lower::derive_config_spec(fn, target);
  EXPECT_EQ(ph::lower::derive_config_spec(parsed, target).describe(), spec.describe());
  const ph::Config config = target.default_config(fn, spec);
  EXPECT_EQ(target.default_config(parsed, spec), config);
  EXPECT_EQ(ph::lower::print(ph::lower::plan(parsed, config, target)),
            ph::lower::print(ph::lower::plan(fn, config, target)));
}

std::vector<ph::Shape> shapes_for(const ph::kernels::KernelEntry& e) {
  if (e.name == "matmul" || e.name == "epilogue_subtiling" || e.name == "matmul_layernorm")
    return {{37, 53, 29}, {128, 64, 256}};
  if (e.name == "bmm" || e.name == "broadcast_matmul") return {{3, 13, 29, 37}};
  if (e.name == "int4_matmul") return {{37, 64, 29, 32}, {8, 128, 64}};  // M,K,N[,G]
  if (e.name == "grouped_gemm") return {{37, 13, 29, 5}};                // M,K,N,G
  if (e.name == "moe_matmul") return {{37, 13, 29, 5, 2}};               // T,K,N,E,TOPK
  if (e.name.find("attention") != std::string::npos) return {{1, 131, 24}, {2, 3, 64, 40}};
  if (e.min_rank == 4) return {{2, 37, 3, 10}, {1, 8, 2, 64}};
  if (e.min_rank == 3) return {{3, 7, 1009}, {2, 8, 64}};
  if (e.min_rank == 2) return {{67, 1009}, {64, 128}};
  return {{1009}, {3, 5, 130}};
}

class LibraryKernel : public ::testing::TestWithParam<std::string> {};

TEST_P(LibraryKernel, RoundTripsAtSeveralShapesAndDtypes) {
  const ph::kernels::KernelEntry& e = ph::kernels::find_kernel(GetParam());
  int cases = 0;
  for (ph::DType dt : {e.dtypes.front(), e.dtypes.back()}) {
    for (const ph::Shape& shape : shapes_for(e)) {
      const ir::Function& fn = e.kernel->trace(e.make_specs(shape, dt).args())->fn;
      expect_round_trip(fn, e.name + "_" + std::string(ph::dtype_name(dt)) + "_" + std::to_string(shape.back()));
      ++cases;
    }
  }
  EXPECT_GE(cases, 2);
}

std::vector<std::string> library_kernels() {
  std::vector<std::string> names;
  for (const auto& e : ph::kernels::registry()) names.push_back(e.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(TirParser, LibraryKernel, ::testing::ValuesIn(library_kernels()),
                         [](const auto& param_info) { return param_info.param; });

TEST(TirParser, FuzzerProgramsRoundTrip) {
  std::map<std::string, int> by_family;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    const ph::fuzz::Program p = ph::fuzz::generate(seed);
    std::unique_ptr<ph::KernelBase> k = ph::fuzz::make_kernel(p);
    const std::vector<ph::Array> inputs = ph::fuzz::make_inputs(p, seed);
    const std::vector<ph::Arg> args = ph::fuzz::make_args(p, inputs);
    // (a program on a mesh is traced on it: its inputs are any one device's)
    const ir::Function& fn = p.mesh.empty() ? k->trace(args)->fn : k->trace_on(ph::Mesh(p.mesh), args)->fn;
    expect_round_trip(fn, "fuzz_seed_" + std::to_string(seed));
    ++by_family[p.family];
    if (HasFailure()) break;  // one program's report is enough to debug
  }
  EXPECT_EQ(by_family.size(), ph::fuzz::families().size()) << "every family is drawn";
}

// --- what the parser rebuilds and where it points --------------------------------------------

const char* const kSoftmax = R"(kernel softmax(arg0: f32[64,128]) -> (buf0)
  $b0 = block_size(extent=64)
  buf0 = empty f32[64,128]
  launch t0 in 0..64 by $b0 {
    %0 = load arg0[t0, :] : f32[t0,128]
    %1 = amax %0 axis=1 keepdim : f32[t0,1]
    %2 = sub %0, %1 : f32[t0,128]
    store buf0[t0, :], %2
  }
  return buf0
)";

// kSoftmax with `from` (once) replaced by `to`.
std::string edited(const std::string& from, const std::string& to) {
  std::string s = kSoftmax;
  size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return s.replace(at, from.size(), to);
}

std::string parse_error(const std::string& text) {
  return user_error_of([&] { ir::parse(text, "bad.tir"); });
}

TEST(TirParser, OpsWithoutLocationsAreAtTheirLineInTheText) {
  ir::Function fn = ir::parse(kSoftmax, "softmax.tir");
  EXPECT_EQ(fn.block_sizes[0].loc.str(), "softmax.tir:2");
  EXPECT_EQ(fn.body[0].loc.str(), "softmax.tir:3");
  EXPECT_EQ(fn.body[1].loc.str(), "softmax.tir:4");
  EXPECT_EQ(fn.tiles[0].loc.str(), "softmax.tir:4");
  EXPECT_EQ(fn.body[1].body[1].loc.str(), "softmax.tir:6");
  EXPECT_EQ(fn.tensors[0].origin, ir::TensorInfo::Param);
  EXPECT_EQ(fn.tensors[1].origin, ir::TensorInfo::Alloc);
}

TEST(TirParser, CommentsAndBlankLinesAreIgnored) {
  std::string text = "// RUN: opt --stage ir\n\n" + edited("    %1 = amax", "    // the row maximum\n    %1 = amax");
  text += "// CHECK: trailing comment\n";
  ir::Function fn = ir::parse(text, "commented.tir");
  EXPECT_EQ(ir::print(fn), kSoftmax);
}

TEST(TirParser, LocationsNameTheUsersLineInLaterDiagnostics) {
  const std::string text =
      edited("  launch t0 in 0..64 by $b0 {\n", "  launch t0 in 0..64 by $b0 loc(\"kernels/k.cpp\":17) {\n");
  ir::Function fn = ir::parse(text, "k.tir");
  EXPECT_EQ(fn.body[1].loc.str(), "kernels/k.cpp:17");
  EXPECT_EQ(fn.tiles[0].loc.str(), "kernels/k.cpp:17");
  EXPECT_EQ(fn.body[1].body[0].loc.str(), "k.tir:5");  // no loc(...): its line in the text
  // A store that misses the launch's tile: the verifier's message names the loc(...), or else
  // the line of the text.
  const std::string racy = R"(kernel k(arg0: f32[64,128]) -> (buf0)
  $b0 = block_size(extent=64)
  buf0 = empty f32[1,128]
  launch t0 in 0..64 by $b0 {
    %0 = load arg0[t0, :] : f32[t0,128]
    %1 = amax %0 axis=0 keepdim : f32[1,128]
    store buf0[:, :], %1 loc("kernels/k.cpp":31)
  }
  return buf0
)";
  EXPECT_HAS(parse_error(racy), "kernels/k.cpp:31: this store to buf0 does not index the launch's tile t0");
  const std::string unlocated = racy.substr(0, racy.find(" loc(")) + racy.substr(racy.find(")\n  }") + 1);
  EXPECT_HAS(parse_error(unlocated), "bad.tir:7: this store to buf0 does not index the launch's tile t0");
}

TEST(TirParser, MalformedTextGivesThePositionAndWhatWasExpected) {
  // A missing ']' (line 5: the second ':' is at column 26).
  EXPECT_HAS(parse_error(edited("load arg0[t0, :] :", "load arg0[t0, : :")),
             "bad.tir:5:26: expected ']' after the index of arg0, got ':'");
  // An index item that is neither a tile, ':' nor a value.
  EXPECT_HAS(parse_error(edited("store buf0[t0, :]", "store buf0[t0, 7]")),
             "bad.tir:8:20: expected a tile (tN or gN) in the index of buf0, got number 7");
  // An unknown op.
  EXPECT_HAS(parse_error(edited("amax %0", "amux %0")), "bad.tir:6:10: unknown op 'amux'");
  // A value used before it is defined.
  EXPECT_HAS(parse_error(edited("sub %0, %1", "sub %0, %9")),
             "bad.tir:7:18: value %9 is not defined before this use as the second operand of sub");
  // A result type that the op's rule contradicts.
  EXPECT_HAS(parse_error(edited("keepdim : f32[t0,1]", "keepdim : f32[t0,128]")),
             "bad.tir:6:35: expected type f32[t0,1] for this amax, got f32[t0,128]");
  // A missing closing brace: the file ends inside the launch.
  EXPECT_HAS(parse_error(edited("  }\n  return buf0\n", "")),
             "bad.tir:9:1: expected '}' closing the launch at line 4, got end of file");
  // A tile used after its loop has ended.
  EXPECT_HAS(parse_error(edited("  return buf0",
                                "  launch t1 in 0..64 by $b0 {\n    %5 = tile_index t0 : i64[t0]\n  }\n"
                                "  return buf0")),
             "bad.tir:11:21: tile t0 is used outside the loop that defines it");
  // A character that starts no token.
  EXPECT_HAS(parse_error(edited("amax %0 axis=1", "amax %0 axis@1")), "bad.tir:6:22: unexpected character '@'");
  // Device code in host code.
  EXPECT_HAS(
      parse_error(edited("  buf0 = empty f32[64,128]\n", "  buf0 = empty f32[64,128]\n  %7 = const 1 : f32[]\n")),
      "bad.tir:4:3: expected 'launch', an allocation (NAME = empty|full ...) or 'return' in host code, got value %7");
  // Block sizes out of order.
  EXPECT_HAS(parse_error(edited("$b0 = block_size(extent=64)", "$b1 = block_size(extent=64)")),
             "bad.tir:2:3: expected block size $b0 (block sizes are numbered in order), got $b1");
  // A statement that runs on past its end.
  EXPECT_HAS(parse_error(edited("sub %0, %1 : f32[t0,128]", "sub %0, %1 : f32[t0,128] %3")),
             "bad.tir:7:35: expected the end of the line after the result type, got value %3");
  // A tile whose range is longer than its block size's extent.
  EXPECT_HAS(parse_error(edited("$b0 = block_size(extent=64)", "$b0 = block_size(extent=32)")),
             "bad.tir:4:10: tile t0 ranges over 64 indices but its block size $b0 has extent=32");
}

}  // namespace

namespace {

// The integer ops' typing rules hold for text too: a bitwise op or a shift of an f32 value and
// a bit_not of a bool are refused at their line.
TEST(TirParser, IntegerOpsOnTheWrongDtypesAreRefusedAtTheirLine) {
  const std::string base = R"(kernel k(arg0: f32[64,128]) -> (buf0)
  $b0 = block_size(extent=64)
  buf0 = empty i64[64,128]
  launch t0 in 0..64 by $b0 {
    %0 = load arg0[t0, :] : f32[t0,128]
    %1 = cast %0 to i64 : i64[t0,128]
    %2 = bit_and %1, %1 : i64[t0,128]
    store buf0[t0, :], %2
  }
  return buf0
)";
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = base;
    return s.replace(s.find(from), from.size(), to);
  };
  EXPECT_NO_THROW(ir::parse(base, "ok.tir"));
  EXPECT_HAS(parse_error(with("bit_and %1, %1", "bit_and %0, %1")),
             "bad.tir:7:10: bitwise bit_and needs two integer or two boolean operands (got f32 and i64)");
  EXPECT_HAS(parse_error(with("bit_and %1, %1", "shl %0, %0")), "bad.tir:7:10: shift shl needs integer operands");
  EXPECT_HAS(parse_error(with("bit_and %1, %1 : i64", "bit_not %0 : f32")),
             "bad.tir:7:10: bitwise not (~) needs an integer operand");
  EXPECT_HAS(parse_error(with("bit_and %1, %1 : i64", "erf %1 : i64")), "bad.tir:7:10: erf needs an f32 operand");
}

}  // namespace

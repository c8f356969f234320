// Device-side control flow: ph::when regions under scalar conditions (loaded from tensors,
// computed from grid indices and integer arguments), with an else branch, Var updates, stores
// and loops inside. Each kernel runs on the cpu backend at several configs, in the interpreter
// and, in TPU interpret mode, on pallas (lowered for a TPU too), against a plain C++ reference.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/pallas/interpret.h"
#include "driver/compiled_kernel_impl.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "parhelion/parhelion.h"

#include "tests/config_sweep.h"
#include "tests/user_error.h"

namespace ph = parhelion;
namespace pallas = ph::backend::pallas;

namespace {

// Rows flagged nonzero are doubled, the others negated (then / otherwise), for x [M, 128].
ph::Tensor flagged_rows(ph::Tensor x, ph::Tensor flag) {
  auto [m, n] = x.sizes<2>();
  // (rows at a leading index, [m, 1, n]: a TPU block cannot squeeze one row out of m)
  auto rows = x.view({m, 1, n});
  auto out = ph::empty({m, 1, n});
  for (auto g : ph::grid(m)) {
    auto on = flag[g] != 0;
    ph::when(
        on, [&] { out[g, 0, ph::all] = rows[g, 0, ph::all] * 2.0f; },
        [&] { out[g, 0, ph::all] = -rows[g, 0, ph::all]; });
  }
  return out.view({m, n});
}

ph::Array flags(int64_t m) {
  ph::Array f = ph::Array::zeros({m}, ph::DType::i32);
  for (int64_t i = 0; i < m; ++i) f.set(i, (i * 7) % 3 == 0 ? 1 : 0);
  return f;
}

ph::Array flagged_want(const ph::Array& x, const ph::Array& f) {
  const int64_t m = x.shape()[0], n = x.shape()[1];
  ph::Array want = ph::Array::zeros({m, n}, ph::DType::f32);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) want.set(i * n + j, f.get(i) != 0 ? 2 * x.get(i * n + j) : -x.get(i * n + j));
  return want;
}

TEST(When, ThenAndOtherwiseUnderAFlagLoadedPerRow) {
  ph::Kernel k("flagged_rows", flagged_rows);
  ph::Array x = ph::Array::random({13, 128}, ph::DType::f32, 1);
  ph::Array f = flags(13);
  check_configs(k, {x, f}, flagged_want(x, f), 1e-5);
  const std::string ir = ph::ir::print(k.trace({x, f})->fn);
  EXPECT_HAS(ir, "  if %");
  EXPECT_EQ(ph::ir::print(ph::ir::parse(ir, "when.tir")), ir);  // the text form reads back
  EXPECT_HAS(k.compile({x, f}).source(), "if (");
}

// The sum of the positive elements of each row: a Var updated under a condition on each
// element, in a loop over single columns; a row whose sum stays 0 is set to the integer
// argument `empty` (a computed condition on the Var after the loop).
ph::Tensor positive_sum(ph::Tensor x, ph::Int empty) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m});
  for (auto g : ph::grid(m)) {
    ph::Var acc = ph::full({}, 0.0f);
    for (auto j : ph::grid(n)) {
      auto v = x[g, j];
      ph::when(v > 0.0f, [&] { acc = acc + v; });
    }
    ph::Var result = ph::full({}, 0.0f);
    result = acc;
    ph::when(acc == 0.0f, [&] { result = ph::full({}, 0.0f) + empty; });
    out[g] = result;
  }
  return out;
}

TEST(When, AVarUpdatedUnderAConditionOnEachElement) {
  ph::Kernel k("positive_sum", positive_sum);
  ph::Array x = ph::Array::random({9, 7}, ph::DType::f32, 2);
  for (int64_t j = 0; j < 7; ++j) x.set(3 * 7 + j, -1.0 - j);  // row 3: nothing positive
  ph::Array want = ph::Array::zeros({9}, ph::DType::f32);
  for (int64_t i = 0; i < 9; ++i) {
    double s = 0;
    for (int64_t j = 0; j < 7; ++j) s += x.get(i * 7 + j) > 0 ? x.get(i * 7 + j) : 0;
    want.set(i, s == 0 ? -5 : s);
  }
  check_configs(k, {x, int64_t{-5}}, want, 1e-5);
}

// A loop inside a region: rows with a flag are copied block by block, the others keep the
// prior contents of the output (zeros).
ph::Tensor copy_flagged(ph::Tensor x, ph::Tensor flag) {
  auto [m, n] = x.sizes<2>();
  auto rows = x.view({m, 1, n});
  auto out = ph::zeros({m, 1, n});
  for (auto g : ph::grid(m))
    ph::when(flag[g] != 0, [&] {
      for (auto tn : ph::tile(n)) out[g, 0, tn] = rows[g, 0, tn] + 1.0f;
    });
  return out.view({m, n});
}

ph::Array copy_want(const ph::Array& x, const ph::Array& f) {
  const int64_t m = x.shape()[0], n = x.shape()[1];
  ph::Array want = ph::Array::zeros({m, n}, ph::DType::f32);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      if (f.get(i) != 0) want.set(i * n + j, x.get(i * n + j) + 1);
  return want;
}

TEST(When, ALoopInsideARegion) {
  ph::Kernel k("copy_flagged", copy_flagged);
  ph::Array x = ph::Array::random({11, 300}, ph::DType::f32, 3);
  ph::Array f = flags(11);
  check_configs(k, {x, f}, copy_want(x, f), 1e-5);
}

TEST(When, PallasRunsRegionsInInterpretMode) {
  ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
  ph::Kernel flagged("flagged_rows", flagged_rows);
  ph::Kernel copy("copy_flagged", copy_flagged);
  ph::Array x = ph::Array::random({13, 128}, ph::DType::f32, 4), x2 = ph::Array::random({11, 256}, ph::DType::f32, 5);
  ph::Array f = flags(13), f2 = flags(11);
  std::string src = flagged.emit_pallas({x, f}, "v7x").source;
  EXPECT_HAS(src, "@pl.when(");
  std::vector<pallas::InterpretCase> runs = {
      {"flagged_rows", src, "flagged_rows", {x, f}, {}, true},
      {"copy_flagged", copy.emit_pallas({x2, f2}, "v7x").source, "copy_flagged", {x2, f2}, {}, true}};
  std::vector<pallas::InterpretResult> r = pallas::run_in_interpret_mode(runs);
  ASSERT_EQ(r.size(), 2u);
  for (size_t i = 0; i < r.size(); ++i) {
    SCOPED_TRACE(runs[i].name);
    ASSERT_TRUE(r[i].ok) << r[i].error << "\n" << runs[i].source;
    EXPECT_EQ(r[i].export_status, "ok");
    EXPECT_FALSE(r[i].races);
  }
  EXPECT_LT(ph::max_abs_diff(r[0].outputs.at(0), flagged_want(x, f)), 1e-5);
  EXPECT_LT(ph::max_abs_diff(r[1].outputs.at(0), copy_want(x2, f2)), 1e-5);
}

// --- user errors ------------------------------------------------------------------------------

ph::Tensor block_condition(ph::Tensor x) {
  auto out = ph::zeros_like(x);
  for (auto t : ph::tile(x.size(0))) ph::when(x[t] > 0.0f, [&] { out[t] = x[t]; });
  return out;
}

ph::Tensor escaping_value(ph::Tensor x) {
  auto out = ph::zeros_like(x);
  for (auto g : ph::grid(x.size(0))) {
    ph::Tensor inner;
    ph::when(x[g] > 0.0f, [&] { inner = x[g] * 2.0f; });
    out[g] = inner;
  }
  return out;
}

ph::Tensor host_when(ph::Tensor x) {
  ph::when(1, [&] {});
  return ph::zeros_like(x);
}

TEST(When, ErrorsNameTheLineAndWhatWasExpected) {
  ph::Array x = ph::Array::random({8}, ph::DType::f32, 6);
  {
    ph::Kernel k("block_condition", block_condition);
    const std::string e = user_error_of([&] { k(x); });
    EXPECT_HAS(e, "test_when.cpp:");
    EXPECT_HAS(e, "ph::when takes a bool scalar");
  }
  {
    ph::Kernel k("escaping_value", escaping_value);
    const std::string e = user_error_of([&] { k(x); });
    EXPECT_HAS(e, "test_when.cpp:");
    EXPECT_HAS(e, "outside the tile loop or ph::when that computes it");
  }
  {
    ph::Kernel k("host_when", host_when);
    const std::string e = user_error_of([&] { k(x); });
    EXPECT_HAS(e, "test_when.cpp:");
    EXPECT_HAS(e, "ph::when is device code");
  }
}

}  // namespace

// Reductions along the rows of one block share one loop over each row where nothing between them
// produces what the later one reads (backend/cpu/emit/reductions.cpp: row_siblings). Each keeps
// its own accumulators, so its lanes add in the order they would in a loop of its own; the
// results must be the interpreter's: ragged blocks, rows whose length leaves a tail after the
// vector loop, a max over rows with a NaN, a sum whose loop also computes and stores its operand
// (read again by a store), and a sum of exp(x - max), which reads the max and so keeps a loop of
// its own. The loops they share are checked as text by tests/passes/code-cpu-reductions-share-rows.tir.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "exact_rows.h"
#include "parhelion/parhelion.h"

namespace ph = parhelion;
using exact_rows::costly;
using exact_rows::expect_outputs_near;
using exact_rows::sixteenths;

namespace {

std::tuple<ph::Tensor, ph::Tensor> several_row_reductions(ph::Tensor x, ph::Tensor y) {
  auto a = ph::empty({x.size(0)}, ph::DType::f32);
  auto b = ph::empty_like(x);
  for (auto tm : ph::tile(x.size(0))) {
    auto xs = x[tm, ph::all];
    auto ys = y[tm, ph::all];
    auto mx = ph::amax(xs, -1);
    auto p = costly(ys);
    auto s = ph::sum(p, -1);
    auto mn = ph::mean(xs * ys, -1);
    auto e = ph::sum(ph::exp(xs - mx.unsqueeze(-1)), -1);
    a[tm] = ((mx + s) + mn) * 64.0f + e;
    b[tm, ph::all] = p * 2.0f + mn.unsqueeze(-1);
  }
  return {a, b};
}

// A reduction of rows gathered by an index that a statement between computes (a sum of another
// block, materialized): it reads that index, so it keeps a loop of its own after it. (It once
// joined the first sum's loop and read the index buffer before it was written.)
ph::Tensor gathered_after_its_index(ph::Tensor x, ph::Tensor ids) {
  auto out = ph::empty({x.size(0)}, ph::DType::f32);
  for (auto tm : ph::tile(x.size(0))) {
    auto a = ph::sum(x[tm, ph::all], -1);
    auto row = ph::sum(ids[tm, ph::all], -1);  // each row's ids sum to a row of x
    auto b = ph::sum(x[row, ph::all], -1);
    out[tm] = a * 1024.0f + b;
  }
  return out;
}

// Two shared loops, over rows of x and of y (another width), each taking a later sum that reads
// one scalar: the scalar is computed once, before the first loop. (It was declared again before
// the second, and the kernel did not compile.)
ph::Tensor two_groups_one_scalar(ph::Tensor x, ph::Tensor y, ph::Tensor w) {
  auto out = ph::empty({x.size(0)}, ph::DType::f32);
  for (auto tm : ph::tile(x.size(0))) {
    auto xs = x[tm, ph::all];
    auto ys = y[tm, ph::all];
    auto sx = ph::sum(xs, -1);
    auto sy = ph::sum(ys, -1);
    auto k = w[1];
    auto kx = ph::sum(xs * k, -1);
    auto ky = ph::sum(ys * k, -1);
    out[tm] = (sx + sy) + (kx + ky) * 64.0f;
  }
  return out;
}

}  // namespace

TEST(SharedRowLoops, ReductionsOfTheSameRowsMatchTheInterpreter) {
  ph::Kernel k("several_row_reductions", several_row_reductions);
  for (int64_t cols : {77, 64, 1000}) {
    ph::Array x = sixteenths({45, cols}, 1), y = sixteenths({45, cols}, 2);
    x.set(7 * cols + cols / 2, std::numeric_limits<double>::quiet_NaN());  // row 7's max is NaN
    const std::vector<ph::Array> want = k.interpret({x, y});
    for (int64_t block : {1, 4, 16}) {
      ph::Config c = k.compile({x, y}).config();
      c.block_sizes = {block};
      SCOPED_TRACE("cols " + std::to_string(cols) + " " + c.to_json());
      ph::CompiledKernel ck = k.compile({x, y}, &c);
      // the max, the sum computing its operand, and the mean in one loop; the exp's sum apart
      EXPECT_NE(ck.source().find("accv2[k] = accv2[k] + "), std::string::npos) << ck.source();
      EXPECT_EQ(ck.source().find("accv3"), std::string::npos) << ck.source();
      expect_outputs_near(ck.run({x, y}), want, 1e-6);
    }
  }
}

TEST(SharedRowLoops, AGatherByAValueComputedBetweenKeepsItsLoop) {
  ph::Kernel k("gathered_after_its_index", gathered_after_its_index);
  ph::Array x = sixteenths({45, 77}, 3);
  ph::Array ids = ph::Array::zeros({45, 3}, ph::DType::i64);
  for (int64_t i = 0; i < 45; ++i) {
    ids.set(i * 3, (i * 7) % 45);
    ids.set(i * 3 + 1, 0);
    ids.set(i * 3 + 2, 0);
  }
  const std::vector<ph::Array> want = k.interpret({x, ids});
  for (int64_t block : {1, 4, 16}) {
    ph::Config c = k.compile({x, ids}).config();
    c.block_sizes = {block};
    SCOPED_TRACE(c.to_json());
    expect_outputs_near(k.compile({x, ids}, &c).run({x, ids}), want, 0);
  }
}

TEST(SharedRowLoops, AScalarBetweenTwoSharedLoopsIsComputedOnce) {
  ph::Kernel k("two_groups_one_scalar", two_groups_one_scalar);
  ph::Array x = sixteenths({45, 77}, 4), y = sixteenths({45, 40}, 5), w = sixteenths({4}, 6);
  const std::vector<ph::Array> want = k.interpret({x, y, w});
  for (int64_t block : {1, 8}) {
    ph::Config c = k.compile({x, y, w}).config();
    c.block_sizes = {block};
    SCOPED_TRACE(c.to_json());
    ph::CompiledKernel ck = k.compile({x, y, w}, &c);
    EXPECT_NE(ck.source().find("accv1[k] = "), std::string::npos) << ck.source();
    expect_outputs_near(ck.run({x, y, w}), want, 0);
  }
}

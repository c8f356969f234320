// `acc = acc + sum(x, axis)`: the cpu backend adds the sum into the Var's buffer where the sum is
// (lower/fusion.h: accumulating_dots' sums; emit/reductions.cpp), along an outer axis row by row, along
// the innermost one its lanes' total. The results must be the interpreter's: ragged blocks and
// row tails, sums over both axes, in a loop over an enclosing block (rms_norm_backward's dw), and
// the cases that keep a buffer for the sum: a sum that reads the Var, one used twice, and one
// whose Var a statement between reads.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "exact_rows.h"
#include "parhelion/parhelion.h"

namespace ph = parhelion;
using exact_rows::sixteenths;

namespace {

// Column sums of each block of rows (walked in tiles; the blocks' partials summed by a second
// launch, as rms_norm_backward's dw), row sums over column tiles, and a one-hot pick per row.
std::tuple<ph::Tensor, ph::Tensor> sums(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto bm = ph::register_block_size(m);
  auto partials = ph::empty({ph::num_blocks(bm), 1, n});
  auto cols = ph::empty({n});
  auto rows = ph::empty({m});
  for (auto block : ph::tile(ph::Extent(m).block(bm))) {
    ph::Var acc = ph::zeros({n});
    for (auto r : ph::tile(block)) acc = acc + ph::sum(x[r, ph::all] * 2.0f, 0);
    partials[block.id(), 0, ph::all] = acc;
  }
  for (auto c : ph::tile(n)) {
    ph::Var acc = ph::zeros({c});
    for (auto b : ph::tile(ph::num_blocks(bm))) acc = acc + ph::sum(partials[b, 0, c], 0);
    cols[c] = acc;
  }
  for (auto r : ph::tile(m)) {
    ph::Var acc = ph::full({r}, 0.5);
    ph::Var picked = ph::zeros({r});  // a one-hot sum (cross_entropy's target logit): x[i, 3i % n]
    auto label = ph::unsqueeze((r.index() * int64_t(3)) % n, -1);
    for (auto c : ph::tile(n)) {
      acc = acc + ph::sum(x[r, c] - 1.0f, 1);
      picked = picked + ph::sum(ph::where(c.index() == label, x[r, c], 0.0f), 1);
    }
    rows[r] = acc + picked * 1024.0f;
  }
  return {cols, rows};
}

// Sums that keep their buffers, over column blocks of a fixed 16 (the interpreter's trips):
// one reads the Var it is added to; one is added to two Vars; one is added after a store that
// reads its Var (which must see the Var without it).
std::tuple<ph::Tensor, ph::Tensor> kept(ph::Tensor x) {
  auto [m, n] = x.sizes<2>();
  auto out = ph::empty({m});
  auto before_last = ph::empty({m});
  for (auto r : ph::tile(m)) {
    ph::Var acc = ph::full({r}, 0.25);
    ph::Var once = ph::zeros({r});
    ph::Var thrice = ph::zeros({r});
    ph::Var late = ph::full({r}, 1.0);
    for (auto c : ph::tile(ph::Extent(n).block(16))) {
      acc = acc + ph::sum(x[r, c] * acc.unsqueeze(-1) * 0.125f, 1);
      auto s = ph::sum(x[r, c], 1);
      once = once + s;
      thrice = thrice + s * 3.0f;
      auto t = ph::sum(x[r, c] * 0.5f, 1);
      before_last[r] = late;
      late = late + t;
    }
    out[r] = (acc + once + thrice) + late;
  }
  return {out, before_last};
}

template <class K>
void expect_interpreters_values(K& k, const ph::Array& x, const std::vector<std::vector<int64_t>>& blocks, int added,
                                double tolerance) {
  const std::vector<ph::Array> want = k.interpret({x});
  for (const std::vector<int64_t>& b : blocks) {
    ph::Config c = k.compile({x}).config();
    c.block_sizes = b;
    SCOPED_TRACE(c.to_json());
    ph::CompiledKernel ck = k.compile({x}, &c);
    int found = 0;
    for (size_t at = ck.source().find(", added into var v"); at != std::string::npos;
         at = ck.source().find(", added into var v", at + 1))
      ++found;
    EXPECT_EQ(found, added) << ck.source();
    exact_rows::expect_outputs_near(ck.run({x}), want, tolerance);
  }
}

}  // namespace

TEST(SumsIntoVars, ColumnAndRowSumsAddIntoTheirVars) {
  ph::Kernel k("sums", sums);
  // multiples of 1/16 summed: exact in any order
  for (int64_t n : {77, 64}) {
    SCOPED_TRACE("n " + std::to_string(n));
    expect_interpreters_values(k, sixteenths({45, n}, 1),
                               {{16, 4, 16, 2, 4, 32}, {8, 2, 64, 1, 1, 16}, {64, 1, 1, 4, 16, 64}}, 4, 0);
  }
}

TEST(SumsIntoVars, ASumThatReadsItsVarOrIsUsedTwiceKeepsItsBuffer) {
  ph::Kernel k("kept", kept);
  expect_interpreters_values(k, sixteenths({45, 77}, 2), {{16}, {1}, {64}}, 0, 1e-6);
}

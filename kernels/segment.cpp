// Segment reduction by a scan (docs/language.md, "Scans"): out[s, :] = the sum of the rows
// x[i, :] whose sorted segment id ids[i] is s, for x [N, D], ids [N] non-decreasing in [0, S).
#include "kernels/kernels.h"

namespace parhelion::kernels {
namespace {
namespace ph = parhelion;

// Restructured for scans: each row's sum is a segmented inclusive scan down the rows (values
// and ids scanned as pairs: equal ids add, a new id restarts), and the row that ends a segment
// holds the segment's sum. A launch over column blocks walks the row blocks in order and carries
// the sum of the segment still open at a block's end (and its id) into the next block in Vars.
// (In x's dtype: each scanned sum is rounded once, as the output holds it.) Every row is then
// scattered to a row of its own: a segment's last row to out[id], the others
// to spare rows S + i past the S returned (nobody reads them). So one plain scatter, with no
// mask and no two rows on one element, writes every sum; segments with no rows stay 0 (the
// zeros of the allocation). `segments` only gives S (its length; its contents are not read).
// The ids must be sorted (not checked): unsorted ids give unspecified sums.
ph::Tensor segment_sum_body(ph::Tensor x, ph::Tensor ids, ph::Tensor segments) {
  ph::expect(x.rank() == 2, "segment_sum: x must be [N, D]");
  ph::expect(ids.rank() == 1 && ids.size(0) == x.size(0), "segment_sum: ids must be [N], one id per row of x");
  ph::expect_dtype(ids, {DType::i32, DType::i64});
  ph::expect(segments.rank() == 1, "segment_sum: segments is a 1-D tensor whose length is the number of segments");
  auto [n, d] = x.sizes<2>();
  const int64_t s = segments.size(0);

  // Where each row's scanned sum goes: out[id] for the last row of a segment (the next row has
  // another id, or there is none), else its spare row.
  auto dest = ph::empty({n}, DType::i64);
  if (n > 1) {
    auto here = ids.narrow(0, 0, n - 1), next = ids.narrow(0, 1, n - 1);
    auto dest_head = dest.narrow(0, 0, n - 1);
    for (auto t : ph::tile(n - 1)) {
      auto id = here[t];
      dest_head[t] = ph::where(id != next[t], id, s + t.index());
    }
  }
  for (auto g : ph::grid(1)) {
    (void)g;
    dest[ph::slice(n - 1, n)] = ids[ph::slice(n - 1, n)];
  }

  auto scanned = ph::empty({n, d}, x.dtype());
  for (auto td : ph::tile(d)) {
    ph::Var carry = ph::zeros({td});                    // the open segment's sum so far
    ph::Var carry_id = ph::full({}, -1.0, DType::i64);  // and its id (-1: none yet)
    for (auto tn : ph::tile(n)) {
      auto v = x[tn, td];
      auto id = ids[tn];
      auto [sums, last_ids] = ph::associative_scan(
          std::pair{v, id.unsqueeze(1)}, 0,
          [](const ph::Tensor& av, const ph::Tensor& ai, const ph::Tensor& bv, const ph::Tensor& bi) {
            return std::pair{ph::where(ai == bi, av + bv, bv), bi};
          });
      (void)last_ids;
      // Rows of the segment open at the block's start add what the earlier blocks summed.
      auto continues = (id == carry_id).unsqueeze(1);
      scanned[tn, td] = sums + ph::where(continues, carry.unsqueeze(0), 0.0f);
      auto last = ph::amax(id, 0);  // sorted: the block's last row's id
      auto in_last = (id == last).unsqueeze(1);
      carry = ph::sum(ph::where(in_last, v, 0.0f), 0) + ph::where(carry_id == last, carry, 0.0f);
      carry_id = last;
    }
  }
  // The scatter, in a launch of its own: its row numbers are a block of `dest` at a grid tile
  // (what a TPU's row DMAs read from SMEM), and every grid step writes distinct rows.
  auto rows = ph::zeros({s + n, d}, x.dtype());
  for (auto [tn, td] : ph::tile(n, d)) rows[dest[tn], td] = scanned[tn, td];
  return rows.narrow(0, 0, s);
}

}  // namespace

Kernel<Tensor(Tensor, Tensor, Tensor)> segment_sum("segment_sum", segment_sum_body);

}  // namespace parhelion::kernels

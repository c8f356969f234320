// Segment reductions over sorted segment ids (ids [N] non-decreasing, so that each segment's rows
// are contiguous): segment_sum, out[s, :] = the sum of the rows x[i, :] whose id is s, and
// segment_cumsum, the running sum down each segment (docs/language.md, "Scans").
#include "kernels/kernels.h"

namespace parhelion::kernels {
namespace {
namespace ph = parhelion;

// Restructured as a jagged reduction: with sorted ids, segment s owns the rows offsets[s] ..
// offsets[s+1], and a launch over (segment, column block) sums just those rows. So x is read
// once and nothing of size N x D is written. On pallas the jagged loop streams x's rows, a
// trip's block at a time, from HBM (docs/pallas.md): any N fits. (An earlier version scanned the
// rows and gathered each segment's last scanned row: it wrote an [N, D] intermediate, twice the
// bytes and 3x the time on the cpu, and made a TPU's one-hot gather multiply by all N rows.)
//
// The offsets come from the ids in two steps, neither of which needs atomics or a masked
// scatter (a TPU kernel has neither):
// - a scatter of each row's end (its number + 1) to `ends[dest]`: entry id + 1 for the row that
//   ends a segment (the next row has another id, or there is none), a spare entry S + 1 + i past
//   the S + 1 read for every other row, so that no entry is written twice;
// - a running max of ends[0..S] (0 where a segment has no rows): offsets[s + 1] = one past the
//   last row of the segments up to s, and an empty segment gets offsets[s + 1] = offsets[s].
// `segments` only gives S (its length; its contents are not read). The ids must be sorted and
// in [0, S) (not checked): others give unspecified sums.
ph::Tensor segment_sum_body(ph::Tensor x, ph::Tensor ids, ph::Tensor segments) {
  ph::expect(x.rank() == 2, "segment_sum: x must be [N, D]");
  ph::expect(ids.rank() == 1 && ids.size(0) == x.size(0), "segment_sum: ids must be [N], one id per row of x");
  ph::expect_dtype(ids, {DType::i32, DType::i64});
  ph::expect(segments.rank() == 1, "segment_sum: segments is a 1-D tensor whose length is the number of segments");
  auto [n, d] = x.sizes<2>();
  const int64_t s = segments.size(0);

  // Where each row's end goes: entry id + 1 for the last row of a segment, else spare S + 1 + i.
  auto dest = ph::empty({n}, DType::i64);
  if (n > 1) {
    auto here = ids.narrow(0, 0, n - 1), next = ids.narrow(0, 1, n - 1);
    auto dest_head = dest.narrow(0, 0, n - 1);
    for (auto t : ph::tile(n - 1)) {
      auto id = here[t];
      dest_head[t] = ph::where(id != next[t], id + 1, s + 1 + t.index());
    }
  }
  for (auto g : ph::grid(1)) {
    (void)g;
    dest[ph::slice(n - 1, n)] = ids[ph::slice(n - 1, n)] + 1;
  }
  auto ends = ph::full({s + n}, 0.0, DType::i64);  // (the last spare entry is S + 1 + (N - 2))
  for (auto t : ph::tile(n)) ends[dest[t]] = t.index() + 1;

  // offsets = the running max of ends[0..S], carried across the blocks of one sequential walk.
  auto offsets = ph::empty({s + 1}, DType::i64);
  auto read_ends = ends.narrow(0, 0, s + 1);
  for (auto g : ph::grid(1)) {
    (void)g;
    ph::Var before = ph::full({}, 0.0, DType::i64);  // the max of the earlier blocks
    for (auto t : ph::tile(s + 1)) {
      auto running = ph::associative_scan(read_ends[t], 0,
                                          [](const ph::Tensor& a, const ph::Tensor& b) { return ph::maximum(a, b); });
      auto upto = ph::maximum(running, before);
      offsets[t] = upto;
      before = ph::amax(upto, 0);
    }
  }

  // One segment per grid step (in f32, rounded once where out holds it), written at a leading
  // index: [S, 1, D], returned as [S, D] (a TPU block's last two dims cannot squeeze a segment's
  // row out of S).
  auto out = ph::empty({s, 1, d}, x.dtype());
  for (auto [g, td] : ph::tile(ph::range(s).block(1), d)) {
    ph::Var sum = ph::zeros({td});
    for (auto tr : ph::tile(ph::jagged(offsets, g.begin()))) sum = sum + ph::sum(x[tr, td], 0);
    out[g, 0, td] = sum;
  }
  return out.view({s, d});
}

// Each row's sum is a segmented inclusive scan down the rows (values and ids scanned as pairs:
// equal ids add, a new id restarts). A launch over column blocks walks the row blocks in order
// and carries the sum of the segment still open at a block's end (and its id) into the next
// block in Vars. The ids must be sorted (not checked): a block's last id is its max, and the
// carry adds every row of the block with that id.
ph::Tensor segment_cumsum_body(ph::Tensor x, ph::Tensor ids) {
  ph::expect(x.rank() == 2, "segment_cumsum: x must be [N, D]");
  ph::expect(ids.rank() == 1 && ids.size(0) == x.size(0), "segment_cumsum: ids must be [N], one id per row of x");
  ph::expect_dtype(ids, {DType::i32, DType::i64});
  auto [n, d] = x.sizes<2>();
  auto out = ph::empty({n, d}, x.dtype());
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
      out[tn, td] = sums + ph::where(continues, carry.unsqueeze(0), 0.0f);
      auto last = ph::amax(id, 0);  // sorted: the block's last row's id
      auto in_last = (id == last).unsqueeze(1);
      carry = ph::sum(ph::where(in_last, v, 0.0f), 0) + ph::where(carry_id == last, carry, 0.0f);
      carry_id = last;
    }
  }
  return out;
}

}  // namespace

Kernel<Tensor(Tensor, Tensor, Tensor)> segment_sum("segment_sum", segment_sum_body);
Kernel<Tensor(Tensor, Tensor)> segment_cumsum("segment_cumsum", segment_cumsum_body);

}  // namespace parhelion::kernels

// Segment reduction by a scan (docs/language.md, "Scans"): out[s, :] = the sum of the rows
// x[i, :] whose sorted segment id ids[i] is s, for x [N, D], ids [N] non-decreasing in [0, S).
#include "kernels/kernels.h"

namespace parhelion::kernels {
namespace {
namespace ph = parhelion;

// Restructured for scans: each row's sum is a segmented inclusive scan down the rows (values
// and ids scanned as pairs: equal ids add, a new id restarts), and the row that ends a segment
// holds the segment's sum. A launch over column blocks walks the row blocks in order and carries
// the sum of the segment still open at a block's end (and its id) into the next block in Vars
// (in x's dtype: each scanned sum is rounded once, as the output holds it), and out[s] gathers
// the scanned row that ends segment s. Which row that is comes from a scatter of row numbers
// through `dest`, which sends each row to an entry of its own: a segment's last row to entry id,
// the others to spare entries s + i past the s read. So the scatter needs no mask and never
// writes one entry twice (a TPU kernel has neither masked scatters nor atomics), and costs 8
// bytes a row, not a row of x. `segments` only gives S (its length; its contents are not read).
// The ids must be sorted (not checked): unsorted ids give unspecified sums.
ph::Tensor segment_sum_body(ph::Tensor x, ph::Tensor ids, ph::Tensor segments) {
  ph::expect(x.rank() == 2, "segment_sum: x must be [N, D]");
  ph::expect(ids.rank() == 1 && ids.size(0) == x.size(0), "segment_sum: ids must be [N], one id per row of x");
  ph::expect_dtype(ids, {DType::i32, DType::i64});
  ph::expect(segments.rank() == 1, "segment_sum: segments is a 1-D tensor whose length is the number of segments");
  auto [n, d] = x.sizes<2>();
  const int64_t s = segments.size(0);

  // Where each row's number goes: entry id for the last row of a segment (the next row has
  // another id, or there is none), else its spare entry s + i.
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

  // The last row of each segment, by one scatter of every row's number to its destination: -1
  // where a segment has no rows (entries past s are the spare ones, not read).
  auto last_row = ph::full({s + n}, -1.0, DType::i64);
  for (auto t : ph::tile(n)) last_row[dest[t]] = t.index();

  // Every row is stored, though the gather reads only those that end a segment: a one-hot gather
  // on a TPU multiplies every row of its table (by 0 where it does not select it), so they must
  // all be finite, and storing them costs less than zeroing the tensor first (on the cpu, 26 ms
  // against 40 at the suite's shape: the zeros are a second pass over it).
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
  // Each segment's sum is the scanned value at its last row: out gathers those rows (a segment
  // with no rows has none, -1, and a masked-off gather gives it 0).
  auto out = ph::empty({s, d}, x.dtype());
  auto last_of_segment = last_row.narrow(0, 0, s);  // (a TPU block spans this dim whole: any s)
  for (auto [ts, td] : ph::tile(s, d)) {
    auto row = last_of_segment[ts];
    out[ts, td] = ph::load(scanned, {row, td}, (row >= 0).unsqueeze(1), 0.0f);
  }
  return out;
}

}  // namespace

Kernel<Tensor(Tensor, Tensor, Tensor)> segment_sum("segment_sum", segment_sum_body);

}  // namespace parhelion::kernels

// Inner loops (a Loop op's tiles) and the blocks their plan stages in fast memory: Resident
// copies a block's whole extent once and keeps it across grid steps (keyed by its outer
// indices), Pipeline copies each trip's block into one of `buffers` slots and prefetches the
// blocks of the trips ahead. Loads of a staged block then read the buffer (staged_offset).

#include <algorithm>
#include <string>

#include "backend/cpu/emit/launch_emitter.h"
#include "ir/trip_guard.h"
#include "parhelion/dtype.h"
#include "parhelion/error.h"

namespace parhelion::backend::cpu::emit {

void LaunchEmitter::loop(const Op& op) {
  line("// loop at " + op.loc.str());
  for (int tile : op.loop_tiles) {
    const ir::TileInfo& t = fn_.tiles[tile];
    std::string n = tname(tile);
    int64_t b = block_of(tile);
    const lower::InnerLoop& il = inner_loop(tile);
    if (il.strategy == lower::Strategy::Resident) fill_resident(il);
    // A tile over an enclosing tile's block ranges over that block (it streams: no staging).
    std::string begin = std::to_string(t.begin), end = std::to_string(t.end);
    if (t.parent >= 0) {
      const std::string pn = tname(t.parent);
      begin = "off_" + pn;
      end = "(off_" + pn + " + n_" + pn + ")";
    }
    if (t.is_jagged()) jagged_range(tile, &begin, &end);
    // A loop whose trips past a bound do nothing (causal attention's key blocks above the
    // diagonal: ir/trip_guard.h) stops there, so the skipped trips stage and prefetch nothing.
    std::string stop = end;
    if (t.parent < 0 && !t.is_jagged()) {
      ir::ScalarSyntax c;
      c.begin = [&](int g) { return "off_" + tname(g); };
      c.end = [&](int g) { return "(off_" + tname(g) + " + n_" + tname(g) + ")"; };
      c.min = "ph_min_i64";
      c.max = "ph_max_i64";
      if (const std::string e = ir::trip_guard_bound(fn_, op, L_.op->loop_tiles, c); !e.empty()) {
        stop = "stop_" + n;
        line("const int64_t " + stop + " = ph_min_i64(" + end + ", " + e +
             ");  // the trips whose body runs (when at " + op.body.back().loc.str() + ")");
      }
    }
    trip_stop_[tile] = stop;
    line("for (int64_t off_" + n + " = " + begin + "; off_" + n + " < " + stop + "; off_" + n +
         " += " + std::to_string(b) + ") {");
    ++depth_;
    line("const int64_t n_" + n + " = ph_min_i64(" + std::to_string(b) + ", " + end + " - off_" + n + ");");
    line("(void)n_" + n + ";");
    if (il.strategy == lower::Strategy::Pipeline) pipeline_trip(il);
  }
  block(op.body);
  for (size_t i = 0; i < op.loop_tiles.size(); ++i) {
    --depth_;
    line("}");
  }
}

// A jagged tile's range for this entry of its loop, lo_tN..hi_tN: a non-empty one is checked
// against the bound (the dims it indexes) before any trip reads or writes.
void LaunchEmitter::jagged_range(int tile, std::string* begin, std::string* end) {
  const ir::TileInfo& t = fn_.tiles[tile];
  const std::string n = tname(tile), lo = "lo_" + n, hi = "hi_" + n;
  line("const int64_t " + lo + " = " + expr(t.begin_value, {}) + ", " + hi + " = " + expr(t.end_value, {}) + ";");
  if (p_.config.index_checks && t.end < ir::kUnboundedRange) {
    const std::string where = c_string(fn_.tiles[tile].loc.str());
    const std::string what = c_string("the range of jagged tile " + n + ", which must lie within 0.." +
                                      std::to_string(t.end) + " (the dimensions it indexes)");
    line("if (" + lo + " < " + hi + " && (" + lo + " < 0 || " + hi + " > " + std::to_string(t.end) + ")) { " +
         "ph_index_error(ph_st, " + where + ", " + what + ", " + lo + " < 0 ? " + lo + " : " + hi + "); return; }");
  }
  *begin = lo;
  *end = hi;
}

const lower::InnerLoop& LaunchEmitter::inner_loop(int tile) const {
  const lower::InnerLoop* il = L_.inner_loop(tile);
  PH_CHECK(il, "no inner loop for tile");
  return *il;
}

// Resident blocks: the outer indices of the block each buffer holds, kept across the grid
// steps this call runs, so that consecutive steps on the same block do not copy it again.
void LaunchEmitter::declare_resident_keys() {
  for (const lower::InnerLoop& il : L_.inner_loops) {
    if (il.strategy != lower::Strategy::Resident) continue;
    for (int k : il.staged) {
      const lower::StagedBlock& b = L_.staged[k];
      line("bool ph_have" + std::to_string(k) + " = false; int64_t ph_key" + std::to_string(k) + "[" +
           std::to_string(std::max<size_t>(1, b.refill_key.size())) + "] = {0};");
      line("(void)ph_key" + std::to_string(k) + ";");
    }
  }
}

std::string LaunchEmitter::stg_name(int k) const { return scratch_name(L_.scratch[L_.staged[k].scratch]); }

// The element offset in a staged buffer of block element `idx` of the current trip.
std::string LaunchEmitter::staged_offset(int k, Idx idx) const {
  const lower::StagedBlock& b = L_.staged[k];
  const lower::InnerLoop& il = inner_loop(b.loop_tile);
  std::string t = tname(b.loop_tile);
  if (il.strategy == lower::Strategy::Resident) {
    idx[b.inner_dim] = "(off_" + t + " - " + std::to_string(il.begin) + " + " + idx[b.inner_dim] + ")";
    return linear(b.capacity, idx);
  }
  std::string base = b.slots > 1 ? "ph_slot_" + t + " * " + std::to_string(b.slot_elems) + " + " : "";
  return base + linear(b.capacity, idx);
}

// The load that defines staged block k (its first reader).
const Op& LaunchEmitter::staged_load_op(int k) {
  int v = L_.staged[k].loads.front();
  const Op* found = nullptr;
  ir::walk(L_.op->body, [&](const Op& o) {
    if (o.result == v) found = &o;
  });
  PH_CHECK(found, "staged load not found");
  return *found;
}

// Copies the block of staged buffer k at the current off_/n_ of its tiles into `slot`
// (an offset expression), valid elements only. It reads the tensor through tensor_address():
// address() would read the staged buffer itself.
void LaunchEmitter::copy_block(int k, const std::string& slot) {
  const Op& load = staged_load_op(k);
  const lower::StagedBlock& b = L_.staged[k];
  nest(type(load.result).shape, [&](const Idx& idx) {
    line(stg_name(k) + "[" + (slot == "0" ? "" : slot + " + ") + linear(b.capacity, idx) +
         "] = " + tensor_address(load, idx) + ";");
  });
}

// Resident: before the loop, bring the whole extent of each block it reads into fast memory,
// unless this thread's previous grid step already did so for the same outer block.
void LaunchEmitter::fill_resident(const lower::InnerLoop& il) {
  std::string t = tname(il.tile);
  for (int k : il.staged) {
    const lower::StagedBlock& b = L_.staged[k];
    std::string ks = std::to_string(k);
    line("{  // resident: stage " + fn_.tensors[b.tensor].name + " over all of " + t + " (" +
         std::to_string(il.extent) + ")");
    ++depth_;
    std::string same = "ph_have" + ks, store_key;
    for (size_t i = 0; i < b.refill_key.size(); ++i) {
      const lower::IndexExpr& e = b.refill_key[i];
      std::string key = e.kind == lower::IndexExpr::Value ? expr(e.value, {}) : "off_" + tname(e.tile);
      same += " && ph_key" + ks + "[" + std::to_string(i) + "] == " + key;
      store_key += "ph_key" + ks + "[" + std::to_string(i) + "] = " + key + "; ";
    }
    line("if (!(" + same + ")) {");
    ++depth_;
    line("const int64_t off_" + t + " = " + std::to_string(il.begin) + ", n_" + t + " = " + std::to_string(il.extent) +
         ";");
    copy_block(k, "0");
    line(store_key + "ph_have" + ks + " = true;");
    --depth_;
    line("}");
    --depth_;
    line("}");
  }
}

// Pipeline: copy this trip's blocks into their slot; with two buffers or more, prefetch the
// blocks `buffers - 1` trips ahead, so they are in the caches when their trip copies them.
void LaunchEmitter::pipeline_trip(const lower::InnerLoop& il) {
  std::string t = tname(il.tile);
  if (il.buffers > 1)
    line("const int64_t ph_slot_" + t + " = ((off_" + t + " - " + std::to_string(il.begin) + ") / " +
         std::to_string(il.block) + ") % " + std::to_string(il.buffers) + ";");
  for (int k : il.staged) {
    const lower::StagedBlock& b = L_.staged[k];
    line("{  // pipeline: stage " + fn_.tensors[b.tensor].name + " block of " + t);
    ++depth_;
    copy_block(k, il.buffers > 1 ? "ph_slot_" + t + " * " + std::to_string(b.slot_elems) : "0");
    --depth_;
    line("}");
  }
  if (il.buffers < 2) return;
  int64_t ahead = (il.buffers - 1) * il.block;
  line("if (off_" + t + " + " + std::to_string(ahead) + " < " + trip_stop_.at(il.tile) + ") {  // prefetch " +
       std::to_string(il.buffers - 1) + " trip(s) ahead");
  ++depth_;
  line("const int64_t ph_ahead = off_" + t + " + " + std::to_string(ahead) + ";");
  line("const int64_t off_" + t + " = ph_ahead, n_" + t + " = ph_min_i64(" + std::to_string(il.block) + ", " +
       std::to_string(il.begin + il.extent) + " - ph_ahead);");
  for (int k : il.staged) prefetch_block(k);
  --depth_;
  line("}");
}

void LaunchEmitter::prefetch_block(int k) {
  const Op& load = staged_load_op(k);
  const std::vector<Dim>& shape = type(load.result).shape;
  const ir::TensorInfo& t = fn_.tensors[load.tensor];
  // The innermost block dim: prefetch one address per cache line when it is contiguous.
  int last_tensor_dim = -1;
  for (size_t d = 0; d < load.index.size(); ++d) {
    const ir::IndexItem& ix = load.index[d];
    if (ix.kind == ir::IndexItem::All || ix.kind == ir::IndexItem::Slice ||
        (ix.kind == ir::IndexItem::Tile && !fn_.tiles[ix.tile].is_grid))
      last_tensor_dim = static_cast<int>(d);
  }
  int64_t step =
      last_tensor_dim >= 0 && t.strides[last_tensor_dim] == 1 ? std::max<int64_t>(1, 64 / dtype_size(t.dtype)) : 1;
  Idx idx(shape.size());
  int opened = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    idx[d] = "i" + std::to_string(d);
    const std::string bound = extent(shape[d]);
    line("for (int64_t " + idx[d] + " = 0; " + idx[d] + " < " + bound + "; " + idx[d] +
         (d + 1 == shape.size() ? " += " + std::to_string(step) : "++") + ") {");
    ++depth_;
    ++opened;
  }
  line("__builtin_prefetch(&" + tensor_address(load, idx) + ", 0, 3);");
  for (int j = 0; j < opened; ++j) {
    --depth_;
    line("}");
  }
}

}  // namespace parhelion::backend::cpu::emit

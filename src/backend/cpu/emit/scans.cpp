// Scans (cumsum, cumprod, associative_scan) of a block along one axis: a sequential loop along
// the scanned dim, outermost, and inside it a loop nest over all the other dims, whose
// innermost loop is the simd one. So the lines of the block advance together, one element per
// trip, in vector lanes; each line's running tuple is carried in a small array indexed by the
// line. The first trip of the scanned dim is peeled (it only copies), so the combine's loop has
// no branch. A ragged block's lines stop at its valid count: missing elements are never read.

#include <string>

#include "backend/cpu/emit/launch_emitter.h"
#include "parhelion/error.h"

namespace parhelion::backend::cpu::emit {

constexpr int64_t kMaxStackCarryBytes = 64 * 1024;

void LaunchEmitter::scan(const Op& op) {
  const ir::ScanCombine& c = op.combine.at(0);
  const size_t n = op.operands.size();
  const ir::Type& t = type(op.result);
  const int axis = op.axis;
  const int m = L_.materialized(op.result);
  PH_CHECK(m >= 0, "scan result not materialized");
  const lower::Scratch& out = L_.scratch[m];
  const Dim& sd = t.shape[axis];
  const std::string count = extent(sd);

  // The lines: every dim but the scanned one; the carried tuple has one slot per line.
  std::vector<Dim> lines = t.shape;
  lines.erase(lines.begin() + axis);
  std::vector<int64_t> capacity;
  int64_t slots = 1;
  for (const Dim& d : lines) {
    capacity.push_back(d.kind == Dim::Tile ? block_of(d.tile) : d.size);
    slots *= capacity.back();
  }
  const std::string id = std::to_string(op.result);
  auto carry = [&](size_t j) { return "sc" + id + "_" + std::to_string(j); };

  line("{  // scan (component " + std::to_string(op.fn) + " of " + std::to_string(n) + ") over axis " +
       std::to_string(axis) + (op.reverse ? ", reversed," : "") + " at " + op.loc.str());
  ++depth_;
  // The carried tuples live on the stack, unless the block has so many lines that they would
  // crowd a worker thread's stack (a [64, 4096] block scanned along its rows needs 4096 slots
  // per component; a rank-3 block far more): then on the heap, once per grid step.
  int64_t bytes = 0;
  for (size_t j = 0; j < n; ++j) bytes += slots * 8;
  const bool on_heap = bytes > kMaxStackCarryBytes;
  for (size_t j = 0; j < n; ++j) {
    const std::string ty = c_type(type(op.operands[j]).dtype), size = std::to_string(slots);
    line(on_heap ? ty + "* " + carry(j) + " = new " + ty + "[" + size + "];" : ty + " " + carry(j) + "[" + size + "];");
  }
  // One trip along the scanned dim: `first` copies the elements into the carried tuples, the
  // others combine them with it; both store the result component.
  auto trip = [&](bool first) {
    const std::string along = "ia" + id;
    line("const int64_t " + along + " = " + (op.reverse ? "(" + count + " - 1 - is" + id + ")" : "is" + id) + ";");
    nest(lines, [&](const Idx& line_idx) {
      Idx full = line_idx;
      full.insert(full.begin() + axis, along);
      const std::string slot = "[" + linear(capacity, line_idx) + "]";
      line("{");
      ++depth_;
      for (size_t j = 0; j < n; ++j) {
        const ir::Type& in = type(op.operands[j]);
        const std::string x = expr(op.operands[j], broadcast(in.shape, full));
        if (first) {
          line(carry(j) + slot + " = " + x + ";");
          continue;
        }
        line("const " + c_type(in.dtype) + " s" + std::to_string(c.params[j]) + " = " + carry(j) + slot + ";");
        line("const " + c_type(in.dtype) + " s" + std::to_string(c.params[n + j]) + " = " + x + ";");
      }
      if (!first) {
        for (const Op& f : c.ops)
          line("const " + c_type(type(f.result).dtype) + " s" + std::to_string(f.result) + " = " + op_expr(f, {}) +
               ";");
        for (size_t j = 0; j < n; ++j) line(carry(j) + slot + " = s" + std::to_string(c.results[j]) + ";");
      }
      line(scratch_ref(out, full) + " = " + carry(static_cast<size_t>(op.fn)) + slot + ";");
      --depth_;
      line("}");
    });
  };
  line("if (" + count + " > 0) {");
  ++depth_;
  line("const int64_t is" + id + " = 0;");
  trip(true);
  --depth_;
  line("}");
  line("for (int64_t is" + id + " = 1; is" + id + " < " + count + "; ++is" + id + ") {");
  ++depth_;
  trip(false);
  --depth_;
  line("}");
  if (on_heap)
    for (size_t j = 0; j < n; ++j) line("delete[] " + carry(j) + ";");
  --depth_;
  line("}");
}

}  // namespace parhelion::backend::cpu::emit

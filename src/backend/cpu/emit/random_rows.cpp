// Random numbers drawn a row at a time. Philox's rounds are 32 x 32 -> 64-bit products, which GCC
// vectorizes as 64 x 64 (vpmullq on AVX-512): dropout spent 8 cycles an element drawing its mask
// and ran at a tenth of the memory roof. A simd loop whose body draws `ph::rand` or `ph::randn`
// under a scalar seed therefore runs in chunks: each chunk first computes the offsets it draws at
// into a buffer (a simd loop of the offset expression alone), then their Philox words with
// ph_rt::philox_row (vpmuludq on 64-bit lanes: 2.5x the vectorized per-element code), and the
// loop's body reads the words and makes its uniform or normal numbers from them. The bits are the
// same as philox() per element. Not where the offsets could read out of range at an element the
// body does not compute (a gather, a masked access's guarded side), nor in a loop whose indices
// are checked ahead (checked_ahead_loop): those keep the per-element draw.

#include <string>

#include "backend/cpu/emit/launch_emitter.h"

namespace parhelion::backend::cpu::emit {

namespace {
constexpr int kRandomChunk = 256;  // elements: the offsets (2 KiB) and words stay in L1
}  // namespace

std::string LaunchEmitter::random_row(const Op& op, const std::string& seed, const std::string& offset) {
  const auto f = static_cast<ir::BinaryFn>(op.fn);
  if (f != ir::BinaryFn::rand && f != ir::BinaryFn::randn) return "";
  // Drawn ahead of the body, the offsets are computed at every element of the chunk, outside
  // any guard of the body's: only offsets that read nothing but their blocks' own elements
  // (speculatable), never on the guarded side of a masked access, and never from a value the
  // body names (a reduction's element, a scan's combine operands, which are scalars).
  if (!random_rows_on_ || no_hoist_ > 0 || !mask_scope_.empty() || !named_values_.empty()) return "";
  if (type(op.result).rank() == 0 || type(op.operands[0]).rank() != 0 || mentions(seed, hoist_var_)) return "";
  bool reads = false;
  if (!speculatable(op.operands[1], reads)) return "";
  const bool normal = f == ir::BinaryFn::randn;
  size_t k = 0;
  while (k < random_rows_.size() && (random_rows_[k].seed != seed || random_rows_[k].offset != offset)) ++k;
  if (k == random_rows_.size()) random_rows_.push_back({seed, offset, false});
  random_rows_[k].second_word |= normal;
  const std::string at = "[" + hoist_var_ + " - ph_rc]", n = std::to_string(k);
  return normal ? "ph_rt::normal_of(ph_rw0_" + n + at + ", ph_rw1_" + n + at + ")"
                : "ph_rt::uniform_of(ph_rw0_" + n + at + ")";
}

void LaunchEmitter::random_rows_loop(const std::string& var, const std::string& pragma, const std::string& first,
                                     const std::string& last, const std::string& inner,
                                     const std::vector<RandomRow>& rows) {
  const std::string chunk = std::to_string(kRandomChunk);
  line("for (int64_t ph_rc = " + first + "; ph_rc <= " + last + "; ph_rc += " + chunk + ") {  // random rows");
  ++depth_;
  line("const int64_t ph_rm = ph_min_i64(" + chunk + ", " + last + " - ph_rc + 1);");
  line("alignas(64) int64_t ph_ro[" + chunk + "];");
  const std::string header = "for (int64_t " + var + " = ph_rc; " + var + " < ph_rc + ph_rm; ++" + var + ")";
  for (size_t k = 0; k < rows.size(); ++k) {
    const RandomRow& r = rows[k];
    const std::string n = std::to_string(k);
    line("alignas(64) uint32_t ph_rw0_" + n + "[" + chunk + "];");
    if (r.second_word) line("alignas(64) uint32_t ph_rw1_" + n + "[" + chunk + "];");
    line(pragma);
    line(header + " ph_ro[" + var + " - ph_rc] = " + r.offset + ";");
    line("ph_rt::philox_row(" + r.seed + ", ph_ro, ph_rw0_" + n + ", " + (r.second_word ? "ph_rw1_" + n : "nullptr") +
         ", ph_rm);");
  }
  line(pragma);
  line(header + " {");
  os_ << inner;
  line("}");
  --depth_;
  line("}");
}

}  // namespace parhelion::backend::cpu::emit

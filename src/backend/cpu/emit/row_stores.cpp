// Stores written a row at a time through a buffer in L1: each row of the stored block (its
// last dim, contiguous in the tensor) is computed in chunks into the buffer, which one call
// then moves out:
//   - streamed (lower/cache_hints.h): ph_stream_store writes whole lines past the caches;
//   - converted: a bf16 or f16 row is computed in f32 and rounded by ph_rt::f32_row_to_bf16
//     (vcvtne2ps2bf16 where the compiler targets AVX-512-BF16) or f32_row_to_f16 (vcvtps2ph:
//     AVX-512F or F16C). Rounded in the compute loop, each element costs the generic round to
//     nearest even, about ten integer vector ops per 16 elements, on the ports the computation
//     needs: a bf16 swiglu's loop ran 1.5x slower than the same loop writing f32 to a buffer
//     and converting it apart (docs/benchmarks.md). Without the instruction (bf16 on a host
//     without AVX-512-BF16) the helper's own loop rounds generically, which measured no slower
//     than rounding in the compute loop (swiglu's and rms_norm's loops, -mno-avx512bf16 and
//     -march=haswell on the Zen 5). The same bits either way (the bf16 helper rounds a group
//     holding an f32 denormal, which the instruction flushes to zero, element by element).
// A streamed 16-bit row is both: converted into a second buffer, which is streamed.

#include <string>

#include "backend/cpu/emit/launch_emitter.h"
#include "lower/cache_hints.h"

namespace parhelion::backend::cpu::emit {

namespace {
constexpr int64_t kRowChunkBytes = 4096;  // a row buffer: in L1 while it is filled and written out
// The shortest row worth a call: one vcvtne2ps2bf16 (32 elements; two vcvtps2ph). Shorter rows
// round in the loop that computes them.
constexpr int64_t kMinConvertedRow = 32;
}  // namespace

bool LaunchEmitter::converts_rows(const Op& op, const std::vector<Dim>& shape) const {
  if (!is16(fn_.tensors[op.tensor].dtype) || ir::is_atomic(op) || ir::is_masked(op) || shape.empty()) return false;
  if (lower::row_group(fn_, op) > 1 || !lower::contiguous_rows(fn_, op) || is_copy(op)) return false;
  const Dim& row = shape.back();
  return (row.kind == Dim::Const ? row.size : block_of(row.tile)) >= kMinConvertedRow;
}

// A row of groups (lower::row_group: rotary's pairs; streamed only) is the tile dim before the
// group's, each element of it the group's elements side by side (unrolled, as nest() unrolls them).
void LaunchEmitter::row_store(const Op& op, const std::vector<Dim>& shape, bool streamed, bool converted) {
  const DType dt = fn_.tensors[op.tensor].dtype;
  const int64_t g = lower::row_group(fn_, op);
  const size_t k = shape.size() - (g > 1 ? 2 : 1);  // the row's dim
  std::vector<Dim> rows = shape;
  for (size_t d = k; d < shape.size(); ++d) rows[d] = Dim::constant(1);
  const std::string ty = storage_type(dt), var = "ph_i", gs = std::to_string(g);
  const std::string bound = extent(shape[k]);
  const int64_t buffered = converted ? 4 : dtype_size(dt);  // bytes of one element in the buffer
  const std::string chunk = std::to_string(kRowChunkBytes / buffered / g);
  nest(
      rows,
      [&](const Idx& outer) {
        Idx idx = outer;
        idx[k] = var;
        line("for (int64_t ph_c = 0; ph_c < " + bound + "; ph_c += " + chunk + ") {");
        ++depth_;
        line("const int64_t ph_m = ph_min_i64(" + chunk + ", " + bound + " - ph_c);");
        line("alignas(64) " + std::string(converted ? "float" : ty) + " ph_row[" +
             std::to_string(kRowChunkBytes / buffered) + "];");
        if (g == 1) prefetch_next_rows(op, idx, k, "ph_c", "ph_m");  // (a hint: none for groups)
        hoisted_loop(
            var, "for (int64_t " + var + " = ph_c; " + var + " < ph_c + ph_m; ++" + var + ") {", "#pragma omp simd",
            [&] {
              for (int64_t e = 0; e < g; ++e) {
                Idx at = idx;
                if (g > 1) at[k + 1] = std::to_string(e);
                const std::string bits = converted ? "" : copied_bits(op, at);
                const std::string slot =
                    g > 1 ? "(" + var + " - ph_c) * " + gs + " + " + std::to_string(e) : var + " - ph_c";
                const std::string value = converted      ? unrounded_operand(op, at)
                                          : bits.empty() ? stored_operand(op, at)
                                                         : bits;
                line("ph_row[" + slot + "] = " + value + ";");
              }
            },
            "ph_c", "(ph_c + ph_m - 1)");
        Idx at = idx;
        at[k] = "ph_c";
        const std::string to = "&" + tensor_address(op, at);
        const std::string bytes = "ph_m * " + (g > 1 ? gs + " * " : "") + "sizeof(" + ty + ")";
        const std::string convert = dt == DType::bf16 ? "ph_rt::f32_row_to_bf16(" : "ph_rt::f32_row_to_f16(";
        if (converted && streamed) {
          line("alignas(64) uint16_t ph_out[" + chunk + "];");
          line(convert + "ph_out, ph_row, ph_m);");
          line("ph_stream_store(" + to + ", ph_out, " + bytes + ");");
        } else if (converted) {
          line(convert + to + ", ph_row, ph_m);");
        } else {
          line("ph_stream_store(" + to + ", ph_row, " + bytes + ");");
        }
        --depth_;
        line("}");
      },
      "", SIZE_MAX);
}

}  // namespace parhelion::backend::cpu::emit

// Cache hints, as lowering planned them (lower/cache_hints.h): stores streamed past the caches,
// and the next grid step's blocks prefetched while this step computes.

#include <string>

#include "backend/cpu/emit/launch_emitter.h"
#include "lower/cache_hints.h"

namespace parhelion::backend::cpu::emit {

namespace {
constexpr int64_t kRowChunkBytes = 4096;  // a row buffer: in L1 while it is filled and written out
}  // namespace

// Each row of the block (its last dim: contiguous in the tensor) is computed in chunks into a
// row buffer, which ph_stream_store writes out past the caches, whole lines at a time. A row of
// groups (lower::row_group: rotary's pairs) is the tile dim before the group's, each element of
// it the group's elements side by side (unrolled, as nest() unrolls them).
void LaunchEmitter::streamed_store(const Op& op, const std::vector<Dim>& shape) {
  const DType dt = fn_.tensors[op.tensor].dtype;
  const int64_t g = lower::row_group(fn_, op);
  const size_t k = shape.size() - (g > 1 ? 2 : 1);  // the row's dim
  std::vector<Dim> rows = shape;
  for (size_t d = k; d < shape.size(); ++d) rows[d] = Dim::constant(1);
  const std::string ty = storage_type(dt), var = "ph_i", gs = std::to_string(g);
  const std::string bound = extent(shape[k]);
  const std::string chunk = std::to_string(kRowChunkBytes / dtype_size(dt) / g);
  nest(
      rows,
      [&](const Idx& outer) {
        Idx idx = outer;
        idx[k] = var;
        line("for (int64_t ph_c = 0; ph_c < " + bound + "; ph_c += " + chunk + ") {");
        ++depth_;
        line("const int64_t ph_m = ph_min_i64(" + chunk + ", " + bound + " - ph_c);");
        line("alignas(64) " + ty + " ph_row[" + std::to_string(kRowChunkBytes / dtype_size(dt)) + "];");
        if (g == 1) prefetch_next_rows(op, idx, k, "ph_c", "ph_m");  // (a hint: none for groups)
        hoisted_loop(
            var, "for (int64_t " + var + " = ph_c; " + var + " < ph_c + ph_m; ++" + var + ") {", "#pragma omp simd",
            [&] {
              for (int64_t e = 0; e < g; ++e) {
                Idx at = idx;
                if (g > 1) at[k + 1] = std::to_string(e);
                const std::string bits = copied_bits(op, at);
                const std::string slot =
                    g > 1 ? "(" + var + " - ph_c) * " + gs + " + " + std::to_string(e) : var + " - ph_c";
                line("ph_row[" + slot + "] = " + (bits.empty() ? stored_operand(op, at) : bits) + ";");
              }
            },
            "ph_c", "(ph_c + ph_m - 1)");
        Idx at = idx;
        at[k] = "ph_c";
        line("ph_stream_store(&" + tensor_address(op, at) + ", ph_row, ph_m * " + (g > 1 ? gs + " * " : "") +
             "sizeof(" + ty + "));");
        --depth_;
        line("}");
      },
      "", SIZE_MAX);
}

// One prefetch per cache line of elements [from, from + count) of the row's next-step
// counterpart, issued before they are computed: the lines arrive while they are.
void LaunchEmitter::prefetch_next_rows(const Op& host, Idx idx, size_t k, const std::string& from,
                                       const std::string& count) {
  for (const lower::Prefetch& f : L_.prefetches) {
    if (f.host != &host) continue;
    const int64_t per_line = lower::kCacheLineBytes / dtype_size(fn_.tensors[f.load->tensor].dtype);
    idx[k] = "ph_pf";
    offset_prefix_ = "pf_off_";
    const std::string at = tensor_address(*f.load, idx);
    offset_prefix_ = "off_";
    line("if (ph_pf_next)  // the next step's " + fn_.tensors[f.load->tensor].name);
    line("  for (int64_t ph_pf = " + from + "; ph_pf < " + from + " + " + count +
         "; ph_pf += " + std::to_string(per_line) + ") __builtin_prefetch(&" + at + ", 0, 2);");
  }
}

}  // namespace parhelion::backend::cpu::emit

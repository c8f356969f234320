#include "backend/cpu/cpu_backend.h"

#include "backend/cpu/runtime_source.h"

#include "backend/cpu/codegen.h"
#include "backend/cpu/default_config.h"
#include "backend/cpu/executor.h"
#include "backend/cpu/jit.h"
#include "lower/block_ir.h"
#include "parhelion/error.h"
#include "runtime/format_bytes.h"
#include "runtime/gemm/amx.h"
#include "runtime/gemm/gemm.h"

#include <map>

namespace parhelion::backend::cpu {

std::vector<int> vector_widths(const std::string& features) {
  // (features is a list of words: "avx512f" is not a prefix of another one)
  if (features.find("avx512f") != std::string::npos) return {512, 256, 128};
  if (features.find("avx2") != std::string::npos) return {256, 128};
  return {};
}

CpuBackend::CpuBackend(const Host& host) : host_(host) {
  machine_.fast_memory_bytes = host.fast_memory_bytes;
  machine_.first_cache_bytes = host.first_cache_bytes;
  machine_.threads = host.threads;
  machine_.description = host.cpu_model + " (" + host.features + ")";
  caps_.inner_loop_strategies = {lower::Strategy::Stream, lower::Strategy::Pipeline, lower::Strategy::Resident};
  caps_.inner_loops_move_every_block = false;
  caps_.lowering_plans_staged_copies = true;
  caps_.runs_on_host = true;
  caps_.dots_write_output_blocks = true;  // the GEMM's C is any row-major block (emit/dots.cpp)
  caps_.collectives = true;               // a mesh's devices as threads of this process (mesh_runner.cpp)
  caps_.cache_hints = true;               // streamed stores, next-step prefetches (lower/cache_hints.h)
  caps_.atomics_have_strategies = true;   // atomic instructions or per-thread partials (emit/atomics.cpp)
  // (a GCC pragma: clang would compile every width alike)
  if (compiler_identity().find("clang") == std::string::npos) caps_.vector_bits = vector_widths(host.features);
}

std::string CpuBackend::identity() const {
  return compiler_identity() + "|" + compiler_flags() + "|" + host_.features + "|code " + performance_revision();
}

namespace {

// Whether both operands of `dot` are bf16: loads of bf16 tensors (through transposes), or values
// cast to bf16 (lowering materializes those in bf16 where only dots read them and one of their
// kernels takes bf16). Only such dots have a choice between the bf16 dot instruction and
// widening to f32.
bool reads_bf16_operands(const ir::Function& fn, const ir::Op& dot) {
  std::map<int, const ir::Op*> defs;
  ir::walk(fn.body, [&](const ir::Op& op) {
    if (op.result >= 0) defs[op.result] = &op;
  });
  auto storage_dtype = [&](auto&& self, int value) -> DType {
    auto it = defs.find(value);
    if (it == defs.end()) return DType::f32;
    const ir::Op& def = *it->second;
    if (def.kind == ir::OpKind::Transpose) return self(self, def.operands[0]);
    if (def.kind == ir::OpKind::Load) return fn.tensors[def.tensor].dtype;
    if (def.kind == ir::OpKind::Cast) return def.dtype;
    return DType::f32;
  };
  return storage_dtype(storage_dtype, dot.operands[0]) == DType::bf16 &&
         storage_dtype(storage_dtype, dot.operands[1]) == DType::bf16;
}

}  // namespace

std::vector<std::string> CpuBackend::micro_kernels(const ir::Function& fn, const ir::Op& dot) const {
  return runtime::gemm_kernel_choices(reads_bf16_operands(fn, dot));
}

int64_t CpuBackend::dot_kept_b_bytes(int64_t n, int64_t k, const std::string& micro_kernel, bool bf16_operands) const {
  return runtime::gemm_b_panels_bytes(n, k, micro_kernel, bf16_operands);
}

// bf16 on the vdpbf16ps and AMX kernels; f16 on none (every kernel converts it while packing).
bool CpuBackend::dot_takes_16bit_operands(const std::string& micro_kernel, DType dtype) const {
  return dtype == DType::bf16 && runtime::gemm_kernel_takes_bf16(micro_kernel);
}

int64_t CpuBackend::dot_workspace_bytes(int64_t m, int64_t n, int64_t k, const std::string& micro_kernel,
                                        bool bf16_operands, int64_t a_row_stride, int64_t k_multiple,
                                        bool b_kept) const {
  // (every call's k a multiple of k_multiple: the tile kernel's test on k holds for all if for it)
  const bool a_in_place = a_row_stride > 0 && runtime::amx_reads_a_in_place(a_row_stride, 1, k_multiple);
  return runtime::gemm_workspace_bytes(m, n, k, micro_kernel, bf16_operands, a_in_place, b_kept);
}

Config CpuBackend::default_config(const ir::Function& fn, const ConfigSpec& spec) const {
  return cpu::default_config(fn, spec, *this);
}

void CpuBackend::check(const lower::BlockProgram& p) const {
  for (const lower::LaunchPlan& L : p.launches)
    if (L.footprint_bytes > machine_.fast_memory_bytes) {
      std::string what;
      for (const lower::Scratch& s : L.scratch)
        what += (what.empty() ? "" : ", ") + lower::scratch_name(p, L, s) + " " + format_bytes(s.bytes);
      throw UserError("config " + p.config.to_json() + " does not fit: launch " + std::to_string(L.index) +
                      " of kernel " + p.fn->name + " needs " + format_bytes(L.footprint_bytes) +
                      " of fast memory per grid step (" + what + "); the target has " +
                      format_bytes(machine_.fast_memory_bytes) + ". " + lower::fit_hint(p, L));
    }
}

Artifact CpuBackend::generate(const lower::BlockProgram& p) const { return {"c++", generate_source(p)}; }

std::shared_ptr<Executable> CpuBackend::load(const Artifact& artifact, const lower::BlockProgram& p) const {
  return load_executable(artifact.source, p);
}

}  // namespace parhelion::backend::cpu

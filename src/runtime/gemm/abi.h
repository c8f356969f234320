// The C ABI between generated kernels and the runtime library: plain structs, no includes
// beyond <stdint.h>, so that the text can be pasted into every generated translation unit
// (runtime_source.cpp embeds it; codegen.cpp pastes it) and both sides agree on the layout.
#pragma once

#include <stdint.h>

extern "C" {

enum ph_dtype_code { PH_F32 = 0, PH_BF16 = 1, PH_F16 = 2 };

struct ph_gemm_args {
  int64_t m, n, k;
  const void* a;  // element (i, p) at a[i * a_rs + p * a_cs]
  int64_t a_rs, a_cs;
  int a_dtype;
  const void* b;  // element (p, j) at b[p * b_rs + j * b_cs]
  int64_t b_rs, b_cs;
  int b_dtype;
  float* c;  // element (i, j) at c[i * ldc + j]
  int64_t ldc;
  int accumulate;  // 1: C += A·B; 0: C = A·B
  int kernel;      // index into ph_gemm_kernel_names(); -1: the best for the host
  // At least gemm_workspace_bytes(m, n, k, ...) bytes (runtime/gemm/gemm.h), 64-byte aligned; with
  // b_panels set, the size for a kept B (b_kept) will do: B is then packed into b_panels, never here.
  void* workspace;
  // The workspace's size: a kernel whose A it sized to be read in place (gemm_workspace_bytes'
  // a_in_place) packs A a strip at a time when A turns out not to be; 0: unknown, taken as the
  // size for a packed A.
  int64_t workspace_bytes;
  // Where B's packed panels are kept across calls, or null (B is packed into the workspace on
  // every call). Non-null: at least gemm_b_panels_bytes (runtime/gemm/gemm.h) bytes, 64-byte
  // aligned, that start with a ph_gemm_panels_key; the panels start 64 bytes in. Where the key
  // names this call's B and their layout (B's address, strides, dtype, k, n, the micro-kernel and
  // whether it packs bf16 pairs), the panels there are B's and are used as they are; otherwise B
  // is packed there and the key set. The caller zeroes the key whenever the memory behind a B it
  // passed may have changed (the cpu executor, through the generated ph_launch_N_kept: once per
  // thread at the start of each launch call, for a tensor that launch does not write).
  void* b_panels;
};

struct ph_gemm_panels_key {
  const void* b;
  int64_t b_rs, b_cs, k, n;
  int b_dtype, kernel;
  int bf16_pairs;  // 1: [n/NR][k/2][NR][2] bf16 panels (a bf16 dot instruction); 0: [n/NR][k][NR] f32
  int zero;        // (no padding: keys are compared as bytes)
};

// What a launch reports back to its caller: the first failed check (an index computed in the
// kernel that is out of its dimension's range), set once by whichever thread fails first.
struct ph_status {
  int failed;
  int64_t value;      // the offending index
  const char* where;  // "file:line" of the subscript
  const char* what;   // "dimension D of NAME (size N)"
};

// What generated code can call; one table per process, passed to every launch, and one per
// device of a mesh for a kernel on one (src/ir/collectives.h), whose collectives call the rest:
// `op` numbers the kernel's collective ops (ir::is_collective) in program order.
struct ph_runtime {
  void (*gemm)(const ph_gemm_args*);
  void* mesh;                                                       // the device's context (null off a mesh)
  int64_t (*mesh_coord)(void* mesh, int axis);                      // the device's coordinate along an axis
  void* (*mesh_tensor)(void* mesh, int64_t device, int tensor);     // a device's tensor
  int64_t (*mesh_peer)(void* mesh, int op, const int64_t* coords);  // the device at coords
  // The synchronization of op `op` (its copy landed, its wait, barrier, signal), with its peer
  // and count where it has them.
  void (*mesh_sync)(void* mesh, int op, int64_t peer, int64_t count);
};
}

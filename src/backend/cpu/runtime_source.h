// The text of the runtime header (runtime/ph_math.h) that every generated translation unit
// starts with. Embedded into the library at build time (see CMakeLists.txt), so generated code
// does not depend on where the sources live.
#pragma once

namespace parhelion::backend::cpu {
const char* runtime_header_source();
// The text of runtime/gemm/abi.h: the structs of the runtime table generated code calls.
const char* runtime_abi_source();
// A hash of the sources that decide a cpu kernel's speed beyond its Tile IR and config (the code
// generator, lowering, these helpers and the GEMM runtime): part of the backend's identity, so
// that the tuner's cache does not reuse winners measured against other code.
const char* performance_revision();
}  // namespace parhelion::backend::cpu

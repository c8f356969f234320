// Runs emitted Triton modules on this machine, which has no GPU: in Triton's interpreter
// (TRITON_INTERPRET=1, numpy under torch CPU tensors) against the kernel's meaning, and through
// Triton's ahead-of-time compiler to PTX and a cubin for each CUDA architecture (ptxas ships
// with the triton wheel), which checks what the interpreter does not (tl.dot shapes, layouts,
// types on a real target).
//
// Needs the project's Python with torch and triton ($PARHELION_PYTHON, else the project's
// .venv, which `make test` creates).
#pragma once

#include <string>
#include <vector>

#include "parhelion/array.h"

namespace parhelion::backend::triton {

struct TritonCase {
  std::string name;      // for messages
  std::string source;    // the module's text
  std::string function;  // the kernel function in it (the kernel's name)
  std::vector<Array> inputs;
  std::vector<double> scalars;
};

struct TritonRun {
  bool ok = false;
  std::string error;           // when !ok: the Python exception and a short trace
  std::vector<Array> outputs;  // f32, in the kernel's output order
};

struct TritonCompile {
  bool ok = false;
  std::string error;
  int kernels = 0;  // kernel x architecture compiles that produced PTX and a cubin
};

// Every case in one Python process, in the interpreter; one result per case, in order. Throws
// UserError when there is no Python with torch and triton, or it dies.
std::vector<TritonRun> run_in_triton_interpreter(const std::vector<TritonCase>& cases);

// Every module's kernels compiled for each architecture (e.g. 90: sm_90, 100: sm_100).
std::vector<TritonCompile> compile_for_gpus(const std::vector<std::string>& sources, const std::vector<int>& archs);

}  // namespace parhelion::backend::triton

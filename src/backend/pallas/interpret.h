// Runs emitted Pallas modules in JAX's TPU interpret mode, on this CPU: the check that a
// module computes what its kernel means, without a TPU (race detection on, uninitialized
// memory poisoned with NaN). Optionally each module is also lowered for a TPU with
// jax.export(platforms=["tpu"]), which checks block shapes and layouts interpret mode accepts.
//
// Needs a Python with the pinned jax: $PARHELION_PYTHON, else the project's .venv
// (`make test` creates it).
#pragma once

#include <string>
#include <vector>

#include "parhelion/array.h"
#include "parhelion/mesh.h"

namespace parhelion::backend::pallas {

struct InterpretCase {
  std::string name;      // for messages
  std::string source;    // the module's text (PallasModule::source)
  std::string function;  // the kernel function in it (the kernel's name)
  std::vector<Array> inputs;
  std::vector<double> scalars;
  bool export_for_tpu = false;
  // A kernel on a mesh (collectives.h): run on every device of it, device d's tensor arguments
  // device_inputs[d] (inputs is then unused); a run that deadlocks ends after timeout_s.
  std::vector<MeshAxis> mesh = {};
  std::vector<std::vector<Array>> device_inputs = {};
  int timeout_s = 600;
};

struct InterpretResult {
  bool ok = false;
  std::string error;                               // when !ok: the Python exception and a short trace
  bool races = false;                              // interpret mode detected a race
  std::string export_status;                       // "ok", the lowering error, or "" when not asked for
  std::vector<Array> outputs;                      // f32, in the kernel's output order
  std::vector<std::vector<Array>> device_outputs;  // on a mesh: device d's outputs (f32)
};

// The Python that runs them, or "" when there is none.
std::string interpret_python();

// Runs every case in one Python process; one result per case, in order. Throws UserError when
// there is no Python with jax or the runner dies.
std::vector<InterpretResult> run_in_interpret_mode(const std::vector<InterpretCase>& cases);

}  // namespace parhelion::backend::pallas

#include "backend/backend.h"

#include "lower/block_ir.h"
#include "parhelion/error.h"

namespace parhelion::backend {

bool Backend::block_size_legal(const ir::Function&, int, int64_t) const { return true; }

int64_t Backend::footprint_bytes(const lower::BlockProgram& p) const { return p.footprint_bytes; }

int64_t Backend::dot_kept_b_bytes(int64_t, int64_t, const std::string&, bool) const { return 0; }

bool Backend::dot_takes_16bit_operands(const std::string&, DType) const { return true; }

int64_t Backend::dot_workspace_bytes(int64_t, int64_t, int64_t, const std::string&, bool, int64_t, int64_t,
                                     bool) const {
  return 0;
}

std::vector<std::string> Backend::gather_strategies(const ir::Function&, const ir::Op&) const { return {}; }

std::shared_ptr<Executable> Backend::load(const Artifact&, const lower::BlockProgram&) const {
  throw UserError("the " + name() + " backend generates code for other hardware; it cannot run in this process (" +
                  machine().description + ")");
}

void Backend::run_on_mesh(const ir::Function& fn, const std::vector<std::vector<void*>>&, const MeshDeviceFn&) const {
  throw UserError("the " + name() + " backend cannot run kernel " + fn.name + " on a mesh in this process");
}

}  // namespace parhelion::backend

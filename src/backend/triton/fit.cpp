#include "backend/triton/fit.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <vector>

#include "backend/triton/layout.h"
#include "parhelion/dtype.h"
#include "parhelion/error.h"
#include "runtime/format_bytes.h"

namespace parhelion::backend::triton {

namespace {

using ir::Op;
using ir::OpKind;

// 32-bit words of a value: i64 takes two.
int64_t words(const lower::BlockProgram& p, const ir::Type& t) {
  return padded_elements(p, t.shape) * (t.dtype == DType::i64 ? 2 : 1);
}

// The bytes of a dot operand as the MXU-like tensor cores read it: 16-bit when it is a load of
// 16-bit data (the emitter feeds such operands as stored), else 32-bit.
int64_t operand_bytes(const lower::BlockProgram& p, const std::map<int, const Op*>& defs, int v) {
  const ir::Function& fn = *p.fn;
  const Op* d = defs.count(v) ? defs.at(v) : nullptr;
  while (d && d->kind == OpKind::Transpose) d = defs.count(d->operands[0]) ? defs.at(d->operands[0]) : nullptr;
  const int64_t elem = d && d->kind == OpKind::Load ? std::min<int64_t>(dtype_size(fn.tensors[d->tensor].dtype), 4) : 4;
  return padded_elements(p, fn.type_of(v).shape) * elem;
}

}  // namespace

ProgramResources estimate_resources(const lower::BlockProgram& p, const lower::LaunchPlan& L) {
  const ir::Function& fn = *p.fn;
  std::map<int, const Op*> defs;
  ir::walk(L.op->body, [&](const Op& op) {
    if (op.result >= 0) defs[op.result] = &op;
  });
  ProgramResources r;
  // Dots, with the stages of the loop around them.
  std::function<void(const std::vector<Op>&, int)> dots = [&](const std::vector<Op>& body, int stages) {
    for (const Op& op : body) {
      if (op.kind == OpKind::Loop) {
        const lower::InnerLoop* il = L.inner_loop(op.loop_tiles[0]);
        dots(op.body, il && il->knob >= 0 ? il->buffers : 1);
      } else if (op.kind == OpKind::If) {
        dots(op.body, stages);
      } else if (op.kind == OpKind::Dot) {
        r.shared_bytes += (operand_bytes(p, defs, op.operands[0]) + operand_bytes(p, defs, op.operands[1])) * stages;
      }
    }
  };
  dots(L.op->body, 1);
  // Registers: the Vars, live across the whole launch, and the two largest values.
  int64_t state = 0;
  std::vector<int64_t> sizes;
  std::set<int> vars;
  ir::walk(L.op->body, [&](const Op& op) {
    if (op.kind == OpKind::VarDecl && !vars.count(op.var)) {
      vars.insert(op.var);
      state += words(p, fn.vars[op.var].type);
    }
    if (op.result >= 0) sizes.push_back(words(p, fn.type_of(op.result)));
  });
  std::sort(sizes.rbegin(), sizes.rend());
  int64_t live = state;
  for (size_t i = 0; i < std::min<size_t>(2, sizes.size()); ++i) live += sizes[i];
  const int64_t threads = 32 * std::max(1, p.config.num_warps);
  r.registers_per_thread = (live + threads - 1) / threads;
  r.detail = "the loop-carried state (" + std::to_string(state) + " words) and the two largest values (" +
             std::to_string(live - state) + " words) over " + std::to_string(threads) + " threads";
  return r;
}

void check_fit(const lower::BlockProgram& p, const GpuModel& gpu) {
  for (const lower::LaunchPlan& L : p.launches) {
    const ProgramResources r = estimate_resources(p, L);
    const std::string where = "launch " + std::to_string(L.index) + " (at " + L.op->loc.str() + ")";
    if (r.shared_bytes > gpu.shared_memory_per_block)
      throw UserError("config " + p.config.to_json() + " does not fit the " + gpu.name + ": " + where +
                      " needs about " + format_bytes(r.shared_bytes) +
                      " of shared memory per program (its dots' operand tiles times the num_stages of their loops), "
                      "and a program may take " +
                      format_bytes(gpu.shared_memory_per_block) + "; use smaller blocks or fewer stages (buffers)");
    if (r.registers_per_thread > gpu.registers_per_thread)
      throw UserError("config " + p.config.to_json() + " does not fit the " + gpu.name + ": " + where +
                      " needs about " + std::to_string(r.registers_per_thread) + " registers per thread (" + r.detail +
                      "), and a thread may hold " + std::to_string(gpu.registers_per_thread) +
                      "; use smaller blocks or more warps (num_warps)");
  }
}

}  // namespace parhelion::backend::triton

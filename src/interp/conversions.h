// Dtype conversions of the reference interpreter, on doubles: what a store does to a value of
// a compute dtype (f32, i64, bool) written to a tensor of a storage dtype, and what a Cast op
// does. They follow the language's definition (include/parhelion/dtype.h) and, where that is
// silent, the CPU backend (src/backend/cpu/codegen.cpp), except that conversions the backend
// leaves undefined (NaN or an out-of-range float to an integer) are errors here.
#pragma once

#include <string>

#include "ir/ir.h"
#include "parhelion/error.h"

namespace parhelion::interp {

// A value the interpreter cannot hold exactly (an integer beyond 2^53): not the kernel's
// mistake, so callers that use the interpreter as a check fall back to another oracle.
class Unrepresentable : public UserError {
 public:
  using UserError::UserError;
};

// `v` (of compute dtype `from`) as a tensor of dtype `storage` holds it. An integer or bool
// `storage` gets an integer; bf16/f16 round to nearest even through f32; f32 rounds to f32.
// NaN of a non-floating `from` is the interpreter's "never written" marker and passes through.
// Throws UserError at `loc` for a float that does not convert to the integer type; `what`
// names the operation for the message.
double to_storage(double v, DType from, DType storage, const ir::SourceLoc& loc, const std::string& what);

// The Cast op: `v` of compute dtype `from` cast to `to` (any dtype; the result has compute
// dtype compute_dtype(to)). bf16/f16 round through that format; f32 keeps the double (the
// interpreter computes f32 in double); integers truncate toward zero, i32 wraps an i64 as the
// CPU backend does; bool is `!= 0`.
double cast_to(double v, DType from, DType to, const ir::SourceLoc& loc);

// A double that is exact as an i64: |v| <= 2^53 (or NaN, the "never written" marker). Throws
// UserError at `loc` otherwise: the interpreter does not round integers.
double exact_i64(double v, const ir::SourceLoc& loc);

}  // namespace parhelion::interp

// The Tile IR's typing rules, shared by the tracer (which reports violations against the user's
// line) and the verifier (which re-checks a whole Function). Each returns an error message, or
// an empty string when the rule holds.
#pragma once

#include <string>

#include "ir/ir.h"

namespace parhelion::ir {

// Numpy broadcasting of two block shapes (aligned right; const size-1 dims stretch).
std::string broadcast_shapes(const Function& fn, const std::vector<Dim>& a, const std::vector<Dim>& b,
                             std::vector<Dim>* out);

// The type a load of tensor[index] produces, checking the index against the tensor's shape.
std::string load_type(const Function& fn, int tensor, const std::vector<IndexItem>& index, Type* out);

// The mask (and, for a load, the fill `other`, or nullptr) of a masked access whose block has
// type `access`: the mask is a bool block and it and the fill broadcast to the block's shape.
std::string mask_rule(const Function& fn, const Type& access, const Type& mask, const Type* other);

// The type of a reduction of `in` over `axis` (may be negative), normalizing `axis`.
std::string reduce_type(const Function& fn, const Type& in, int* axis, bool keepdim, Type* out);

// The type of dot(a, b): a [..., M, K] . b [..., K, N] -> f32 [..., M, N]; leading (batch)
// dims broadcast; K must be the same dimension (the same tile, or the same size).
std::string dot_type(const Function& fn, const Type& a, const Type& b, Type* out);

// The result dtype of a unary op on a compute dtype: the operand's. `not` takes bool; bit_not
// takes i64; neg, abs, round, floor, ceil and trunc take f32 or i64; the others f32 (the
// tracer casts an i64 operand to f32 first, as torch computes them).
std::string unary_dtype(UnaryFn f, DType a, DType* out);

// The result dtype of a binary op on two compute dtypes.
std::string binary_dtype(BinaryFn f, DType a, DType b, DType* out);
// Whether a binary op with this result computes its operands in f32 (converting an i64 one):
// mixed f32/i64 arithmetic does; random numbers map integer operands to an f32 result. Every
// backend converts by this one rule.
bool binary_operands_in_f32(BinaryFn f, DType result);

std::string dims_to_string(const Function& fn, const std::vector<Dim>& dims);

}  // namespace parhelion::ir

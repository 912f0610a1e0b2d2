#pragma once
// matmul: the matrix product of torch.matmul, 2-D and batched.
//
//   y[..., M, N] = a[..., M, K] . b[..., K, N]
//
// The leading ("batch") axes broadcast with NumPy rules (aligned from the
// right, each axis equal or 1 or missing): [B, H, T, D] . [B, H, D, T],
// [B, M, K] . [K, N] (one b for every batch), [2, 1, M, K] . [3, K, N] gives
// [2, 3, M, N]. A 1-D operand is a vector, as in torch: a [K] acts as [1, K]
// and b [K] as [K, 1], and that axis is dropped from the result
// ([K] . [K, N] -> [N], [M, K] . [K] -> [M], [K] . [K] -> [], a 0-d dot).
//
// Derivatives, per batch, with dy [M, N] the upstream gradient:
//   da = dy . b^T   [M, K]        db = a^T . dy   [K, N]
// (the reverse-mode rule of the matrix product: M. Giles, "An extended
// collection of matrix derivative results for forward and reverse mode
// algorithmic differentiation", 2008).
// An operand repeated along broadcast batch axes gets the sum of its
// batches' gradients. Every product is one call of the GEMM helper with
// transpose flags: nothing is transposed in memory. When b has one matrix
// for all batches, a is one [batch * M, K] matrix: one GEMM forward, one for
// da and one for db = a^T . dy over all rows.
//
// Zero sizes are fine: K = 0 gives zeros, a zero batch, M or N an empty
// result (and zero gradients). 0-d operands throw std::invalid_argument
// (torch refuses them too), as do inner sizes or batch axes that do not fit;
// the message names the op, 'a' and 'b' and both shapes.

#include "../tape.hpp"

namespace xtgrad {

template <class T>
Var<T> matmul(const Var<T>& a, const Var<T>& b);

}  // namespace xtgrad

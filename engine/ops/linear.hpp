#pragma once
// linear: the affine map of a Linear layer, on any number of leading axes.
//
//   WeightLayout::out_in (PyTorch's nn.Linear, torch.nn.functional.linear):
//     y[..., out] = x[..., in] . W^T + b,     W [out, in]
//   WeightLayout::in_out (input-channel-first, as in the gated FFN):
//     y[..., out] = x[..., in] . W + b,       W [in, out]
//   b [out] is optional.
//
// Derivatives, with dy [N, out] the upstream gradient and x seen as [N, in]
// (N = product of the leading axes; 1 for a single vector, 0 allowed):
//   dx = dy . W        (out_in)    dx = dy . W^T     (in_out)
//   dW = dy^T . x      (out_in)    dW = x^T . dy     (in_out)
//   db = sum over the N rows of dy
// Each is one GEMM with BLAS transpose flags; nothing is transposed in memory.
// Throws std::invalid_argument naming the argument and both shapes when the
// shapes do not fit, and naming 'layout' for a WeightLayout outside the enumeration.

#include <optional>

#include "../tape.hpp"

namespace xtgrad {

enum class WeightLayout { out_in, in_out };

namespace detail {
// std::invalid_argument naming `op` and the argument 'layout' for a value
// outside the enumeration.
void check_layout(const char* op, WeightLayout layout);
// The rows of a [..., features] tensor seen as a matrix: the product of its
// leading axes (also when features is 0, where size / features cannot tell).
std::size_t leading_rows(const Shape& shape);

// The dimensions of one linear map, after checking x [..., in] (named
// `x_name`), weight [out, in] or [in, out] by `layout`, and bias [out] when
// present; std::invalid_argument naming `op`, the argument and both shapes.
struct LinearDims {
  std::size_t in, out, rows;  // rows: the product of x's leading axes
  Shape y_shape;              // x's shape with the last axis set to out
};
LinearDims check_linear_shapes(const char* op, const char* x_name, const Shape& x_shape,
                               const Shape& w_shape, const Shape* bias_shape, WeightLayout layout);

// linear without its checks, for a caller that has checked the shapes with
// check_linear_shapes (giving `dims`) and the tape with common_tape: the
// functional forms and the modules check all their shapes once, up front,
// before they record anything.
template <class T>
Var<T> record_linear(const LinearDims& dims, const Var<T>& x, const Var<T>& weight,
                     const std::optional<Var<NoDeduce<T>>>& bias, WeightLayout layout);
}  // namespace detail

template <class T>
Var<T> linear(const Var<T>& x, const Var<T>& weight,
              const std::optional<Var<NoDeduce<T>>>& bias = {},
              WeightLayout layout = WeightLayout::out_in);

}  // namespace xtgrad

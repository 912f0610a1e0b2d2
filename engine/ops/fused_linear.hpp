#pragma once
// Fused ops: a linear layer that consumes an activation, or a gated product,
// without ever storing it (the layout of `weight` as in linear.hpp).
//
//   activation_linear(h, f, W, b, layout)  ==  linear(activation(h, f), W, b, layout)
//     y[..., out] = f(h)[..., in] . op(W) + b
//   gated_linear(u, g, f, W, b, layout)     ==  linear(gated(u, g, f), W, b, layout)
//     y[..., out] = (u * f(g))[..., in] . op(W) + b
//   op(W) = W^T for WeightLayout::out_in (W [out, in]), W for in_out (W [in, out]);
//   b [out] optional; f as in activation.hpp.
//
// Derivatives, with a = f(h) or u * f(g) seen as [N, in] and dy [N, out]:
//   da = dy . op(W)^T
//   dh = da * f'(h)                       (activation_linear)
//   du = da * f(g),  dg = da * u * f'(g)  (gated_linear)
//   dW = dy^T . a (out_in) or a^T . dy (in_out),   db = sum over the N rows of dy
//
// Why fused: a is [N, in], in a feed-forward block the widest tensor there is
// (in = d_ff). Unfused, the tape keeps a and its gradient da for the whole
// step, and spends a pass over memory writing and reading each. Here a and da
// exist only a block of rows at a time: forward computes a block of a and
// multiplies it while it is still in cache; backward computes a block of da
// (one GEMM), then in one pass a (again, bit for bit) and the input
// gradients, then the block's share of dW. The tape holds h (or u and g), y
// and their gradients. Values equal the unfused composition up to the
// rounding of the per-block sums of dW.
//
// Hidden dropout (optional, `dropout`): a is replaced by dropout(a, p, true,
// key) of ops/dropout.hpp before the product, a' = a * m / (1 - p), and then
//   da = m / (1 - p) * (dy . op(W)^T),   dW from a' instead of a.
// The mask is the one dropout.hpp draws for `key` on a tensor of a's shape
// (element r * in + j of a has counter key.first_element + r * in + j), so
// the fused op equals linear(dropout(activation(h, f), p, true, key), W, b)
// to the rounding of the per-block sums of dW; a row block recomputes its
// share of the mask in backward, which is never stored. p == 0 is no dropout,
// p == 1 gives a' = 0. Throws std::invalid_argument naming 'dropout.p' for p
// outside [0, 1] or NaN.
//
// Shapes: h (u, g) [..., in], any leading axes, [0, in] and [in] included;
// y [..., out]. Errors (std::invalid_argument naming the op, the argument and
// both shapes): weight not 2-D, h's (u's) last axis not `in`, g's shape not
// u's, bias not [out]; and for an Activation or WeightLayout outside its
// enumeration.

#include <optional>

#include "../activation.hpp"
#include "../tape.hpp"
#include "dropout.hpp"
#include "linear.hpp"

namespace xtgrad {

// Dropout of probability p on the hidden a, with the mask of `key` (always in
// training: pass no HiddenDropout for inference).
struct HiddenDropout {
  double p = 0.0;
  DropoutKey key;
};

template <class T>
Var<T> activation_linear(const Var<T>& h, Activation f, const Var<T>& weight,
                         const std::optional<Var<NoDeduce<T>>>& bias = {},
                         WeightLayout layout = WeightLayout::out_in,
                         const std::optional<HiddenDropout>& dropout = {});

template <class T>
Var<T> gated_linear(const Var<T>& u, const Var<T>& g, Activation f, const Var<T>& weight,
                    const std::optional<Var<NoDeduce<T>>>& bias = {},
                    WeightLayout layout = WeightLayout::out_in,
                    const std::optional<HiddenDropout>& dropout = {});

namespace detail {
// The two ops without their checks, for a caller that has checked tape, f
// and shapes already (dims from check_linear_shapes; see record_linear) and
// the dropout probability (check_hidden_dropout).
template <class T>
Var<T> record_activation_linear(const LinearDims& dims, const Var<T>& h, Activation f,
                                const Var<T>& weight, const std::optional<Var<NoDeduce<T>>>& bias,
                                WeightLayout layout,
                                const std::optional<HiddenDropout>& dropout = {});
template <class T>
Var<T> record_gated_linear(const LinearDims& dims, const Var<T>& u, const Var<T>& g, Activation f,
                           const Var<T>& weight, const std::optional<Var<NoDeduce<T>>>& bias,
                           WeightLayout layout, const std::optional<HiddenDropout>& dropout = {});
// std::invalid_argument from `op` naming 'dropout.p' unless p is in [0, 1].
void check_hidden_dropout(const char* op, const std::optional<HiddenDropout>& dropout);
}  // namespace detail

}  // namespace xtgrad

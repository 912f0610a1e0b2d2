#pragma once
// The seed functional API: the Transformer feed-forward blocks as
// compositions of engine ops (linear, activation, gated). Each records its
// ops on the tape of its arguments; gradients flow to every argument that
// requires one. Inputs are never modified; no residual, normalization or
// dropout is applied. x may have any number of leading axes: a single [D]
// vector, [T, D], [B, T, D], ... and zero tokens [0, D]. Every token is
// processed independently with the same weights.
//
// Shape mismatches throw std::invalid_argument naming the function, the
// argument and both shapes; arguments from different tapes throw
// std::logic_error.

#include <array>
#include <optional>
#include <string_view>

#include "../engine/activation.hpp"
#include "../engine/ops/fused_linear.hpp"
#include "../engine/ops/linear.hpp"
#include "../engine/tape.hpp"

namespace xtgrad {

// "Attention Is All You Need", section 3.3, Eq. (2), in PyTorch's weight layout:
//   FFN(x) = relu(x w1^T + b1) w2^T + b2
//   x [..., D], w1 [H, D], b1 [H], w2 [D, H], b2 [D]  ->  [..., D]
template <class T>
Var<T> positionwise_ffn(const Var<T>& x, const Var<T>& w1, const Var<T>& b1, const Var<T>& w2,
                        const Var<T>& b2);

// The GELU feed-forward sublayer: the same shapes with the exact (erf) GELU,
//   gelu(x weight1^T + bias1) weight2^T + bias2
template <class T>
Var<T> feedforward_sublayer(const Var<T>& x, const Var<T>& weight1, const Var<T>& bias1,
                            const Var<T>& weight2, const Var<T>& bias2);

// The two-layer block with any activation f (what FeedForward<T> uses):
//   f(x w1^T + b1) w2^T + b2, shapes as positionwise_ffn.
template <class T>
Var<T> feedforward(const Var<T>& x, const Var<T>& w1, const Var<T>& b1, const Var<T>& w2,
                   const Var<T>& b2, Activation activation);

// The gated feed-forward block (GLU variants: SwiGLU with silu, GeGLU with
// gelu, ReGLU with relu; Shazeer 2020, "GLU Variants Improve Transformer"),
// in input-channel-first layout:
//   u = x w_up + b_up,  g = x w_gate + b_gate,  y = (u * f(g)) w_down + b_down
//   x [..., Cin], w_up [Cin, H], w_gate [Cin, H], w_down [H, Cout],
//   b_up [H], b_gate [H], b_down [Cout] (each optional)  ->  [..., Cout]
// Only the gate branch g is activated; u stays linear.
template <class T>
Var<T> gated_feedforward(const Var<T>& x, const Var<T>& w_up, const Var<T>& w_gate,
                         const Var<T>& w_down, const std::optional<Var<NoDeduce<T>>>& b_up = {},
                         const std::optional<Var<NoDeduce<T>>>& b_gate = {},
                         const std::optional<Var<NoDeduce<T>>>& b_down = {},
                         Activation activation = Activation::silu);

// The same, with the activation named: "silu", "relu", "gelu" (exact erf),
// "gelu_tanh" or "gelu_sigmoid"; any other name throws std::invalid_argument.
template <class T>
Var<T> gated_feedforward(const Var<T>& x, const Var<T>& w_up, const Var<T>& w_gate,
                         const Var<T>& w_down, const std::optional<Var<NoDeduce<T>>>& b_up,
                         const std::optional<Var<NoDeduce<T>>>& b_gate,
                         const std::optional<Var<NoDeduce<T>>>& b_down,
                         std::string_view activation);

namespace detail {

// The checked-once halves of the blocks above, for the modules: check every
// shape (and the activation) of a block up front, before anything is
// recorded, then record its ops without checking again. Errors name
// `function` and the argument names given.
using TwoLayerNames = std::array<const char*, 5>;  // x, w1, b1, w2, b2
struct TwoLayerDims {
  LinearDims first, second;  // x [..., D] -> [..., H] -> [..., D]
};
TwoLayerDims check_two_layer(const char* function, const TwoLayerNames& names, const Shape& x,
                             const Shape& w1, const Shape& b1, const Shape& w2, const Shape& b2,
                             Activation activation);
template <class T>
Var<T> record_two_layer(const TwoLayerDims& dims, const Var<T>& x, const Var<T>& w1,
                        const Var<T>& b1, const Var<T>& w2, const Var<T>& b2, Activation activation,
                        const std::optional<HiddenDropout>& dropout = {});

// For gated_feedforward (errors name it); absent biases are null.
struct GatedDims {
  LinearDims up, gate, down;  // x [..., Cin] -> u, g [..., H] -> [..., Cout]
};
GatedDims check_gated(const Shape& x, const Shape& w_up, const Shape& w_gate, const Shape& w_down,
                      const Shape* b_up, const Shape* b_gate, const Shape* b_down,
                      Activation activation);
template <class T>
Var<T> record_gated(const GatedDims& dims, const Var<T>& x, const Var<T>& w_up,
                    const Var<T>& w_gate, const Var<T>& w_down,
                    const std::optional<Var<NoDeduce<T>>>& b_up,
                    const std::optional<Var<NoDeduce<T>>>& b_gate,
                    const std::optional<Var<NoDeduce<T>>>& b_down, Activation activation,
                    const std::optional<HiddenDropout>& dropout = {});

}  // namespace detail

}  // namespace xtgrad

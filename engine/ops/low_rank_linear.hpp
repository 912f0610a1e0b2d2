#pragma once
// low_rank_linear: a linear map plus a scaled low-rank update, in one node
// (the layer of LoRA, Hu et al. 2021, with its adapter's h = x' A^T given):
//
//   y[..., out] = x[..., in] . op(W) + b + s * (h[..., r] . B^T),   B [out, r]
//
// op(W) and b as in linear.hpp (W [out, in] for WeightLayout::out_in, [in,
// out] for in_out; b [out] optional); h has x's leading axes; s a constant.
// The same values, bit for bit, as the composition
//   add(linear(x, W, b, layout), scale(linear(h, B), s)).
//
// Derivatives, with dy [N, out] and x, h seen as [N, in], [N, r]:
//   dx = dy . op(W)^T,  dW and db as linear's,
//   g = s * dy,   dh[N, r] = g . B,   dB[out, r] = g^T . h.
//
// Why one node: the composition keeps three more [N, out] arrays on the tape
// (x op(W) + b, h B^T and its scaled copy) and their gradients, for each
// adapted layer, where only h [N, r] is needed. Here h B^T and g exist only
// while the op (or its backward) runs.
//
// std::invalid_argument naming the argument and both shapes: x, weight and
// bias as linear's; h [..., r] whose leading axes are not x's; B not [out, r].

#include <optional>

#include "linear.hpp"

namespace xtgrad {

template <class T>
Var<T> low_rank_linear(const Var<T>& x, const Var<T>& weight,
                       const std::optional<Var<NoDeduce<T>>>& bias, WeightLayout layout,
                       const Var<NoDeduce<T>>& h, const Var<NoDeduce<T>>& b_low_rank,
                       NoDeduce<T> scaling);

}  // namespace xtgrad

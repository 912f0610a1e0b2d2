#pragma once
// Vectorized (xsimd) kernels of the activations' derivatives, on flat buffers
// of n elements: f', f'' and f''' of activation_formulas.hpp and
// activation_derivatives.hpp. Used by ops/activation_derivatives; not part of
// the user API.
//
// The same scheme as activation_kernels.hpp: one pass of xsimd::batch<T>, the
// last n % lanes elements through the same batch code on a zero-padded copy
// (an element's result never depends on n or on its position), split over the
// threads in use. Order 1 evaluates Act::slope, the very f' of
// activation_backward, so that the op y = f'(x) equals the first-order
// backward's factor bit for bit.
//
// An order outside [1, 3] or an invalid Activation throws
// std::invalid_argument before any write.

#include <cstddef>

#include "../activation.hpp"

namespace xtgrad::detail {

// y[i] = f^(order)(x[i]), order 1, 2 or 3. y may equal x.
template <class T>
void activation_derivative_forward(Activation activation, int order, const T* x, T* y,
                                   std::size_t n);

// dx[i] (+)= dy[i] * f^(order + 1)(x[i]), order 1 or 2 (the backward of the
// op y = f^(order)(x)); each += is one fused multiply-add. dx may equal dy.
template <class T>
void activation_derivative_backward(Activation activation, int order, const T* x, const T* dy,
                                    T* dx, std::size_t n, bool accumulate);

}  // namespace xtgrad::detail

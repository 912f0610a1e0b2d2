#pragma once
// Vectorized (xsimd) kernels of the activations in activation.hpp, on flat
// buffers of n elements. Used by the ops in ops/activations and ops/gated;
// not part of the user API.
//
// Each kernel is one pass of xsimd::batch<T> of the widest instruction set the
// library was compiled for (AVX-512 with -march=native). The last n % lanes
// elements go through the same batch code on a zero-padded copy, so an
// element's result never depends on n or on its position.
//
// Numerics: |error| <= 1e-6 |f| + 1e-7 in float and 1e-14 |f| + 1e-15 in double
// against a long double reference, for f and f' (tests/test_activations.cpp):
//  * gelu: Phi(x) = 0.5 erfc(|x| / sqrt 2) or one minus it, with Cephes'
//    rational approximations of erf/erfc on xsimd batches and exp(-x^2/2) from
//    an exactly split x^2. The left tail keeps its relative accuracy, where
//    0.5 (1 + erf(x / sqrt 2)) cancels to 0. (xsimd 8.1's own erfc loses up to
//    4e-12 relative in double and returns NaN for |x| > ~1e51.)
//  * gelu_tanh, gelu_sigmoid, silu: 0.5 (1 + tanh u) = sigmoid(2u), and
//    sigmoid(z) = 1 / (1 + exp(-z)) (exact limits, no inf / inf); 1 - sigmoid(z)
//    is exp(-z) sigmoid(z) for z >= 0, where the subtraction would cancel.
//  * tanh: xsimd's tanh on x clamped to +-40 (where tanh is +-1 already);
//    tanh' = 4 sigmoid(2x) (1 - sigmoid(2x)), never the cancelling 1 - tanh^2.
//  * inf * 0 products at x = +-inf are taken as their limit, 0.
//
// An invalid Activation value throws std::invalid_argument before any write.

#include <cstddef>

#include "../activation.hpp"

namespace xtgrad::detail {

// y[i] = f(x[i]). y may equal x.
template <class T>
void activation_forward(Activation activation, const T* x, T* y, std::size_t n);

// dx[i] = dy[i] * f'(x[i]) (or += when accumulate). dx may equal dy.
// Every += in these kernels is one fused multiply-add, fma(dy, f'(x), dx):
// one rounding, the same for every element wherever it lies.
template <class T>
void activation_backward(Activation activation, const T* x, const T* dy, T* dx, std::size_t n,
                         bool accumulate);

// y[i] = u[i] * f(g[i]) (the GLU family: SwiGLU with silu, GeGLU with gelu, ReGLU with relu).
template <class T>
void gated_forward(Activation activation, const T* u, const T* g, T* y, std::size_t n);

// One pass computing both
//   du[i] = dy[i] * f(g[i])            (+= when du_accumulate; skipped when du is null)
//   dg[i] = dy[i] * u[i] * f'(g[i])    (+= when dg_accumulate; skipped when dg is null)
// du and dg may be the same buffer (gated(x, x)): du is written before dg is read.
template <class T>
void gated_backward(Activation activation, const T* u, const T* g, const T* dy, T* du,
                    bool du_accumulate, T* dg, bool dg_accumulate, std::size_t n);

// The backward kernels with the forward value in the same pass, for the fused
// ops that recompute it instead of storing it (ops/fused_linear): f and f'
// share their work (erf, exp), and the value is the one activation_forward /
// gated_forward compute, bit for bit. y is written, never accumulated; it may
// not alias any other argument. A null y skips it (then these are
// activation_backward and gated_backward); with dy, du and dg all null
// gated_value_and_backward computes y alone.
//   y[i] = f(x[i]),  dx[i] (+)= dy[i] * f'(x[i])
template <class T>
void activation_value_and_backward(Activation activation, const T* x, const T* dy, T* dx,
                                   bool accumulate, T* y, std::size_t n);
//   y[i] = u[i] * f(g[i]),  du, dg as gated_backward
template <class T>
void gated_value_and_backward(Activation activation, const T* u, const T* g, const T* dy, T* du,
                              bool du_accumulate, T* dg, bool dg_accumulate, T* y, std::size_t n);

}  // namespace xtgrad::detail

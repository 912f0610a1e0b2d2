#pragma once
// Elementwise math functions with the semantics of their torch namesakes.
// Every op maps x of any shape ([], [0, D], 3-D, ...) to y of the same shape;
// dx = dy * f'(x) has x's shape. Backward reads one saved array: the output
// y where f' is a function of y, the input x otherwise. NaN and Inf pass
// through as IEEE arithmetic (and torch) give them.
//
//   op               y                  dx                           saves  torch
//   exp(x)           e^x                dy * y                       y      torch.exp
//   log(x)           ln x               dy / x                       x      torch.log
//   sqrt(x)          x^(1/2)            dy / (2 y)                   y      torch.sqrt
//   rsqrt(x)         x^(-1/2)           -0.5 dy y^3                  y      torch.rsqrt
//   tanh(x)          tanh x             dy (1 - y^2)                 y      torch.tanh
//   sigmoid(x)       1 / (1 + e^-x)     dy (1 - y) y                 y      torch.sigmoid
//   abs(x)           |x|                dy sign(x), sign(0) = 0      x      torch.abs
//   square(x)        x^2                2 x dy                       x      torch.square
//   pow(x, p)        x^p                dy p x^(p-1); 0 if p == 0    x      torch.pow(x, p)
//   clamp(x, lo, hi) min(max(x, lo),hi) dy if lo <= x <= hi, else 0  x      torch.clamp
//
// Conventions, as torch 1.13 has them (tests/support/fixtures/math_fixtures.hpp):
//  * log(0) = -inf, log(x < 0) = NaN; sqrt(0) = 0 with gradient inf;
//    rsqrt(0) = inf; sqrt and rsqrt of x < 0 are NaN.
//  * abs'(0) = 0 (torch's sgn), so dy = inf at x = 0 gives NaN, as in torch.
//  * pow: the exponent is a constant (no gradient). d/dx x^0 = 0 everywhere,
//    also where dy is NaN; otherwise p * x^(p-1) with std::pow's IEEE values,
//    so at x = 0 the slope is inf for p in (0, 1), -inf for p < 0 (times
//    dy's sign), 0 for p > 1 and 1 for p = 1. x < 0 with a non-integer p is NaN.
//  * clamp passes dy where lo <= x <= hi, boundaries included (torch's mask
//    x >= min && x <= max), and 0 elsewhere and where x is NaN (which clamp
//    keeps as NaN). lo > hi is allowed as in torch: every element becomes
//    hi, with gradient 0. lo or hi NaN throws std::invalid_argument; use
//    -inf / inf, or clamp_min / clamp_max, for a one-sided bound.
//  * sigmoid is stable for every float and double: it is formed from
//    e = e^-|x| in (0, 1], which never overflows (1 / (1 + e) for x >= 0,
//    e / (1 + e) below), so sigmoid(-inf) = 0 and sigmoid(inf) = 1 exactly.
//    Its derivative is formed from y alone: 1 - y is exact for y >= 1/2
//    (Sterbenz), so nothing cancels beyond the rounding of y itself (as torch).
//
// Accuracy: exp, tanh and sigmoid use xsimd's vectorized exp and tanh
// (within a few ulp of std::exp / std::tanh); log uses xsimd::log; sqrt is the
// IEEE square root; pow is std::pow element by element.

#include "../tape.hpp"

namespace xtgrad {

template <class T>
Var<T> exp(const Var<T>& x);
template <class T>
Var<T> log(const Var<T>& x);
template <class T>
Var<T> sqrt(const Var<T>& x);
template <class T>
Var<T> rsqrt(const Var<T>& x);
template <class T>
Var<T> tanh(const Var<T>& x);
template <class T>
Var<T> sigmoid(const Var<T>& x);
template <class T>
Var<T> abs(const Var<T>& x);
template <class T>
Var<T> square(const Var<T>& x);
template <class T>
Var<T> pow(const Var<T>& x, NoDeduce<T> exponent);
template <class T>
Var<T> clamp(const Var<T>& x, NoDeduce<T> min, NoDeduce<T> max);
// clamp(x, min, +inf) and clamp(x, -inf, max), recorded under their own names
// (torch.clamp_min, torch.clamp_max).
template <class T>
Var<T> clamp_min(const Var<T>& x, NoDeduce<T> min);
template <class T>
Var<T> clamp_max(const Var<T>& x, NoDeduce<T> max);

}  // namespace xtgrad

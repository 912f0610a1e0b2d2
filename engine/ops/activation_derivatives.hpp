#pragma once
// activation_derivative: the first or second derivative of an activation of
// activation.hpp as a recorded op of its own, so that the derivative of an
// activation can itself be differentiated (the rules of backward with
// create_graph: relu, gelu, ... have dx = dy * f'(x), with f'(x) this op).
//
//   order 1:  y = f'(x),    dx = dy * f''(x)     op name "<activation>_derivative"
//   order 2:  y = f''(x),   dx = dy * f'''(x)    op name "<activation>_second_derivative"
//   x, y, dy, dx: any shape, [0, D] included
//
// f', f'' and f''' are in kernels/activation_formulas.hpp and
// kernels/activation_derivatives.hpp (the formulas, and relu''(x) = 0 at 0
// too, are written there). Order 1 is bit for bit the factor f'(x) that the
// first-order backward of the activation multiplies by. The order-1 op is
// twice differentiable (its create_graph rule uses the order-2 op); the
// order-2 op has a first-order backward only, so third derivatives of an
// activation exist and fourth ones are refused.
//
// Throws std::invalid_argument for an order other than 1 or 2 and for an
// Activation value outside the enumeration.

#include "../activation.hpp"
#include "../tape.hpp"

namespace xtgrad {

template <class T>
Var<T> activation_derivative(const Var<T>& x, Activation a, int order = 1);

}  // namespace xtgrad

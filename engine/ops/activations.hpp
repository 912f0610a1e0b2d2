#pragma once
// activation: y = f(x) elementwise, for the activations of activation.hpp
// (relu, exact gelu, gelu_tanh, gelu_sigmoid, silu, tanh; formulas, derivatives and
// which GELU is which are documented there).
//
//   y = f(x),   dx = dy * f'(x)     x, y, dy, dx: any shape, [0, D] included
//
// One vectorized pass each way; backward reads x from the tape, nothing else
// is saved. Throws std::invalid_argument for an Activation value outside the
// enumeration.

#include "../activation.hpp"
#include "../tape.hpp"

namespace xtgrad {

template <class T>
Var<T> activation(const Var<T>& x, Activation a);

// relu(x) = max(x, 0), relu'(0) = 0.
template <class T>
Var<T> relu(const Var<T>& x) {
  return activation(x, Activation::relu);
}
// Exact GELU: x Phi(x), torch gelu(approximate='none').
template <class T>
Var<T> gelu(const Var<T>& x) {
  return activation(x, Activation::gelu);
}
// tanh-approximated GELU, torch gelu(approximate='tanh').
template <class T>
Var<T> gelu_tanh(const Var<T>& x) {
  return activation(x, Activation::gelu_tanh);
}
// sigmoid-approximated GELU: x sigmoid(1.702 x).
template <class T>
Var<T> gelu_sigmoid(const Var<T>& x) {
  return activation(x, Activation::gelu_sigmoid);
}
// SiLU (Swish-1): x sigmoid(x).
template <class T>
Var<T> silu(const Var<T>& x) {
  return activation(x, Activation::silu);
}

}  // namespace xtgrad

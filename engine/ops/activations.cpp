#include "activations.hpp"

#include "../check.hpp"
#include "../kernels/activation_kernels.hpp"
#include "activation_derivatives.hpp"
#include "elementwise.hpp"

namespace xtgrad {

template <class T>
Var<T> activation(const Var<T>& x, Activation a) {
  Tape<T>& tape = detail::common_tape<T>("activation", {{"x", &x}});
  const char* op = detail::activation_name(a, "activation", "a");  // validates `a`

  const std::size_t xi = x.index();
  const std::size_t yi = tape.record(op, {xi}, x.requires_grad());
  const xt::xarray<T>& xv = tape.value(xi);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(xv.shape());
  // y[...] = f(x[...])
  detail::activation_forward(a, xv.data(), y.data(), xv.size());

  tape.set_backward(yi, [xi, a](Tape<T>& t, const xt::xarray<T>& dy) {
    if (!t.requires_grad(xi)) return;
    GradSlot<T> dx = t.grad_slot(xi);
    // dx[...] (+)= dy[...] * f'(x[...])
    detail::activation_backward(a, t.value(xi).data(), dy.data(), dx.buffer.data(), dy.size(),
                                dx.accumulate);
  });
  // create_graph: dx = dy * f'(x), f'(x) the differentiable op of activation_derivatives.hpp
  tape.set_grad_rule(yi, [a](GradSink<T>& g) {
    if (g.needs_grad(0)) g.add(0, mul(g.grad_output(), activation_derivative(g.input(0), a, 1)));
  });
  return tape.var(yi);
}

template Var<float> activation(const Var<float>&, Activation);
template Var<double> activation(const Var<double>&, Activation);

}  // namespace xtgrad

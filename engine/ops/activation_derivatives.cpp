#include "activation_derivatives.hpp"

#include <string>

#include "../check.hpp"
#include "../kernels/activation_derivative_kernels.hpp"
#include "elementwise.hpp"

namespace xtgrad {

namespace {

constexpr const char* k_derivative_op = "activation_derivative";

// The tape name of the op of `order` for activation `a` (checked by the caller).
const char* derivative_name(Activation a, int order) {
  static constexpr const char* first[] = {"relu_derivative",      "gelu_derivative",
                                          "gelu_tanh_derivative", "gelu_sigmoid_derivative",
                                          "silu_derivative",      "tanh_derivative"};
  static constexpr const char* second[] = {
      "relu_second_derivative",         "gelu_second_derivative", "gelu_tanh_second_derivative",
      "gelu_sigmoid_second_derivative", "silu_second_derivative", "tanh_second_derivative"};
  const auto k = static_cast<std::size_t>(a);
  return order == 1 ? first[k] : second[k];
}

}  // namespace

template <class T>
Var<T> activation_derivative(const Var<T>& x, Activation a, int order) {
  Tape<T>& tape = detail::common_tape<T>(k_derivative_op, {{"x", &x}});
  detail::activation_name(a, k_derivative_op, "a");  // validates `a`
  detail::Check(k_derivative_op)
      .argument(order == 1 || order == 2, "order", "is ", order, ", expected 1 (f') or 2 (f'')");

  const std::size_t xi = x.index();
  const std::size_t yi = tape.record(derivative_name(a, order), {xi}, x.requires_grad());
  const xt::xarray<T>& xv = tape.value(xi);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(xv.shape());
  // y[...] = f^(order)(x[...])
  detail::activation_derivative_forward(a, order, xv.data(), y.data(), xv.size());

  tape.set_backward(yi, [xi, a, order](Tape<T>& t, const xt::xarray<T>& dy) {
    if (!t.requires_grad(xi)) return;
    const GradPointer<T> dx = t.grad_pointer(xi);
    // dx[...] (+)= dy[...] * f^(order + 1)(x[...])
    detail::activation_derivative_backward(a, order, t.value(xi).data(), dy.data(), dx.data,
                                           dy.size(), dx.accumulate);
  });
  // create_graph, order 1 only: dx = dy * f''(x), through the order-2 op. The
  // order-2 op sets no rule (f''' exists as a kernel, not as an op), so a
  // fourth derivative is refused as "not twice differentiable".
  if (order == 1)
    tape.set_grad_rule(yi, [a](GradSink<T>& g) {
      if (g.needs_grad(0)) g.add(0, mul(g.grad_output(), activation_derivative(g.input(0), a, 2)));
    });
  return tape.var(yi);
}

template Var<float> activation_derivative(const Var<float>&, Activation, int);
template Var<double> activation_derivative(const Var<double>&, Activation, int);

}  // namespace xtgrad

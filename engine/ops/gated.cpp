#include "gated.hpp"

#include "../check.hpp"
#include "../kernels/activation_kernels.hpp"
#include "activation_derivatives.hpp"
#include "elementwise.hpp"

namespace xtgrad {

template <class T>
Var<T> gated(const Var<T>& u, const Var<T>& g, Activation a) {
  static constexpr const char* op = "gated";
  Tape<T>& tape = detail::common_tape<T>(op, {{"u", &u}, {"g", &g}});
  detail::activation_name(a, op, "a");  // validates `a`
  detail::Check(op).shape(g.shape() == u.shape(), "g", g.shape(), u.shape(), " (the shape of 'u')");

  const std::size_t ui = u.index(), gi = g.index();
  const std::size_t yi = tape.record(op, {ui, gi}, u.requires_grad() || g.requires_grad());
  const xt::xarray<T>& uv = tape.value(ui);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(uv.shape());
  // y[...] = u[...] * f(g[...])
  detail::gated_forward(a, uv.data(), tape.value(gi).data(), y.data(), uv.size());

  tape.set_backward(yi, [ui, gi, a](Tape<T>& t, const xt::xarray<T>& dy) {
    // When u and g are one node, both slots are its one buffer (the second
    // accumulates); the kernel writes du before it reads dg.
    const GradPointer<T> du = t.grad_pointer(ui);
    const GradPointer<T> dg = t.grad_pointer(gi);
    // du[...] (+)= dy[...] * f(g[...]);  dg[...] (+)= dy[...] * u[...] * f'(g[...])
    detail::gated_backward(a, t.value(ui).data(), t.value(gi).data(), dy.data(), du.data,
                           du.accumulate, dg.data, dg.accumulate, dy.size());
  });
  // create_graph: du = dy * f(g) = gated(dy, g), dg = (dy * u) * f'(g)
  tape.set_grad_rule(yi, [a](GradSink<T>& s) {
    const Var<T> dy = s.grad_output(), u = s.input(0), g = s.input(1);
    if (s.needs_grad(0)) s.add(0, gated(dy, g, a));
    if (s.needs_grad(1)) s.add(1, mul(mul(dy, u), activation_derivative(g, a, 1)));
  });
  return tape.var(yi);
}

template Var<float> gated(const Var<float>&, const Var<float>&, Activation);
template Var<double> gated(const Var<double>&, const Var<double>&, Activation);

}  // namespace xtgrad

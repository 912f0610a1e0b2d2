#pragma once
// check_module_gradients: a module's gradients, in double, against central
// finite differences: gradcheck (engine/gradcheck.hpp) for the input, and the
// same difference quotient, element by element, for every parameter (a
// Parameter is not a gradcheck input: its gradient goes to p.grad).
//
// `reset` runs before every evaluation, for a module with state that a
// forward advances (a Dropout's step): then every evaluation draws the same
// mask, so the function differentiated is one function.

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <xtensor/xarray.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/module.hpp>

#include "support/test_helpers.hpp"

namespace xtgrad::testing {

inline void check_module_gradients(
    Module<double>& module, const xt::xarray<double>& x, const std::function<void()>& reset = [] {},
    double eps = 1e-6, double atol = 1e-6, double rtol = 1e-4) {
  // The input, through the public gradcheck.
  check_gradients(
      [&](const std::vector<Var<double>>& v) {
        reset();
        return module(v[0]);
      },
      {x});
  // Every parameter: analytic from one backward with a random upstream dy ...
  reset();
  Tape<double> tape;
  Var<double> y = module(tape.leaf(x));
  const xt::xarray<double> dy =
      random_array(std::vector<std::size_t>(y.shape().begin(), y.shape().end()), 4242);
  module.zero_grad();
  tape.backward(y, dy);
  // ... against (L(p + eps) - L(p - eps)) / 2 eps with L = sum(dy * y).
  const auto loss = [&] {
    reset();
    Tape<double> t;
    const xt::xarray<double> yv = module(t.leaf(x, false)).value();
    return double(xt::sum(dy * yv)());
  };
  for (auto& entry : module.named_parameters()) {
    // not structured bindings: doctest's message macros capture them in lambdas (not C++17)
    auto& name = std::get<0>(entry);
    auto& p = std::get<1>(entry);
    const xt::xarray<double> analytic = p->grad;
    for (std::size_t i = 0; i < p->value.size(); ++i) {
      double& element = p->value.data()[i];
      const double saved = element;
      element = saved + eps;
      const double plus = loss();
      element = saved - eps;
      const double minus = loss();
      element = saved;
      const double numeric = (plus - minus) / (2 * eps);
      INFO(name << "[" << i << "]: analytic " << analytic.data()[i] << ", numeric " << numeric);
      CHECK(std::abs(analytic.data()[i] - numeric) <= atol + rtol * std::abs(numeric));
    }
  }
}

}  // namespace xtgrad::testing

// Higher-order gradients: backward with create_graph, Var::grad_var, the
// GradRules of the ops (gradgradcheck in double against finite differences of
// the first derivative), and the refusals (an op without a rule, an observer).
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include <xtgrad/engine/engine.hpp>

#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

TEST_CASE("second order: y = x^3 by mul, its gradient 3 x^2 and second derivative 6 x") {
  Tape<double> tape;
  const xt::xarray<double> xv = {0.5, -1.25, 2.0};
  const Var<double> x = tape.leaf(xv);
  const Var<double> y = mul(mul(x, x), x);
  const xt::xarray<double> ones = xt::ones<double>(xv.shape());
  tape.backward(y, ones, create_graph);
  const xt::xarray<double> first = 3.0 * xv * xv;
  check_close(x.grad(), first);
  const Var<double> g = x.grad_var();
  check_close(g.value(), first);
  CHECK(g.requires_grad());
  // d/dx <v, 3 x^2> = 6 x v
  tape.zero_grad();
  const xt::xarray<double> v = {1.0, -2.0, 0.25};
  tape.backward(g, v);
  check_close(x.grad(), 6.0 * xv * v);
}

TEST_CASE("second order: add of a broadcast bias, and a reused node") {
  Tape<double> tape;
  const xt::xarray<double> av = {{0.5, -1.0, 2.0}, {1.5, 0.25, -0.75}};
  const xt::xarray<double> bv = {0.3, -0.2, 0.1};
  const Var<double> a = tape.leaf(av);
  const Var<double> b = tape.leaf(bv);
  const Var<double> s = add(a, b);  // [2, 3]
  const Var<double> y = mul(s, s);  // s^2, s used twice
  tape.backward(y, xt::ones<double>({2, 3}), create_graph);
  const xt::xarray<double> sv = av + bv;
  check_close(a.grad(), 2.0 * sv);
  check_close(b.grad(), xt::xarray<double>(2.0 * xt::sum(sv, {0})));
  // d/db sum(v * db) where db = sum_rows 2 (a + b): 2 * 2 * v (two rows)
  const Var<double> gb = b.grad_var();
  tape.zero_grad();
  const xt::xarray<double> v = {1.0, -0.5, 2.0};
  tape.backward(gb, v);
  check_close(b.grad(), 4.0 * v);
  check_close(a.grad(), xt::xarray<double>(2.0 * xt::ones<double>({2, 3}) * v));
}

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

namespace {

using Dims = std::vector<std::size_t>;

// gradgradcheck, failing the test with its report.
void check_second_order(const GradcheckFunction& f, const std::vector<xt::xarray<double>>& inputs,
                        const GradcheckOptions& options = {}) {
  const GradcheckResult result = gradgradcheck(f, inputs, options);
  INFO(result.report());
  CHECK(result.passed);
  CHECK(result.elements_checked > 0);
}

}  // namespace

TEST_CASE("second order: elementwise arithmetic, with broadcasting") {
  const xt::xarray<double> a = random_away_from_zero({2, 3}, 11, 0.5);
  const xt::xarray<double> b = random_away_from_zero({3}, 12, 0.5);
  const xt::xarray<double> c = random_away_from_zero({2, 1}, 13, 0.5);
  using Inputs = const std::vector<Var<double>>&;
  check_second_order([](Inputs x) { return mul(add(x[0], x[1]), mul(x[0], x[2])); }, {a, b, c});
  check_second_order([](Inputs x) { return mul(sub(x[0], x[1]), sub(x[2], x[0])); }, {a, b, c});
  check_second_order([](Inputs x) { return div(mul(x[0], x[0]), x[1]); }, {a, b});
  check_second_order([](Inputs x) { return div(x[1], add(x[0], x[2])); }, {a, b, c});
  check_second_order([](Inputs x) { return mul(scale(x[0], 1.5), add_scalar(x[0], 0.25)); }, {a});
  check_second_order([](Inputs x) { return mul(rsub(x[0], 2.0), div_scalar(x[0], 3.0)); }, {a});
  check_second_order([](Inputs x) { return mul(rdiv(x[0], 2.0), x[0]); }, {a});
}

TEST_CASE("second order: math functions") {
  const xt::xarray<double> x = random_away_from_zero({2, 3}, 21, 0.2);
  const xt::xarray<double> positive = random_array({2, 3}, 22, 0.5, 2.0);
  using Inputs = const std::vector<Var<double>>&;
  check_second_order([](Inputs v) { return mul(exp(v[0]), v[0]); }, {x});
  check_second_order([](Inputs v) { return mul(log(v[0]), v[0]); }, {positive});
  check_second_order([](Inputs v) { return mul(sqrt(v[0]), v[0]); }, {positive});
  check_second_order([](Inputs v) { return rsqrt(v[0]); }, {positive});
  check_second_order([](Inputs v) { return tanh(mul(v[0], v[0])); }, {x});
  check_second_order([](Inputs v) { return sigmoid(mul(v[0], v[0])); }, {x});
  check_second_order([](Inputs v) { return mul(abs(v[0]), v[0]); }, {x});
  check_second_order([](Inputs v) { return mul(square(v[0]), v[0]); }, {x});
  check_second_order([](Inputs v) { return pow(v[0], 3.5); }, {positive});
  check_second_order([](Inputs v) { return mul(pow(v[0], 0.0), v[0]); }, {positive});
  check_second_order([](Inputs v) { return mul(clamp(v[0], -0.5, 0.5), v[0]); }, {x});
  check_second_order([](Inputs v) { return mul(clamp_min(v[0], 0.0), v[0]); }, {x});
}

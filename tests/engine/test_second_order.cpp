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

TEST_CASE("second order: reductions (sum, mean, amax, amin, var, logsumexp)") {
  const xt::xarray<double> x = random_away_from_zero({2, 3, 2}, 31, 0.2);
  using Inputs = const std::vector<Var<double>>&;
  check_second_order([](Inputs v) { return mul(sum(mul(v[0], v[0])), sum(v[0])); }, {x});
  check_second_order([](Inputs v) { return mul(mean(v[0]), v[0]); }, {x});
  check_second_order([](Inputs v) { return square(sum(mul(v[0], v[0]), {0, 2})); }, {x});
  check_second_order([](Inputs v) { return mul(mean(v[0], -1, true), v[0]); }, {x});
  check_second_order([](Inputs v) { return square(amax(v[0], {1})); }, {x});
  check_second_order([](Inputs v) { return mul(amin(v[0], 2, true), v[0]); }, {x});
  check_second_order([](Inputs v) { return square(amax(v[0], std::vector<std::int64_t>{})); }, {x});
  check_second_order([](Inputs v) { return mul(var(v[0], {0, 2}), var(v[0], {0, 2}, 0)); }, {x});
  check_second_order([](Inputs v) { return square(var(v[0], -1, 1, true)); }, {x});
  check_second_order([](Inputs v) { return square(logsumexp(v[0], {1})); }, {x});
  check_second_order([](Inputs v) { return mul(logsumexp(v[0], 0, true), v[0]); }, {x});
}

TEST_CASE("second order: shape ops (reshape, permute, transpose, expand, flatten)") {
  const xt::xarray<double> x = random_away_from_zero({2, 3, 4}, 41, 0.2);
  const xt::xarray<double> b = random_away_from_zero({3, 1}, 42, 0.2);
  using Inputs = const std::vector<Var<double>>&;
  check_second_order([](Inputs v) { return square(reshape(v[0], {4, -1})); }, {x});
  check_second_order(
      [](Inputs v) {
        return mul(permute(v[0], {2, 0, 1}), permute(v[0], {2, 0, 1}));
      },
      {x});
  check_second_order([](Inputs v) { return square(transpose(v[0], 0, 2)); }, {x});
  check_second_order([](Inputs v) { return mul(expand(v[1], {2, 3, 4}), v[0]); }, {x, b});
  check_second_order([](Inputs v) { return square(flatten(v[0], 1)); }, {x});
}

TEST_CASE("second order: slice (step 1), concat, stack, split, chunk") {
  const xt::xarray<double> x = random_away_from_zero({3, 5}, 51, 0.2);
  const xt::xarray<double> y = random_away_from_zero({3, 2}, 52, 0.2);
  using Inputs = const std::vector<Var<double>>&;
  check_second_order([](Inputs v) { return square(slice(v[0], 1, 1, 4)); }, {x});
  check_second_order([](Inputs v) { return square(concat({v[0], v[1], v[0]}, 1)); }, {x, y});
  check_second_order(
      [](Inputs v) {
        return mul(stack({v[0], v[1]}, 0), stack({v[1], v[0]}, 0));
      },
      {y, y});
  check_second_order(
      [](Inputs v) {
        const std::vector<Var<double>> parts = split(v[0], 2, 1);
        return mul(parts[0], parts[1]);
      },
      {x});
  check_second_order(
      [](Inputs v) {
        const std::vector<Var<double>> parts = chunk(v[0], 3, 0);
        return mul(parts[2], square(parts[0]));
      },
      {x});
}

TEST_CASE("second order: matmul (batched, broadcast) and linear (both layouts, bias, 3-D x)") {
  using Inputs = const std::vector<Var<double>>&;
  const xt::xarray<double> a = random_array({2, 3, 4}, 61);
  const xt::xarray<double> b = random_array({4, 2}, 62);
  const xt::xarray<double> c = random_array({2, 4, 2}, 63);
  check_second_order([](Inputs v) { return square(matmul(v[0], v[1])); }, {a, b});
  check_second_order([](Inputs v) { return tanh(matmul(v[0], v[1])); }, {a, c});
  const xt::xarray<double> x = random_array({2, 2, 3}, 64);
  const xt::xarray<double> w = random_array({4, 3}, 65);
  const xt::xarray<double> wt = random_array({3, 4}, 66);
  const xt::xarray<double> bias = random_array({4}, 67);
  check_second_order([](Inputs v) { return tanh(linear(v[0], v[1], v[2])); }, {x, w, bias});
  check_second_order(
      [](Inputs v) { return sigmoid(linear(v[0], v[1], std::nullopt, WeightLayout::in_out)); },
      {x, wt});
  check_second_order([](Inputs v) { return square(linear(v[0], v[1])); },
                     {xt::xarray<double>(random_array({3}, 68)), w});
}

namespace {

// An op with a first-order backward and no GradRule: y = 2 x.
Var<double> doubled_without_rule(const Var<double>& x) {
  Tape<double>& tape = x.tape();
  const std::size_t xi = x.index();
  const std::size_t yi = tape.record("doubled", {xi}, x.requires_grad());
  tape.value_mut(yi) = 2.0 * tape.value(xi);
  tape.set_backward(yi, [xi](Tape<double>& t, const xt::xarray<double>& dy) {
    GradSlot<double> dx = t.grad_slot(xi);
    if (dx.accumulate)
      dx.buffer += 2.0 * dy;
    else
      dx.buffer = 2.0 * dy;
  });
  return tape.var(yi);
}

struct CountingObserver : BackwardObserver<double> {
  int begins = 0;
  void backward_begin(const Tape<double>&, std::size_t) override { ++begins; }
  void node_done(const Tape<double>&, std::size_t) override {}
  void backward_end(const Tape<double>&) override {}
};

}  // namespace

TEST_CASE("second order: an op without a GradRule refuses create_graph and changes nothing") {
  Tape<double> tape;
  Parameter<double> p("p", xt::xarray<double>{1.5, -0.5});
  const Var<double> x = tape.leaf(xt::xarray<double>{0.5, 2.0});
  const Var<double> y = sum(mul(doubled_without_rule(mul(x, x)), tape.param(p)));
  tape.backward(y);  // first order works
  const xt::xarray<double> x_grad = x.grad(), p_grad = p.grad;
  const std::size_t before = tape.size();
  CHECK_THROWS_WITH_PARTS(tape.backward(y, create_graph), std::logic_error,
                          {"xtgrad::Tape::backward", "not twice differentiable: doubled"});
  CHECK_THROWS_WITH_PARTS(grad(tape, {y}, {x}, GradOptions<double>{{}, true}), std::logic_error,
                          {"xtgrad::grad", "not twice differentiable: doubled"});
  CHECK(tape.size() == before);
  CHECK(x.grad() == x_grad);
  CHECK(p.grad == p_grad);
  // Gradients that do not pass through it need no rule: dy/dp = 2 x^2 only.
  check_close(grad(tape, {y}, {p}, GradOptions<double>{{}, true})[0].value(),
              xt::xarray<double>{0.5, 8.0});
  // grad without create_graph runs the fused backward: any op works.
  check_close(grad(tape, {y}, {x})[0].value(),
              xt::xarray<double>{2.0 * 2.0 * 0.5 * 1.5, 2.0 * 2.0 * 2.0 * -0.5});
}

TEST_CASE("second order: a strided slice and a matmul of a vector have no rule and refuse") {
  Tape<double> tape;
  const Var<double> x = tape.leaf(xt::xarray<double>{{0.5, 2.0, -1.0, 3.0}});
  const Var<double> strided = sum(square(slice(x, 1, 0, 4, 2)));
  const Var<double> vector_product =
      sum(square(matmul(x, tape.leaf(xt::xarray<double>{1.0, 2.0, 3.0, 4.0}))));
  const std::size_t before = tape.size();
  CHECK_THROWS_WITH_PARTS(tape.backward(strided, create_graph), std::logic_error,
                          {"not twice differentiable: slice"});
  CHECK_THROWS_WITH_PARTS(tape.backward(vector_product, create_graph), std::logic_error,
                          {"not twice differentiable: matmul"});
  CHECK(tape.size() == before);
  CHECK(x.grad() == xt::zeros<double>({1, 4}));
}

TEST_CASE("second order: create_graph refuses an added observer, a released tape, a stale y") {
  Tape<double> tape;
  const Var<double> x = tape.leaf(xt::xarray<double>{0.5, 2.0});
  const Var<double> y = sum(mul(x, x));
  CountingObserver observer;
  tape.add_backward_observer(&observer);
  const std::size_t before = tape.size();
  CHECK_THROWS_WITH_PARTS(tape.backward(y, create_graph), std::logic_error,
                          {"xtgrad::Tape::backward", "BackwardObserver"});
  CHECK(observer.begins == 0);
  CHECK(tape.size() == before);
  CHECK(x.grad() == xt::xarray<double>{0.0, 0.0});
  tape.remove_backward_observer(&observer);
  tape.backward(y, create_graph);
  check_close(x.grad(), xt::xarray<double>{1.0, 4.0});
  tape.release();
  CHECK_THROWS_WITH_PARTS(tape.backward(y, create_graph), std::logic_error,
                          {"xtgrad::Tape::backward", "cleared"});
  CHECK_THROWS_WITH_PARTS(x.grad_var(), std::logic_error, {"xtgrad::Var::grad_var", "cleared"});
  CHECK(tape.size() == 0);
}

TEST_CASE("second order: grad_var follows PyTorch's accumulation and is refused when stale") {
  Tape<double> tape;
  const xt::xarray<double> pv = {1.5, -0.5}, xv = {0.5, 2.0};
  Parameter<double> p("p", pv);
  const Var<double> x = tape.leaf(xv);
  const Var<double> pn = tape.param(p);
  const Var<double> h = mul(x, pn);
  const Var<double> y = sum(mul(h, h));  // (p x)^2
  CHECK_THROWS_WITH_PARTS(x.grad_var(), std::logic_error,
                          {"xtgrad::Var::grad_var", "no gradient Var"});
  tape.backward(y, create_graph);
  const xt::xarray<double> dx = 2.0 * pv * pv * xv, dp = 2.0 * xv * xv * pv;
  check_close(x.grad_var().value(), dx);
  check_close(x.grad(), dx);
  check_close(pn.grad_var().value(), dp);
  check_close(p.grad, dp);
  check_close(h.grad_var().value(), xt::xarray<double>(2.0 * pv * xv));
  // A second create_graph backward accumulates into leaves and Parameters,
  // differentiably: d/dx <v, 2 * 2 p^2 x> = 4 p^2 v.
  tape.backward(y, create_graph);
  check_close(x.grad(), xt::xarray<double>(2.0 * dx));
  check_close(p.grad, xt::xarray<double>(2.0 * dp));
  const Var<double> gx = x.grad_var();
  check_close(gx.value(), xt::xarray<double>(2.0 * dx));
  tape.zero_grad();
  p.zero_grad();
  CHECK_THROWS_WITH_PARTS(pn.grad_var(), std::logic_error, {"xtgrad::Var::grad_var"});
  const xt::xarray<double> v = {1.0, -2.0};
  tape.backward(gx, v);
  check_close(x.grad(), xt::xarray<double>(4.0 * pv * pv * v));
  // After a plain backward the gradient Vars are gone.
  CHECK_THROWS_WITH_PARTS(x.grad_var(), std::logic_error, {"xtgrad::Var::grad_var"});
  CHECK_THROWS_WITH_PARTS(h.grad_var(), std::logic_error, {"xtgrad::Var::grad_var"});
  // Recording off around a create_graph backward: its gradients are still recorded.
  tape.zero_grad();
  tape.set_grad_enabled(false);
  tape.backward(y, create_graph);
  CHECK(!tape.grad_enabled());
  tape.set_grad_enabled(true);
  CHECK(x.grad_var().requires_grad());
}

TEST_CASE("second order: the first-order values of a create_graph backward equal a plain one") {
  const xt::xarray<double> xv = random_array({3, 4}, 71), wv = random_array({5, 4}, 72);
  const xt::xarray<double> bv = random_array({5}, 73);
  auto run = [&](bool create, Parameter<double>& w, Parameter<double>& b) {
    Tape<double> tape;
    const Var<double> x = tape.leaf(xv);
    const Var<double> y = mean(tanh(linear(x, tape.param(w), tape.param(b))));
    if (create)
      tape.backward(y, create_graph);
    else
      tape.backward(y);
    return x.grad();
  };
  Parameter<double> w1("w", wv), b1("b", bv), w2("w", wv), b2("b", bv);
  check_close(run(true, w1, b1), run(false, w2, b2), 1e-14, 1e-15);
  check_close(w1.grad, w2.grad, 1e-14, 1e-15);
  check_close(b1.grad, b2.grad, 1e-14, 1e-15);
}

TEST_CASE("second order: third derivatives (gradgradcheck of a recorded gradient)") {
  using Inputs = const std::vector<Var<double>>&;
  const xt::xarray<double> x = random_away_from_zero({2, 3}, 81, 0.2);
  const xt::xarray<double> w = random_array({3, 3}, 82);
  // f returns d/dx sum(tanh(x w) * x), itself recorded with create_graph.
  check_second_order(
      [](Inputs v) {
        const Var<double> s = sum(mul(tanh(matmul(v[0], v[1])), v[0]));
        return grad(v[0].tape(), {s}, {v[0], v[1]}, GradOptions<double>{{}, true})[0];
      },
      {x, w});
  check_second_order(
      [](Inputs v) {
        const Var<double> s = sum(mul(exp(v[0]), sigmoid(v[0])));
        return grad(v[0].tape(), {s}, {v[0]}, GradOptions<double>{{}, true})[0];
      },
      {x});
}

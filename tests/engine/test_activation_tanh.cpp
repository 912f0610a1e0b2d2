// Activation::tanh through every op that takes an Activation, against
// torch 1.13 (tests/support/fixtures/make_activation_tanh.py): the op and its
// derivative ops, gated, and the fused FFN ops, first and second order. The
// loops over every activation in test_activations, test_activation_derivatives,
// test_gated, test_fused and test_second_order_ops cover tanh against the
// long-double reference and by gradcheck / gradgradcheck in double.

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include <xtgrad/engine/engine.hpp>

#include "support/fixtures/activation_tanh_fixtures.hpp"
#include "support/fixtures/fixture_array.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fx = xtgrad::fixtures::activation_tanh;

namespace {

template <class T>
constexpr double rtol() {
  return std::is_same_v<T, float> ? 2e-5 : 1e-12;
}
template <class T>
constexpr double atol() {
  return std::is_same_v<T, float> ? 2e-6 : 1e-14;
}

template <class T, std::size_t R, std::size_t N>
xt::xarray<T> fixture(const std::size_t (&shape)[R], const double (&values)[N]) {
  return fixture_array<T>(shape, values);
}

}  // namespace

TEST_CASE("activation tanh: parsed, printed and the same values as the elementwise tanh") {
  CHECK(parse_activation("tanh") == Activation::tanh);
  CHECK(to_string(Activation::tanh) == "tanh");
  Tape<double> tape;
  const Var<double> x = tape.leaf(random_array<double>({9}, 3, -4.0, 4.0));
  check_close(activation(x, Activation::tanh).value(), tanh(x).value(), 1e-15, 1e-16);
}

TEST_CASE_TEMPLATE("activation tanh: f, f', f'' and f''' equal torch's", T, float, double) {
  Tape<T> tape;
  const Var<T> x = tape.leaf(fixture<T>(fx::k_points_shape, fx::k_points));
  const Var<T> y = activation(x, Activation::tanh);
  check_close(y.value(), fixture<double>(fx::k_tanh_shape, fx::k_tanh), rtol<T>(), atol<T>());
  check_close(activation_derivative(x, Activation::tanh, 1).value(),
              fixture<double>(fx::k_tanh_d1_shape, fx::k_tanh_d1), rtol<T>(), atol<T>());
  check_close(activation_derivative(x, Activation::tanh, 2).value(),
              fixture<double>(fx::k_tanh_d2_shape, fx::k_tanh_d2), rtol<T>(), atol<T>());
  // f''' as the backward of the order-2 op, with dy = 1
  const Var<T> d2 = activation_derivative(x, Activation::tanh, 2);
  tape.backward(d2, xt::xarray<T>(xt::ones<T>(d2.shape())));
  check_close(x.grad(), fixture<double>(fx::k_tanh_d3_shape, fx::k_tanh_d3), rtol<T>(), atol<T>());
}

TEST_CASE_TEMPLATE("activation tanh: bounded limits, never NaN - NaN in, NaN out", T, float,
                   double) {
  const T inf = std::numeric_limits<T>::infinity(), big = std::numeric_limits<T>::max();
  Tape<T> tape;
  const Var<T> x = tape.leaf(xt::xarray<T>{T(30), T(-30), T(1e30), -big, inf, -inf});
  const Var<T> y = activation(x, Activation::tanh);
  tape.backward(y, xt::xarray<T>(xt::ones<T>(y.shape())));
  for (std::size_t i = 0; i < y.size(); ++i) {
    const T xi = x.value()(i);
    CAPTURE(xi);
    CHECK(y.value()(i) == (xi > 0 ? T(1) : T(-1)));
    CHECK(x.grad()(i) >= T(0));
    CHECK(x.grad()(i) <= T(1e-20));
    for (int order = 1; order <= 2; ++order) {
      const T d = activation_derivative(x, Activation::tanh, order).value()(i);
      CHECK(std::isfinite(d));
      CHECK(std::abs(d) <= T(1e-20));
    }
  }
  const T nan = std::numeric_limits<T>::quiet_NaN();
  CHECK(std::isnan(activation(tape.leaf(xt::xarray<T>{nan}), Activation::tanh).value()(0)));

  // gated: u * tanh(g) -> +-u, du -> +-1, dg -> 0
  Tape<T> gated_tape;
  const Var<T> g = gated_tape.leaf(x.value());
  const Var<T> u = gated_tape.leaf(xt::xarray<T>(xt::full_like(x.value(), T(2))));
  const Var<T> yg = gated(u, g, Activation::tanh);
  gated_tape.backward(yg, xt::xarray<T>(xt::ones<T>(yg.shape())));
  for (std::size_t i = 0; i < yg.size(); ++i) {
    const T gi = g.value()(i);
    CAPTURE(gi);
    CHECK(yg.value()(i) == (gi > 0 ? T(2) : T(-2)));
    CHECK(u.grad()(i) == (gi > 0 ? T(1) : T(-1)));
    CHECK(std::abs(g.grad()(i)) <= T(1e-20));
  }
}

TEST_CASE_TEMPLATE("activation tanh: the fused FFN ops and gated equal torch's", T, float, double) {
  Tape<T> tape;
  const Var<T> h = tape.leaf(fixture<T>(fx::k_h_shape, fx::k_h));
  const Var<T> u = tape.leaf(fixture<T>(fx::k_u_shape, fx::k_u));
  const Var<T> g = tape.leaf(fixture<T>(fx::k_g_shape, fx::k_g));
  const Var<T> w = tape.leaf(fixture<T>(fx::k_w_shape, fx::k_w));
  const Var<T> b = tape.leaf(fixture<T>(fx::k_b_shape, fx::k_b));
  const xt::xarray<T> r = fixture<T>(fx::k_r_shape, fx::k_r);

  const Var<T> ya = activation_linear(h, Activation::tanh, w, b);
  check_close(ya.value(), fixture<double>(fx::k_act_y_shape, fx::k_act_y), rtol<T>(), atol<T>());
  tape.backward(ya, r);
  check_close(h.grad(), fixture<double>(fx::k_act_dh_shape, fx::k_act_dh), rtol<T>(), atol<T>());
  check_close(w.grad(), fixture<double>(fx::k_act_dw_shape, fx::k_act_dw), rtol<T>(), atol<T>());
  check_close(b.grad(), fixture<double>(fx::k_act_db_shape, fx::k_act_db), rtol<T>(), atol<T>());

  // gated_linear, then the unfused gated + linear: the same values and gradients
  for (const bool fused : {true, false}) {
    CAPTURE(fused);
    tape.zero_grad();
    const Var<T> yg = fused ? gated_linear(u, g, Activation::tanh, w, b)
                            : linear(gated(u, g, Activation::tanh), w, b);
    check_close(yg.value(), fixture<double>(fx::k_gated_y_shape, fx::k_gated_y), rtol<T>(),
                atol<T>());
    tape.backward(yg, r);
    check_close(u.grad(), fixture<double>(fx::k_gated_du_shape, fx::k_gated_du), rtol<T>(),
                atol<T>());
    check_close(g.grad(), fixture<double>(fx::k_gated_dg_shape, fx::k_gated_dg), rtol<T>(),
                atol<T>());
    check_close(w.grad(), fixture<double>(fx::k_gated_dw_shape, fx::k_gated_dw), rtol<T>(),
                atol<T>());
    check_close(b.grad(), fixture<double>(fx::k_gated_db_shape, fx::k_gated_db), rtol<T>(),
                atol<T>());
  }
}

TEST_CASE_TEMPLATE("activation tanh: a second derivative through activation_linear equals torch's",
                   T, float, double) {
  Tape<T> tape;
  const Var<T> h = tape.leaf(fixture<T>(fx::k_h_shape, fx::k_h));
  const Var<T> w = tape.leaf(fixture<T>(fx::k_w_shape, fx::k_w));
  const Var<T> b = tape.leaf(fixture<T>(fx::k_b_shape, fx::k_b), false);
  const Var<T> y = activation_linear(h, Activation::tanh, w, b);
  GradOptions<T> options;
  options.grad_outputs = {fixture<T>(fx::k_r_shape, fx::k_r)};
  options.create_graph = true;
  const Var<T> dh = grad(tape, {y}, {h}, options)[0];
  const Var<T> v = tape.leaf(fixture<T>(fx::k_v_shape, fx::k_v), false);
  const std::vector<Var<T>> second = grad(tape, {sum(mul(v, dh))}, {h, w});
  check_close(second[0].value(), fixture<double>(fx::k_hvp_h_shape, fx::k_hvp_h), rtol<T>(),
              atol<T>());
  check_close(second[1].value(), fixture<double>(fx::k_hvp_w_shape, fx::k_hvp_w), rtol<T>(),
              atol<T>());
}

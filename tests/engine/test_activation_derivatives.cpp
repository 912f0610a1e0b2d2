#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include <xtensor/xarray.hpp>

#include <xtgrad/engine/activation.hpp>
#include <xtgrad/engine/ops/activation_derivatives.hpp>
#include <xtgrad/engine/ops/activations.hpp>

#include "support/activation_reference.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

namespace {

// |error| <= rtol |reference| + atol for f', f'' and f''' computed in T (a
// few more roundings than f' alone: the polynomial factors of f'' and f''').
template <class T>
struct DerivativeTolerance;
template <>
struct DerivativeTolerance<float> {
  static constexpr double rtol = 2e-5, atol = 2e-6;
};
template <>
struct DerivativeTolerance<double> {
  static constexpr double rtol = 1e-12, atol = 1e-14;
};

// Records x, applies the derivative op of `order`, runs backward with dy;
// returns (y, dx) by value.
template <class T>
std::pair<xt::xarray<T>, xt::xarray<T>> run_derivative(const xt::xarray<T>& x, Activation a,
                                                       int order, const xt::xarray<T>& dy) {
  Tape<T> tape;
  Var<T> xv = tape.leaf(x);
  Var<T> y = activation_derivative(xv, a, order);
  tape.backward(y, dy);
  return {y.value(), xv.grad()};
}

template <class T, class F>
void check_against(const xt::xarray<T>& x, const xt::xarray<T>& actual, F reference,
                   const char* what) {
  INFO(what);
  xt::xarray<double> expected = xt::empty<double>(x.shape());
  for (std::size_t i = 0; i < x.size(); ++i)
    expected.data()[i] = static_cast<double>(reference(static_cast<Real>(x.data()[i])));
  check_close(actual, expected, DerivativeTolerance<T>::rtol, DerivativeTolerance<T>::atol);
}

}  // namespace

TEST_CASE_TEMPLATE("activation_derivative: f', f'' and f''' match the scalar reference", T, float,
                   double) {
  const xt::xarray<T> x = random_array<T>({4, 5, 7}, 41, -9.0, 9.0);
  const xt::xarray<T> ones = xt::ones<T>(x.shape());
  for (Activation a : k_all_activations) {
    CAPTURE(to_string(a));
    const auto [slope, curvature] = run_derivative<T>(x, a, 1, ones);
    check_against(
        x, slope, [a](Real v) { return reference_slope(a, v); }, "f'");
    check_against(
        x, curvature, [a](Real v) { return reference_second_derivative(a, v); },
        "f'' (the backward of order 1)");
    const auto [second, third] = run_derivative<T>(x, a, 2, ones);
    check_against(
        x, second, [a](Real v) { return reference_second_derivative(a, v); }, "f''");
    check_against(
        x, third, [a](Real v) { return reference_third_derivative(a, v); },
        "f''' (the backward of order 2)");
  }
}

TEST_CASE("activation_derivative: hand-computed second derivatives at 0 and 1") {
  // d^2/dx^2 of torch.nn.functional.gelu / silu at x, from sympy:
  //   gelu:   phi(x) (2 - x^2);  silu: s (1 - s) (2 + x (1 - 2 s)), s = sigmoid(x)
  struct Point {
    Activation a;
    double x, d2;
  };
  const Point points[] = {
      {Activation::gelu, 0.0, 0.7978845608028654},  // 2 phi(0) = sqrt(2 / pi)
      {Activation::gelu, 1.0, 0.24197072451914335},
      {Activation::silu, 0.0, 0.5},
      {Activation::silu, 1.0, 0.3023661188100153},
      {Activation::gelu_sigmoid, 0.0, 0.851},  // 2 * 1.702 / 4
      {Activation::gelu_tanh, 0.0, 0.7978845608028654},
      {Activation::relu, 1.0, 0.0},
      {Activation::relu, 0.0, 0.0},
  };
  for (const Point& p : points) {
    CAPTURE(to_string(p.a));
    CAPTURE(p.x);
    const auto [y, dx] =
        run_derivative<double>(xt::xarray<double>{p.x}, p.a, 2, xt::xarray<double>{1.0});
    CHECK(y(0) == doctest::Approx(p.d2).epsilon(1e-14));
  }
}

TEST_CASE("activation_derivative: order 1 is the first-order backward's factor, bit for bit") {
  const xt::xarray<double> x = random_array<double>({3, 37}, 42, -6.0, 6.0);
  for (Activation a : k_all_activations) {
    CAPTURE(to_string(a));
    Tape<double> tape;
    Var<double> xv = tape.leaf(x);
    tape.backward(activation(xv, a), xt::ones<double>(x.shape()));
    const xt::xarray<double> slope = activation_derivative(xv, a, 1).value();
    CHECK(slope == xv.grad());
  }
}

TEST_CASE("activation_derivative: gradcheck of orders 1 and 2 in double") {
  for (Activation a : k_all_activations) {
    CAPTURE(to_string(a));
    const xt::xarray<double> x = a == Activation::relu
                                     ? random_away_from_zero<double>({2, 3, 4}, 43, 0.1, 3.0)
                                     : random_array<double>({2, 3, 4}, 43, -4.0, 4.0);
    for (int order : {1, 2}) {
      CAPTURE(order);
      check_gradients(
          [a, order](const std::vector<Var<double>>& in) {
            return activation_derivative(in[0], a, order);
          },
          {x});
    }
  }
}

TEST_CASE_TEMPLATE("activation_derivative: limits at large magnitudes, NaN passes through", T,
                   float, double) {
  const T inf = std::numeric_limits<T>::infinity(), big = std::numeric_limits<T>::max();
  const xt::xarray<T> x{inf, -inf, big, -big, T(1e30), T(-1e30), T(800), T(-800)};
  const xt::xarray<T> ones = xt::ones<T>(x.shape());
  for (Activation a : k_all_activations) {
    if (a == Activation::tanh) continue;  // bounded: test_activation_tanh.cpp checks its limits
    CAPTURE(to_string(a));
    const auto [slope, curvature] = run_derivative<T>(x, a, 1, ones);
    const auto [second, third] = run_derivative<T>(x, a, 2, ones);
    // f' -> 1 at +inf, 0 at -inf; f'' and f''' -> 0 at both
    for (std::size_t i = 0; i < x.size(); ++i) {
      CAPTURE(static_cast<double>(x(i)));
      CHECK(slope(i) == (x(i) > 0 ? T(1) : T(0)));
      CHECK(curvature(i) == T(0));
      CHECK(second(i) == T(0));
      CHECK(third(i) == T(0));
    }
    if (a != Activation::relu) {  // relu's f'' and f''' are 0 everywhere
      const T nan = std::numeric_limits<T>::quiet_NaN();
      const auto [s_nan, c_nan] = run_derivative<T>(xt::xarray<T>{nan}, a, 2, xt::xarray<T>{T(1)});
      CHECK(std::isnan(s_nan(0)));
      CHECK(std::isnan(c_nan(0)));
    }
  }
}

TEST_CASE("activation_derivative: shapes [], [0, D] and a strided input") {
  for (Activation a : k_all_activations) {
    CAPTURE(to_string(a));
    Tape<double> tape;
    Var<double> scalar = tape.leaf(xt::xarray<double>(0.5));
    CHECK(activation_derivative(scalar, a, 2).shape() == Shape{});
    Var<double> empty = tape.leaf(xt::xarray<double>::from_shape({0, 3}));
    Var<double> de = activation_derivative(empty, a, 1);
    CHECK(de.shape() == Shape{0, 3});
    tape.backward(de, xt::xarray<double>::from_shape({0, 3}));
    CHECK(empty.grad().shape() == Shape{0, 3});
  }
}

TEST_CASE("activation_derivative: records its op under a name of its own") {
  Tape<double> tape;
  Var<double> x = tape.leaf(xt::xarray<double>{0.3});
  CHECK(std::string(tape.node_op(activation_derivative(x, Activation::silu, 1).index())) ==
        "silu_derivative");
  CHECK(std::string(tape.node_op(activation_derivative(x, Activation::gelu_tanh, 2).index())) ==
        "gelu_tanh_second_derivative");
}

TEST_CASE("activation_derivative: bad order or activation is refused before recording") {
  Tape<double> tape;
  Var<double> x = tape.leaf(xt::xarray<double>{0.3});
  const std::size_t before = tape.size();
  for (int order : {0, 3, -1}) {
    CAPTURE(order);
    CHECK_THROWS_WITH_AS(activation_derivative(x, Activation::gelu, order),
                         doctest::Contains("activation_derivative: argument 'order'"),
                         std::invalid_argument);
  }
  CHECK_THROWS_AS(activation_derivative(x, static_cast<Activation>(17), 1), std::invalid_argument);
  CHECK(tape.size() == before);
}

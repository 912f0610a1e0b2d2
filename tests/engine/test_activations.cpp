#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xview.hpp>

#include <xtgrad/engine/activation.hpp>
#include <xtgrad/engine/kernels/activation_kernels.hpp>
#include <xtgrad/engine/ops/activations.hpp>

#include "support/activation_reference.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

namespace {

template <class T>
using Tolerance = xtgrad::testing::ActivationTolerance<T>;

template <class T, class F>
xt::xarray<double> reference_of(const xt::xarray<T>& x, F f) {
  xt::xarray<double> r = xt::empty<double>(x.shape());
  for (std::size_t i = 0; i < x.size(); ++i)
    r.data()[i] = static_cast<double>(f(static_cast<Real>(x.data()[i])));
  return r;
}

// Checks every element of `actual` against reference(x[i]) and names the worst.
template <class T, class F>
void check_elementwise(const std::vector<T>& x, const std::vector<T>& actual, F reference,
                       const char* what) {
  REQUIRE(actual.size() == x.size());
  double worst_ratio = 0;
  std::size_t worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const Real expected = reference(static_cast<Real>(x[i]));
    const Real error = std::fabs(static_cast<Real>(actual[i]) - expected);
    const double ratio = static_cast<double>(
        error / (Tolerance<T>::atol + Tolerance<T>::rtol * std::fabs(expected)));
    if (!(ratio <= worst_ratio)) {  // also catches NaN
      worst_ratio = std::isnan(ratio) ? std::numeric_limits<double>::infinity() : ratio;
      worst = i;
    }
  }
  INFO(what << ": worst at x = " << static_cast<double>(x[worst]) << ": got "
            << static_cast<double>(actual[worst]) << ", expected "
            << static_cast<double>(reference(static_cast<Real>(x[worst])))
            << " (error / tolerance = " << worst_ratio << ")");
  CHECK(worst_ratio <= 1.0);
}

// A dense sweep of [-20, 20], irregular enough to hit every lane position,
// and magnitudes far outside it.
template <class T>
std::vector<T> sweep() {
  std::vector<T> x;
  for (int i = -20000; i <= 20000; ++i) x.push_back(static_cast<T>(i * 1e-3 + 1.3e-5));
  for (double big : {30.0, 100.0, 1e10, 1e30, static_cast<double>(std::numeric_limits<T>::max())}) {
    x.push_back(static_cast<T>(big));
    x.push_back(static_cast<T>(-big));
  }
  x.push_back(T(0));
  return x;
}

// Records x, applies the activation, runs backward with dy; returns (y, dx).
template <class T, class E>
std::pair<xt::xarray<T>, xt::xarray<T>> run_op(const E& x, Activation a, const xt::xarray<T>& dy) {
  Tape<T> tape;
  Var<T> xv = tape.leaf(x);
  Var<T> y = activation(xv, a);
  tape.backward(y, dy);
  return {y.value(), xv.grad()};
}

}  // namespace

TEST_CASE("activations: relu of [-1, 2, -3] is [0, 2, 0] and relu'(0) = 0") {
  Tape<double> tape;
  Var<double> x = tape.leaf(xt::xarray<double>{-1.0, 2.0, -3.0});
  Var<double> y = relu(x);
  CHECK(y.value() == xt::xarray<double>{0.0, 2.0, 0.0});
  tape.backward(y, xt::xarray<double>{5.0, 7.0, 11.0});
  CHECK(x.grad() == xt::xarray<double>{0.0, 7.0, 0.0});

  Tape<double> tape0;
  Var<double> x0 = tape0.leaf(xt::xarray<double>{0.0, -0.0, 1e-300});
  Var<double> y0 = relu(x0);
  CHECK(y0.value() == xt::xarray<double>{0.0, 0.0, 1e-300});
  tape0.backward(y0, xt::xarray<double>{1.0, 1.0, 1.0});
  CHECK(x0.grad() == xt::xarray<double>{0.0, 0.0, 1.0});  // relu'(0) = 0, as in PyTorch
}

TEST_CASE("activations: hand-computed values and slopes at 0, 1, -1, 2") {
  // f(x) and f'(x) from Python's math module (erf, tanh, exp), as in
  // torch.nn.functional.gelu(x, approximate='none' / 'tanh') and silu.
  struct Point {
    Activation a;
    double x, f, df;
  };
  const Point points[] = {
      {Activation::gelu, 1.0, 0.8413447460685429, 1.0833154705876864},
      {Activation::gelu, -1.0, -0.15865525393145707, -0.08331547058768629},
      {Activation::gelu, 2.0, 1.9544997361036416, 1.085231801078197},
      {Activation::gelu_tanh, 1.0, 0.8411919906082768, 1.0829640838457826},
      {Activation::gelu_tanh, -1.0, -0.15880800939172324, -0.08296408384578255},
      {Activation::gelu_sigmoid, 1.0, 0.8457957659328212, 1.067779606556334},
      {Activation::gelu_sigmoid, -0.5, -0.1496115633936199, 0.12077808803458576},
      {Activation::silu, 1.0, 0.7310585786300049, 0.9276705118714869},
      {Activation::silu, -1.0, -0.2689414213699951, 0.07232948812851325},
      {Activation::silu, 2.0, 1.7615941559557646, 1.0907842487848955},
  };
  for (const Point& p : points) {
    CAPTURE(to_string(p.a));
    CAPTURE(p.x);
    const auto [y, dx] = run_op<double>(xt::xarray<double>{p.x}, p.a, xt::xarray<double>{1.0});
    CHECK(y(0) == doctest::Approx(p.f).epsilon(1e-14));
    CHECK(dx(0) == doctest::Approx(p.df).epsilon(1e-14));
  }
  for (Activation a :
       {Activation::gelu, Activation::gelu_tanh, Activation::gelu_sigmoid, Activation::silu}) {
    CAPTURE(to_string(a));
    const auto [y, dx] = run_op<double>(xt::xarray<double>{0.0}, a, xt::xarray<double>{1.0});
    CHECK(y(0) == 0.0);
    CHECK(dx(0) == 0.5);  // Phi(0) = sigmoid(0) = 1/2
  }
}

TEST_CASE_TEMPLATE("activations: values and gradients match the scalar reference", T, float,
                   double) {
  const xt::xarray<T> x = random_array<T>({3, 4, 5}, 11, -12.0, 12.0);
  const xt::xarray<T> dy = random_array<T>({3, 4, 5}, 12);
  for (Activation a : k_all_activations) {
    CAPTURE(to_string(a));
    const auto [y, dx] = run_op<T>(x, a, dy);
    check_close(y, reference_of(x, [a](Real v) { return reference_value(a, v); }),
                Tolerance<T>::rtol, Tolerance<T>::atol);
    xt::xarray<double> expected_dx = reference_of(x, [a](Real v) { return reference_slope(a, v); });
    for (std::size_t i = 0; i < dy.size(); ++i) expected_dx.data()[i] *= dy.data()[i];
    check_close(dx, expected_dx, 2 * Tolerance<T>::rtol, Tolerance<T>::atol);
  }
}

TEST_CASE("activations: gradcheck of every activation in double") {
  for (Activation a : k_all_activations) {
    CAPTURE(to_string(a));
    // relu away from its kink; the smooth ones across it, tails included
    const xt::xarray<double> x = a == Activation::relu
                                     ? random_away_from_zero<double>({2, 3, 4}, 21, 0.1, 3.0)
                                     : random_array<double>({2, 3, 4}, 21, -5.0, 5.0);
    check_gradients([a](const std::vector<Var<double>>& in) { return activation(in[0], a); }, {x});
  }
  check_gradients([](const std::vector<Var<double>>& in) { return gelu(in[0]); },
                  {random_array<double>({7}, 22, -2.0, 2.0)});
  check_gradients([](const std::vector<Var<double>>& in) { return gelu_tanh(in[0]); },
                  {random_array<double>({7}, 23, -2.0, 2.0)});
  check_gradients([](const std::vector<Var<double>>& in) { return gelu_sigmoid(in[0]); },
                  {random_array<double>({7}, 24, -2.0, 2.0)});
  check_gradients([](const std::vector<Var<double>>& in) { return silu(in[0]); },
                  {random_array<double>({7}, 25, -2.0, 2.0)});
  check_gradients([](const std::vector<Var<double>>& in) { return relu(in[0]); },
                  {random_away_from_zero<double>({7}, 26)});
}

TEST_CASE("activations: the convenience functions are the enum's activations") {
  const xt::xarray<double> x = random_array<double>({9}, 31, -4.0, 4.0);
  // Copies: a reference from value() does not survive the next recording.
  const auto by_enum = [&x](Activation a) {
    Tape<double> tape;
    return xt::xarray<double>(activation(tape.leaf(x), a).value());
  };
  const auto by_name = [&x](Var<double> (*f)(const Var<double>&)) {
    Tape<double> tape;
    return xt::xarray<double>(f(tape.leaf(x)).value());
  };
  CHECK(by_name(relu<double>) == by_enum(Activation::relu));
  CHECK(by_name(gelu<double>) == by_enum(Activation::gelu));
  CHECK(by_name(gelu_tanh<double>) == by_enum(Activation::gelu_tanh));
  CHECK(by_name(gelu_sigmoid<double>) == by_enum(Activation::gelu_sigmoid));
  CHECK(by_name(silu<double>) == by_enum(Activation::silu));
  // and the GELU flavours are three different functions
  CHECK(by_enum(Activation::gelu) != by_enum(Activation::gelu_tanh));
  CHECK(by_enum(Activation::gelu) != by_enum(Activation::gelu_sigmoid));
}

TEST_CASE_TEMPLATE("activations: large magnitudes give the limits, never NaN or inf", T, float,
                   double) {
  const T inf = std::numeric_limits<T>::infinity();
  const xt::xarray<T> x{T(30),
                        T(-30),
                        T(100),
                        T(-100),
                        T(1e30),
                        T(-1e30),
                        inf,
                        -inf,
                        std::numeric_limits<T>::max(),
                        -std::numeric_limits<T>::max()};
  const xt::xarray<T> dy = xt::ones<T>(x.shape());
  for (Activation a : k_all_activations) {
    if (a == Activation::tanh) continue;  // bounded: test_activation_tanh.cpp checks its limits
    CAPTURE(to_string(a));
    const auto [y, dx] = run_op<T>(x, a, dy);
    for (std::size_t i = 0; i < x.size(); ++i) {
      CAPTURE(x(i));
      REQUIRE_FALSE(std::isnan(y(i)));
      REQUIRE_FALSE(std::isnan(dx(i)));
      CHECK(std::isfinite(dx(i)));
      CHECK(std::isfinite(y(i)) == (x(i) != inf));  // f(+inf) = +inf, f(-inf) = 0
      if (std::abs(x(i)) >= T(1e30)) {              // the limits, exactly
        CHECK(y(i) == (x(i) > 0 ? x(i) : T(0)));
        CHECK(dx(i) == (x(i) > 0 ? T(1) : T(0)));
      } else if (x(i) > 0) {  // f(x) -> x, f'(x) -> 1
        CHECK(std::abs(y(i) - x(i)) <= 1e-9 * x(i));
        CHECK(std::abs(dx(i) - T(1)) <= 1e-9);
      } else {  // f(x) -> 0, f'(x) -> 0
        CHECK(std::abs(y(i)) <= 1e-9);
        CHECK(std::abs(dx(i)) <= 1e-9);
      }
    }
  }
}

TEST_CASE_TEMPLATE("activations: NaN in, NaN out", T, float, double) {
  const xt::xarray<T> x{std::numeric_limits<T>::quiet_NaN()};
  for (Activation a : k_all_activations) {
    CAPTURE(to_string(a));
    Tape<T> tape;
    CHECK(std::isnan(activation(tape.leaf(x), a).value()(0)));
  }
}

TEST_CASE_TEMPLATE("activations: edge shapes and strided views", T, float, double) {
  for (Activation a : k_all_activations) {
    CAPTURE(to_string(a));
    const auto ref_value = [a](Real v) { return reference_value(a, v); };

    SUBCASE("[D], with a length that is no multiple of the SIMD width") {
      const xt::xarray<T> x = random_array<T>({37}, 41, -6.0, 6.0);
      const auto [y, dx] = run_op<T>(x, a, xt::ones<T>({37}));
      CHECK(y.shape() == x.shape());
      CHECK(dx.shape() == x.shape());
      check_close(y, reference_of(x, ref_value), Tolerance<T>::rtol, Tolerance<T>::atol);
    }
    SUBCASE("[0, D]") {
      const xt::xarray<T> x = xt::empty<T>({0, 5});
      const auto [y, dx] = run_op<T>(x, a, xt::empty<T>({0, 5}));
      CHECK(y.shape() == std::vector<std::size_t>{0, 5});
      CHECK(dx.shape() == std::vector<std::size_t>{0, 5});
    }
    SUBCASE("[2, 3, D]") {
      const xt::xarray<T> x = random_array<T>({2, 3, 7}, 42, -6.0, 6.0);
      const auto [y, dx] = run_op<T>(x, a, xt::ones<T>({2, 3, 7}));
      CHECK(y.shape() == x.shape());
      check_close(y, reference_of(x, ref_value), Tolerance<T>::rtol, Tolerance<T>::atol);
      check_close(dx, reference_of(x, [a](Real v) { return reference_slope(a, v); }),
                  Tolerance<T>::rtol, Tolerance<T>::atol);
    }
    SUBCASE("a transposed view equals its contiguous copy") {
      const xt::xarray<T> base = random_array<T>({5, 7}, 43, -6.0, 6.0);
      const xt::xarray<T> base_before = base;
      const xt::xarray<T> copy = xt::transpose(base);
      const xt::xarray<T> dy = random_array<T>({7, 5}, 44);
      const auto [y_view, dx_view] = run_op<T>(xt::transpose(base), a, dy);
      const auto [y_copy, dx_copy] = run_op<T>(copy, a, dy);
      CHECK(y_view == y_copy);
      CHECK(dx_view == dx_copy);
      CHECK(base == base_before);
    }
    SUBCASE("a stepped view equals its contiguous copy") {
      const xt::xarray<T> base = random_array<T>({21}, 45, -6.0, 6.0);
      const xt::xarray<T> base_before = base;
      const xt::xarray<T> copy = xt::view(base, xt::range(0, 21, 2));
      const xt::xarray<T> dy = random_array<T>({11}, 46);
      const auto [y_view, dx_view] = run_op<T>(xt::view(base, xt::range(0, 21, 2)), a, dy);
      const auto [y_copy, dx_copy] = run_op<T>(copy, a, dy);
      CHECK(y_view == y_copy);
      CHECK(dx_view == dx_copy);
      CHECK(base == base_before);
    }
  }
}

TEST_CASE_TEMPLATE("activations: inputs unchanged, gradients accumulate into leaves and Parameters",
                   T, float, double) {
  const xt::xarray<T> x0 = random_array<T>({4, 6}, 51, -3.0, 3.0);
  const xt::xarray<T> dy = random_array<T>({4, 6}, 52);
  for (Activation a : k_all_activations) {
    CAPTURE(to_string(a));
    Tape<T> tape;
    Var<T> x = tape.leaf(x0);
    Var<T> y = activation(x, a);
    tape.backward(y, dy);
    const xt::xarray<T> once = x.grad();
    CHECK(x.value() == x0);
    tape.backward(y, dy);  // a leaf accumulates: the kernel's += path
    check_close(x.grad(), xt::xarray<T>(2 * once), 1e-6, 0.0);
    CHECK(x.value() == x0);

    Parameter<T> p("p", x0);
    Tape<T> ptape;
    Var<T> py = activation(ptape.param(p), a);
    ptape.backward(py, dy);
    CHECK(p.grad == once);
    CHECK(p.value == x0);
  }
}

TEST_CASE("activations: recording off computes the same values and saves nothing") {
  const xt::xarray<double> x = random_array<double>({3, 3}, 61, -3.0, 3.0);
  for (Activation a : k_all_activations) {
    CAPTURE(to_string(a));
    Tape<double> tape;
    Var<double> v = tape.leaf(x);
    const xt::xarray<double> recorded = activation(v, a).value();
    NoGradGuard<double> guard(tape);
    Var<double> y = activation(v, a);
    CHECK_FALSE(y.requires_grad());
    CHECK(y.value() == recorded);
  }
}

TEST_CASE("activations: parse_activation, to_string and their errors") {
  for (Activation a : k_all_activations) CHECK(parse_activation(to_string(a)) == a);
  CHECK(to_string(Activation::gelu) == "gelu");
  CHECK(parse_activation("gelu_sigmoid") == Activation::gelu_sigmoid);

  try {
    parse_activation("swish");
    FAIL("parse_activation('swish') did not throw");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()) ==
          "xtgrad::parse_activation: unknown activation 'swish'; valid names are relu, gelu, "
          "gelu_tanh, gelu_sigmoid, silu, tanh");
  }
  CHECK_THROWS_WITH_PARTS(parse_activation("GELU"), std::invalid_argument, {"'GELU'", "gelu_tanh"});
  CHECK_THROWS_WITH_PARTS(parse_activation(""), std::invalid_argument, {"''", "silu"});
  CHECK_THROWS_WITH_PARTS(parse_activation("relu "), std::invalid_argument, {"'relu '"});
  CHECK_THROWS_WITH_PARTS(to_string(static_cast<Activation>(42)), std::invalid_argument,
                          {"to_string", "Activation(42)", "relu, gelu"});

  Tape<double> tape;
  Var<double> x = tape.leaf(xt::xarray<double>{1.0, 2.0});
  const std::size_t nodes = tape.size();
  CHECK_THROWS_WITH_PARTS(activation(x, static_cast<Activation>(-1)), std::invalid_argument,
                          {"xtgrad::activation", "'a'", "Activation(-1)"});
  CHECK(tape.size() == nodes);  // checked before anything is recorded
}

// ---- The kernels themselves (detail::), over a dense sweep ----

TEST_CASE_TEMPLATE("activation kernels: agree with the scalar reference over [-20, 20] and beyond",
                   T, float, double) {
  const std::vector<T> x = sweep<T>();
  const std::size_t n = x.size();
  for (Activation a : k_all_activations) {
    CAPTURE(to_string(a));
    std::vector<T> y(n), dx(n);
    detail::activation_forward(a, x.data(), y.data(), n);
    check_elementwise(
        x, y, [a](Real v) { return reference_value(a, v); }, "f");

    const std::vector<T> dy(n, T(1));
    detail::activation_backward(a, x.data(), dy.data(), dx.data(), n, false);
    check_elementwise(
        x, dx, [a](Real v) { return reference_slope(a, v); }, "f'");

    // accumulate: dx = 0.25 + 1 * f'(x) (0.25 is exact, so is the reference)
    std::vector<T> acc(n, T(0.25));
    detail::activation_backward(a, x.data(), dy.data(), acc.data(), n, true);
    check_elementwise(
        x, acc, [a](Real v) { return 0.25L + reference_slope(a, v); }, "0.25 + f'");

    // in place: y may equal x
    std::vector<T> in_place = x;
    detail::activation_forward(a, in_place.data(), in_place.data(), n);
    CHECK(std::memcmp(in_place.data(), y.data(), n * sizeof(T)) == 0);
  }
}

TEST_CASE_TEMPLATE("activation kernels: gelu keeps its relative accuracy in the left tail", T,
                   float, double) {
  // Down to where Phi(x) leaves the normal range of T; 0.5 x (1 + erf(x / sqrt 2))
  // would have lost every digit below x ~ -5.5 (float) or -8.5 (double).
  const double lowest = std::is_same_v<T, float> ? -12.9 : -37.5;
  const double rtol = std::is_same_v<T, float> ? 2e-6 : 1e-14;
  const std::size_t n = static_cast<std::size_t>((-1.0 - lowest) / 1e-3) + 1;
  std::vector<T> x(n), y(n), dx(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<T>(lowest + 1e-3 * static_cast<double>(i));
  const std::vector<T> dy(n, T(1));
  detail::activation_forward(Activation::gelu, x.data(), y.data(), n);
  detail::activation_backward(Activation::gelu, x.data(), dy.data(), dx.data(), n, false);
  double worst_f = 0, worst_df = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const Real f = reference_value(Activation::gelu, x[i]);
    const Real df = reference_slope(Activation::gelu, x[i]);
    worst_f = std::max(worst_f, static_cast<double>(std::fabs((y[i] - f) / f)));
    worst_df = std::max(worst_df, static_cast<double>(std::fabs((dx[i] - df) / df)));
  }
  CHECK(worst_f <= rtol);
  CHECK(worst_df <= rtol);
}

TEST_CASE_TEMPLATE("activation kernels: the tail gives bit-identical results to the body", T, float,
                   double) {
  // Every prefix length 0..70 (more than 4 AVX-512 batches): an element's
  // result must not depend on whether it lands in a full batch or the tail.
  const std::vector<T> x = [] {
    std::vector<T> v;
    for (int i = 0; i < 70; ++i) v.push_back(static_cast<T>(-9.0 + 0.261 * i));
    return v;
  }();
  const std::vector<T> dy(x.size(), T(0.75));
  for (Activation a : k_all_activations) {
    CAPTURE(to_string(a));
    std::vector<T> y_full(x.size()), dx_full(x.size());
    detail::activation_forward(a, x.data(), y_full.data(), x.size());
    detail::activation_backward(a, x.data(), dy.data(), dx_full.data(), x.size(), false);
    for (std::size_t n = 0; n <= x.size(); ++n) {
      CAPTURE(n);
      const T sentinel = T(-12345);
      std::vector<T> y(x.size() + 1, sentinel), dx(x.size() + 1, sentinel);
      detail::activation_forward(a, x.data(), y.data(), n);
      detail::activation_backward(a, x.data(), dy.data(), dx.data(), n, false);
      CHECK(std::memcmp(y.data(), y_full.data(), n * sizeof(T)) == 0);
      CHECK(std::memcmp(dx.data(), dx_full.data(), n * sizeof(T)) == 0);
      CHECK(y[n] == sentinel);  // nothing written past n
      CHECK(dx[n] == sentinel);
    }
  }
}

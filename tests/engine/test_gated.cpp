#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xview.hpp>

#include <xtgrad/engine/activation.hpp>
#include <xtgrad/engine/kernels/activation_kernels.hpp>
#include <xtgrad/engine/ops/gated.hpp>

#include "support/activation_reference.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

namespace {

// A gated value is a product of up to three factors: twice one activation's
// relative tolerance.
template <class T>
struct Tolerance {
  static constexpr double rtol = 2 * xtgrad::testing::ActivationTolerance<T>::rtol;
  static constexpr double atol = xtgrad::testing::ActivationTolerance<T>::atol;
};

struct GatedReference {
  xt::xarray<double> y, du, dg;
};

template <class T>
GatedReference gated_reference(Activation a, const xt::xarray<T>& u, const xt::xarray<T>& g,
                               const xt::xarray<T>& dy) {
  GatedReference r{xt::empty<double>(u.shape()), xt::empty<double>(u.shape()),
                   xt::empty<double>(u.shape())};
  for (std::size_t i = 0; i < u.size(); ++i) {
    const Real ui = u.data()[i], gi = g.data()[i], dyi = dy.data()[i];
    r.y.data()[i] = static_cast<double>(ui * reference_value(a, gi));
    r.du.data()[i] = static_cast<double>(dyi * reference_value(a, gi));
    r.dg.data()[i] = static_cast<double>(dyi * ui * reference_slope(a, gi));
  }
  return r;
}

struct Result {
  template <class T>
  Result(const xt::xarray<T>& y_, const xt::xarray<T>& du_, const xt::xarray<T>& dg_)
      : y(xt::cast<double>(y_)), du(xt::cast<double>(du_)), dg(xt::cast<double>(dg_)) {}
  xt::xarray<double> y, du, dg;
};

// Records u and g (any expressions), runs gated and backward with dy.
template <class T, class EU, class EG>
Result run_gated(const EU& u, const EG& g, Activation a, const xt::xarray<T>& dy) {
  Tape<T> tape;
  Var<T> uv = tape.leaf(u);
  Var<T> gv = tape.leaf(g);
  Var<T> y = gated(uv, gv, a);
  tape.backward(y, dy);
  return Result(xt::xarray<T>(y.value()), xt::xarray<T>(uv.grad()), xt::xarray<T>(gv.grad()));
}

template <class T>
void check_result(const Result& r, const GatedReference& expected) {
  check_close(r.y, expected.y, Tolerance<T>::rtol, Tolerance<T>::atol);
  check_close(r.du, expected.du, Tolerance<T>::rtol, Tolerance<T>::atol);
  check_close(r.dg, expected.dg, Tolerance<T>::rtol, Tolerance<T>::atol);
}

}  // namespace

TEST_CASE("gated: hand-computed ReGLU and SwiGLU") {
  {
    // y = u * relu(g);  du = dy * relu(g);  dg = dy * u * [g > 0], relu'(0) = 0
    const Result r = run_gated<double>(xt::xarray<double>{1.0, 2.0, -3.0, 5.0},
                                       xt::xarray<double>{-1.0, 2.0, -3.0, 0.0}, Activation::relu,
                                       xt::xarray<double>{10.0, 10.0, 10.0, 10.0});
    CHECK(r.y == xt::xarray<double>{0.0, 4.0, 0.0, 0.0});
    CHECK(r.du == xt::xarray<double>{0.0, 20.0, 0.0, 0.0});
    CHECK(r.dg == xt::xarray<double>{0.0, 20.0, 0.0, 0.0});
  }
  {
    // u = 2, g = 1: silu(1) = 0.7310585786300049, silu'(1) = 0.9276705118714869 (Python math)
    const Result r = run_gated<double>(xt::xarray<double>{2.0}, xt::xarray<double>{1.0},
                                       Activation::silu, xt::xarray<double>{1.0});
    CHECK(r.y(0) == doctest::Approx(2 * 0.7310585786300049).epsilon(1e-14));
    CHECK(r.du(0) == doctest::Approx(0.7310585786300049).epsilon(1e-14));
    CHECK(r.dg(0) == doctest::Approx(2 * 0.9276705118714869).epsilon(1e-14));
  }
  {
    // GeGLU, exact GELU: gelu(-1) = -0.15865525393145707, gelu'(-1) = -0.08331547058768629
    const Result r = run_gated<double>(xt::xarray<double>{-3.0}, xt::xarray<double>{-1.0},
                                       Activation::gelu, xt::xarray<double>{0.5});
    CHECK(r.y(0) == doctest::Approx(-3 * -0.15865525393145707).epsilon(1e-14));
    CHECK(r.du(0) == doctest::Approx(0.5 * -0.15865525393145707).epsilon(1e-14));
    CHECK(r.dg(0) == doctest::Approx(0.5 * -3 * -0.08331547058768629).epsilon(1e-14));
  }
}

TEST_CASE_TEMPLATE("gated: values and both gradients match the scalar reference", T, float,
                   double) {
  const xt::xarray<T> u = random_array<T>({3, 4, 5}, 101);
  const xt::xarray<T> g = random_array<T>({3, 4, 5}, 102, -8.0, 8.0);
  const xt::xarray<T> dy = random_array<T>({3, 4, 5}, 103);
  for (Activation a : k_all_activations) {
    CAPTURE(to_string(a));
    check_result<T>(run_gated<T>(u, g, a, dy), gated_reference(a, u, g, dy));
  }
}

TEST_CASE("gated: gradcheck for each of the five activations") {
  for (Activation a : k_all_activations) {
    CAPTURE(to_string(a));
    const xt::xarray<double> u = random_array<double>({2, 3, 4}, 111, -2.0, 2.0);
    const xt::xarray<double> g = a == Activation::relu
                                     ? random_away_from_zero<double>({2, 3, 4}, 112, 0.1, 3.0)
                                     : random_array<double>({2, 3, 4}, 112, -4.0, 4.0);
    check_gradients([a](const std::vector<Var<double>>& in) { return gated(in[0], in[1], a); },
                    {u, g});
  }
}

TEST_CASE("gated: u and g may be the same Var (x * f(x))") {
  for (Activation a : k_all_activations) {
    CAPTURE(to_string(a));
    // 37 elements: the fused kernel's body and its tail both see du and dg in one buffer
    const xt::xarray<double> x = a == Activation::relu
                                     ? random_away_from_zero<double>({37}, 121, 0.1, 3.0)
                                     : random_array<double>({37}, 121, -4.0, 4.0);
    check_gradients([a](const std::vector<Var<double>>& in) { return gated(in[0], in[0], a); },
                    {x});
    const xt::xarray<double> dy = random_array<double>({37}, 122);
    Tape<double> tape;
    Var<double> v = tape.leaf(x);
    Var<double> y = gated(v, v, a);
    tape.backward(y, dy);
    xt::xarray<double> expected_y = xt::empty<double>({37}), expected_dx = xt::empty<double>({37});
    for (std::size_t i = 0; i < 37; ++i) {
      const Real xi = x(i);
      expected_y(i) = static_cast<double>(xi * reference_value(a, xi));
      expected_dx(i) =
          static_cast<double>(dy(i) * (reference_value(a, xi) + xi * reference_slope(a, xi)));
    }
    check_close(y.value(), expected_y, 1e-14, 1e-15);
    check_close(v.grad(), expected_dx, 1e-14, 1e-15);
  }
}

TEST_CASE_TEMPLATE("gated: only the inputs that require a gradient get one", T, float, double) {
  const xt::xarray<T> u = random_array<T>({4, 9}, 131);
  const xt::xarray<T> g = random_array<T>({4, 9}, 132, -5.0, 5.0);
  const xt::xarray<T> dy = random_array<T>({4, 9}, 133);
  for (Activation a : k_all_activations) {
    CAPTURE(to_string(a));
    const GatedReference expected = gated_reference(a, u, g, dy);
    {
      Tape<T> tape;
      Var<T> uv = tape.leaf(u, true), gv = tape.leaf(g, false);
      tape.backward(gated(uv, gv, a), dy);
      check_close(uv.grad(), expected.du, Tolerance<T>::rtol, Tolerance<T>::atol);
      CHECK(gv.grad() == xt::zeros<T>(g.shape()));
    }
    {
      Tape<T> tape;
      Var<T> uv = tape.leaf(u, false), gv = tape.leaf(g, true);
      tape.backward(gated(uv, gv, a), dy);
      CHECK(uv.grad() == xt::zeros<T>(u.shape()));
      check_close(gv.grad(), expected.dg, Tolerance<T>::rtol, Tolerance<T>::atol);
    }
    {
      Tape<T> tape;
      Var<T> y = gated(tape.leaf(u, false), tape.leaf(g, false), a);
      CHECK_FALSE(y.requires_grad());
      check_close(y.value(), expected.y, Tolerance<T>::rtol, Tolerance<T>::atol);
    }
  }
}

TEST_CASE("gated: shape mismatch and bad arguments are errors naming gated, 'g' and both shapes") {
  Tape<double> tape;
  Var<double> u = tape.leaf(xt::xarray<double>(xt::zeros<double>({2, 3})));
  Var<double> g32 = tape.leaf(xt::xarray<double>(xt::zeros<double>({3, 2})));
  Var<double> g6 = tape.leaf(xt::xarray<double>(xt::zeros<double>({6})));
  Var<double> g231 = tape.leaf(xt::xarray<double>(xt::zeros<double>({2, 3, 1})));
  const std::size_t nodes = tape.size();
  CHECK_THROWS_WITH_PARTS(gated(u, g32, Activation::silu), std::invalid_argument,
                          {"xtgrad::gated", "'g'", "[3, 2]", "[2, 3]"});
  CHECK_THROWS_WITH_PARTS(gated(u, g6, Activation::gelu), std::invalid_argument,
                          {"xtgrad::gated", "'g'", "[6]", "[2, 3]"});
  CHECK_THROWS_WITH_PARTS(gated(u, g231, Activation::relu), std::invalid_argument,
                          {"xtgrad::gated", "'g'", "[2, 3, 1]", "[2, 3]"});
  CHECK_THROWS_WITH_PARTS(gated(u, u, static_cast<Activation>(7)), std::invalid_argument,
                          {"xtgrad::gated", "'a'", "Activation(7)"});
  CHECK(tape.size() == nodes);  // nothing recorded by a failed call

  Tape<double> other;
  Var<double> foreign = other.leaf(xt::xarray<double>(xt::zeros<double>({2, 3})));
  CHECK_THROWS_WITH_PARTS(gated(u, foreign, Activation::silu), std::logic_error,
                          {"gated", "'g'", "different tape"});
}

TEST_CASE_TEMPLATE("gated: edge shapes and strided views", T, float, double) {
  for (Activation a : k_all_activations) {
    CAPTURE(to_string(a));
    SUBCASE("[D] with a length that is no multiple of the SIMD width") {
      const xt::xarray<T> u = random_array<T>({37}, 141), g = random_array<T>({37}, 142, -6, 6);
      const xt::xarray<T> dy = random_array<T>({37}, 143);
      check_result<T>(run_gated<T>(u, g, a, dy), gated_reference(a, u, g, dy));
    }
    SUBCASE("[0, D]") {
      const xt::xarray<T> empty = xt::empty<T>({0, 4});
      const Result r = run_gated<T>(empty, empty, a, empty);
      CHECK(r.y.shape() == std::vector<std::size_t>{0, 4});
      CHECK(r.du.shape() == std::vector<std::size_t>{0, 4});
      CHECK(r.dg.shape() == std::vector<std::size_t>{0, 4});
    }
    SUBCASE("[2, 3, D]") {
      const xt::xarray<T> u = random_array<T>({2, 3, 5}, 144);
      const xt::xarray<T> g = random_array<T>({2, 3, 5}, 145, -6, 6);
      const xt::xarray<T> dy = random_array<T>({2, 3, 5}, 146);
      check_result<T>(run_gated<T>(u, g, a, dy), gated_reference(a, u, g, dy));
    }
    SUBCASE("a transposed u and a stepped g equal their contiguous copies") {
      const xt::xarray<T> u_base = random_array<T>({6, 4}, 147);
      const xt::xarray<T> g_base = random_array<T>({4, 12}, 148, -6, 6);
      const xt::xarray<T> u_before = u_base, g_before = g_base;
      const auto u_view = xt::transpose(u_base);                             // [4, 6]
      const auto g_view = xt::view(g_base, xt::all(), xt::range(0, 12, 2));  // [4, 6]
      const xt::xarray<T> u_copy = u_view, g_copy = g_view;
      const xt::xarray<T> dy = random_array<T>({4, 6}, 149);
      const Result from_views = run_gated<T>(u_view, g_view, a, dy);
      const Result from_copies = run_gated<T>(u_copy, g_copy, a, dy);
      CHECK(from_views.y == from_copies.y);
      CHECK(from_views.du == from_copies.du);
      CHECK(from_views.dg == from_copies.dg);
      check_result<T>(from_views, gated_reference(a, u_copy, g_copy, dy));
      CHECK(u_base == u_before);  // inputs unchanged
      CHECK(g_base == g_before);
    }
  }
}

TEST_CASE_TEMPLATE("gated: large gate magnitudes give the limits, never NaN", T, float, double) {
  const T inf = std::numeric_limits<T>::infinity();
  const xt::xarray<T> g{T(30), T(-30), T(100), T(-100), T(1e30), T(-1e30), inf, -inf};
  const xt::xarray<T> u = xt::full_like(g, T(2));
  const xt::xarray<T> dy = xt::ones<T>(g.shape());
  for (Activation a : k_all_activations) {
    if (a == Activation::tanh) continue;  // bounded: test_activation_tanh.cpp checks its limits
    CAPTURE(to_string(a));
    const Result r = run_gated<T>(u, g, a, dy);
    for (std::size_t i = 0; i < g.size(); ++i) {
      CAPTURE(g(i));
      REQUIRE_FALSE(std::isnan(r.y(i)));
      REQUIRE_FALSE(std::isnan(r.du(i)));
      REQUIRE_FALSE(std::isnan(r.dg(i)));
      CHECK(std::isfinite(r.dg(i)));
      if (g(i) == inf) {
        CHECK(r.y(i) == inf);
        CHECK(r.du(i) == inf);
        CHECK(r.dg(i) == 2.0);
      } else if (g(i) > 0) {  // f(g) -> g, f'(g) -> 1
        CHECK(r.y(i) == doctest::Approx(2.0 * g(i)).epsilon(1e-9));
        CHECK(r.du(i) == doctest::Approx(static_cast<double>(g(i))).epsilon(1e-9));
        CHECK(r.dg(i) == doctest::Approx(2.0).epsilon(1e-9));
      } else {  // f(g) -> 0, f'(g) -> 0
        CHECK(std::abs(r.y(i)) <= 1e-9);
        CHECK(std::abs(r.du(i)) <= 1e-9);
        CHECK(std::abs(r.dg(i)) <= 1e-9);
      }
    }
  }
}

TEST_CASE_TEMPLATE("gated: inputs unchanged, gradients accumulate into leaves and Parameters", T,
                   float, double) {
  const xt::xarray<T> u0 = random_array<T>({3, 7}, 151);
  const xt::xarray<T> g0 = random_array<T>({3, 7}, 152, -4, 4);
  const xt::xarray<T> dy = random_array<T>({3, 7}, 153);
  for (Activation a : k_all_activations) {
    CAPTURE(to_string(a));
    Tape<T> tape;
    Var<T> u = tape.leaf(u0), g = tape.leaf(g0);
    Var<T> y = gated(u, g, a);
    tape.backward(y, dy);
    const xt::xarray<T> du_once = u.grad(), dg_once = g.grad();
    tape.backward(y, dy);  // leaves accumulate: the kernel's += path for both outputs
    check_close(u.grad(), xt::xarray<T>(2 * du_once), 1e-6, 0.0);
    check_close(g.grad(), xt::xarray<T>(2 * dg_once), 1e-6, 0.0);
    CHECK(u.value() == u0);
    CHECK(g.value() == g0);

    Parameter<T> pu("w_up", u0), pg("w_gate", g0);
    Tape<T> ptape;
    ptape.backward(gated(ptape.param(pu), ptape.param(pg), a), dy);
    CHECK(pu.grad == du_once);
    CHECK(pg.grad == dg_once);
    CHECK(pu.value == u0);
    CHECK(pg.value == g0);
  }
}

// ---- The fused kernels themselves (detail::) ----

TEST_CASE_TEMPLATE("gated kernels: agree with the reference over [-20, 20], every output mode", T,
                   float, double) {
  std::vector<T> g;
  for (int i = -4000; i <= 4000; ++i) g.push_back(static_cast<T>(i * 5e-3 + 1.7e-5));
  for (double big : {30.0, 100.0, 1e30}) {
    g.push_back(static_cast<T>(big));
    g.push_back(static_cast<T>(-big));
  }
  const std::size_t n = g.size();
  const xt::xarray<T> u = random_array<T>({n}, 161), dy = random_array<T>({n}, 162);
  const xt::xarray<T> gx = xt::adapt(g, std::vector<std::size_t>{n});
  for (Activation a : k_all_activations) {
    CAPTURE(to_string(a));
    const GatedReference expected = gated_reference(a, u, gx, dy);
    xt::xarray<T> y = xt::empty<T>({n});
    detail::gated_forward(a, u.data(), gx.data(), y.data(), n);
    check_close(y, expected.y, Tolerance<T>::rtol, Tolerance<T>::atol);

    // write both, add both (onto 0.5), and each one alone
    xt::xarray<T> du = xt::empty<T>({n}), dg = xt::empty<T>({n});
    detail::gated_backward(a, u.data(), gx.data(), dy.data(), du.data(), false, dg.data(), false,
                           n);
    check_close(du, expected.du, Tolerance<T>::rtol, Tolerance<T>::atol);
    check_close(dg, expected.dg, Tolerance<T>::rtol, Tolerance<T>::atol);

    xt::xarray<T> du_add = xt::full_like(du, T(0.5)), dg_add = xt::full_like(dg, T(0.5));
    detail::gated_backward(a, u.data(), gx.data(), dy.data(), du_add.data(), true, dg_add.data(),
                           true, n);
    check_close(du_add, xt::xarray<double>(expected.du + 0.5), Tolerance<T>::rtol,
                Tolerance<T>::atol);
    check_close(dg_add, xt::xarray<double>(expected.dg + 0.5), Tolerance<T>::rtol,
                Tolerance<T>::atol);

    xt::xarray<T> du_only = xt::empty<T>({n}), dg_only = xt::full_like(dg, T(0.5));
    detail::gated_backward(a, u.data(), gx.data(), dy.data(), du_only.data(), false,
                           static_cast<T*>(nullptr), false, n);
    detail::gated_backward(a, u.data(), gx.data(), dy.data(), static_cast<T*>(nullptr), false,
                           dg_only.data(), true, n);
    CHECK(du_only == du);  // the same arithmetic, whichever outputs are wanted
    check_close(dg_only, xt::xarray<double>(expected.dg + 0.5), Tolerance<T>::rtol,
                Tolerance<T>::atol);
  }
}

TEST_CASE_TEMPLATE("gated kernels: the tail gives bit-identical results to the body", T, float,
                   double) {
  const std::size_t total = 70;
  const xt::xarray<T> u = random_array<T>({total}, 171), g = random_array<T>({total}, 172, -9, 9);
  const xt::xarray<T> dy = random_array<T>({total}, 173);
  for (Activation a : k_all_activations) {
    CAPTURE(to_string(a));
    std::vector<T> y_full(total), du_full(total), dg_full(total);
    detail::gated_forward(a, u.data(), g.data(), y_full.data(), total);
    detail::gated_backward(a, u.data(), g.data(), dy.data(), du_full.data(), false, dg_full.data(),
                           false, total);
    for (std::size_t n = 0; n <= total; ++n) {
      CAPTURE(n);
      const T sentinel = T(-4321);
      std::vector<T> y(total + 1, sentinel), du(total + 1, sentinel), dg(total + 1, sentinel);
      detail::gated_forward(a, u.data(), g.data(), y.data(), n);
      detail::gated_backward(a, u.data(), g.data(), dy.data(), du.data(), false, dg.data(), false,
                             n);
      CHECK(std::memcmp(y.data(), y_full.data(), n * sizeof(T)) == 0);
      CHECK(std::memcmp(du.data(), du_full.data(), n * sizeof(T)) == 0);
      CHECK(std::memcmp(dg.data(), dg_full.data(), n * sizeof(T)) == 0);
      CHECK(y[n] == sentinel);
      CHECK(du[n] == sentinel);
      CHECK(dg[n] == sentinel);
    }
  }
}

// gradcheck itself: it must fail, and say where, for each mistake an op author
// can make in a custom op, and pass on the same op written correctly. The
// custom ops below use the op-author API of Tape (record, value_mut,
// set_backward, grad_slot), as engine/ops/activations.cpp does; each has one
// correct rule and the planted mistakes that a test selects. Expected values
// are derived by hand from the formulas in the comments, never computed with
// the engine.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xoperation.hpp>
#include <xtgrad/engine/check.hpp>
#include <xtgrad/engine/gradcheck.hpp>
#include <xtgrad/engine/ops/elementwise.hpp>
#include <xtgrad/engine/tape.hpp>

#include "support/test_helpers.hpp"

using namespace xtgrad;
using xtgrad::testing::random_array;
using xtgrad::testing::random_away_from_zero;

namespace {

using Array = xt::xarray<double>;
using Inputs = std::vector<Array>;

// The mistakes planted in the backward rule of cube().
enum class Plant {
  none,                       // dx (+)= 3 x^2 dy, the correct rule
  wrong_derivative,           // dx (+)= 2 x dy: the derivative of x^2, not of x^3
  overwrites,                 // dx = 3 x^2 dy even when dx already holds another op's part
  not_reentrant,              // scales the saved x^2 by 3 in place: 9 x^2 at the second backward
  nonzero_for_zero_upstream,  // takes an all-zero dy for "no dy given" and uses ones
  reads_dy_reversed,          // reads dy at the wrong index: dx[i] (+)= 3 x[i]^2 dy[n - 1 - i]
};

// Writes g into a parent's gradient slot, honouring the write-or-accumulate
// contract of GradSlot.
void put(GradSlot<double> slot, const Array& g) {
  if (slot.accumulate)
    slot.buffer += g;
  else
    slot.buffer = g;
}

// y = x^3 elementwise, dy/dx = 3 x^2; x, y and dx of any one shape.
Var<double> cube(const Var<double>& x, Plant plant = Plant::none) {
  Tape<double>& tape = detail::common_tape<double>("cube", {{"x", &x}});
  const std::size_t xi = x.index();
  const std::size_t yi = tape.record("cube", {xi}, x.requires_grad());
  const Array& xv = tape.value(xi);
  tape.value_mut(yi) = xv * xv * xv;
  Array x_squared = xv * xv;  // saved for backward
  tape.set_backward(yi, [xi, x_squared, plant](Tape<double>& t, const Array& dy) mutable {
    if (!t.requires_grad(xi)) return;
    GradSlot<double> dx = t.grad_slot(xi);
    switch (plant) {
      case Plant::none:
        put(dx, 3.0 * x_squared * dy);
        return;
      case Plant::wrong_derivative:
        put(dx, 2.0 * t.value(xi) * dy);
        return;
      case Plant::overwrites:
        dx.buffer = 3.0 * x_squared * dy;  // ignores dx.accumulate
        return;
      case Plant::not_reentrant:
        x_squared *= 3.0;  // mutates the capture: every backward sees a larger factor
        put(dx, x_squared * dy);
        return;
      case Plant::nonzero_for_zero_upstream: {
        const bool all_zero = xt::all(xt::equal(dy, 0.0));
        put(dx, 3.0 * x_squared * (all_zero ? Array(xt::ones<double>(dy.shape())) : dy));
        return;
      }
      case Plant::reads_dy_reversed: {
        Array reversed = dy;
        std::reverse(reversed.data(), reversed.data() + reversed.size());
        put(dx, 3.0 * x_squared * reversed);
        return;
      }
    }
  });
  return tape.var(yi);
}

// y = a^3 + b elementwise (a, b, y of one shape): da = 3 a^2 dy, db = dy.
// With `wrong_parent`, a's part is written into b's slot and a gets nothing.
Var<double> cube_plus(const Var<double>& a, const Var<double>& b, bool wrong_parent = false) {
  Tape<double>& tape = detail::common_tape<double>("cube_plus", {{"a", &a}, {"b", &b}});
  const std::size_t ai = a.index(), bi = b.index();
  const std::size_t yi = tape.record("cube_plus", {ai, bi}, a.requires_grad() || b.requires_grad());
  const Array& av = tape.value(ai);
  tape.value_mut(yi) = av * av * av + tape.value(bi);
  const Array three_a_squared = 3.0 * av * av;
  tape.set_backward(yi, [ai, bi, three_a_squared, wrong_parent](Tape<double>& t, const Array& dy) {
    if (t.requires_grad(bi)) put(t.grad_slot(bi), dy);
    const std::size_t da_goes_to = wrong_parent ? bi : ai;
    if (t.requires_grad(da_goes_to)) put(t.grad_slot(da_goes_to), three_a_squared * dy);
  });
  return tape.var(yi);
}

// y = sin(x) + forward_error x^3 elementwise, with the backward of sin alone:
// dx (+)= cos(x) dy. Correct only for forward_error = 0.
Var<double> sine(const Var<double>& x, double forward_error = 0.0) {
  Tape<double>& tape = detail::common_tape<double>("sine", {{"x", &x}});
  const std::size_t xi = x.index();
  const std::size_t yi = tape.record("sine", {xi}, x.requires_grad());
  const Array& xv = tape.value(xi);
  // Scalar loops: xtensor's vectorized sin and cos trip a false
  // -Wmaybe-uninitialized of g++ 12 in the AVX-512 intrinsics.
  Array& y = tape.value_mut(yi);
  y.resize(xv.shape());
  Array cos_x = xt::empty<double>(xv.shape());
  for (std::size_t i = 0; i < xv.size(); ++i) {
    const double xe = xv.data()[i];
    y.data()[i] = std::sin(xe) + forward_error * xe * xe * xe;
    cos_x.data()[i] = std::cos(xe);
  }
  tape.set_backward(yi, [xi, cos_x](Tape<double>& t, const Array& dy) {
    if (t.requires_grad(xi)) put(t.grad_slot(xi), cos_x * dy);
  });
  return tape.var(yi);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// f(inputs) = cube(inputs[0]) with the given plant.
GradcheckFunction cube_of_input(Plant plant) {
  return [plant](const std::vector<Var<double>>& v) { return cube(v[0], plant); };
}

// The correct op passes every check of gradcheck on these inputs.
void check_passes(const GradcheckFunction& f, const Inputs& inputs, std::size_t elements) {
  const GradcheckResult r = gradcheck(f, inputs);
  INFO(r.report());
  CHECK(r.passed);
  CHECK(r.within_tolerance);
  CHECK(r.reentrant);
  CHECK(r.zero_upstream_gives_zero);
  CHECK(r.worst_ratio <= 1.0);
  CHECK(r.elements_checked == elements);
  CHECK(contains(r.report(), "gradcheck passed: " + std::to_string(elements) + " elements"));
}

// The check of gradcheck that a planted mistake must fail.
enum class Fails { tolerance, reentrancy, zero_upstream };

// The planted op fails gradcheck on exactly the check `fails` (the other two
// still pass), and the report says FAILED. Returns the result for the checks
// particular to the mistake.
GradcheckResult check_fails(const GradcheckFunction& f, const Inputs& inputs, Fails fails) {
  const GradcheckResult r = gradcheck(f, inputs);
  INFO(r.report());
  CHECK_FALSE(r.passed);
  CHECK(r.within_tolerance == (fails != Fails::tolerance));
  CHECK(r.reentrant == (fails != Fails::reentrancy));
  CHECK(r.zero_upstream_gives_zero == (fails != Fails::zero_upstream));
  CHECK(contains(r.report(), "gradcheck FAILED"));
  return r;
}

// The value of `a` at the multi-index gradcheck reports.
double at(const Array& a, const std::vector<std::size_t>& index) {
  REQUIRE(index.size() == a.dimension());
  return a.element(index.begin(), index.end());
}

}  // namespace

TEST_CASE("gradcheck: a wrong derivative fails at the element where it differs") {
  // f(a, b) = a*a + cube(b). The planted rule writes 2 b dy for 3 b^2 dy,
  // which agree where 2 b = 3 b^2, at b = 2/3. Every element of b is 2/3
  // but b[1, 2] = -1/2, so that is the one element gradcheck may report:
  // analytic 2 (-1/2) v = -v, numeric 3 (1/4) v = 3/4 v, a ratio of -4/3
  // whatever the random upstream v is.
  Array b = 2.0 / 3.0 * xt::ones<double>({2, 3});
  b(1, 2) = -0.5;
  const Inputs inputs = {random_array({2, 3}, 1), b};
  const auto f = [](Plant plant) -> GradcheckFunction {
    return [plant](const std::vector<Var<double>>& v) {
      return add(mul(v[0], v[0]), cube(v[1], plant));
    };
  };
  check_passes(f(Plant::none), inputs, 12);

  const GradcheckResult r = check_fails(f(Plant::wrong_derivative), inputs, Fails::tolerance);
  INFO(r.report());
  CHECK(r.worst_ratio > 1.0);
  CHECK(r.worst_input == 1);
  CHECK(r.worst_index == std::vector<std::size_t>{1, 2});
  CHECK(r.worst_analytic / r.worst_numeric == doctest::Approx(-4.0 / 3.0).epsilon(1e-6));
  CHECK(contains(r.report(), "gradcheck FAILED: 12 elements checked"));
  CHECK(contains(r.report(), "worst is input 1 at [1, 2]"));
}

TEST_CASE("gradcheck: a rule that overwrites instead of accumulating fails") {
  // f(x) = cube(x) + x: x's gradient is 3 x^2 v + v. The add's rule runs
  // first (it is later on the tape) and writes v; the planted cube rule then
  // overwrites it with 3 x^2 v. At every element analytic / numeric is
  // 3 x^2 / (3 x^2 + 1).
  const Inputs inputs = {random_away_from_zero({2, 3}, 2)};
  const auto f = [](Plant plant) -> GradcheckFunction {
    return [plant](const std::vector<Var<double>>& v) { return add(cube(v[0], plant), v[0]); };
  };
  check_passes(f(Plant::none), inputs, 6);

  const GradcheckResult r = check_fails(f(Plant::overwrites), inputs, Fails::tolerance);
  INFO(r.report());
  CHECK(r.worst_input == 0);
  const double x = at(inputs[0], r.worst_index);
  CHECK(r.worst_analytic / r.worst_numeric ==
        doctest::Approx(3 * x * x / (3 * x * x + 1)).epsilon(1e-6));
  CHECK(contains(r.report(), "worst is input 0 at [" + std::to_string(r.worst_index[0]) + ", " +
                                 std::to_string(r.worst_index[1]) + "]"));
}

TEST_CASE("gradcheck: a gradient written into the wrong parent fails on the parent that lost it") {
  // f(a, b) = cube_plus(a, b) with a's part 3 a^2 v added to b's gradient
  // instead of a's: a's analytic gradient is exactly 0 where the numeric one
  // is 3 a^2 v. With |a| = 0.3 everywhere, b's error 0.27 |v| stays below
  // 270 tolerances (atol 1e-5 + rtol 1e-3 |v|) for every v, while a's exceeds
  // that wherever |v| > 0.014: the worst element is in input 0.
  const Inputs inputs = {Array{{0.3, -0.3, 0.3}, {-0.3, 0.3, -0.3}}, random_array({2, 3}, 3)};
  const auto f = [](bool wrong_parent) -> GradcheckFunction {
    return [wrong_parent](const std::vector<Var<double>>& v) {
      return cube_plus(v[0], v[1], wrong_parent);
    };
  };
  check_passes(f(false), inputs, 12);

  const GradcheckResult r = check_fails(f(true), inputs, Fails::tolerance);
  INFO(r.report());
  CHECK(r.worst_input == 0);
  CHECK(r.worst_analytic == 0.0);
  CHECK(std::abs(r.worst_numeric) > 0.0);
  CHECK(r.worst_ratio > 270.0);
  CHECK(contains(r.report(), "worst is input 0 at ["));
  CHECK(contains(r.report(), "analytic 0, numeric"));
}

TEST_CASE("gradcheck: a forward that its correct-looking backward does not match fails") {
  // y = sin(x) + 1e-3 x^3 against the backward of sin: analytic cos(x) v,
  // numeric (cos(x) + 3e-3 x^2) v. With |x| in [1, 2.2] (and away from
  // pi/2, where cos vanishes) the error is at least 3e-3 |v|, several
  // tolerances (atol 1e-5 + rtol 1e-3 |numeric|) for all but a tiny v.
  const Inputs inputs = {Array{{1.0, -1.2, 1.9}, {-2.1, 1.3, 2.2}}};
  const auto f = [](double forward_error) -> GradcheckFunction {
    return [forward_error](const std::vector<Var<double>>& v) { return sine(v[0], forward_error); };
  };
  check_passes(f(0.0), inputs, 6);

  const GradcheckResult r = check_fails(f(1e-3), inputs, Fails::tolerance);
  INFO(r.report());
  CHECK(r.worst_input == 0);
  const double x = at(inputs[0], r.worst_index);
  CHECK(r.worst_analytic / r.worst_numeric ==
        doctest::Approx(std::cos(x) / (std::cos(x) + 3e-3 * x * x)).epsilon(1e-6));
}

TEST_CASE("gradcheck: a backward that changes its captured state between calls fails") {
  // The planted rule scales its saved x^2 by 3 in place: the first backward
  // gives 3 x^2 v (the right gradient, so every element is within
  // tolerance), the second 9 x^2 v.
  const Inputs inputs = {random_away_from_zero({2, 3}, 4)};
  check_passes(cube_of_input(Plant::none), inputs, 6);

  const GradcheckResult r =
      check_fails(cube_of_input(Plant::not_reentrant), inputs, Fails::reentrancy);
  INFO(r.report());
  CHECK(contains(r.report(), "a second backward gave different gradients"));
  CHECK_FALSE(contains(r.report(), "zero upstream"));
}

TEST_CASE("gradcheck: a rule that writes a gradient for a zero upstream gradient fails") {
  // The planted rule replaces an all-zero dy by ones: for the random v
  // (no element of it is 0) it is the right rule, for dy = 0 it gives 3 x^2.
  const Inputs inputs = {random_away_from_zero({2, 3}, 5)};
  check_passes(cube_of_input(Plant::none), inputs, 6);

  const GradcheckResult r =
      check_fails(cube_of_input(Plant::nonzero_for_zero_upstream), inputs, Fails::zero_upstream);
  INFO(r.report());
  CHECK(contains(r.report(), "a zero upstream gradient gave nonzero gradients"));
  CHECK_FALSE(contains(r.report(), "second backward"));
}

TEST_CASE("gradcheck: a rule that reads the upstream gradient at the wrong index fails") {
  // The planted rule pairs x[i] with dy[5 - i]. An all-ones (or any
  // constant) upstream gradient would hide that; gradcheck's random one must
  // not.
  const Inputs inputs = {random_away_from_zero({2, 3}, 6)};
  check_passes(cube_of_input(Plant::none), inputs, 6);

  const GradcheckResult r =
      check_fails(cube_of_input(Plant::reads_dy_reversed), inputs, Fails::tolerance);
  INFO(r.report());
  CHECK(r.worst_ratio > 1.0);
  CHECK(r.worst_input == 0);
}

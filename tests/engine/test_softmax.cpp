// softmax and log_softmax along any axis.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <xtensor/xview.hpp>
#include <xtgrad/engine/errors.hpp>
#include <xtgrad/engine/ops/elementwise.hpp>
#include <xtgrad/engine/ops/reduce.hpp>
#include <xtgrad/engine/ops/softmax.hpp>

#include "support/bad_input.hpp"
#include "support/fixtures/softmax_fixtures.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fx = xtgrad::fixtures::softmax;

namespace {

using Dims = std::vector<std::size_t>;

template <class T>
using Op = Var<T> (*)(const Var<T>&, std::int64_t);

// Like check_close, but NaN must meet NaN and an infinity the same infinity.
template <class A>
void check_matches(const A& actual, const xt::xarray<double>& expected, double tol) {
  REQUIRE(actual.shape() == expected.shape());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const double a = actual.data()[i], e = expected.data()[i];
    INFO("flat position " << i << ": actual " << a << ", expected " << e);
    if (std::isnan(e))
      CHECK(std::isnan(a));
    else if (std::isinf(e))
      CHECK(a == e);
    else
      CHECK(std::abs(a - e) <= tol + tol * std::abs(e));
  }
}

// The reference: softmax or log_softmax of x along `axis` and its vector-
// Jacobian product with dy, in long double, element by element.
struct Reference {
  xt::xarray<double> y, dx;
};
template <class T>
Reference reference(const xt::xarray<T>& x, const xt::xarray<T>& dy, std::size_t axis, bool log) {
  Reference r{xt::zeros<double>(x.shape()), xt::zeros<double>(x.shape())};
  std::size_t outer = 1, inner = 1;
  const std::size_t extent = x.shape()[axis];
  for (std::size_t d = 0; d < x.dimension(); ++d) {
    if (d < axis) outer *= x.shape()[d];
    if (d > axis) inner *= x.shape()[d];
  }
  for (std::size_t o = 0; o < outer; ++o)
    for (std::size_t i = 0; i < inner; ++i) {
      const auto at = [&](std::size_t j) { return (o * extent + j) * inner + i; };
      long double m = -INFINITY, s = 0, dot = 0, dsum = 0;
      for (std::size_t j = 0; j < extent; ++j) m = std::max(m, (long double)x.data()[at(j)]);
      for (std::size_t j = 0; j < extent; ++j) s += std::exp((long double)x.data()[at(j)] - m);
      std::vector<long double> y(extent);
      for (std::size_t j = 0; j < extent; ++j) {
        const long double z = (long double)x.data()[at(j)] - m;
        y[j] = log ? z - std::log(s) : std::exp(z) / s;
        dot += (long double)dy.data()[at(j)] * y[j];
        dsum += dy.data()[at(j)];
      }
      for (std::size_t j = 0; j < extent; ++j) {
        const long double g = dy.data()[at(j)];
        r.y.data()[at(j)] = static_cast<double>(y[j]);
        r.dx.data()[at(j)] =
            static_cast<double>(log ? g - std::exp(y[j]) * dsum : y[j] * (g - dot));
      }
    }
  return r;
}

}  // namespace

TEST_CASE_TEMPLATE("softmax: values and gradients match torch along dims 0, 1 and -1", T, float,
                   double) {
  const Dims shape = {2, 3, 4};
  const xt::xarray<T> xv = fx::array<T>(fx::k_sm_x, shape);
  const xt::xarray<T> dy = fx::array<T>(fx::k_sm_dy, shape);
  struct Case {
    Op<T> op;
    std::int64_t dim;
    const double* y;
    const double* dx;
  };
  const std::vector<Case> cases = {
      {softmax<T>, 0, fx::k_sm_d0_y, fx::k_sm_d0_dx},
      {softmax<T>, 1, fx::k_sm_d1_y, fx::k_sm_d1_dx},
      {softmax<T>, -1, fx::k_sm_dm1_y, fx::k_sm_dm1_dx},
      {log_softmax<T>, 0, fx::k_lsm_d0_y, fx::k_lsm_d0_dx},
      {log_softmax<T>, 1, fx::k_lsm_d1_y, fx::k_lsm_d1_dx},
      {log_softmax<T>, -1, fx::k_lsm_dm1_y, fx::k_lsm_dm1_dx},
  };
  for (const Case& c : cases) {
    INFO("dim " << c.dim << (c.op == softmax<T> ? " softmax" : " log_softmax"));
    Tape<T> tape;
    auto x = tape.leaf(xv);
    auto y = c.op(x, c.dim);
    xt::xarray<double> ey = xt::empty<double>(shape), edx = xt::empty<double>(shape);
    std::copy(c.y, c.y + 24, ey.data());
    std::copy(c.dx, c.dx + 24, edx.data());
    check_close(y.value(), ey, 4 * tolerance<T>(), 4 * tolerance<T>());
    tape.backward(y, dy);
    check_close(x.grad(), edx, 4 * tolerance<T>(), 4 * tolerance<T>());
  }
}

TEST_CASE_TEMPLATE("softmax: logits of +-1000 are stable and -inf entries get probability 0", T,
                   float, double) {
  // Rows: [1000, -1000, 999, 0], all near -1000, two -inf entries, all -inf (NaN as torch).
  const xt::xarray<T> xv = fx::array<T>(fx::k_big_x, {4, 4});
  const xt::xarray<T> dy = fx::array<T>(fx::k_big_dy, {4, 4});
  for (bool log : {false, true}) {
    INFO((log ? "log_softmax" : "softmax"));
    Tape<T> tape;
    auto x = tape.leaf(xv);
    auto y = log ? log_softmax(x) : softmax(x);
    check_matches(y.value(), fx::array<double>(log ? fx::k_big_lsm_y : fx::k_big_sm_y, {4, 4}),
                  4 * tolerance<T>());
    tape.backward(y, dy);
    check_matches(x.grad(), fx::array<double>(log ? fx::k_big_lsm_dx : fx::k_big_sm_dx, {4, 4}),
                  4 * tolerance<T>());
  }
}

TEST_CASE_TEMPLATE("softmax: every axis of wide shapes against a long-double loop", T, float,
                   double) {
  // 37 and 70: SIMD bodies with tails along the last axis, and more than one
  // block of 64 neighbouring rows along the others.
  const Dims shape = {3, 37, 70};
  const xt::xarray<T> xv = random_array<T>(shape, 11, -8.0, 8.0);
  const xt::xarray<T> dy = random_array<T>(shape, 12);
  for (std::int64_t dim : {0, 1, 2}) {
    for (bool log : {false, true}) {
      INFO("dim " << dim << (log ? " log_softmax" : " softmax"));
      const Reference r = reference(xv, dy, static_cast<std::size_t>(dim), log);
      Tape<T> tape;
      auto x = tape.leaf(xv);
      auto y = log ? log_softmax(x, dim) : softmax(x, dim);
      check_close(y.value(), r.y, 8 * tolerance<T>(), 8 * tolerance<T>());
      tape.backward(y, dy);
      check_close(x.grad(), r.dx, 8 * tolerance<T>(), 8 * tolerance<T>());
    }
  }
}

TEST_CASE("softmax: float rows of 100000 sum to 1 within float rounding") {
  Tape<float> tape;
  auto x = tape.leaf(random_array<float>({2, 100000}, 13, -1.0, 1.0));
  auto y = softmax(x);
  for (std::size_t r = 0; r < 2; ++r) {
    double total = 0.0;
    for (std::size_t j = 0; j < 100000; ++j) total += y.value()(r, j);
    CHECK(std::abs(total - 1.0) <= 1e-6);
  }
}

TEST_CASE("softmax: gradcheck along every axis, negative dims included") {
  for (bool log : {false, true})
    for (const Dims& shape : {Dims{5}, Dims{2, 3, 4}, Dims{3, 66}})
      for (std::int64_t dim = -static_cast<std::int64_t>(shape.size());
           dim < static_cast<std::int64_t>(shape.size()); ++dim) {
        INFO((log ? "log_softmax" : "softmax")
             << " " << detail::shape_str(shape) << " dim " << dim);
        check_gradients(
            [log, dim](const std::vector<Var<double>>& v) {
              return log ? log_softmax(v[0], dim) : softmax(v[0], dim);
            },
            {random_array(shape, 21, -3.0, 3.0)});
      }
}

TEST_CASE_TEMPLATE("softmax: edge shapes [D], [0, D], [D, 0], negative dims and views", T, float,
                   double) {
  for (bool log : {false, true}) {
    INFO((log ? "log_softmax" : "softmax"));
    const auto f = [log](const Var<T>& v, std::int64_t d) {
      return log ? log_softmax(v, d) : softmax(v, d);
    };
    Tape<T> tape;
    // [D]: the one row; against the long-double loop.
    const xt::xarray<T> v5 = random_array<T>({5}, 31);
    auto a = tape.leaf(v5);
    check_close(f(a, 0).value(), reference(v5, v5, 0, log).y, tolerance<T>(), tolerance<T>());
    // [0, D] along either axis, and [D, 0]: empty results, empty gradients.
    for (const Dims& shape : {Dims{0, 4}, Dims{4, 0}})
      for (std::int64_t d : {0, 1}) {
        auto e = tape.leaf(xt::xarray<T>(xt::zeros<T>(shape)));
        auto y = f(e, d);
        CHECK(y.shape() == e.shape());
        tape.backward(y, xt::xarray<T>(xt::zeros<T>(shape)));
        CHECK(e.grad().shape() == e.shape());
      }
    // Negative dims are the same axes as their positive counterparts.
    const xt::xarray<T> v3 = random_array<T>({2, 3, 4}, 32);
    auto c = tape.leaf(v3);
    for (std::int64_t d : {0, 1, 2}) CHECK(f(c, d - 3).value() == f(c, d).value());
    // A transposed and a stepped view give the result of their contiguous copies.
    xt::xarray<T> m = random_array<T>({6, 8}, 33);
    const xt::xarray<T> before = m;
    auto t = tape.leaf(xt::transpose(m));
    auto t2 = tape.leaf(xt::xarray<T>(xt::transpose(m)));
    auto s = tape.leaf(xt::view(m, xt::all(), xt::range(0, 8, 3)));
    auto s2 = tape.leaf(xt::xarray<T>(xt::view(m, xt::all(), xt::range(0, 8, 3))));
    for (std::int64_t d : {0, 1}) {
      CHECK(f(t, d).value() == f(t2, d).value());
      CHECK(f(s, d).value() == f(s2, d).value());
    }
    CHECK(m == before);
  }
}

TEST_CASE_TEMPLATE("softmax: gradients accumulate over two backwards - no gradient, no work", T,
                   float, double) {
  for (bool log : {false, true})
    for (std::int64_t dim : {0, -1}) {
      INFO((log ? "log_softmax" : "softmax") << " dim " << dim);
      Tape<T> tape;
      auto x = tape.leaf(random_array<T>({3, 5}, 41, -2.0, 2.0));
      auto data = tape.leaf(random_array<T>({3, 5}, 42), false);
      auto y = log ? log_softmax(x, dim) : softmax(x, dim);
      auto yd = log ? log_softmax(data, dim) : softmax(data, dim);
      CHECK_FALSE(yd.requires_grad());
      const xt::xarray<T> dy = random_array<T>({3, 5}, 43);
      const Reference r = reference(x.value(), dy, dim == 0 ? 0 : 1, log);
      tape.backward(y, dy);
      check_close(x.grad(), r.dx, 4 * tolerance<T>(), 4 * tolerance<T>());
      tape.backward(y, dy);
      check_close(x.grad(), xt::xarray<double>(2.0 * r.dx), 4 * tolerance<T>(), 4 * tolerance<T>());
      // Used twice in one graph: the second use accumulates onto the first.
      tape.zero_grad();
      tape.backward(sum(mul(y, y)));
      const xt::xarray<T> g = x.grad();
      tape.zero_grad();
      tape.backward(add(sum(mul(y, y)), sum(mul(y, y))));
      check_close(x.grad(), xt::xarray<T>(T(2) * g), 4 * tolerance<T>(), 4 * tolerance<T>());
    }
}

TEST_CASE_TEMPLATE("softmax: anomaly mode names softmax and log_softmax", T, float, double) {
  const T inf = std::numeric_limits<T>::infinity();
  Tape<T> tape;
  auto x = tape.leaf(xt::xarray<T>{{-inf, -inf}, {0, 1}});  // recorded before the mode is on
  auto z = tape.leaf(xt::xarray<T>{{0, -inf}, {0, 1}});
  tape.set_detect_anomaly(true);
  auto finite = softmax(z);  // probability 0 is finite
  CHECK(finite.value()(0, 1) == T(0));
  check_forward_anomaly(tape, "softmax", [&] { softmax(x); });  // an all -inf row is NaN
  // log 0 = -inf where z already holds -inf: a deliberate mask, no anomaly
  CHECK(log_softmax(z).value()(0, 1) == -inf);
  auto masked = tape.leaf(xt::xarray<T>{{-inf, -inf}, {0, 1}});
  check_forward_anomaly(tape, "log_softmax",
                        [&] { log_softmax(masked); });  // an all -inf row is NaN
}

TEST_CASE_TEMPLATE("bad input: softmax", T, float, double) {
  Tape<T> tape, other, cleared;
  const Var<T> stale = cleared.leaf(xt::xarray<T>{1, 2});
  cleared.clear();
  Var<T> x = tape.leaf(random_array<T>({2, 3}, 51));
  Var<T> scalar = tape.leaf(xt::xarray<T>(T(0.5)));
  tape.backward(sum(softmax(x, 0)), xt::xarray<T>(T(1)));  // x holds a gradient
  const auto snapshot = snapshot_of<T>({&tape, &other}, {x, scalar});
  std::vector<Row> rows;
  const auto bad = row_adder(rows);
  const auto IA = Expect::invalid_argument;
  for (const char* name : {"softmax", "log_softmax"}) {
    const std::string op = name;
    const Op<T> f = op == "softmax" ? softmax<T> : log_softmax<T>;
    bad(op + ": dim 2 of rank 2", [&, f] { f(x, 2); }, IA,
        {op, "'dim'", "is 2", "[-2, 2)", "rank 2"});
    bad(op + ": dim -3 of rank 2", [&, f] { f(x, -3); }, IA, {op, "'dim'", "is -3", "[-2, 2)"});
    bad(op + ": 0-d x", [&, f] { f(scalar, -1); }, IA, {op, "'dim'", "0-d tensor has no axis"});
    add_handle_rows<T>(
        rows, op, {"x"}, {x}, [f](const std::vector<Var<T>>& v) { f(v[0], -1); }, other, stale);
  }
  report("softmax", run_rows(rows, snapshot));
}

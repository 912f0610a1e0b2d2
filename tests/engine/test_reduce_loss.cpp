// sum, mean (0-d results) and the mse loss.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include <xtensor/xview.hpp>
#include <xtgrad/engine/check.hpp>
#include <xtgrad/engine/ops/elementwise.hpp>
#include <xtgrad/engine/ops/loss.hpp>
#include <xtgrad/engine/ops/reduce.hpp>

#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

namespace {

using Dims = std::vector<std::size_t>;

// A 0-d array holding v.
template <class T>
xt::xarray<T> scalar(T v) {
  xt::xarray<T> a = xt::empty<T>(Dims{});
  a() = v;
  return a;
}

// An array of shape `dims` with every element v.
template <class T>
xt::xarray<T> filled(const Dims& dims, double v) {
  xt::xarray<T> a = xt::empty<T>(dims);
  a.fill(static_cast<T>(v));
  return a;
}

// Shapes for [D], [0, D], [2, 3, D], 0-d and one-element inputs.
const std::vector<Dims> k_shapes = {{5}, {0, 5}, {2, 3, 5}, {}, {1}, {4, 1}};

}  // namespace

// ---- sum and mean ----

TEST_CASE_TEMPLATE("reduce: sum and mean match hand-computed values and have shape []", T, float,
                   double) {
  Tape<T> tape;
  auto x = tape.leaf(xt::xarray<T>{{1, 2, 3}, {4, 5, 6}});
  auto s = sum(x);
  auto m = mean(x);
  CHECK(s.shape() == Shape{});
  CHECK(s.dimension() == 0);
  CHECK(s.size() == 1);
  CHECK(s.value()() == T(21));
  CHECK(m.shape() == Shape{});
  CHECK(m.value()() == T(3.5));

  tape.backward(s);  // a 0-d y: the upstream gradient is 1
  CHECK(x.grad() == xt::ones<T>({2, 3}));
  tape.zero_grad();
  tape.backward(m);
  CHECK(x.grad() == xt::xarray<T>(xt::ones<T>({2, 3}) / T(6)));
  tape.zero_grad();
  tape.backward(m, scalar<T>(-12));  // an explicit 0-d upstream gradient
  CHECK(x.grad() == xt::xarray<T>(T(-2) * xt::ones<T>({2, 3})));
}

TEST_CASE_TEMPLATE("reduce: every shape against a plain loop - empty sum is 0, empty mean NaN", T,
                   float, double) {
  std::uint32_t seed = 30;
  for (const Dims& dims : k_shapes) {
    INFO(detail::shape_str(dims));
    const xt::xarray<T> xv = random_array<T>(dims, ++seed);
    double total = 0.0;
    for (std::size_t i = 0; i < xv.size(); ++i) total += xv.data()[i];
    const double n = static_cast<double>(xv.size());

    Tape<T> tape;
    auto x = tape.leaf(xv);
    auto s = sum(x);
    auto m = mean(x);
    check_close(s.value(), scalar(total), tolerance<T>(), tolerance<T>());
    if (xv.size() == 0) {
      CHECK(s.value()() == T(0));
      CHECK(std::isnan(m.value()()));
    } else {
      check_close(m.value(), scalar(total / n), tolerance<T>(), tolerance<T>());
    }
    tape.backward(s, scalar<T>(3));
    CHECK(x.grad() == filled<T>(dims, 3));
    tape.zero_grad();
    tape.backward(m, scalar<T>(3));  // also on an empty x: nothing to write, no failure
    check_close(x.grad(), filled<double>(dims, 3.0 / n), tolerance<T>(), tolerance<T>());
  }
}

TEST_CASE("reduce: gradcheck sum and mean") {
  for (const Dims& dims : k_shapes) {
    INFO(detail::shape_str(dims));
    check_gradients([](const std::vector<Var<double>>& v) { return sum(v[0]); },
                    {random_array(dims, 41)});
    if (!dims.empty() && dims[0] == 0) continue;  // NaN mean: nothing meaningful to compare
    check_gradients([](const std::vector<Var<double>>& v) { return mean(v[0]); },
                    {random_array(dims, 42)});
  }
  // A 0-d result broadcast back against its input: y = sum(x) * x - mean(x).
  check_gradients(
      [](const std::vector<Var<double>>& v) { return sub(mul(sum(v[0]), v[0]), mean(v[0])); },
      {random_array({3, 4}, 43)});
}

TEST_CASE("reduce: float sums accumulate in double") {
  // A left-to-right float sum of a million 0.1f drifts by about 1%; the
  // double accumulation is exact to float rounding.
  Tape<float> tape;
  auto x = tape.leaf(xt::xarray<float>(xt::ones<float>({1000, 1000}) * 0.1f));
  const double exact = 1e6 * static_cast<double>(0.1f);
  CHECK(std::abs(sum(x).value()() - exact) <= exact * 1e-7);
  CHECK(std::abs(mean(x).value()() - 0.1f) <= 1e-7f);
}

TEST_CASE_TEMPLATE("reduce: sum and mean of transposed and stepped views equal the contiguous ones",
                   T, float, double) {
  xt::xarray<T> m = random_array<T>({3, 8}, 51);
  const xt::xarray<T> m_before = m;
  const xt::xarray<T> transposed = xt::transpose(m);
  const xt::xarray<T> stepped = xt::view(m, xt::all(), xt::range(0, 8, 2));
  Tape<T> tape;
  auto a = tape.leaf(xt::transpose(m));
  auto b = tape.leaf(xt::view(m, xt::all(), xt::range(0, 8, 2)));
  auto a2 = tape.leaf(transposed);
  auto b2 = tape.leaf(stepped);
  CHECK(sum(a).value() == sum(a2).value());
  CHECK(mean(b).value() == mean(b2).value());
  tape.backward(add(sum(a), mean(b)));
  CHECK(a.grad() == xt::ones<T>({8, 3}));
  CHECK(b.grad() == xt::xarray<T>(xt::ones<T>({3, 4}) / T(12)));
  CHECK(m == m_before);
  CHECK(a.value() == transposed);
  CHECK(b.value() == stepped);
}

// ---- mse ----

TEST_CASE_TEMPLATE("loss: mse matches hand-computed value and gradients", T, float, double) {
  Tape<T> tape;
  auto p = tape.leaf(xt::xarray<T>{{1, 2}, {3, 4}});
  auto t = tape.leaf(xt::xarray<T>{{0, 2}, {5, 1}});
  auto loss = mse(p, t);  // differences 1, 0, -2, 3: (1 + 0 + 4 + 9) / 4
  CHECK(loss.shape() == Shape{});
  CHECK(loss.value()() == T(3.5));
  tape.backward(loss);
  CHECK(p.grad() == xt::xarray<T>{{0.5, 0}, {-1, 1.5}});  // 2 (p - t) / 4
  CHECK(t.grad() == xt::xarray<T>{{-0.5, 0}, {1, -1.5}});
  tape.backward(loss, scalar<T>(2));  // leaves accumulate: 1 + 2 times the gradient
  CHECK(p.grad() == xt::xarray<T>{{1.5, 0}, {-3, 4.5}});
  CHECK(t.grad() == xt::xarray<T>{{-1.5, 0}, {3, -4.5}});
}

TEST_CASE_TEMPLATE("loss: mse of every shape against a plain loop", T, float, double) {
  std::uint32_t seed = 60;
  for (const Dims& dims : k_shapes) {
    INFO(detail::shape_str(dims));
    const xt::xarray<T> pv = random_array<T>(dims, ++seed), tv = random_array<T>(dims, ++seed);
    const double n = static_cast<double>(pv.size());
    double total = 0.0;
    xt::xarray<double> dp = filled<double>(dims, 0);
    for (std::size_t i = 0; i < pv.size(); ++i) {
      const double r = double(pv.data()[i]) - double(tv.data()[i]);
      total += r * r;
      dp.data()[i] = 2.0 * r / n * -0.5;  // upstream -0.5
    }
    Tape<T> tape;
    auto p = tape.leaf(pv);
    auto t = tape.leaf(tv);
    auto loss = mse(p, t);
    CHECK(loss.shape() == Shape{});
    if (pv.size() == 0)
      CHECK(std::isnan(loss.value()()));
    else
      check_close(loss.value(), scalar(total / n), tolerance<T>(), tolerance<T>());
    tape.backward(loss, scalar<T>(-0.5));
    check_close(p.grad(), dp, tolerance<T>(), tolerance<T>());
    check_close(t.grad(), xt::xarray<double>(-dp), tolerance<T>(), tolerance<T>());
  }
}

TEST_CASE("loss: gradcheck mse for both arguments") {
  for (const Dims& dims : k_shapes) {
    if (!dims.empty() && dims[0] == 0) continue;  // NaN loss
    INFO(detail::shape_str(dims));
    check_gradients([](const std::vector<Var<double>>& v) { return mse(v[0], v[1]); },
                    {random_array(dims, 71), random_array(dims, 72)});
  }
  // A tiny regression: mse(x * w + b, y) with a row weight and a scalar bias.
  check_gradients(
      [](const std::vector<Var<double>>& v) { return mse(add(mul(v[0], v[1]), v[2]), v[3]); },
      {random_array({4, 3}, 73), random_array({3}, 74), random_array({1}, 75),
       random_array({4, 3}, 76)});
  // The same Var as both arguments: the two gradients cancel.
  check_gradients([](const std::vector<Var<double>>& v) { return mse(mul(v[0], v[0]), v[0]); },
                  {random_array({2, 3}, 77)});
}

TEST_CASE_TEMPLATE("loss: a target without requires_grad gets no gradient", T, float, double) {
  Parameter<T> weight("weight", xt::xarray<T>{2, -1});
  Tape<T> tape;
  auto w = tape.param(weight);
  auto x = tape.leaf(xt::xarray<T>{{1, 2}, {3, 4}}, false);
  auto y = tape.leaf(xt::xarray<T>{{1, 1}, {1, 1}}, false);
  auto loss = mse(mul(x, w), y);   // x * w = {{2, -2}, {6, -4}}; residuals {{1, -3}, {5, -5}}
  CHECK(loss.value()() == T(15));  // (1 + 9 + 25 + 25) / 4
  tape.backward(loss);
  // dw[j] = sum_i 2 r[i, j] x[i, j] / 4 = ((1 * 1 + 5 * 3), (-3 * 2 - 5 * 4)) / 2
  CHECK(weight.grad == xt::xarray<T>{8, -13});
  CHECK(y.grad() == xt::zeros<T>({2, 2}));
  CHECK(x.grad() == xt::zeros<T>({2, 2}));
  CHECK_FALSE(mse(x, y).requires_grad());

  auto q = tape.leaf(xt::xarray<T>{3, 4}, false);
  auto target = tape.leaf(xt::xarray<T>{1, 1});
  tape.backward(mse(q, target));  // only the target wants a gradient: -2 (q - t) / 2
  CHECK(target.grad() == xt::xarray<T>{-2, -3});
  auto loss2 = mse(target, q);  // and only the prediction: 2 (t - q) / 2, accumulating
  tape.backward(loss2);
  tape.backward(loss2);
  CHECK(target.grad() == xt::xarray<T>{-6, -9});
}

TEST_CASE("loss: mse rejects different shapes, even ones that broadcast") {
  Tape<double> tape;
  auto a = tape.leaf(xt::zeros<double>({2, 3}));
  auto b = tape.leaf(xt::zeros<double>({3}));
  auto c = tape.leaf(xt::zeros<double>({3, 1}));
  CHECK_THROWS_WITH_PARTS(mse(a, b), std::invalid_argument,
                          {"xtgrad::mse", "'target'", "'prediction'", "[3]", "[2, 3]"});
  CHECK_THROWS_WITH_PARTS(mse(b, c), std::invalid_argument,
                          {"xtgrad::mse", "'target'", "[3, 1]", "[3]"});
  CHECK(tape.size() == 3);
  Tape<double> other;
  auto d = other.leaf(xt::zeros<double>({3}));
  CHECK_THROWS_WITH_PARTS(mse(b, d), std::logic_error, {"xtgrad::mse", "'target'"});
}

TEST_CASE_TEMPLATE("loss: views give the contiguous result and inputs stay unchanged", T, float,
                   double) {
  xt::xarray<T> m = random_array<T>({4, 6}, 81);
  xt::xarray<T> n = random_array<T>({3, 4}, 82);
  const xt::xarray<T> m_before = m, n_before = n;
  Tape<T> tape;
  auto p = tape.leaf(xt::view(m, xt::all(), xt::range(0, 6, 2)));  // [4, 3]
  auto t = tape.leaf(xt::transpose(n));                            // [4, 3]
  auto p2 = tape.leaf(xt::xarray<T>(xt::view(m, xt::all(), xt::range(0, 6, 2))));
  auto t2 = tape.leaf(xt::xarray<T>(xt::transpose(n)));
  auto loss = mse(p, t);
  auto loss2 = mse(p2, t2);
  CHECK(loss.value() == loss2.value());
  tape.backward(loss);
  tape.backward(loss2);
  CHECK(p.grad() == p2.grad());
  CHECK(t.grad() == t2.grad());
  CHECK(m == m_before);
  CHECK(n == n_before);
  CHECK(p.value() == p2.value());
  CHECK(t.value() == t2.value());
}

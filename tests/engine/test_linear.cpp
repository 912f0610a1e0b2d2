// linear in both weight layouts: values against loops, gradients against the
// closed form and gradcheck, edge shapes, views and error messages.
#include <doctest/doctest.h>

#include <xtensor/xview.hpp>
#include <xtgrad/engine/ops/linear.hpp>

#include "support/test_helpers.hpp"

using namespace xtgrad;
using xtgrad::testing::check_close;
using xtgrad::testing::check_gradients;
using xtgrad::testing::random_array;

namespace {

// y[n,o] = sum_i x[n,i] W(o,i) + b[o], as loops; `in_out` reads W[i,o].
template <class T>
xt::xarray<T> reference_linear(const xt::xarray<T>& x2d, const xt::xarray<T>& w,
                               const xt::xarray<T>* b, bool in_out) {
  const std::size_t n = x2d.shape()[0], in = x2d.shape()[1];
  const std::size_t out = in_out ? w.shape()[1] : w.shape()[0];
  xt::xarray<T> y = xt::zeros<T>({n, out});
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t o = 0; o < out; ++o) {
      double acc = b ? (*b)(o) : 0.0;
      for (std::size_t i = 0; i < in; ++i) acc += double(x2d(r, i)) * (in_out ? w(i, o) : w(o, i));
      y(r, o) = static_cast<T>(acc);
    }
  return y;
}

}  // namespace

TEST_CASE_TEMPLATE("linear: a hand-computed non-square example in both layouts", T, float, double) {
  Tape<T> tape;
  auto x = tape.leaf(xt::xarray<T>{{1, 2}});                   // [1, 2]
  auto w = tape.leaf(xt::xarray<T>{{1, 0}, {0, 1}, {1, -1}});  // [out=3, in=2]
  auto b = tape.leaf(xt::xarray<T>{0.5, 0.5, 0.5});
  CHECK(linear(x, w, b).value() == xt::xarray<T>{{1.5, 2.5, -0.5}});
  auto w_in_out = tape.leaf(xt::xarray<T>{{1, 0, 1}, {0, 1, -1}});  // [in=2, out=3]
  CHECK(linear(x, w_in_out, b, WeightLayout::in_out).value() == xt::xarray<T>{{1.5, 2.5, -0.5}});
  CHECK(linear(x, w).value() == xt::xarray<T>{{1, 2, -1}});
}

TEST_CASE_TEMPLATE("linear: values match loops for random sizes", T, float, double) {
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  const xt::xarray<T> xv = random_array<T>({7, 5}, 1), wv = random_array<T>({3, 5}, 2),
                      bv = random_array<T>({3}, 3);
  Tape<T> tape;
  check_close(linear(tape.leaf(xv), tape.leaf(wv), tape.leaf(bv)).value(),
              reference_linear(xv, wv, &bv, false), tol, tol);
  const xt::xarray<T> w_io = random_array<T>({5, 3}, 4);
  check_close(linear(tape.leaf(xv), tape.leaf(w_io), {}, WeightLayout::in_out).value(),
              reference_linear<T>(xv, w_io, nullptr, true), tol, tol);
}

TEST_CASE("linear: gradients equal the closed form dx = dy W, dW = dy^T x, db = sum dy") {
  const xt::xarray<double> xv = random_array({4, 3}, 5), wv = random_array({2, 3}, 6),
                           bv = random_array({2}, 7), dy = random_array({4, 2}, 8);
  Tape<double> tape;
  auto x = tape.leaf(xv);
  auto w = tape.leaf(wv);
  auto b = tape.leaf(bv);
  tape.backward(linear(x, w, b), dy);
  xt::xarray<double> dx = xt::zeros<double>({4, 3}), dw = xt::zeros<double>({2, 3}),
                     db = xt::zeros<double>({2});
  for (std::size_t n = 0; n < 4; ++n)
    for (std::size_t o = 0; o < 2; ++o) {
      db(o) += dy(n, o);
      for (std::size_t i = 0; i < 3; ++i) {
        dx(n, i) += dy(n, o) * wv(o, i);
        dw(o, i) += dy(n, o) * xv(n, i);
      }
    }
  check_close(x.grad(), dx);
  check_close(w.grad(), dw);
  check_close(b.grad(), db);
}

TEST_CASE("linear: gradcheck in both layouts, with and without bias, on 1-D to 3-D inputs") {
  for (const auto& x_shape : std::vector<std::vector<std::size_t>>{{3}, {4, 3}, {2, 3, 3}}) {
    CAPTURE(x_shape.size());
    const auto xv = random_array(x_shape, 9);
    check_gradients([](const auto& v) { return linear(v[0], v[1], v[2]); },
                    {xv, random_array({5, 3}, 10), random_array({5}, 11)});
    check_gradients([](const auto& v) { return linear(v[0], v[1]); },
                    {xv, random_array({5, 3}, 12)});
    check_gradients([](const auto& v) { return linear(v[0], v[1], v[2], WeightLayout::in_out); },
                    {xv, random_array({3, 5}, 13), random_array({5}, 14)});
  }
}

TEST_CASE_TEMPLATE("linear: leading axes are kept: [D], [0, D], [2, 3, D]", T, float, double) {
  const xt::xarray<T> wv = random_array<T>({4, 3}, 15), bv = random_array<T>({4}, 16);
  Tape<T> tape;
  auto w = tape.leaf(wv);
  auto b = tape.leaf(bv);

  auto single = linear(tape.leaf(xt::xarray<T>{1, 0, 0}), w, b);
  CHECK(single.shape() == Shape{4});
  check_close(single.value(), xt::xarray<T>(xt::view(wv, xt::all(), 0) + bv), 1e-6, 1e-6);

  auto empty_x = tape.leaf(xt::xarray<T>(xt::zeros<T>({0, 3})));
  auto empty = linear(empty_x, w, b);
  CHECK(empty.shape() == Shape{0, 4});
  tape.backward(empty, xt::zeros<T>({0, 4}));
  CHECK(w.grad() == xt::zeros<T>({4, 3}));
  CHECK(b.grad() == xt::zeros<T>({4}));
  CHECK(empty_x.grad().shape() == Shape{0, 3});

  const xt::xarray<T> x3 = random_array<T>({2, 3, 3}, 17);
  auto y3 = linear(tape.leaf(x3), w, b);
  CHECK(y3.shape() == Shape{2, 3, 4});
  const xt::xarray<T> flat = xt::reshape_view(x3, {6, 3});
  const xt::xarray<T> expected =
      xt::reshape_view(reference_linear(flat, wv, &bv, false), {2, 3, 4});
  check_close(y3.value(), expected, 1e-5, 1e-5);
}

TEST_CASE_TEMPLATE("linear: transposed and stepped views give the contiguous result", T, float,
                   double) {
  const xt::xarray<T> base = random_array<T>({3, 6}, 18);  // transposed: [6, 3]
  const xt::xarray<T> wv = random_array<T>({2, 3}, 19), dy = random_array<T>({6, 2}, 20);
  const xt::xarray<T> contiguous = xt::transpose(base);
  auto run = [&](auto&& input) {
    Tape<T> tape;
    auto x = tape.leaf(input);
    auto w = tape.leaf(wv);
    auto y = linear(x, w);
    tape.backward(y, dy);
    return std::vector<xt::xarray<T>>{y.value(), x.grad(), w.grad()};
  };
  const auto expected = run(contiguous);
  const auto transposed = run(xt::transpose(base));
  for (std::size_t i = 0; i < 3; ++i) CHECK(transposed[i] == expected[i]);

  const xt::xarray<T> tall = random_array<T>({12, 3}, 21);
  const xt::xarray<T> every_second = xt::view(tall, xt::range(0, 12, 2), xt::all());
  const auto stepped = run(xt::view(tall, xt::range(0, 12, 2), xt::all()));
  const auto stepped_expected = run(every_second);
  for (std::size_t i = 0; i < 3; ++i) CHECK(stepped[i] == stepped_expected[i]);
}

TEST_CASE_TEMPLATE("linear: inputs and parameters are unchanged by forward and backward", T, float,
                   double) {
  const xt::xarray<T> xv = random_array<T>({3, 4}, 22);
  Parameter<T> w("weight", random_array<T>({5, 4}, 23)), b("bias", random_array<T>({5}, 24));
  const xt::xarray<T> w_before = w.value, b_before = b.value;
  const xt::xarray<T> x_copy = xv;
  Tape<T> tape;
  auto y = linear(tape.leaf(xv), tape.param(w), tape.param(b));
  tape.backward(y, random_array<T>({3, 5}, 25));
  CHECK(xv == x_copy);
  CHECK(w.value == w_before);
  CHECK(b.value == b_before);
}

TEST_CASE("linear: shape errors name the op, the argument and both shapes") {
  Tape<double> tape;
  auto x = tape.leaf(xt::xarray<double>(xt::zeros<double>({2, 3})));
  auto w = tape.leaf(xt::xarray<double>(xt::zeros<double>({4, 5})));
  CHECK_THROWS_WITH_PARTS(linear(x, w), std::invalid_argument,
                          {"linear", "'x'", "[2, 3]", "[..., 5]", "[4, 5]"});
  auto w1d = tape.leaf(xt::xarray<double>(xt::zeros<double>({3})));
  CHECK_THROWS_WITH_PARTS(linear(x, w1d), std::invalid_argument,
                          {"linear", "'weight'", "[3]", "[out, in]"});
  auto w_ok = tape.leaf(xt::xarray<double>(xt::zeros<double>({4, 3})));
  auto b_bad = tape.leaf(xt::xarray<double>(xt::zeros<double>({3})));
  CHECK_THROWS_WITH_PARTS(linear(x, w_ok, b_bad), std::invalid_argument,
                          {"linear", "'bias'", "[3]", "[4]"});
  CHECK_THROWS_WITH_PARTS(linear(x, w_ok, {}, WeightLayout::in_out), std::invalid_argument,
                          {"linear", "'x'", "[2, 3]", "[..., 4]"});
  auto scalar = tape.leaf(xt::xarray<double>(1.0));
  CHECK_THROWS_WITH_PARTS(linear(scalar, w_ok), std::invalid_argument, {"linear", "'x'", "[]"});
}

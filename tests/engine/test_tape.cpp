// The tape itself: recording, accumulation, reentrant backward, clear(),
// misuse errors, non-recording mode, and one tape per thread.
#include <doctest/doctest.h>

#include <thread>

#include <xtensor/xview.hpp>
#include <xtgrad/engine/engine.hpp>

#include "support/test_helpers.hpp"

using namespace xtgrad;
using xtgrad::testing::check_close;
using xtgrad::testing::random_array;

namespace {

// dx[n,i] = sum_o dy[n,o] W[o,i], written as loops (reference for linear's dx).
xt::xarray<double> reference_dx(const xt::xarray<double>& dy, const xt::xarray<double>& w) {
  xt::xarray<double> dx = xt::zeros<double>({dy.shape()[0], w.shape()[1]});
  for (std::size_t n = 0; n < dy.shape()[0]; ++n)
    for (std::size_t i = 0; i < w.shape()[1]; ++i)
      for (std::size_t o = 0; o < w.shape()[0]; ++o) dx(n, i) += dy(n, o) * w(o, i);
  return dx;
}

}  // namespace

TEST_CASE_TEMPLATE("tape: a leaf evaluates strided views once and never writes to them", T, float,
                   double) {
  xt::xarray<T> source = random_array<T>({4, 3}, 1);
  const xt::xarray<T> before = source;
  Tape<T> tape;
  auto transposed = tape.leaf(xt::transpose(source));
  auto stepped = tape.leaf(xt::view(source, xt::range(0, 4, 2), xt::all()));
  CHECK(transposed.shape() == Shape{3, 4});
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 4; ++j) CHECK(transposed.value()(i, j) == source(j, i));
  CHECK(stepped.value() == xt::xarray<T>{{source(0, 0), source(0, 1), source(0, 2)},
                                         {source(2, 0), source(2, 1), source(2, 2)}});
  auto w = tape.leaf(random_array<T>({2, 4}, 2));
  tape.backward(linear(transposed, w), xt::ones<T>({3, 2}));
  CHECK(source == before);
}

TEST_CASE("tape: leaves accumulate across backwards, intermediates restart") {
  Tape<double> tape;
  const xt::xarray<double> x0 = random_array({2, 3}, 3), w1v = random_array({4, 3}, 4),
                           w2v = random_array({2, 4}, 5), dy = random_array({2, 2}, 6);
  auto x = tape.leaf(x0);
  auto w1 = tape.leaf(w1v);
  auto w2 = tape.leaf(w2v);
  auto h = linear(x, w1);
  auto y = linear(h, w2);

  tape.backward(y, dy);
  const xt::xarray<double> dh = reference_dx(dy, w2v);
  const xt::xarray<double> dx = reference_dx(dh, w1v);
  check_close(h.grad(), dh);
  check_close(x.grad(), dx);

  tape.backward(y, dy);             // same recording, second time
  check_close(h.grad(), dh);        // intermediate: restarted, not doubled
  check_close(x.grad(), 2.0 * dx);  // leaf: accumulated
  tape.zero_grad();
  check_close(x.grad(), xt::zeros<double>({2, 3}));
  tape.backward(y, dy);
  check_close(x.grad(), dx);
}

TEST_CASE("tape: backward from an intermediate ignores later nodes") {
  Tape<double> tape;
  auto x = tape.leaf(random_array({1, 3}, 7));
  const xt::xarray<double> w1v = random_array({2, 3}, 8);
  auto w1 = tape.leaf(w1v);
  auto h = linear(x, w1);
  auto w2 = tape.leaf(random_array({5, 2}, 9));
  auto later = linear(h, w2);
  const xt::xarray<double> dh = random_array({1, 2}, 10);
  tape.backward(h, dh);
  check_close(x.grad(), reference_dx(dh, w1v));
  check_close(w2.grad(), xt::zeros<double>({5, 2}));
  check_close(later.grad(), xt::zeros<double>({1, 5}));
}

TEST_CASE_TEMPLATE("tape: parameters accumulate into Parameter::grad until zero_grad", T, float,
                   double) {
  Parameter<T> p("weight", xt::xarray<T>{{1, 2}, {3, 4}});
  CHECK_FALSE(p.has_grad);
  Tape<T> tape;
  auto x = tape.leaf(xt::xarray<T>{{1, 1}}, false);
  auto y = linear(x, tape.param(p));
  // y = x W^T, dW[o,i] = dy[o] x[i] = dy[o]
  const xt::xarray<T> dy{{2, -1}};
  tape.backward(y, dy);
  CHECK(p.has_grad);
  CHECK(p.grad == xt::xarray<T>{{2, 2}, {-1, -1}});
  tape.backward(y, dy);
  CHECK(p.grad == xt::xarray<T>{{4, 4}, {-2, -2}});
  CHECK(x.grad() == xt::zeros<T>({1, 2}));  // requires_grad = false: nothing flows there
  p.zero_grad();
  CHECK_FALSE(p.has_grad);
  CHECK(p.grad == xt::zeros<T>({2, 2}));
  CHECK(p.value == xt::xarray<T>{{1, 2}, {3, 4}});
}

TEST_CASE("tape: clear() invalidates Vars, and the tape records again with reused buffers") {
  Tape<double> tape;
  auto x = tape.leaf(xt::xarray<double>{{1.0, 2.0}});
  auto w = tape.leaf(xt::xarray<double>{{3.0, 4.0}});
  auto y = linear(x, w);
  CHECK(y.value() == xt::xarray<double>(xt::xarray<double>::shape_type{1, 1}, 11.0));
  tape.clear();
  CHECK(tape.size() == 0);
  CHECK_THROWS_WITH_PARTS(y.value(), std::logic_error, {"cleared", "record the computation again"});
  CHECK_THROWS_WITH_PARTS(tape.backward(y), std::logic_error, {"Tape::backward", "cleared"});
  CHECK_THROWS_WITH_PARTS(linear(x, w), std::logic_error, {"linear", "cleared"});

  // Same tape, different shapes: the kept buffers must not leak old values.
  auto x2 = tape.leaf(xt::xarray<double>{{1.0, 0.0, -1.0}, {2.0, 2.0, 2.0}});
  auto w2 = tape.leaf(xt::xarray<double>{{1.0, 1.0, 1.0}});
  auto y2 = linear(x2, w2);
  CHECK(y2.value() ==
        xt::xarray<double>(std::initializer_list<std::initializer_list<double>>{{0.0}, {6.0}}));
  tape.backward(y2, xt::ones<double>({2, 1}));
  CHECK(w2.grad() == xt::xarray<double>{{3.0, 2.0, 1.0}});
  tape.release();
  CHECK_THROWS_AS(y2.value(), std::logic_error);
}

TEST_CASE("tape: misuse gives clear errors") {
  Tape<double> a, b;
  auto x = a.leaf(xt::xarray<double>{{1.0, 2.0}});
  auto w = b.leaf(xt::xarray<double>{{1.0, 2.0}});
  CHECK_THROWS_WITH_PARTS(linear(x, w), std::logic_error,
                          {"linear", "'x'", "'weight'", "different tapes"});
  CHECK_THROWS_WITH_PARTS(Var<double>().value(), std::logic_error,
                          {"Var::value", "empty Var handle"});
  CHECK_THROWS_WITH_PARTS(b.backward(x), std::logic_error, {"Tape::backward", "different tape"});

  auto w_a = a.leaf(xt::xarray<double>{{1.0, 2.0}, {3.0, 4.0}});
  auto y = linear(x, w_a);  // shape [1, 2]: not one element
  CHECK_THROWS_WITH_PARTS(a.backward(y), std::logic_error, {"[1, 2]", "backward(y, dy)"});
  CHECK_THROWS_WITH_PARTS(a.backward(y, xt::ones<double>({2, 1})), std::invalid_argument,
                          {"Tape::backward", "'dy'", "[2, 1]", "[1, 2]"});
}

TEST_CASE_TEMPLATE("tape: the non-recording mode computes the same values and saves nothing", T,
                   float, double) {
  const xt::xarray<T> xv = random_array<T>({3, 4}, 11), wv = random_array<T>({2, 4}, 12);
  Tape<T> tape;
  auto y_recorded = linear(tape.leaf(xv), tape.leaf(wv));
  CHECK(y_recorded.requires_grad());
  xt::xarray<T> recorded = y_recorded.value();
  {
    NoGradGuard<T> guard(tape);
    CHECK_FALSE(tape.grad_enabled());
    auto y = linear(tape.leaf(xv), tape.leaf(wv));
    CHECK_FALSE(y.requires_grad());
    CHECK(y.value() == recorded);
    CHECK_THROWS_WITH_PARTS(tape.backward(y, xt::ones<T>({3, 2})), std::logic_error,
                            {"does not require a gradient"});
  }
  CHECK(tape.grad_enabled());
}

TEST_CASE("tape: two threads with their own tapes give the single-thread results") {
  auto run = [](std::uint32_t seed) {
    Tape<double> tape;
    auto x = tape.leaf(random_array({64, 32}, seed));
    auto w1 = tape.leaf(random_array({48, 32}, seed + 1));
    auto w2 = tape.leaf(random_array({8, 48}, seed + 2));
    auto y = linear(linear(x, w1), w2);
    tape.backward(y, random_array({64, 8}, seed + 3));
    return std::vector<xt::xarray<double>>{y.value(), x.grad(), w1.grad(), w2.grad()};
  };
  const auto expected_a = run(100), expected_b = run(200);
  std::vector<xt::xarray<double>> got_a, got_b;
  std::thread ta([&] {
    for (int i = 0; i < 20; ++i) got_a = run(100);
  });
  std::thread tb([&] {
    for (int i = 0; i < 20; ++i) got_b = run(200);
  });
  ta.join();
  tb.join();
  REQUIRE(got_a.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(got_a[i] == expected_a[i]);
    CHECK(got_b[i] == expected_b[i]);
  }
}

TEST_CASE("tape: an op on a Parameter that changed shape throws and records nothing") {
  // Every op checks its arguments' Parameters before it records: the tape is
  // left exactly as it was, whatever op is called.
  Parameter<double> p("p", xt::xarray<double>{{1.0, -2.0, 3.0}});
  Tape<double> tape;
  const Var<double> v = tape.param(p);
  p.value = xt::xarray<double>{1.0, 2.0};  // resized after recording
  const std::size_t nodes = tape.size();
  const auto expect_refused = [&](const char* op, auto call) {
    CAPTURE(op);
    CHECK_THROWS_WITH_PARTS(call(), std::logic_error, {op, "'p'", "[1, 3]", "[2]"});
    CHECK(tape.size() == nodes);
  };
  expect_refused("xtgrad::activation", [&] { return relu(v); });
  expect_refused("xtgrad::sum", [&] { return sum(v); });
  expect_refused("xtgrad::mean", [&] { return mean(v); });
  expect_refused("xtgrad::scale", [&] { return scale(v, 2.0); });
  expect_refused("xtgrad::add", [&] { return add(v, v); });
  expect_refused("xtgrad::linear", [&] { return linear(v, v); });
  expect_refused("xtgrad::mse", [&] { return mse(v, v); });
}

TEST_CASE("tape: param() refuses to drop a gradient accumulated for a Parameter's old shape") {
  Parameter<double> p("p", xt::xarray<double>{2.0, 3.0});
  {
    Tape<double> tape;
    tape.backward(sum(mul(tape.param(p), tape.param(p))));  // dp = 2 p
  }
  REQUIRE(p.has_grad);
  p.value = xt::xarray<double>{1.0, 1.0, 1.0};
  Tape<double> tape;
  CHECK_THROWS_WITH_PARTS(tape.param(p), std::logic_error,
                          {"xtgrad::Tape::param", "'p'", "[3]", "[2]", "zero_grad"});
  CHECK(tape.size() == 0);
  CHECK(p.grad == xt::xarray<double>{4.0, 6.0});  // kept
  // Without a gradient the buffer simply follows the new shape.
  p.zero_grad();
  const Var<double> v = tape.param(p);
  tape.backward(sum(v));
  CHECK(p.grad == xt::xarray<double>{1.0, 1.0, 1.0});
}

TEST_CASE("tape: item reads a one-element Var and names the shape of any other") {
  Tape<double> tape;
  CHECK(tape.leaf(xt::xarray<double>(2.5 * xt::ones<double>({1, 1}))).item() == 2.5);
  const Var<double> v = tape.leaf(xt::xarray<double>{{1.0, 2.0, 3.0}});
  CHECK(sum(v).item() == 6.0);
  CHECK_THROWS_WITH_PARTS(v.item(), std::invalid_argument,
                          {"xtgrad::Var::item", "argument 'this' has shape [1, 3]", "one element"});
  CHECK_THROWS_AS(Var<double>().item(), std::logic_error);
}

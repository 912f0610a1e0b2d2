// Non-finite values. Without anomaly mode NaN and Inf flow
// through every op, backward rule and optimizer exactly as IEEE arithmetic
// says, and nothing throws; references are plain scalar expressions written
// here. With Tape::set_detect_anomaly(true) the first node whose value or
// gradient is not finite throws AnomalyError naming the op, the node index
// and the shapes, and a forward anomaly leaves the tape as it was.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <xtensor/xtensor.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/modules.hpp>
#include <xtgrad/optim/optim.hpp>

#include "support/test_helpers.hpp"

using namespace xtgrad;

namespace {

template <class T>
constexpr T k_nan = std::numeric_limits<T>::quiet_NaN();
template <class T>
constexpr T k_inf = std::numeric_limits<T>::infinity();

// A [rows, cols] array from row-major values (a {{x}} literal is ambiguous).
template <class T>
xt::xarray<T> matrix(std::size_t rows, std::size_t cols, const std::vector<T>& values) {
  xt::xarray<T> a = xt::empty<T>({rows, cols});
  std::copy(values.begin(), values.end(), a.begin());
  return a;
}

// Equal shapes and, element by element, both NaN or equal (inf == inf).
template <class T>
bool same_ieee(const xt::xarray<T>& actual, const xt::xarray<T>& expected) {
  if (actual.shape() != expected.shape()) return false;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const T a = actual.data()[i], e = expected.data()[i];
    if (std::isnan(e) ? !std::isnan(a) : a != e) return false;
  }
  return true;
}

template <class T>
void check_ieee(const xt::xarray<T>& actual, const xt::xarray<T>& expected) {
  INFO("actual:\n" << actual << "\nexpected:\n" << expected);
  CHECK(same_ieee(actual, expected));
}

template <class T>
bool all_finite(const xt::xarray<T>& a) {
  for (T v : a)
    if (!std::isfinite(v)) return false;
  return true;
}

// Runs `f` and returns the AnomalyError it throws; fails the test if it
// throws nothing or anything else.
template <class F>
AnomalyError expect_anomaly(F&& f) {
  try {
    f();
  } catch (const AnomalyError& e) {
    return e;
  } catch (const std::exception& e) {
    FAIL("expected AnomalyError, got: " << e.what());
  }
  FAIL("expected AnomalyError, nothing was thrown");
  return AnomalyError("", AnomalyError::Phase::forward, "", 0, 0);
}

}  // namespace

// ---------------------------------------------------------------- IEEE propagation

TEST_CASE_TEMPLATE("anomaly: add, sub, mul and scale propagate NaN and Inf as IEEE says", T, float,
                   double) {
  const T nan = k_nan<T>, inf = k_inf<T>;
  const xt::xarray<T> av = {1, nan, inf, -inf, 0, inf};
  const xt::xarray<T> bv = {2, 3, inf, inf, inf, -inf};
  xt::xarray<T> sum = xt::empty<T>({6}), diff = xt::empty<T>({6}), prod = xt::empty<T>({6});
  for (std::size_t i = 0; i < 6; ++i) {  // the reference: scalar IEEE arithmetic
    sum(i) = av(i) + bv(i);
    diff(i) = av(i) - bv(i);
    prod(i) = av(i) * bv(i);
  }
  CHECK(std::isnan(sum(3)));   // -inf + inf
  CHECK(std::isnan(prod(4)));  // 0 * inf

  Tape<T> tape;
  Var<T> a = tape.leaf(av), b = tape.leaf(bv);
  check_ieee(add(a, b).value(), sum);
  check_ieee(sub(a, b).value(), diff);
  Var<T> p = mul(a, b);
  check_ieee(p.value(), prod);
  check_ieee(scale(a, T(0)).value(), xt::xarray<T>{0, nan, nan, nan, 0, nan});
  // d(a * b)/da = dy * b and d/db = dy * a, with dy = 1: the other operand exactly.
  tape.backward(p, xt::ones<T>({6}));
  check_ieee(a.grad(), bv);
  check_ieee(b.grad(), av);

  // Broadcasting repeats a NaN along the axis it is repeated on, and the
  // gradient of the repeated operand sums over it.
  Tape<T> t2;
  Var<T> m = t2.leaf(xt::xarray<T>{{1, 2}, {3, 4}});
  Var<T> bias = t2.leaf(xt::xarray<T>{nan, 1});
  Var<T> y = add(m, bias);
  check_ieee(y.value(), xt::xarray<T>{{nan, 3}, {nan, 5}});
  t2.backward(y, xt::xarray<T>{{1, inf}, {1, -inf}});
  check_ieee(bias.grad(), xt::xarray<T>{2, nan});  // inf + -inf
  check_ieee(m.grad(), xt::xarray<T>{{1, inf}, {1, -inf}});
}

TEST_CASE_TEMPLATE("anomaly: sum, mean and mse propagate NaN and Inf", T, float, double) {
  const T nan = k_nan<T>, inf = k_inf<T>;
  Tape<T> tape;
  CHECK(sum(tape.leaf(xt::xarray<T>{1, inf})).value()() == inf);
  CHECK(std::isnan(sum(tape.leaf(xt::xarray<T>{1, inf, -inf})).value()()));
  CHECK(std::isnan(mean(tape.leaf(xt::xarray<T>{1, nan, 2})).value()()));
  CHECK(std::isnan(mean(tape.leaf(xt::xarray<T>::from_shape({0}))).value()()));  // 0 / 0

  // mean backward spreads dy / n, finite even when the values are not.
  Var<T> x = tape.leaf(xt::xarray<T>{nan, inf, 3, 4});
  tape.backward(mean(x));
  check_ieee(x.grad(), xt::xarray<T>{0.25, 0.25, 0.25, 0.25});

  // mse with one NaN target: the loss is NaN, and the gradient of the
  // prediction is NaN exactly there: d/dp_i = 2 (p_i - t_i) / n.
  Tape<T> t2;
  Var<T> p = t2.leaf(xt::xarray<T>{1, 2, 3});
  Var<T> target = t2.leaf(xt::xarray<T>{0, nan, 1}, false);
  Var<T> loss = mse(p, target);
  CHECK(std::isnan(loss.value()()));
  t2.backward(loss, xt::xarray<T>(T(1)));
  check_ieee(p.grad(), xt::xarray<T>{T(2) * 1 / 3, nan, T(2) * 2 / 3});
}

TEST_CASE_TEMPLATE("anomaly: linear spreads a NaN along its row and column only", T, float,
                   double) {
  const T nan = k_nan<T>, inf = k_inf<T>;
  xt::xarray<T> xv = {{1, 2, 3}, {4, 5, 6}, {0.5, -1, 2}};
  xv(1, 2) = nan;                                    // row 1, input feature 2
  const xt::xarray<T> wv = {{1, 0, -1}, {2, 1, 0}};  // [out = 2, in = 3]
  Tape<T> tape;
  Var<T> x = tape.leaf(xv), w = tape.leaf(wv), b = tape.leaf(xt::xarray<T>{0, 1});
  Var<T> y = linear(x, w, b);
  // y[r, o] = sum_k x[r, k] w[o, k] + b[o], in a scalar loop.
  xt::xarray<T> expected = xt::empty<T>({3, 2});
  for (std::size_t r = 0; r < 3; ++r)
    for (std::size_t o = 0; o < 2; ++o) {
      T acc = b.value()(o);
      for (std::size_t k = 0; k < 3; ++k) acc += xv(r, k) * wv(o, k);
      expected(r, o) = acc;
    }
  check_ieee(y.value(), expected);
  CHECK(std::isnan(y.value()(1, 0)));
  CHECK(std::isnan(y.value()(1, 1)));

  tape.backward(y, xt::ones<T>({3, 2}));
  // dW[o, k] = sum_r dy[r, o] x[r, k]: column k = 2 is NaN, the rest finite.
  for (std::size_t o = 0; o < 2; ++o)
    for (std::size_t k = 0; k < 3; ++k) CHECK(std::isnan(w.grad()(o, k)) == (k == 2));
  CHECK(all_finite(xt::xarray<T>(x.grad())));  // dx = dy W: no NaN involved
  check_ieee(b.grad(), xt::xarray<T>{3, 3});

  // An infinite weight: y = inf where x > 0, -inf where x < 0, NaN where x = 0.
  Tape<T> t2;
  Var<T> y2 = linear(t2.leaf(matrix<T>(3, 1, {2, -1, 0})), t2.leaf(matrix<T>(1, 1, {inf})));
  check_ieee(y2.value(), matrix<T>(3, 1, {inf, -inf, nan}));
}

TEST_CASE_TEMPLATE("anomaly: activations and gated take their limits at +-inf and keep NaN", T,
                   float, double) {
  const T nan = k_nan<T>, inf = k_inf<T>;
  // Long enough for the vectorized body and the scalar tail of each kernel.
  const std::size_t n = 37;
  xt::xarray<T> xv = xt::zeros<T>({n});
  for (std::size_t i : {std::size_t(0), std::size_t(20), n - 1}) {
    xv(i) = nan;
    xv(i + 1 < n ? i + 1 : 1) = inf;
    xv(i + 2 < n ? i + 2 : 2) = -inf;
  }
  for (Activation a : {Activation::relu, Activation::gelu, Activation::gelu_tanh,
                       Activation::gelu_sigmoid, Activation::silu}) {
    INFO("activation " << to_string(a));
    Tape<T> tape;
    Var<T> x = tape.leaf(xv);
    Var<T> y = activation(x, a);
    tape.backward(y, xt::ones<T>({n}));
    for (std::size_t i = 0; i < n; ++i) {
      INFO("element " << i << " x = " << xv(i));
      const T v = xv(i), f = y.value()(i), d = x.grad()(i);
      if (std::isnan(v)) {
        CHECK(std::isnan(f));  // f(NaN) = NaN, as torch
        // relu'(NaN) = 0: PyTorch's threshold_backward keeps dy only where x > 0.
        if (a == Activation::relu)
          CHECK(d == 0);
        else
          CHECK(std::isnan(d));
      } else if (v == inf) {
        CHECK(f == inf);  // f(+inf) = +inf, f'(+inf) = 1 (activation.hpp)
        CHECK(d == 1);
      } else if (v == -inf) {
        CHECK(f == 0);  // f(-inf) = 0, f'(-inf) = 0, not inf * 0 = NaN
        CHECK(d == 0);
      }
    }
  }

  // gated: y = u * f(g), du = dy * f(g), dg = dy * u * f'(g).
  Tape<T> tape;
  Var<T> u = tape.leaf(xt::xarray<T>{nan, 2, inf, 3});
  Var<T> g = tape.leaf(xt::xarray<T>{1, -inf, -inf, nan});
  Var<T> y = gated(u, g, Activation::silu);
  const T silu1 = T(1) / (T(1) + std::exp(T(-1)));
  check_ieee(y.value(), xt::xarray<T>{nan, 0, nan, nan});  // inf * f(-inf) = inf * 0 = NaN
  CHECK(y.value()(0) != silu1);                            // NaN
  tape.backward(y, xt::ones<T>({4}));
  check_ieee(u.grad(), xt::xarray<T>{silu1, 0, 0, nan});
  check_ieee(g.grad(), xt::xarray<T>{nan, 0, nan, nan});  // 2 * f'(-inf) = 0; inf * 0 = NaN
}

TEST_CASE_TEMPLATE("anomaly: optimizers pass a NaN gradient through to its element only", T, float,
                   double) {
  const T nan = k_nan<T>, inf = k_inf<T>;
  Parameter<T> p("p", xt::xarray<T>{1, 2, 3});
  p.grad = xt::xarray<T>{0.5, nan, -0.5};
  p.has_grad = true;
  optim::Adam<T> adam({&p}, optim::AdamOptions(0.1));
  adam.step();
  // First Adam step: p -= lr * sign(g) (m / sqrt(v) = g / |g| up to eps).
  CHECK(p.value(0) == doctest::Approx(0.9).epsilon(1e-6));
  CHECK(std::isnan(p.value(1)));
  CHECK(p.value(2) == doctest::Approx(3.1).epsilon(1e-6));

  Parameter<T> q("q", xt::xarray<T>{1, 2});
  q.grad = xt::xarray<T>{inf, 1};
  q.has_grad = true;
  optim::SGD<T> sgd({&q}, optim::SGDOptions(0.5));
  sgd.step();
  check_ieee(q.value, xt::xarray<T>{-inf, 1.5});

  // clip_grad_norm reports a non-finite norm and leaves the gradients alone.
  Parameter<T> r("r", xt::xarray<T>{1, 2});
  r.grad = xt::xarray<T>{inf, 1};
  r.has_grad = true;
  CHECK(optim::clip_grad_norm<T>({&r}, 1.0) == std::numeric_limits<double>::infinity());
  check_ieee(r.grad, xt::xarray<T>{inf, 1});
}

// ---------------------------------------------------------------- anomaly mode

TEST_CASE("anomaly: the mode is off by default and the guard restores it") {
  Tape<double> tape;
  CHECK_FALSE(tape.detect_anomaly());
  {
    DetectAnomalyGuard<double> guard(tape);
    CHECK(tape.detect_anomaly());
    {
      DetectAnomalyGuard<double> off(tape, false);
      CHECK_FALSE(tape.detect_anomaly());
    }
    CHECK(tape.detect_anomaly());
  }
  CHECK_FALSE(tape.detect_anomaly());
  // Off: a NaN input and a NaN result are recorded without complaint.
  Var<double> x = tape.leaf(xt::xarray<double>{k_nan<double>, 1.0});
  CHECK(std::isnan(sum(x).value()()));
  CHECK(tape.size() == 2);
}

TEST_CASE_TEMPLATE("anomaly: a forward value that overflows names the op, node and shapes", T,
                   float, double) {
  const T big = std::numeric_limits<T>::max() / 4;
  Tape<T> tape;
  tape.set_detect_anomaly(true);
  Var<T> a = tape.leaf(xt::xarray<T>{{big, 1}, {2, 3}});  // node 0
  Var<T> b = tape.leaf(xt::xarray<T>{8, 1});              // node 1
  Var<T> c = add(a, b);                                   // node 2, finite
  const std::size_t size_before = tape.size();
  const AnomalyError e = expect_anomaly([&] { mul(c, b); });  // big * 8 = inf at [0, 1]
  CHECK(e.phase() == AnomalyError::Phase::forward);
  CHECK(e.op() == "mul");
  CHECK(e.node() == 3);
  CHECK(testing::message_contains(
      e, {"anomaly mode", "forward value of node 3 ('mul', shape [2, 2])", "inf at [0, 0]",
          "node 2 ('add', shape [2, 2])", "node 1 ('leaf', shape [2])", "not recorded"}));
  // The node was not recorded: the tape goes on as if mul had not been called.
  CHECK(tape.size() == size_before);
  Var<T> d = scale(c, T(2));
  CHECK(d.index() == 3);
  tape.backward(sum(d));
  CHECK(a.grad() == xt::xarray<T>{{2, 2}, {2, 2}});
  static_assert(std::is_base_of_v<std::runtime_error, AnomalyError>);
}

TEST_CASE_TEMPLATE(
    "anomaly: a non-finite leaf, Parameter or reduction is reported where it appears", T, float,
    double) {
  const T nan = k_nan<T>;
  Tape<T> tape;
  DetectAnomalyGuard<T> guard(tape);
  Var<T> ok = tape.leaf(xt::xarray<T>{1, 2});
  AnomalyError e = expect_anomaly([&] { tape.leaf(xt::xarray<T>{{1, 2}, {3, nan}}); });
  CHECK(e.op() == "leaf");
  CHECK(e.node() == 1);
  CHECK(testing::message_contains(e, {"node 1 ('leaf', shape [2, 2])", "nan at [1, 1]"}));
  CHECK(tape.size() == 1);

  Parameter<T> p("weight", xt::xarray<T>{{0, -k_inf<T>}});
  e = expect_anomaly([&] { tape.param(p); });
  CHECK(e.op() == "param");
  CHECK(
      testing::message_contains(e, {"node 1 ('param' 'weight', shape [1, 2])", "-inf at [0, 1]"}));
  CHECK(tape.size() == 1);

  // The mean of nothing is 0 / 0.
  Var<T> none = tape.leaf(xt::xarray<T>::from_shape({0, 3}));
  e = expect_anomaly([&] { mean(none); });
  CHECK(e.op() == "mean");
  CHECK(testing::message_contains(
      e, {"node 2 ('mean', shape [])", "nan at []", "node 1 ('leaf', shape [0, 3])"}));
  CHECK(tape.size() == 2);
  CHECK(sum(ok).value()() == 3);

  // Also while recording is off (inference).
  NoGradGuard<T> no_grad(tape);
  e = expect_anomaly([&] { mean(none); });
  CHECK(e.op() == "mean");
}

TEST_CASE("anomaly: the first backward rule that makes a gradient non-finite is reported") {
  // y = scale(scale(x, 1e20), 1e20) in float: every value is finite, but with
  // dy = 1 the gradient is 1e20 after the outer rule (finite) and 1e40 = inf
  // after the inner one, which is therefore the culprit.
  Tape<float> tape;
  tape.set_detect_anomaly(true);
  Var<float> x = tape.leaf(xt::xarray<float>{{1e-30f, 2e-30f, 0.f}});  // node 0
  Var<float> inner = scale(x, 1e20f);                                  // node 1
  Var<float> outer = scale(inner, 1e20f);                              // node 2
  Var<float> y = sum(outer);                                           // node 3
  REQUIRE(std::isfinite(y.value()()));
  const AnomalyError e = expect_anomaly([&] { tape.backward(y); });
  CHECK(e.phase() == AnomalyError::Phase::backward);
  CHECK(e.op() == "scale");
  CHECK(e.node() == 1);
  CHECK(e.gradient_node() == 0);
  CHECK(testing::message_contains(
      e, {"backward of node 1 ('scale', shape [1, 3])",
          "gradient of its input node 0 ('leaf', shape [1, 3])", "inf at [0, 0]"}));

  // Without the mode the same backward runs to the end and gives inf, as IEEE says.
  tape.set_detect_anomaly(false);
  tape.zero_grad();
  tape.backward(y);
  CHECK(x.grad() == xt::xarray<float>{{k_inf<float>, k_inf<float>, k_inf<float>}});
}

TEST_CASE(
    "anomaly: a non-finite dy, or a gradient left by an earlier backward, is reported first") {
  Tape<double> tape;
  Var<double> x = tape.leaf(xt::xarray<double>{1.0, 2.0});
  Var<double> y = scale(x, 3.0);
  tape.set_detect_anomaly(true);
  AnomalyError e = expect_anomaly([&] {
    tape.backward(y, xt::xarray<double>{1.0, k_nan<double>});
  });
  CHECK(e.node() == 1);
  CHECK(testing::message_contains(
      e, {"Tape::backward", "upstream gradient dy", "node 1 ('scale', shape [2])", "nan at [1]"}));
  CHECK(x.grad() == xt::xarray<double>{0.0, 0.0});  // nothing ran

  tape.set_detect_anomaly(false);
  tape.backward(y, xt::xarray<double>{1.0, k_inf<double>});  // accumulates inf into x
  tape.set_detect_anomaly(true);
  e = expect_anomaly([&] { tape.backward(y, xt::xarray<double>{1.0, 1.0}); });
  CHECK(e.node() == 0);
  CHECK(testing::message_contains(
      e, {"node 0 ('leaf', shape [2])", "earlier backward", "inf at [1]", "zero_grad"}));
  tape.zero_grad();
  tape.backward(y, xt::xarray<double>{1.0, 1.0});
  CHECK(x.grad() == xt::xarray<double>{3.0, 3.0});
}

TEST_CASE_TEMPLATE("anomaly: finite training is bit for bit the same with the mode on", T, float,
                   double) {
  const xt::xarray<T> xv = testing::random_array<T>({32, 4}, 5);
  const xt::xarray<T> tv = testing::random_array<T>({32, 4}, 6);
  auto train = [&](bool detect) {
    PositionwiseFFN<T> model(4, 8);
    optim::Adam<T> opt(model.parameters(), optim::AdamOptions(1e-2));
    Tape<T> tape;
    tape.set_detect_anomaly(detect);
    for (int step = 0; step < 20; ++step) {
      Var<T> loss = mse(model(tape.leaf(xv, false)), tape.leaf(tv, false));
      tape.backward(loss);
      opt.step();
      opt.zero_grad();
      tape.clear();
    }
    std::vector<xt::xarray<T>> values;
    for (Parameter<T>* p : model.parameters()) values.push_back(p->value);
    return values;
  };
  const auto plain = train(false), checked = train(true);
  REQUIRE(plain.size() == checked.size());
  for (std::size_t i = 0; i < plain.size(); ++i) CHECK(plain[i] == checked[i]);
}

TEST_CASE("anomaly: a module whose weights went NaN is caught at the Parameter") {
  PositionwiseFFN<double> model(2, 4);
  model.w2.weight.value(1, 3) = k_nan<double>;
  Tape<double> tape;
  tape.set_detect_anomaly(true);
  Var<double> x = tape.leaf(xt::xarray<double>{{0.5, -0.5}}, false);
  const AnomalyError e = expect_anomaly([&] { model(x); });
  CHECK(e.op() == "param");
  CHECK(testing::message_contains(e, {"'param' 'weight'", "shape [2, 4]", "nan at [1, 3]"}));
}

TEST_CASE("anomaly: a Parameter that changed shape since it was recorded stops backward") {
  Parameter<double> w("w", xt::xarray<double>{{1.0, 2.0}});
  Tape<double> tape;
  Var<double> y = sum(linear(tape.leaf(xt::xarray<double>{{1.0, 1.0}}), tape.param(w)));
  w.value = matrix<double>(1, 1, {1.0});  // would make the backward GEMM read past the end
  CHECK_THROWS_WITH_PARTS(tape.backward(y), std::logic_error,
                          {"Tape::backward", "Parameter 'w'", "[1, 2]", "[1, 1]", "record"});
  CHECK_FALSE(w.has_grad);
}

TEST_CASE(
    "anomaly: a Parameter resized after it was recorded cannot be used, even if resized back") {
  // Found by fuzz_tape (heap-buffer-overflow): recorded at [1], used by mse at
  // [3], put back to [1] before backward, whose rule then read 3 elements of 1.
  Parameter<double> p("p", xt::xarray<double>{1.0});
  Tape<double> tape;
  Var<double> pv = tape.param(p);
  p.value = xt::xarray<double>{1.0, 2.0, 3.0};
  Var<double> t = tape.leaf(xt::xarray<double>{0.0, 0.0, 0.0});
  CHECK_THROWS_WITH_PARTS(mse(pv, t), std::logic_error,
                          {"Parameter 'p'", "had shape [1] when it was recorded",
                           "has shape [3] now", "record the computation again"});
  CHECK_THROWS_AS(pv.shape(), std::logic_error);
  CHECK(tape.size() == 2);
  p.value = xt::xarray<double>{5.0};  // back to the recorded shape: usable again
  Var<double> y = mse(pv, tape.leaf(xt::xarray<double>{1.0}));
  tape.backward(y);
  CHECK(p.grad == xt::xarray<double>{8.0});  // 2 (5 - 1)
}

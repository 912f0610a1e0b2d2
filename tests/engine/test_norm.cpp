#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xview.hpp>

#include <xtgrad/engine/ops/elementwise.hpp>
#include <xtgrad/engine/ops/norm.hpp>
#include <xtgrad/engine/ops/reduce.hpp>

#include "support/bad_input.hpp"
#include "support/fixtures/norm_fixtures.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

namespace {

using Long = long double;

// The reference: one row at a time in long double, the gradients derived by
// hand from y = (x - mean) * rstd * w + b (Centered) or y = x * rstd * w:
//   dx_j = rstd * (g_j - mean(g) - xhat_j * mean(g * xhat)),  g = dy * w
// (without the mean(g) term for rms_norm), dw = sum dy * xhat, db = sum dy.
struct NormReference {
  xt::xarray<double> y, dx, dw, db;
};

template <class T>
NormReference norm_reference(bool centered, const xt::xarray<T>& x, const xt::xarray<T>* w,
                             const xt::xarray<T>* b, const xt::xarray<T>& dy, double eps) {
  const std::size_t d = x.shape().back(), rows = d ? x.size() / d : 0;
  NormReference r{xt::zeros<double>(x.shape()), xt::zeros<double>(x.shape()),
                  xt::zeros<double>({d}), xt::zeros<double>({d})};
  std::vector<Long> dw(d, 0), db(d, 0), xhat(d), g(d);
  for (std::size_t i = 0; i < rows; ++i) {
    const T* xr = x.data() + i * d;
    const T* dr = dy.data() + i * d;
    Long mean = 0, var = 0, mean_g = 0, mean_gx = 0;
    if (centered) {
      for (std::size_t j = 0; j < d; ++j) mean += xr[j];
      mean /= d;
    }
    for (std::size_t j = 0; j < d; ++j) var += (xr[j] - mean) * (xr[j] - mean);
    var /= d;
    const Long rstd = 1 / std::sqrt(var + static_cast<Long>(eps));
    for (std::size_t j = 0; j < d; ++j) {
      const Long wj = w ? Long(w->data()[j]) : 1, bj = b ? Long(b->data()[j]) : 0;
      xhat[j] = (xr[j] - mean) * rstd;
      g[j] = dr[j] * wj;
      r.y.data()[i * d + j] = static_cast<double>(xhat[j] * wj + bj);
      if (centered) mean_g += g[j] / d;
      mean_gx += g[j] * xhat[j] / d;
      dw[j] += dr[j] * xhat[j];
      db[j] += dr[j];
    }
    for (std::size_t j = 0; j < d; ++j)
      r.dx.data()[i * d + j] = static_cast<double>(rstd * (g[j] - mean_g - xhat[j] * mean_gx));
  }
  for (std::size_t j = 0; j < d; ++j) {
    r.dw(j) = static_cast<double>(dw[j]);
    r.db(j) = static_cast<double>(db[j]);
  }
  return r;
}

template <class T>
constexpr double rtol() {
  return std::is_same_v<T, float> ? 2e-5 : 1e-12;
}

// Runs layer_norm (centered) or rms_norm with optional weight and bias and
// checks value and every gradient against norm_reference.
template <class T>
void check_against_reference(bool centered, const xt::xarray<T>& x, const xt::xarray<T>* w,
                             const xt::xarray<T>* b, const xt::xarray<T>& dy, double eps) {
  Tape<T> tape;
  Var<T> xv = tape.leaf(x);
  std::optional<Var<T>> wv, bv;
  if (w) wv = tape.leaf(*w);
  if (b) bv = tape.leaf(*b);
  Var<T> y = centered ? layer_norm(xv, wv, bv, eps) : rms_norm(xv, wv, eps);
  tape.backward(y, dy);
  const NormReference r = norm_reference(centered, x, w, b, dy, eps);
  const double tol = rtol<T>();
  check_close(y.value(), r.y, tol, tol);
  check_close(xv.grad(), r.dx, tol, tol);
  if (wv) check_close(wv->grad(), r.dw, tol, tol * x.size());
  if (bv) check_close(bv->grad(), r.db, tol, tol * x.size());
}

template <class T>
xt::xarray<T> fixture(const double* data, std::vector<std::size_t> shape) {
  std::size_t n = 1;
  for (std::size_t s : shape) n *= s;
  return xt::cast<T>(xt::xarray<double>(xt::adapt(data, n, xt::no_ownership(), shape)));
}

}  // namespace

TEST_CASE_TEMPLATE("layer_norm: values and gradients match torch.nn.functional.layer_norm", T,
                   float, double) {
  namespace f = fixtures::norm;
  const std::vector<std::size_t> shape = {f::rows, f::features};
  const xt::xarray<T> x = fixture<T>(f::x, shape), dy = fixture<T>(f::dy, shape);
  const double tol = rtol<T>();
  {
    Tape<T> tape;
    Var<T> xv = tape.leaf(x), w = tape.leaf(fixture<T>(f::weight, {f::features}));
    Var<T> b = tape.leaf(fixture<T>(f::bias, {f::features}));
    Var<T> y = layer_norm(xv, opt(w), opt(b), f::eps);
    tape.backward(y, dy);
    check_close(y.value(), fixture<double>(f::y, shape), tol, tol);
    check_close(xv.grad(), fixture<double>(f::dx, shape), tol, tol);
    check_close(w.grad(), fixture<double>(f::dweight, {f::features}), tol, tol);
    check_close(b.grad(), fixture<double>(f::dbias, {f::features}), tol, tol);
  }
  {
    Tape<T> tape;
    Var<T> xv = tape.leaf(x);
    Var<T> y = layer_norm(xv);  // eps 1e-5 by default, as torch
    tape.backward(y, dy);
    check_close(y.value(), fixture<double>(f::y_plain, shape), tol, tol);
    check_close(xv.grad(), fixture<double>(f::dx_plain, shape), tol, tol);
  }
}

TEST_CASE("rms_norm: hand-computed values") {
  // x = [3, 4], eps 0: rms = sqrt(12.5), y = x / rms; weight [2, -1]
  Tape<double> tape;
  Var<double> x = tape.leaf(xt::xarray<double>{3.0, 4.0});
  Var<double> w = tape.leaf(xt::xarray<double>{2.0, -1.0});
  Var<double> y = rms_norm(x, opt(w), 0.0);
  CHECK(y.value()(0) == doctest::Approx(2 * 0.848528137423857).epsilon(1e-14));
  CHECK(y.value()(1) == doctest::Approx(-1.131370849898476).epsilon(1e-14));
  // default eps 1e-6: y0 = 3 / sqrt(12.5 + 1e-6)
  Var<double> y_default = rms_norm(x);
  CHECK(y_default.value()(0) == doctest::Approx(3 / std::sqrt(12.5 + 1e-6)).epsilon(1e-15));
  // layer_norm of [1, 2, 3]: mean 2, var 2/3
  Var<double> z = layer_norm(tape.leaf(xt::xarray<double>{1.0, 2.0, 3.0}), {}, {}, 0.0);
  CHECK(z.value()(0) == doctest::Approx(-std::sqrt(1.5)).epsilon(1e-14));
  CHECK(z.value()(1) == 0.0);
}

TEST_CASE_TEMPLATE("norms: values and all gradients match a long-double loop", T, float, double) {
  const xt::xarray<T> x = random_array<T>({2, 3, 37}, 11, -2.0, 3.0);
  const xt::xarray<T> w = random_array<T>({37}, 12, 0.5, 1.5), b = random_array<T>({37}, 13);
  const xt::xarray<T> dy = random_array<T>({2, 3, 37}, 14);
  for (bool centered : {true, false}) {
    CAPTURE(centered);
    check_against_reference<T>(centered, x, &w, centered ? &b : nullptr, dy, 1e-5);
    check_against_reference<T>(centered, x, nullptr, nullptr, dy, 1e-5);
    check_against_reference<T>(centered, x, &w, nullptr, dy, 0.0);
  }
}

TEST_CASE("norms: float rows 1000 + 1e-2 * noise keep float accuracy") {
  // A one-pass E[x^2] - E[x]^2 in float loses every digit here.
  xt::xarray<float> x = random_array<float>({4, 1024}, 21);
  for (float& v : x) v = 1000.0f + 1e-2f * v;
  const xt::xarray<float> w = random_array<float>({1024}, 22, 0.5, 1.5);
  const xt::xarray<float> b = random_array<float>({1024}, 23);
  const xt::xarray<float> dy = random_array<float>({4, 1024}, 24);
  check_against_reference<float>(true, x, &w, &b, dy, 1e-5);
  check_against_reference<float>(false, x, &w, nullptr, dy, 1e-6);
}

TEST_CASE_TEMPLATE("norms: constant rows give y = b and finite gradients", T, float, double) {
  const xt::xarray<T> x = {{3.5, 3.5, 3.5, 3.5}, {-1e4, -1e4, -1e4, -1e4}};
  const xt::xarray<T> w = {0.5, 2, -1, 1}, b = {1, 2, 3, 4};
  Tape<T> tape;
  Var<T> xv = tape.leaf(x), wv = tape.leaf(w), bv = tape.leaf(b);
  Var<T> y = layer_norm(xv, opt(wv), opt(bv));
  tape.backward(y, random_array<T>({2, 4}, 31));
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 4; ++j) CHECK(y.value()(i, j) == b(j));
  for (const Var<T>& v : {xv, wv, bv})
    for (T g : v.grad()) CHECK(std::isfinite(g));
  // dx of a constant row: xhat = 0, so dx = rstd * (g - mean(g)) with rstd = 1 / sqrt(eps)
  Var<T> zero_row = tape.leaf(xt::xarray<T>{0, 0, 0});
  Var<T> r = rms_norm(zero_row, std::optional<Var<T>>{}, 1e-6);
  tape.backward(r, xt::xarray<T>{1, 2, 3});
  check_close(r.value(), xt::xarray<double>{0, 0, 0}, 0, 0);
  check_close(zero_row.grad(), xt::xarray<double>{1e3, 2e3, 3e3}, 1e-5, 0);
}

TEST_CASE("norms: gradcheck over x, weight and bias") {
  const auto x = random_array<double>({3, 6}, 41, -2.0, 2.0);
  const auto x3 = random_array<double>({2, 2, 5}, 42, -2.0, 2.0);
  const auto w = random_array<double>({6}, 43, 0.5, 1.5), b = random_array<double>({6}, 44);
  const auto w5 = random_array<double>({5}, 45, -1.5, 1.5);
  using V = std::vector<Var<double>>;
  check_gradients([](const V& v) { return layer_norm(v[0], opt(v[1]), opt(v[2])); }, {x, w, b});
  check_gradients([](const V& v) { return layer_norm(v[0]); }, {x3});
  check_gradients([](const V& v) { return layer_norm(v[0], opt(v[1]), {}, 0.5); }, {x3, w5});
  check_gradients([](const V& v) { return rms_norm(v[0], opt(v[1])); }, {x, w});
  check_gradients([](const V& v) { return rms_norm(v[0], {}, 0.25); }, {x3});
  // one Var as x and weight (and bias): both shares add up
  check_gradients([](const V& v) { return layer_norm(v[0], opt(v[0]), opt(v[0])); }, {w});
  check_gradients([](const V& v) { return rms_norm(v[0], opt(v[0])); }, {w});
}

TEST_CASE_TEMPLATE("norms: edge shapes and strided views", T, float, double) {
  // [0, D]: an empty y, and zero gradients for weight and bias
  {
    Tape<T> tape;
    Var<T> x = tape.leaf(xt::xarray<T>(xt::zeros<T>({0, 4})));
    Var<T> w = tape.leaf(xt::xarray<T>{1, 2, 3, 4}), b = tape.leaf(xt::xarray<T>{1, 2, 3, 4});
    Var<T> y = layer_norm(x, opt(w), opt(b));
    CHECK(y.shape() == Shape{0, 4});
    tape.backward(y, xt::xarray<T>(xt::zeros<T>({0, 4})));
    check_close(w.grad(), xt::xarray<double>{0, 0, 0, 0}, 0, 0);
    check_close(b.grad(), xt::xarray<double>{0, 0, 0, 0}, 0, 0);
    Var<T> r = rms_norm(x, opt(w));
    CHECK(r.shape() == Shape{0, 4});
    Var<T> empty_rows = layer_norm(tape.leaf(xt::xarray<T>(xt::zeros<T>({3, 0}))));
    CHECK(empty_rows.shape() == Shape{3, 0});
  }
  // [D] and 3-D leading axes are the same rows as [1, D] and [N, D]
  const xt::xarray<T> x3 = random_array<T>({2, 3, 6}, 51);
  const xt::xarray<T> x2 = xt::reshape_view(x3, {6, 6});
  Tape<T> tape;
  for (bool centered : {true, false}) {
    auto f = [centered](const Var<T>& v) { return centered ? layer_norm(v) : rms_norm(v); };
    Var<T> a = f(tape.leaf(x3)), b = f(tape.leaf(x2));
    check_close(xt::xarray<T>(xt::reshape_view(a.value(), {6, 6})), b.value(), 0, 0);
    const xt::xarray<T> row = xt::view(x2, 1);
    Var<T> c = f(tape.leaf(row));
    check_close(c.value(), xt::xarray<T>(xt::view(b.value(), 1)), 0, 0);
    // a strided view (every other row of a transpose) equals its contiguous copy
    const auto strided = xt::view(xt::transpose(x2), xt::range(0, 6, 2));
    const xt::xarray<T> copy = strided;
    Var<T> s = tape.leaf(strided), s_copy = tape.leaf(copy);
    Var<T> ys = f(s), yc = f(s_copy);
    check_close(ys.value(), yc.value(), 0, 0);
    tape.backward(sum(mul(ys, ys)));
    tape.backward(sum(mul(yc, yc)));
    check_close(s.grad(), s_copy.grad(), 0, 0);
  }
}

TEST_CASE_TEMPLATE("norms: only the inputs that require a gradient get one", T, float, double) {
  Tape<T> tape;
  Var<T> x = tape.leaf(random_array<T>({3, 4}, 61), false);
  Var<T> w = tape.leaf(random_array<T>({4}, 62));
  Var<T> b = tape.leaf(random_array<T>({4}, 63), false);
  const xt::xarray<T> dy = random_array<T>({3, 4}, 64);
  Var<T> y = layer_norm(x, opt(w), opt(b));
  CHECK(y.requires_grad());
  tape.backward(y, dy);
  const NormReference r = norm_reference<T>(true, x.value(), &w.value(), &b.value(), dy, 1e-5);
  check_close(w.grad(), r.dw, rtol<T>(), rtol<T>());
  check_close(x.grad(), xt::xarray<double>(xt::zeros<double>({3, 4})), 0, 0);
  check_close(b.grad(), xt::xarray<double>(xt::zeros<double>({4})), 0, 0);
  Var<T> none = rms_norm(x);
  CHECK_FALSE(none.requires_grad());
}

TEST_CASE_TEMPLATE("norms: gradients accumulate over two backwards", T, float, double) {
  Tape<T> tape;
  Var<T> x = tape.leaf(random_array<T>({3, 5}, 71)), w = tape.leaf(random_array<T>({5}, 72));
  Var<T> b = tape.leaf(random_array<T>({5}, 73));
  const xt::xarray<T> dy = random_array<T>({3, 5}, 74);
  for (bool centered : {true, false}) {
    tape.zero_grad();
    Var<T> y = centered ? layer_norm(x, opt(w), opt(b)) : rms_norm(x, opt(w));
    tape.backward(y, dy);
    const xt::xarray<T> dx1 = x.grad(), dw1 = w.grad(), db1 = b.grad();
    tape.backward(y, dy);
    check_close(x.grad(), xt::xarray<T>(2 * dx1), 1e-6, 0);
    check_close(w.grad(), xt::xarray<T>(2 * dw1), 1e-6, 0);
    check_close(b.grad(), xt::xarray<T>(2 * db1), 1e-6, 0);
  }
}

TEST_CASE_TEMPLATE("norms: anomaly mode names the op whose forward gives NaN", T, float, double) {
  Tape<T> tape;
  tape.set_detect_anomaly(true);
  Var<T> constant = tape.leaf(xt::xarray<T>{2, 2, 2});  // var 0: with eps 0, 0 * inf
  Var<T> zeros = tape.leaf(xt::xarray<T>{0, 0});
  check_forward_anomaly(tape, "layer_norm", [&] { layer_norm(constant, {}, {}, 0.0); });
  check_forward_anomaly(tape, "rms_norm", [&] { rms_norm(zeros, {}, 0.0); });
  // eps > 0 (the default) keeps them finite
  CHECK(std::isfinite(layer_norm(constant).value()(0)));
  CHECK(std::isfinite(rms_norm(zeros).value()(0)));
  // NaN in, NaN out of that row only (anomaly off)
  tape.set_detect_anomaly(false);
  Var<T> y = layer_norm(tape.leaf(xt::xarray<T>{{1, std::numeric_limits<T>::quiet_NaN()}, {1, 2}}));
  CHECK(std::isnan(y.value()(0, 0)));
  CHECK(y.value()(1, 1) == doctest::Approx(1.0).epsilon(1e-4));
}

TEST_CASE_TEMPLATE("bad input: norm", T, float, double) {
  Tape<T> tape, other, cleared;
  const Var<T> stale = cleared.leaf(xt::xarray<T>{1, 2});
  cleared.clear();
  Var<T> x = tape.leaf(random_array<T>({2, 3}, 1));
  Var<T> w = tape.leaf(random_array<T>({3}, 2)), b = tape.leaf(random_array<T>({3}, 3));
  Var<T> v4 = tape.leaf(random_array<T>({4}, 4)), m13 = tape.leaf(random_array<T>({1, 3}, 5));
  Var<T> scalar = tape.leaf(xt::xarray<T>(T(0.5)));
  tape.backward(sum(layer_norm(x, opt(w), opt(b))));
  const std::vector<Var<T>> leaves = {x, w, b, v4, m13, scalar};
  const auto snapshot = snapshot_of<T>({&tape, &other}, leaves);
  std::vector<Row> rows;
  const auto bad = row_adder(rows);
  const auto IA = Expect::invalid_argument;
  const double nan = k_nan;
  bad("layer_norm: 0-d x", [&] { layer_norm(scalar); }, IA,
      {"layer_norm", "'x'", "[]", "[..., D]"});
  bad("layer_norm: weight of the wrong size", [&] { layer_norm(x, opt(v4)); }, IA,
      {"layer_norm", "'weight'", "[4]", "expected [3]", "x [2, 3]"});
  bad("layer_norm: 2-d weight", [&] { layer_norm(x, opt(m13)); }, IA,
      {"layer_norm", "'weight'", "[1, 3]", "expected [3]"});
  bad("layer_norm: bias of the wrong size", [&] { layer_norm(x, opt(w), opt(v4)); }, IA,
      {"layer_norm", "'bias'", "[4]", "expected [3]", "x [2, 3]"});
  bad("layer_norm: negative eps", [&] { layer_norm(x, opt(w), opt(b), -1e-5); }, IA,
      {"layer_norm", "'eps'", "-1e-05", ">= 0"});
  bad("layer_norm: NaN eps", [&] { layer_norm(x, {}, {}, nan); }, IA,
      {"layer_norm", "'eps'", "nan"});
  bad("layer_norm: infinite eps", [&] { layer_norm(x, {}, {}, k_inf); }, IA,
      {"layer_norm", "'eps'", "inf"});
  bad("rms_norm: 0-d x", [&] { rms_norm(scalar); }, IA, {"rms_norm", "'x'", "[]"});
  bad("rms_norm: weight of the wrong size", [&] { rms_norm(x, opt(v4)); }, IA,
      {"rms_norm", "'weight'", "[4]", "expected [3]", "x [2, 3]"});
  bad("rms_norm: negative eps", [&] { rms_norm(x, opt(w), -1.0); }, IA,
      {"rms_norm", "'eps'", "-1", ">= 0"});
  add_handle_rows<T>(
      rows, "layer_norm", {"x", "weight", "bias"}, {x, w, b},
      [](const std::vector<Var<T>>& a) { layer_norm(a[0], opt(a[1]), opt(a[2])); }, other, stale);
  add_handle_rows<T>(
      rows, "rms_norm", {"x", "weight"}, {x, w},
      [](const std::vector<Var<T>>& a) { rms_norm(a[0], opt(a[1])); }, other, stale);
  report("norm", run_rows(rows, snapshot));
}

// activation_linear and gated_linear (engine/ops/fused_linear): values and
// every gradient against long-double loops, gradcheck, several row blocks on
// the BLAS path, edge shapes, views, aliased inputs, errors.
#include <doctest/doctest.h>

#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include <xtensor/xmanipulation.hpp>
#include <xtensor/xview.hpp>
#include <xtgrad/engine/kernels/activation_kernels.hpp>
#include <xtgrad/engine/ops/elementwise.hpp>
#include <xtgrad/engine/ops/fused_linear.hpp>

#include "support/activation_reference.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

namespace {

// The inputs of one call; u empty for activation_linear (g is h then).
template <class T>
struct Case {
  std::optional<xt::xarray<T>> u;
  xt::xarray<T> g;
  xt::xarray<T> w;
  std::optional<xt::xarray<T>> b;
  bool in_out = false;
  Activation f = Activation::relu;
};

struct Outputs {
  xt::xarray<double> y, du, dg, dw, db;
};

// The reference, in long double loops on g (and u) seen as [N, in]:
//   a = f(g) or u f(g);  y = a op(W) + b;  da = dy op(W)^T;
//   dg = da (u) f'(g);  du = da f(g);  dW = dy^T a (out_in) or a^T dy;  db = sum_r dy.
template <class T>
Outputs reference(const Case<T>& c, const xt::xarray<T>& dy) {
  const std::size_t in = c.in_out ? c.w.shape()[0] : c.w.shape()[1];
  const std::size_t out = c.in_out ? c.w.shape()[1] : c.w.shape()[0];
  std::size_t n = 1;  // the product of the leading axes
  for (std::size_t k = 0; k + 1 < c.g.dimension(); ++k) n *= c.g.shape()[k];
  const auto weight = [&](std::size_t o, std::size_t i) -> Real {
    return c.in_out ? c.w(i, o) : c.w(o, i);
  };
  Shape y_shape = c.g.shape();
  y_shape.back() = out;
  Outputs r{xt::zeros<double>(y_shape), xt::zeros<double>(c.g.shape()),
            xt::zeros<double>(c.g.shape()), xt::zeros<double>(c.w.shape()),
            xt::zeros<double>({out})};
  for (std::size_t row = 0; row < n; ++row) {
    std::vector<Real> a(in), da(in, 0);
    for (std::size_t i = 0; i < in; ++i) {
      const Real u = c.u ? Real(c.u->data()[row * in + i]) : 1;
      a[i] = u * reference_value(c.f, c.g.data()[row * in + i]);
    }
    for (std::size_t o = 0; o < out; ++o) {
      Real acc = c.b ? Real((*c.b)(o)) : 0;
      for (std::size_t i = 0; i < in; ++i) acc += a[i] * weight(o, i);
      r.y.data()[row * out + o] = static_cast<double>(acc);
      const Real d = dy.data()[row * out + o];
      r.db(o) += static_cast<double>(d);
      for (std::size_t i = 0; i < in; ++i) {
        da[i] += d * weight(o, i);
        const std::size_t w_index = c.in_out ? i * out + o : o * in + i;
        r.dw.data()[w_index] += static_cast<double>(d * a[i]);
      }
    }
    for (std::size_t i = 0; i < in; ++i) {
      const Real gi = c.g.data()[row * in + i];
      const Real u = c.u ? Real(c.u->data()[row * in + i]) : 1;
      r.dg.data()[row * in + i] = static_cast<double>(da[i] * u * reference_slope(c.f, gi));
      r.du.data()[row * in + i] = static_cast<double>(da[i] * reference_value(c.f, gi));
    }
  }
  return r;
}

template <class T>
Var<T> call(const Case<T>& c, Tape<T>& tape, std::optional<Var<T>>& u, Var<T>& g, Var<T>& w,
            std::optional<Var<T>>& b) {
  if (c.u) u = tape.leaf(*c.u);
  g = tape.leaf(c.g);
  w = tape.leaf(c.w);
  if (c.b) b = tape.leaf(*c.b);
  const WeightLayout layout = c.in_out ? WeightLayout::in_out : WeightLayout::out_in;
  return u ? gated_linear(*u, g, c.f, w, b, layout) : activation_linear(g, c.f, w, b, layout);
}

// Records the op, runs backward with dy, returns the value and every gradient.
template <class T>
Outputs run(const Case<T>& c, const xt::xarray<T>& dy) {
  Tape<T> tape;
  std::optional<Var<T>> u, b;
  Var<T> g, w;
  const Var<T> y = call(c, tape, u, g, w, b);
  tape.backward(y, dy);
  Outputs r{xt::cast<double>(y.value()), xt::zeros<double>(c.g.shape()), xt::cast<double>(g.grad()),
            xt::cast<double>(w.grad()), xt::zeros<double>({0})};
  if (u) r.du = xt::cast<double>(u->grad());
  if (b) r.db = xt::cast<double>(b->grad());
  return r;
}

// Float sums of `in` products: a few ulp per term.
template <class T>
double tolerance(std::size_t terms) {
  return std::is_same_v<T, float> ? 2e-6 * (10.0 + static_cast<double>(terms)) : 1e-12;
}

template <class T>
void check_outputs(const Case<T>& c, const Outputs& got, const Outputs& expected,
                   std::size_t terms) {
  const double tol = tolerance<T>(terms);
  check_close(got.y, expected.y, tol, tol);
  check_close(got.dg, expected.dg, tol, tol);
  check_close(got.dw, expected.dw, tol, tol);
  if (c.u) check_close(got.du, expected.du, tol, tol);
  if (c.b) check_close(got.db, expected.db, tol, tol);
}

// A random case: g in [-6, 6] (every branch of the activations), the rest in [-1, 1].
template <class T>
Case<T> random_case(bool gated, const std::vector<std::size_t>& x_shape, std::size_t out,
                    bool in_out, bool bias, Activation f, std::uint32_t seed) {
  const std::size_t in = x_shape.back();
  Case<T> c;
  if (gated) c.u = random_array<T>(x_shape, seed);
  c.g = random_array<T>(x_shape, seed + 1, -6.0, 6.0);
  c.w = in_out ? random_array<T>({in, out}, seed + 2) : random_array<T>({out, in}, seed + 2);
  if (bias) c.b = random_array<T>({out}, seed + 3);
  c.in_out = in_out;
  c.f = f;
  return c;
}

template <class T>
xt::xarray<T> y_shaped(const Case<T>& c, std::size_t out, std::uint32_t seed) {
  std::vector<std::size_t> shape(c.g.shape().begin(), c.g.shape().end());
  shape.back() = out;
  return random_array<T>(shape, seed);
}

}  // namespace

TEST_CASE("fused: hand-computed activation_linear and gated_linear (ReLU)") {
  // h = [1, -2], W = [[3, 4], [1, -1]], b = [0.5, 0]: a = relu(h) = [1, 0], y = [3.5, 1].
  // dy = [2, 1]: da = dy W = [7, 7], dh = da relu'(h) = [7, 0], dW = dy^T a = [[2, 0], [1, 0]],
  // db = [2, 1].
  const xt::xarray<double> w0{{3.0, 4.0}, {1.0, -1.0}}, b0{0.5, 0.0}, dy{{2.0, 1.0}};
  Tape<double> tape;
  Var<double> h = tape.leaf(xt::xarray<double>{{1.0, -2.0}});
  Var<double> w = tape.leaf(w0), b = tape.leaf(b0);
  Var<double> y = activation_linear(h, Activation::relu, w, b);
  tape.backward(y, dy);
  CHECK(y.value() == xt::xarray<double>{{3.5, 1.0}});
  CHECK(h.grad() == xt::xarray<double>{{7.0, 0.0}});
  CHECK(w.grad() == xt::xarray<double>{{2.0, 0.0}, {1.0, 0.0}});
  CHECK(b.grad() == xt::xarray<double>{2.0, 1.0});

  // u = [2, 3], g = [1, -2]: a = u relu(g) = [2, 0], y = [6.5, 2]. da = [7, 7],
  // du = da relu(g) = [7, 0], dg = da u relu'(g) = [14, 0], dW = [[4, 0], [2, 0]].
  Tape<double> t2;
  Var<double> u2 = t2.leaf(xt::xarray<double>{{2.0, 3.0}});
  Var<double> g2 = t2.leaf(xt::xarray<double>{{1.0, -2.0}});
  Var<double> w2 = t2.leaf(w0), b2 = t2.leaf(b0);
  Var<double> y2 = gated_linear(u2, g2, Activation::relu, w2, b2);
  t2.backward(y2, dy);
  CHECK(y2.value() == xt::xarray<double>{{6.5, 2.0}});
  CHECK(u2.grad() == xt::xarray<double>{{7.0, 0.0}});
  CHECK(g2.grad() == xt::xarray<double>{{14.0, 0.0}});
  CHECK(w2.grad() == xt::xarray<double>{{4.0, 0.0}, {2.0, 0.0}});
  CHECK(b2.grad() == xt::xarray<double>{2.0, 1.0});
}

TEST_CASE_TEMPLATE("fused: values and every gradient match the long-double reference", T, float,
                   double) {
  std::uint32_t seed = 100;
  for (bool gated : {false, true})
    for (Activation f : k_all_activations)
      for (bool in_out : {false, true})
        for (bool bias : {false, true}) {
          CAPTURE(gated);
          CAPTURE(to_string(f));
          CAPTURE(in_out);
          CAPTURE(bias);
          const Case<T> c = random_case<T>(gated, {5, 37}, 3, in_out, bias, f, seed += 10);
          const xt::xarray<T> dy = y_shaped(c, 3, seed + 5);
          check_outputs(c, run(c, dy), reference(c, dy), 37);
        }
}

TEST_CASE_TEMPLATE("fused: several row blocks on the BLAS path match the reference", T, float,
                   double) {
  // in = 1024: backward blocks of 512 (float) or 256 (double) rows, so N = 600
  // is 2 or 3 blocks, the last one short (forward blocks of 512 rows: 2);
  // every GEMM is far above the small-product path.
  std::uint32_t seed = 300;
  for (bool gated : {false, true})
    for (bool in_out : {false, true}) {
      CAPTURE(gated);
      CAPTURE(in_out);
      const Activation f = gated ? Activation::silu : Activation::gelu;
      const Case<T> c = random_case<T>(gated, {600, 1024}, 24, in_out, true, f, seed += 10);
      const xt::xarray<T> dy = y_shaped(c, 24, seed + 5);
      const Outputs got = run(c, dy), expected = reference(c, dy);
      check_outputs(c, got, expected, 1024);
      // dW and db sum over all 600 rows: across the blocks
      check_close(got.dw, expected.dw, tolerance<T>(600), tolerance<T>(600));
    }
}

TEST_CASE_TEMPLATE("fused: gradients added onto earlier ones over several row blocks", T, float,
                   double) {
  // The second backward adds onto the first's gradients: h's (or u's and g's)
  // then accumulates, a row block at a time, and must end at twice the first.
  std::uint32_t seed = 350;
  for (bool gated : {false, true}) {
    CAPTURE(gated);
    const Activation f = gated ? Activation::silu : Activation::gelu;
    const Case<T> c = random_case<T>(gated, {600, 1024}, 24, false, true, f, seed += 10);
    const xt::xarray<T> dy = y_shaped(c, 24, seed + 5);
    Tape<T> tape;
    std::optional<Var<T>> u, b;
    Var<T> g, w;
    const Var<T> y = call(c, tape, u, g, w, b);
    tape.backward(y, dy);
    tape.backward(y, dy);
    const Outputs expected = reference(c, dy);
    const double tol = 2 * tolerance<T>(1024);
    check_close(xt::xarray<double>(xt::cast<double>(g.grad())), xt::xarray<double>(2 * expected.dg),
                tol, tol);
    if (u)
      check_close(xt::xarray<double>(xt::cast<double>(u->grad())),
                  xt::xarray<double>(2 * expected.du), tol, tol);
    check_close(xt::xarray<double>(xt::cast<double>(w.grad())), xt::xarray<double>(2 * expected.dw),
                2 * tolerance<T>(600), 2 * tolerance<T>(600));
  }
}

TEST_CASE("fused: gradcheck over every input, both layouts, every activation") {
  for (Activation f : k_all_activations) {
    CAPTURE(to_string(f));
    // relu away from its kink at 0
    const auto pre = [&](std::uint32_t seed) {
      return f == Activation::relu ? random_away_from_zero<double>({2, 3, 4}, seed, 0.1, 3.0)
                                   : random_array<double>({2, 3, 4}, seed, -3.0, 3.0);
    };
    const xt::xarray<double> u = random_array<double>({2, 3, 4}, 401);
    const xt::xarray<double> w_oi = random_array<double>({5, 4}, 402);
    const xt::xarray<double> w_io = random_array<double>({4, 5}, 403);
    const xt::xarray<double> b = random_array<double>({5}, 404);
    check_gradients(
        [f](const std::vector<Var<double>>& v) { return activation_linear(v[0], f, v[1], v[2]); },
        {pre(405), w_oi, b});
    check_gradients(
        [f](const std::vector<Var<double>>& v) {
          return activation_linear(v[0], f, v[1], {}, WeightLayout::in_out);
        },
        {pre(406), w_io});
    check_gradients(
        [f](const std::vector<Var<double>>& v) {
          return gated_linear(v[0], v[1], f, v[2], v[3], WeightLayout::in_out);
        },
        {u, pre(407), w_io, b});
    check_gradients(
        [f](const std::vector<Var<double>>& v) { return gated_linear(v[0], v[1], f, v[2]); },
        {u, pre(408), w_oi});
  }
}

TEST_CASE_TEMPLATE("fused: edge shapes [in], [0, in] and [2, 3, in]", T, float, double) {
  for (bool gated : {false, true}) {
    CAPTURE(gated);
    SUBCASE("[in]: one vector") {
      const Case<T> c = random_case<T>(gated, {19}, 4, false, true, Activation::gelu, 501);
      const xt::xarray<T> dy = random_array<T>({4}, 502);
      const Outputs got = run(c, dy);
      CHECK(got.y.shape() == std::vector<std::size_t>{4});
      check_outputs(c, got, reference(c, dy), 19);
    }
    SUBCASE("[2, 3, in]: leading axes kept") {
      const Case<T> c = random_case<T>(gated, {2, 3, 9}, 4, true, true, Activation::silu, 503);
      const xt::xarray<T> dy = random_array<T>({2, 3, 4}, 504);
      const Outputs got = run(c, dy);
      CHECK(got.y.shape() == std::vector<std::size_t>{2, 3, 4});
      check_outputs(c, got, reference(c, dy), 9);
    }
    SUBCASE("[3, 0]: no input features, y = b on every row") {
      Case<T> c = random_case<T>(gated, {3, 1}, 2, false, true, Activation::silu, 507);
      c.g = xt::zeros<T>({3, 0});
      if (gated) c.u = xt::zeros<T>({3, 0});
      c.w = xt::zeros<T>({2, 0});
      const xt::xarray<T> dy = random_array<T>({3, 2}, 508);
      const Outputs got = run(c, dy);
      check_outputs(c, got, reference(c, dy), 0);
      CHECK(got.dw.shape() == std::vector<std::size_t>{2, 0});
    }
    SUBCASE("[0, in]: no tokens, zero weight and bias gradients") {
      Case<T> c = random_case<T>(gated, {1, 6}, 4, false, true, Activation::relu, 505);
      c.g = xt::zeros<T>({0, 6});
      if (gated) c.u = xt::zeros<T>({0, 6});
      const Outputs got = run(c, xt::xarray<T>(xt::zeros<T>({0, 4})));
      CHECK(got.y.shape() == std::vector<std::size_t>{0, 4});
      CHECK(got.dg.shape() == std::vector<std::size_t>{0, 6});
      CHECK(got.dw == xt::zeros<double>({4, 6}));
      CHECK(got.db == xt::zeros<double>({4}));
    }
  }
}

TEST_CASE_TEMPLATE("fused: a transposed and a stepped input equal their contiguous copies", T,
                   float, double) {
  const xt::xarray<T> u_base = random_array<T>({8, 6}, 601);
  const xt::xarray<T> g_base = random_array<T>({6, 16}, 602, -6.0, 6.0);
  const xt::xarray<T> u_before = u_base, g_before = g_base;
  const auto u_view = xt::transpose(u_base);                             // [6, 8]
  const auto g_view = xt::view(g_base, xt::all(), xt::range(0, 16, 2));  // [6, 8]
  const xt::xarray<T> w = random_array<T>({3, 8}, 603), dy = random_array<T>({6, 3}, 604);
  for (Activation f : k_all_activations) {
    CAPTURE(to_string(f));
    Tape<T> tape;
    Var<T> uv = tape.leaf(u_view), gv = tape.leaf(g_view), wv = tape.leaf(w);
    Var<T> uc = tape.leaf(xt::xarray<T>(u_view)), gc = tape.leaf(xt::xarray<T>(g_view));
    Var<T> from_views = gated_linear(uv, gv, f, wv);
    Var<T> from_copies = gated_linear(uc, gc, f, wv);
    CHECK(from_views.value() == from_copies.value());
    Var<T> act_views = activation_linear(gv, f, wv);
    CHECK(act_views.value() == activation_linear(gc, f, wv).value());
    tape.backward(from_views, dy);
    tape.backward(from_copies, dy);
    CHECK(uv.grad() == uc.grad());
    CHECK(gv.grad() == gc.grad());
  }
  CHECK(u_base == u_before);
  CHECK(g_base == g_before);
}

TEST_CASE("fused: an input that is also the weight or the bias, and u == g") {
  const xt::xarray<double> square = random_array<double>({3, 3}, 701, -2.0, 2.0);
  const xt::xarray<double> vec = random_array<double>({3}, 702, -2.0, 2.0);
  for (Activation f : {Activation::gelu, Activation::silu, Activation::gelu_tanh}) {
    CAPTURE(to_string(f));
    // h is W: f(W) W^T (+ b), and f(W) W
    check_gradients(
        [f](const std::vector<Var<double>>& v) { return activation_linear(v[0], f, v[0], v[1]); },
        {square, vec});
    check_gradients(
        [f](const std::vector<Var<double>>& v) {
          return activation_linear(v[0], f, v[0], {}, WeightLayout::in_out);
        },
        {square});
    // h is the bias: f(h) W^T + h, h [3]
    check_gradients(
        [f](const std::vector<Var<double>>& v) { return activation_linear(v[0], f, v[1], v[0]); },
        {vec, square});
    // u is g: x f(x) W^T; u is W; g is the bias
    check_gradients(
        [f](const std::vector<Var<double>>& v) { return gated_linear(v[0], v[0], f, v[1]); },
        {square, random_array<double>({2, 3}, 703)});
    check_gradients(
        [f](const std::vector<Var<double>>& v) { return gated_linear(v[0], v[1], f, v[0]); },
        {square, random_array<double>({3, 3}, 704, -2.0, 2.0)});
    check_gradients(
        [f](const std::vector<Var<double>>& v) { return gated_linear(v[0], v[1], f, v[2], v[1]); },
        {vec, random_array<double>({3}, 705, -2.0, 2.0), square});
  }
  // The same values as the reference, u == g (the kernel writes du and dg into one buffer)
  Case<double> c = random_case<double>(true, {4, 5}, 3, false, true, Activation::silu, 706);
  c.u = c.g;
  const xt::xarray<double> dy = random_array<double>({4, 3}, 707);
  Tape<double> tape;
  Var<double> x = tape.leaf(c.g), w = tape.leaf(c.w), b = tape.leaf(*c.b);
  Var<double> y = gated_linear(x, x, c.f, w, b);
  tape.backward(y, dy);
  const Outputs expected = reference(c, dy);
  check_close(y.value(), expected.y);
  check_close(x.grad(), xt::xarray<double>(expected.du + expected.dg));
  check_close(w.grad(), expected.dw);
}

TEST_CASE_TEMPLATE("fused: only the inputs that require a gradient get one", T, float, double) {
  const Case<T> c = random_case<T>(true, {4, 7}, 3, false, true, Activation::gelu, 801);
  const xt::xarray<T> dy = random_array<T>({4, 3}, 802);
  const Outputs expected = reference(c, dy);
  const double tol = tolerance<T>(7);
  {  // the weight alone: the forward value is recomputed for dW, nothing else
    Tape<T> tape;
    Var<T> u = tape.leaf(*c.u, false), g = tape.leaf(c.g, false), w = tape.leaf(c.w);
    Var<T> b = tape.leaf(*c.b, false);
    tape.backward(gated_linear(u, g, c.f, w, b), dy);
    check_close(w.grad(), expected.dw, tol, tol);
    CHECK(u.grad() == xt::zeros<T>(c.g.shape()));
    CHECK(g.grad() == xt::zeros<T>(c.g.shape()));
    CHECK(b.grad() == xt::zeros<T>({3}));
  }
  {  // g alone
    Tape<T> tape;
    Var<T> u = tape.leaf(*c.u, false), g = tape.leaf(c.g), w = tape.leaf(c.w, false);
    tape.backward(gated_linear(u, g, c.f, w, tape.leaf(*c.b, false)), dy);
    check_close(g.grad(), expected.dg, tol, tol);
    CHECK(w.grad() == xt::zeros<T>(c.w.shape()));
  }
  {  // activation_linear, h alone
    Case<T> a = c;
    a.u.reset();
    const Outputs e = reference(a, dy);
    Tape<T> tape;
    Var<T> h = tape.leaf(a.g), w = tape.leaf(a.w, false);
    tape.backward(activation_linear(h, a.f, w), dy);
    check_close(h.grad(), e.dg, tol, tol);
  }
  {  // nothing: no backward is recorded and the value is the same
    Tape<T> tape;
    Var<T> y = activation_linear(tape.leaf(c.g, false), c.f, tape.leaf(c.w, false));
    CHECK_FALSE(y.requires_grad());
  }
}

TEST_CASE_TEMPLATE("fused: inputs unchanged, backward twice accumulates into leaves", T, float,
                   double) {
  const Case<T> c = random_case<T>(true, {6, 5}, 4, true, true, Activation::silu, 901);
  const xt::xarray<T> dy = random_array<T>({6, 4}, 902);
  Tape<T> tape;
  std::optional<Var<T>> u, b;
  Var<T> g, w;
  const Var<T> y = call(c, tape, u, g, w, b);
  tape.backward(y, dy);
  const xt::xarray<T> dg_once = g.grad(), dw_once = w.grad(), du_once = u->grad();
  tape.backward(y, dy);
  check_close(g.grad(), xt::xarray<T>(2 * dg_once), 1e-6, 0.0);
  check_close(w.grad(), xt::xarray<T>(2 * dw_once), 1e-6, 0.0);
  check_close(u->grad(), xt::xarray<T>(2 * du_once), 1e-6, 0.0);
  CHECK(g.value() == c.g);
  CHECK(u->value() == *c.u);
  CHECK(w.value() == c.w);
  CHECK(b->value() == *c.b);

  // Parameters: the same gradient, accumulated in place
  Parameter<T> pw("w", c.w);
  Tape<T> ptape;
  Var<T> pu = ptape.leaf(*c.u), pg = ptape.leaf(c.g);
  ptape.backward(gated_linear(pu, pg, c.f, ptape.param(pw), std::nullopt, WeightLayout::in_out),
                 dy);
  CHECK(pw.grad == dw_once);
  CHECK(pw.value == c.w);
}

TEST_CASE("fused: errors name the op, the argument and both shapes") {
  Tape<double> tape;
  Var<double> h = tape.leaf(xt::xarray<double>(xt::zeros<double>({2, 3})));
  Var<double> g4 = tape.leaf(xt::xarray<double>(xt::zeros<double>({2, 4})));
  Var<double> w = tape.leaf(xt::xarray<double>(xt::zeros<double>({5, 3})));
  Var<double> w1 = tape.leaf(xt::xarray<double>(xt::zeros<double>({15})));
  Var<double> b = tape.leaf(xt::xarray<double>(xt::zeros<double>({5})));
  Var<double> b4 = tape.leaf(xt::xarray<double>(xt::zeros<double>({4})));
  const std::size_t nodes = tape.size();
  CHECK_THROWS_WITH_PARTS(activation_linear(h, Activation::gelu, w1), std::invalid_argument,
                          {"xtgrad::activation_linear", "'weight'", "[15]", "[out, in]"});
  CHECK_THROWS_WITH_PARTS(activation_linear(g4, Activation::gelu, w, b), std::invalid_argument,
                          {"xtgrad::activation_linear", "'h'", "[2, 4]", "[..., 3]", "[5, 3]"});
  CHECK_THROWS_WITH_PARTS(activation_linear(h, Activation::gelu, w, {}, WeightLayout::in_out),
                          std::invalid_argument,
                          {"xtgrad::activation_linear", "'h'", "[2, 3]", "[..., 5]", "[5, 3]"});
  CHECK_THROWS_WITH_PARTS(activation_linear(h, Activation::relu, w, b4), std::invalid_argument,
                          {"xtgrad::activation_linear", "'bias'", "[4]", "[5]"});
  CHECK_THROWS_WITH_PARTS(activation_linear(h, static_cast<Activation>(9), w),
                          std::invalid_argument, {"xtgrad::activation_linear", "'f'"});
  CHECK_THROWS_WITH_PARTS(gated_linear(h, g4, Activation::silu, w), std::invalid_argument,
                          {"xtgrad::gated_linear", "'g'", "[2, 4]", "[2, 3]"});
  CHECK_THROWS_WITH_PARTS(gated_linear(g4, g4, Activation::silu, w), std::invalid_argument,
                          {"xtgrad::gated_linear", "'u'", "[2, 4]", "[..., 3]"});
  CHECK_THROWS_WITH_PARTS(gated_linear(h, h, Activation::silu, w, {}, static_cast<WeightLayout>(5)),
                          std::invalid_argument,
                          {"xtgrad::gated_linear", "'layout'", "WeightLayout(5)"});
  CHECK(tape.size() == nodes);  // nothing recorded by a failed call

  Tape<double> other;
  Var<double> foreign = other.leaf(xt::xarray<double>(xt::zeros<double>({5, 3})));
  CHECK_THROWS_WITH_PARTS(activation_linear(h, Activation::gelu, foreign), std::logic_error,
                          {"activation_linear", "'weight'", "different tape"});
  CHECK_THROWS_WITH_PARTS(gated_linear(h, h, Activation::gelu, w, Var<double>()), std::logic_error,
                          {"gated_linear", "'bias'"});
}

TEST_CASE_TEMPLATE(
    "fused kernels: value and gradients in one pass equal the separate kernels bit "
    "for bit",
    T, float, double) {
  // 37 + 3 * 16 elements: whole vectors and a tail; g over [-20, 20] and the far tails
  const std::size_t n = 85;
  xt::xarray<T> g = random_array<T>({n}, 1001, -20.0, 20.0);
  g(0) = T(1e30);
  g(1) = T(-1e30);
  const xt::xarray<T> u = random_array<T>({n}, 1002), dy = random_array<T>({n}, 1003);
  const xt::xarray<T> start = random_array<T>({n}, 1004);
  for (Activation f : k_all_activations)
    for (bool accumulate : {false, true}) {
      CAPTURE(to_string(f));
      CAPTURE(accumulate);
      xt::xarray<T> y_alone = xt::zeros<T>({n}), dx_alone = start;
      detail::activation_forward(f, g.data(), y_alone.data(), n);
      detail::activation_backward(f, g.data(), dy.data(), dx_alone.data(), n, accumulate);
      xt::xarray<T> y = xt::zeros<T>({n}), dx = start;
      detail::activation_value_and_backward(f, g.data(), dy.data(), dx.data(), accumulate, y.data(),
                                            n);
      CHECK(y == y_alone);
      CHECK(dx == dx_alone);

      xt::xarray<T> gy_alone = xt::zeros<T>({n}), du_alone = start, dg_alone = start;
      detail::gated_forward(f, u.data(), g.data(), gy_alone.data(), n);
      detail::gated_backward(f, u.data(), g.data(), dy.data(), du_alone.data(), accumulate,
                             dg_alone.data(), accumulate, n);
      xt::xarray<T> gy = xt::zeros<T>({n}), du = start, dg = start;
      detail::gated_value_and_backward(f, u.data(), g.data(), dy.data(), du.data(), accumulate,
                                       dg.data(), accumulate, gy.data(), n);
      CHECK(gy == gy_alone);
      CHECK(du == du_alone);
      CHECK(dg == dg_alone);
      // each output alone: y only (no dy), du only, dg only
      xt::xarray<T> y_only = xt::zeros<T>({n});
      detail::gated_value_and_backward(f, u.data(), g.data(), static_cast<const T*>(nullptr),
                                       static_cast<T*>(nullptr), false, static_cast<T*>(nullptr),
                                       false, y_only.data(), n);
      CHECK(y_only == gy_alone);
      xt::xarray<T> du_only = start, dg_only = start;
      detail::gated_value_and_backward(f, u.data(), g.data(), dy.data(), du_only.data(), accumulate,
                                       static_cast<T*>(nullptr), false, static_cast<T*>(nullptr),
                                       n);
      detail::gated_value_and_backward(f, u.data(), g.data(), dy.data(), static_cast<T*>(nullptr),
                                       false, dg_only.data(), accumulate, static_cast<T*>(nullptr),
                                       n);
      CHECK(du_only == du_alone);
      CHECK(dg_only == dg_alone);
    }
}

TEST_CASE_TEMPLATE("fused kernels: one pass equals the same pass in pieces (tails included)", T,
                   float, double) {
  // Pieces of 1000 end in a vector tail (1000 is no multiple of 16): an
  // element's result, += included, may not depend on where it lies.
  const std::size_t n = (std::size_t(1) << 18) + 37, piece = 1000;
  const xt::xarray<T> g = random_array<T>({n}, 1101, -8.0, 8.0);
  const xt::xarray<T> u = random_array<T>({n}, 1102), dy = random_array<T>({n}, 1103);
  const xt::xarray<T> start = random_array<T>({n}, 1104);
  for (Activation f : k_all_activations) {
    CAPTURE(to_string(f));
    xt::xarray<T> y = xt::zeros<T>({n}), dx = start, gy = xt::zeros<T>({n}), du = start, dg = start;
    detail::activation_value_and_backward(f, g.data(), dy.data(), dx.data(), true, y.data(), n);
    detail::gated_value_and_backward(f, u.data(), g.data(), dy.data(), du.data(), true, dg.data(),
                                     false, gy.data(), n);
    xt::xarray<T> y_p = xt::zeros<T>({n}), dx_p = start, gy_p = xt::zeros<T>({n}), du_p = start,
                  dg_p = start;
    for (std::size_t b = 0; b < n; b += piece) {
      const std::size_t count = std::min(piece, n - b);
      detail::activation_value_and_backward(f, g.data() + b, dy.data() + b, dx_p.data() + b, true,
                                            y_p.data() + b, count);
      detail::gated_value_and_backward(f, u.data() + b, g.data() + b, dy.data() + b,
                                       du_p.data() + b, true, dg_p.data() + b, false,
                                       gy_p.data() + b, count);
    }
    CHECK(y == y_p);
    CHECK(dx == dx_p);
    CHECK(gy == gy_p);
    CHECK(du == du_p);
    CHECK(dg == dg_p);
    xt::xarray<T> y_forward = xt::zeros<T>({n}), gy_forward = xt::zeros<T>({n});
    detail::activation_forward(f, g.data(), y_forward.data(), n);
    detail::gated_forward(f, u.data(), g.data(), gy_forward.data(), n);
    CHECK(y_forward == y_p);
    CHECK(gy_forward == gy_p);
  }
}

TEST_CASE_TEMPLATE("fused: linear with zero input features gives y = b on every row", T, float,
                   double) {
  // x [3, 0]: the rows are the leading axes (3), not size / features (0 / 0).
  Tape<T> tape;
  Var<T> x = tape.leaf(xt::xarray<T>(xt::zeros<T>({3, 0})));
  Var<T> w = tape.leaf(xt::xarray<T>(xt::zeros<T>({2, 0})));
  Var<T> b = tape.leaf(xt::xarray<T>{T(1.5), T(-2)});
  Var<T> y = linear(x, w, b);
  CHECK(y.value() == xt::xarray<T>{{1.5, -2}, {1.5, -2}, {1.5, -2}});
  tape.backward(y, xt::xarray<T>{{1, 2}, {3, 4}, {5, 6}});
  CHECK(b.grad() == xt::xarray<T>{9, 12});
  CHECK(w.grad().shape() == Shape{2, 0});
  CHECK(x.grad().shape() == Shape{3, 0});
}

TEST_CASE_TEMPLATE(
    "fused: every weight gradient accumulates, in both layouts and across row blocks", T, float,
    double) {
  // Two backwards over one recording must leave twice the gradient of one in
  // every weight: linear, activation_linear and gated_linear, [out, in] and
  // [in, out], with 130 rows of 8192 features so that the fused ops take
  // several row blocks (each block adds its share). A gradient that is
  // overwritten instead of accumulated comes out as one share, not two.
  constexpr std::size_t rows = 130, in = 8192, out = 3;
  for (const WeightLayout layout : {WeightLayout::out_in, WeightLayout::in_out}) {
    CAPTURE(static_cast<int>(layout));
    const bool out_in = layout == WeightLayout::out_in;
    const std::vector<std::size_t> w_shape =
        out_in ? std::vector<std::size_t>{out, in} : std::vector<std::size_t>{in, out};
    Parameter<T> w_linear("w_linear", random_array<T>(w_shape, 911));
    Parameter<T> w_activation("w_activation", random_array<T>(w_shape, 912));
    Parameter<T> w_gated("w_gated", random_array<T>(w_shape, 913));
    Parameter<T> bias("bias", random_array<T>({out}, 914));
    Tape<T> tape;
    const Var<T> h = tape.leaf(random_array<T>({rows, in}, 915), false);
    const Var<T> u = tape.leaf(random_array<T>({rows, in}, 916), false);
    const Var<T> b = tape.param(bias);
    const Var<T> y =
        add(add(linear(h, tape.param(w_linear), b, layout),
                activation_linear(h, Activation::gelu, tape.param(w_activation), b, layout)),
            gated_linear(u, h, Activation::silu, tape.param(w_gated), b, layout));
    const xt::xarray<T> dy = random_array<T>({rows, out}, 917);
    tape.backward(y, dy);
    const xt::xarray<T> once_linear = w_linear.grad, once_activation = w_activation.grad,
                        once_gated = w_gated.grad;
    CHECK(xt::amax(xt::abs(once_gated))() > T(0));
    tape.backward(y, dy);
    const double rtol = std::is_same_v<T, float> ? 1e-4 : 1e-11;
    for (const auto& grads :
         {std::pair{&w_linear, &once_linear}, std::pair{&w_activation, &once_activation},
          std::pair{&w_gated, &once_gated}}) {
      // not a structured binding: CAPTURE's lambda cannot capture one in C++17
      const auto* p = grads.first;
      const auto* once = grads.second;
      CAPTURE(p->name);
      const double atol = rtol * static_cast<double>(xt::amax(xt::abs(*once))());
      check_close(p->grad, xt::xarray<T>(T(2) * *once), rtol, atol);
    }
  }
}

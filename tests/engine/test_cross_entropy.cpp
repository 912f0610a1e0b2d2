// cross_entropy (class and probability targets) and nll_loss.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <xtensor/xview.hpp>
#include <xtgrad/engine/errors.hpp>
#include <xtgrad/engine/ops/cross_entropy.hpp>
#include <xtgrad/engine/ops/elementwise.hpp>
#include <xtgrad/engine/ops/reduce.hpp>

#include "support/bad_input.hpp"
#include "support/fixtures/softmax_fixtures.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fx = xtgrad::fixtures::softmax;

namespace {

using Dims = std::vector<std::size_t>;

const char* name_of(Reduction r) {
  return r == Reduction::none ? "none" : r == Reduction::mean ? "mean" : "sum";
}

// The upstream gradient the fixtures used: dy_rows [5] for none, 0.75 otherwise.
template <class T>
xt::xarray<T> upstream(Reduction r) {
  if (r == Reduction::none) return fx::array<T>(fx::k_ce_dy_rows, {5});
  return xt::xarray<T>(T(0.75));
}

// Result shape of a [5, C] loss.
Dims result_dims(Reduction r) {
  return r == Reduction::none ? Dims{5} : Dims{};
}

// The long-double reference of smoothed cross-entropy with class targets,
// per row (0 for ignored rows), and its gradient for upstream weights g.
struct Reference {
  std::vector<double> loss;
  xt::xarray<double> dlogits;
};
template <class T>
Reference reference(const xt::xarray<T>& x, const Indices& t, double eps, std::int64_t ignore,
                    const std::vector<double>& g) {
  const std::size_t n = x.shape()[0], c = x.shape()[1];
  Reference r{std::vector<double>(n, 0.0), xt::zeros<double>(x.shape())};
  for (std::size_t i = 0; i < n; ++i) {
    if (t(i) == ignore) continue;
    long double m = -INFINITY, s = 0, mean = 0;
    for (std::size_t k = 0; k < c; ++k) m = std::max(m, (long double)x(i, k));
    for (std::size_t k = 0; k < c; ++k) s += std::exp((long double)x(i, k) - m);
    for (std::size_t k = 0; k < c; ++k) mean += (long double)x(i, k) / c;
    const long double lse = m + std::log(s);
    r.loss[i] = static_cast<double>((1 - eps) * (lse - x(i, t(i))) + eps * (lse - mean));
    for (std::size_t k = 0; k < c; ++k) {
      const long double target = (1 - eps) * (k == std::size_t(t(i))) + eps / c;
      r.dlogits(i, k) = static_cast<double>(g[i] * (std::exp(x(i, k) - lse) - target));
    }
  }
  return r;
}

}  // namespace

TEST_CASE_TEMPLATE("cross_entropy: class targets match torch for every reduction and smoothing", T,
                   float, double) {
  const xt::xarray<T> lv = fx::array<T>(fx::k_ce_logits, {5, 4});
  struct Case {
    Indices target;
    double eps;
    Reduction reduction;
    const double* y;
    const double* dl;
  };
  const Indices some = {1, 0, 3, -100, 2}, all = {-100, -100, -100, -100, -100},
                none = {1, 0, 3, 3, 2};
  const Reduction N = Reduction::none, M = Reduction::mean, S = Reduction::sum;
  const std::vector<Case> cases = {
      {some, 0.0, N, fx::k_ce_some_e0_none_y, fx::k_ce_some_e0_none_dl},
      {some, 0.0, M, fx::k_ce_some_e0_mean_y, fx::k_ce_some_e0_mean_dl},
      {some, 0.0, S, fx::k_ce_some_e0_sum_y, fx::k_ce_some_e0_sum_dl},
      {some, 0.1, N, fx::k_ce_some_e1_none_y, fx::k_ce_some_e1_none_dl},
      {some, 0.1, M, fx::k_ce_some_e1_mean_y, fx::k_ce_some_e1_mean_dl},
      {some, 0.1, S, fx::k_ce_some_e1_sum_y, fx::k_ce_some_e1_sum_dl},
      {all, 0.0, N, fx::k_ce_all_e0_none_y, fx::k_ce_all_e0_none_dl},
      {all, 0.0, M, fx::k_ce_all_e0_mean_y, fx::k_ce_all_e0_mean_dl},
      {all, 0.0, S, fx::k_ce_all_e0_sum_y, fx::k_ce_all_e0_sum_dl},
      {all, 0.1, N, fx::k_ce_all_e1_none_y, fx::k_ce_all_e1_none_dl},
      {all, 0.1, M, fx::k_ce_all_e1_mean_y, fx::k_ce_all_e1_mean_dl},
      {all, 0.1, S, fx::k_ce_all_e1_sum_y, fx::k_ce_all_e1_sum_dl},
      {none, 0.0, N, fx::k_ce_none_e0_none_y, fx::k_ce_none_e0_none_dl},
      {none, 0.0, M, fx::k_ce_none_e0_mean_y, fx::k_ce_none_e0_mean_dl},
      {none, 0.0, S, fx::k_ce_none_e0_sum_y, fx::k_ce_none_e0_sum_dl},
      {none, 0.1, N, fx::k_ce_none_e1_none_y, fx::k_ce_none_e1_none_dl},
      {none, 0.1, M, fx::k_ce_none_e1_mean_y, fx::k_ce_none_e1_mean_dl},
      {none, 0.1, S, fx::k_ce_none_e1_sum_y, fx::k_ce_none_e1_sum_dl},
  };
  for (const Case& c : cases) {
    INFO("target " << c.target << ", eps " << c.eps << ", " << name_of(c.reduction));
    Tape<T> tape;
    auto x = tape.leaf(lv);
    auto y = cross_entropy(x, c.target, {-100, c.eps, c.reduction});
    const Dims dims = result_dims(c.reduction);
    xt::xarray<double> ey = xt::empty<double>(dims);
    std::copy(c.y, c.y + ey.size(), ey.data());
    if (c.reduction == M && c.target == all)  // torch 1.13: NaN, with a zero gradient
      CHECK(std::isnan(y.value()()));
    else
      check_close(y.value(), ey, 4 * tolerance<T>(), 4 * tolerance<T>());
    tape.backward(y, upstream<T>(c.reduction));
    check_close(x.grad(), fx::array<double>(c.dl, {5, 4}), 4 * tolerance<T>(), 4 * tolerance<T>());
  }
}

TEST_CASE_TEMPLATE("cross_entropy: one row [C] with a 0-d target matches torch", T, float, double) {
  const Indices t = Indices(4);
  REQUIRE(t.dimension() == 0);
  for (double eps : {0.0, 0.1}) {
    INFO("eps " << eps);
    for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum}) {
      Tape<T> tape;
      auto x = tape.leaf(fx::array<T>(fx::k_ce1_logits, {6}));
      auto y = cross_entropy(x, t, {-100, eps, r});
      CHECK(y.shape() == Shape{});  // every reduction of one row is 0-d, as torch
      check_close(y.value(), fx::array<double>(eps == 0 ? fx::k_ce1_e0_y : fx::k_ce1_e1_y, {}),
                  tolerance<T>(), tolerance<T>());
      tape.backward(y, xt::xarray<T>(T(0.75)));
      check_close(x.grad(), fx::array<double>(eps == 0 ? fx::k_ce1_e0_dl : fx::k_ce1_e1_dl, {6}),
                  tolerance<T>(), tolerance<T>());
    }
  }
}

TEST_CASE_TEMPLATE("cross_entropy: probability targets match torch, gradients to both inputs", T,
                   float, double) {
  const xt::xarray<T> lv = fx::array<T>(fx::k_ce_logits, {5, 4});
  const xt::xarray<T> qv = fx::array<T>(fx::k_cep_target, {5, 4});
  struct Case {
    double eps;
    Reduction reduction;
    const double *y, *dl, *dt;
  };
  const std::vector<Case> cases = {
      {0.0, Reduction::none, fx::k_cep_e0_none_y, fx::k_cep_e0_none_dl, fx::k_cep_e0_none_dt},
      {0.0, Reduction::mean, fx::k_cep_e0_mean_y, fx::k_cep_e0_mean_dl, fx::k_cep_e0_mean_dt},
      {0.0, Reduction::sum, fx::k_cep_e0_sum_y, fx::k_cep_e0_sum_dl, fx::k_cep_e0_sum_dt},
      {0.1, Reduction::none, fx::k_cep_e1_none_y, fx::k_cep_e1_none_dl, fx::k_cep_e1_none_dt},
      {0.1, Reduction::mean, fx::k_cep_e1_mean_y, fx::k_cep_e1_mean_dl, fx::k_cep_e1_mean_dt},
      {0.1, Reduction::sum, fx::k_cep_e1_sum_y, fx::k_cep_e1_sum_dl, fx::k_cep_e1_sum_dt},
  };
  for (const Case& c : cases) {
    INFO("eps " << c.eps << ", " << name_of(c.reduction));
    Tape<T> tape;
    auto x = tape.leaf(lv);
    auto q = tape.leaf(qv);
    auto y = cross_entropy(x, q, {-100, c.eps, c.reduction});
    const Dims dims = result_dims(c.reduction);
    xt::xarray<double> ey = xt::empty<double>(dims);
    std::copy(c.y, c.y + ey.size(), ey.data());
    check_close(y.value(), ey, 4 * tolerance<T>(), 4 * tolerance<T>());
    tape.backward(y, upstream<T>(c.reduction));
    check_close(x.grad(), fx::array<double>(c.dl, {5, 4}), 4 * tolerance<T>(), 4 * tolerance<T>());
    check_close(q.grad(), fx::array<double>(c.dt, {5, 4}), 4 * tolerance<T>(), 4 * tolerance<T>());
  }
  // A target that needs no gradient gets none; logits still do.
  Tape<T> tape;
  auto x = tape.leaf(lv);
  auto q = tape.leaf(qv, false);
  tape.backward(cross_entropy(x, q), xt::xarray<T>(T(0.75)));
  check_close(x.grad(), fx::array<double>(fx::k_cep_e0_mean_dl, {5, 4}), 4 * tolerance<T>(),
              4 * tolerance<T>());
}

TEST_CASE_TEMPLATE("nll_loss: matches torch for every reduction, with ignored targets", T, float,
                   double) {
  const xt::xarray<T> zv = fx::array<T>(fx::k_nll_input, {5, 4});
  const Indices some = {1, 0, 3, -100, 2}, all = {-100, -100, -100, -100, -100},
                none = {1, 0, 3, 3, 2};
  struct Case {
    const Indices* target;
    Reduction reduction;
    const double *y, *d;
  };
  const std::vector<Case> cases = {
      {&some, Reduction::none, fx::k_nll_some_none_y, fx::k_nll_some_none_d},
      {&some, Reduction::mean, fx::k_nll_some_mean_y, fx::k_nll_some_mean_d},
      {&some, Reduction::sum, fx::k_nll_some_sum_y, fx::k_nll_some_sum_d},
      {&all, Reduction::none, fx::k_nll_all_none_y, fx::k_nll_all_none_d},
      {&all, Reduction::mean, fx::k_nll_all_mean_y, fx::k_nll_all_mean_d},
      {&all, Reduction::sum, fx::k_nll_all_sum_y, fx::k_nll_all_sum_d},
      {&none, Reduction::none, fx::k_nll_none_none_y, fx::k_nll_none_none_d},
      {&none, Reduction::mean, fx::k_nll_none_mean_y, fx::k_nll_none_mean_d},
      {&none, Reduction::sum, fx::k_nll_none_sum_y, fx::k_nll_none_sum_d},
  };
  for (const Case& c : cases) {
    INFO("target " << *c.target << ", " << name_of(c.reduction));
    Tape<T> tape;
    auto z = tape.leaf(zv);
    auto y = nll_loss(z, *c.target, {-100, c.reduction});
    const Dims dims = result_dims(c.reduction);
    xt::xarray<double> ey = xt::empty<double>(dims);
    std::copy(c.y, c.y + ey.size(), ey.data());
    if (c.target == &all && c.reduction == Reduction::mean)
      CHECK(std::isnan(y.value()()));
    else
      check_close(y.value(), ey, tolerance<T>(), tolerance<T>());
    tape.backward(y, upstream<T>(c.reduction));
    check_close(z.grad(), fx::array<double>(c.d, {5, 4}), tolerance<T>(), tolerance<T>());
  }
  // Another ignore_index: -100 is then an out-of-range class (see the bad-input
  // table), and 2 is skipped.
  Tape<T> tape;
  auto z = tape.leaf(zv);
  auto y = nll_loss(z, Indices{1, 0, 3, 2, 2}, {2, Reduction::sum});
  CHECK(y.value()() == doctest::Approx(-(zv(0, 1) + zv(1, 0) + zv(2, 3))));
}

TEST_CASE_TEMPLATE("cross_entropy: wide rows and +-1000 logits against a long-double loop", T,
                   float, double) {
  // C = 1000: SIMD bodies and a tail; rows of +-1000 and of near-equal logits.
  const std::size_t n = 6, c = 1003;
  xt::xarray<T> xv = random_array<T>({n, c}, 61, -5.0, 5.0);
  for (std::size_t k = 0; k < c; ++k) {
    xv(0, k) = k % 2 ? T(1000) : T(-1000);
    xv(1, k) = T(1000) + T(k % 7);
  }
  const Indices t = {1, 2, 1002, -100, 500, 0};
  const std::vector<double> rows = {0.3, -1.2, 0.7, 2.0, 0.25, -0.5};
  xt::xarray<T> dy = xt::empty<T>({n});
  std::copy(rows.begin(), rows.end(), dy.data());
  for (double eps : {0.0, 0.1}) {
    INFO("eps " << eps);
    const Reference r = reference(xv, t, eps, -100, rows);
    Tape<T> tape;
    auto x = tape.leaf(xv);
    auto y = cross_entropy(x, t, {-100, eps, Reduction::none});
    xt::xarray<double> ey = xt::empty<double>({n});
    std::copy(r.loss.begin(), r.loss.end(), ey.data());
    // float: logits of 1000 carry float's rounding of 1000 (6e-5) into lse.
    check_close(y.value(), ey, 10 * tolerance<T>(), 10 * tolerance<T>());
    tape.backward(y, dy);
    check_close(x.grad(), r.dlogits, 10 * tolerance<T>(), 10 * tolerance<T>());
  }
}

TEST_CASE("cross_entropy: gradcheck for class and probability targets, and nll_loss") {
  const Indices t = {2, -100, 0, 3};
  for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum}) {
    for (double eps : {0.0, 0.1}) {
      INFO(name_of(r) << ", eps " << eps);
      const CrossEntropyOptions o{-100, eps, r};
      check_gradients([&](const std::vector<Var<double>>& v) { return cross_entropy(v[0], t, o); },
                      {random_array({4, 5}, 71, -2.0, 2.0)});
      check_gradients(
          [&](const std::vector<Var<double>>& v) { return cross_entropy(v[0], v[1], o); },
          {random_array({4, 5}, 72, -2.0, 2.0), random_array({4, 5}, 73, 0.0, 1.0)});
      check_gradients(
          [&](const std::vector<Var<double>>& v) {
            return cross_entropy(v[0], Indices(1), o);  // [C] with a 0-d target
          },
          {random_array({5}, 74, -2.0, 2.0)});
    }
    check_gradients(
        [&](const std::vector<Var<double>>& v) {
          return nll_loss(v[0], t, {-100, r});
        },
        {random_array({4, 5}, 75)});
  }
  // One Var as logits and as target: both gradients land on it.
  check_gradients([](const std::vector<Var<double>>& v) { return cross_entropy(v[0], v[0]); },
                  {random_array({3, 4}, 76, 0.1, 1.0)});
}

TEST_CASE_TEMPLATE("cross_entropy: zero rows, views, and gradients that accumulate", T, float,
                   double) {
  Tape<T> tape;
  // [0, C]: mean is NaN (0 / 0), sum 0, none [0]; gradients empty.
  auto e = tape.leaf(xt::xarray<T>(xt::zeros<T>({0, 4})));
  const Indices none_t = xt::zeros<std::int64_t>({0});
  CHECK(std::isnan(cross_entropy(e, none_t).value()()));
  CHECK(cross_entropy(e, none_t, {-100, 0.0, Reduction::sum}).value()() == T(0));
  CHECK(cross_entropy(e, none_t, {-100, 0.0, Reduction::none}).shape() == Shape{0});
  CHECK(std::isnan(cross_entropy(e, e).value()()));  // as torch (k_cep_empty_mean)
  CHECK(std::isnan(fx::k_cep_empty_mean[0]));
  CHECK(std::isnan(nll_loss(e, none_t).value()()));
  tape.backward(cross_entropy(e, none_t, {-100, 0.0, Reduction::sum}));
  CHECK(e.grad().shape() == e.shape());

  // A transposed view gives the result of its contiguous copy.
  xt::xarray<T> m = random_array<T>({4, 3}, 81);
  auto a = tape.leaf(xt::transpose(m));
  auto b = tape.leaf(xt::xarray<T>(xt::transpose(m)));
  const Indices t = {0, 3, 1};
  CHECK(cross_entropy(a, t).value() == cross_entropy(b, t).value());
  CHECK(nll_loss(a, t).value() == nll_loss(b, t).value());
  CHECK(cross_entropy(a, b).value() == cross_entropy(b, b).value());

  // Recording off: the same values, nothing requires a gradient.
  {
    const T with_grad = cross_entropy(a, t).value()();
    const T nll_with_grad = nll_loss(a, t).value()();
    NoGradGuard<T> guard(tape);
    auto y = cross_entropy(a, t);
    CHECK_FALSE(y.requires_grad());
    CHECK(y.value()() == with_grad);
    CHECK(nll_loss(a, t).value()() == nll_with_grad);
  }

  // Two backwards over one recording give twice the gradient.
  for (int form = 0; form < 3; ++form) {
    INFO("form " << form);
    Tape<T> tp;
    auto x = tp.leaf(random_array<T>({3, 4}, 82));
    auto q = tp.leaf(random_array<T>({3, 4}, 83, 0.0, 1.0));
    auto y = form == 0   ? cross_entropy(x, t, {-100, 0.1, Reduction::mean})
             : form == 1 ? cross_entropy(x, q, {-100, 0.1, Reduction::sum})
                         : nll_loss(x, t);
    tp.backward(y);
    const xt::xarray<T> gx = x.grad(), gq = q.grad();
    tp.backward(y);
    check_close(x.grad(), xt::xarray<T>(T(2) * gx), tolerance<T>(), tolerance<T>());
    check_close(q.grad(), xt::xarray<T>(T(2) * gq), tolerance<T>(), tolerance<T>());
    CHECK(xt::any(xt::not_equal(gx, T(0))));
  }
}

TEST_CASE_TEMPLATE("cross_entropy: anomaly mode names cross_entropy and nll_loss", T, float,
                   double) {
  Tape<T> tape;
  tape.set_detect_anomaly(true);
  auto x = tape.leaf(random_array<T>({2, 3}, 91));
  const Indices ignored = {-100, -100};
  CHECK(std::isfinite(cross_entropy(x, Indices{0, 2}).value()()));
  // every target ignored: mean is 0 / 0 from finite input
  check_forward_anomaly(tape, "cross_entropy", [&] { cross_entropy(x, ignored); });
  check_forward_anomaly(tape, "nll_loss", [&] { nll_loss(x, ignored); });
}

TEST_CASE_TEMPLATE("bad input: cross_entropy", T, float, double) {
  Tape<T> tape, other, cleared;
  const Var<T> stale = cleared.leaf(xt::xarray<T>{1, 2});
  cleared.clear();
  Var<T> x = tape.leaf(random_array<T>({3, 4}, 101));
  Var<T> q = tape.leaf(random_array<T>({3, 4}, 102, 0.0, 1.0));
  Var<T> q5 = tape.leaf(random_array<T>({3, 5}, 103));
  Var<T> row = tape.leaf(random_array<T>({4}, 104));
  Var<T> cube = tape.leaf(random_array<T>({2, 4, 3}, 105));
  Var<T> scalar = tape.leaf(xt::xarray<T>(T(0.5)));
  const Indices t = {0, 3, 1};
  const Indices column = xt::zeros<std::int64_t>({3, 1});
  tape.backward(add(cross_entropy(x, t), cross_entropy(x, q)));  // gradients in place
  const auto snapshot = snapshot_of<T>({&tape, &other}, {x, q, q5, row, cube, scalar});
  std::vector<Row> rows;
  const auto bad = row_adder(rows);
  const auto IA = Expect::invalid_argument;
  const CrossEntropyOptions o;
  for (const std::string op : {"cross_entropy", "nll_loss"}) {
    const bool ce = op == "cross_entropy";
    const std::string arg = ce ? "'logits'" : "'log_probs'";
    const auto f = [ce](const Var<T>& v, const Indices& tt, std::int64_t ignore = -100) {
      if (ce)
        cross_entropy(v, tt, {ignore, 0.0, Reduction::mean});
      else
        nll_loss(v, tt, {ignore, Reduction::mean});
    };
    bad(op + ": target 4 of 4 classes",
        [&, f] {
          f(x, Indices{0, 4, 1});
        },
        IA, {op, "'target'", "holds 4 at flat position 1", "[0, 4) or -100"});
    bad(op + ": target -1",
        [&, f] {
          f(x, Indices{0, 1, -1});
        },
        IA, {op, "'target'", "holds -1 at flat position 2"});
    bad(op + ": -100 with another ignore_index",
        [&, f] {
          f(x, Indices{-100, 1, 1}, 1);
        },
        IA, {op, "'target'", "holds -100 at flat position 0", "or 1"});
    bad(op + ": target [2] for [3, 4]",
        [&, f] {
          f(x, Indices{0, 1});
        },
        IA, {op, "'target'", "has shape [2], expected [3]", arg, "[3, 4]"});
    bad(op + ": target [3, 1]", [&, f] { f(x, column); }, IA,
        {op, "'target'", "[3, 1]", "expected [3]"});
    bad(op + ": target [1] for one row [4]", [&, f] { f(row, Indices{1}); }, IA,
        {op, "'target'", "has shape [1], expected []", "[4]"});
    bad(op + ": 0-d input", [&, f] { f(scalar, Indices(0)); }, IA,
        {op, arg, "has shape []", "expected [N, C] or [C]"});
    bad(op + ": K-dimensional input",
        [&, f] {
          f(cube, Indices{{0, 1, 2}, {0, 1, 2}});
        },
        IA, {op, arg, "[2, 4, 3]", "K-dimensional", "not supported"});
  }
  bad("cross_entropy: label_smoothing -0.1",
      [&] {
        cross_entropy(x, t, {-100, -0.1});
      },
      IA, {"cross_entropy", "'options.label_smoothing'", "is -0.1", "[0, 1]"});
  bad("cross_entropy: label_smoothing 1.5",
      [&] {
        cross_entropy(x, q, {-100, 1.5});
      },
      IA, {"cross_entropy", "'options.label_smoothing'", "is 1.5", "[0, 1]"});
  bad("cross_entropy: label_smoothing NaN",
      [&] {
        cross_entropy(x, t, {-100, k_nan});
      },
      IA, {"cross_entropy", "'options.label_smoothing'", "is nan"});
  bad("cross_entropy: a Reduction outside the enumeration",
      [&] {
        cross_entropy(x, t, {-100, 0.0, static_cast<Reduction>(5)});
      },
      IA, {"cross_entropy", "'options.reduction'", "Reduction(5)", "none, mean or sum"});
  bad("nll_loss: a Reduction outside the enumeration",
      [&] {
        nll_loss(x, t, {-100, static_cast<Reduction>(-1)});
      },
      IA, {"nll_loss", "'options.reduction'", "Reduction(-1)"});
  bad("cross_entropy: target_probs [3, 5] for logits [3, 4]", [&] { cross_entropy(x, q5, o); }, IA,
      {"cross_entropy", "'target_probs'", "has shape [3, 5], expected [3, 4]", "'logits'"});
  bad("cross_entropy: target_probs [4] for logits [3, 4]", [&] { cross_entropy(x, row, o); }, IA,
      {"cross_entropy", "'target_probs'", "has shape [4], expected [3, 4]"});
  bad("cross_entropy: K-dimensional probabilities", [&] { cross_entropy(cube, cube, o); }, IA,
      {"cross_entropy", "'logits'", "[2, 4, 3]", "not supported"});
  add_handle_rows<T>(
      rows, "cross_entropy", {"logits"}, {x},
      [t](const std::vector<Var<T>>& v) { cross_entropy(v[0], t); }, other, stale);
  add_handle_rows<T>(
      rows, "cross_entropy", {"logits", "target_probs"}, {x, q},
      [](const std::vector<Var<T>>& v) { cross_entropy(v[0], v[1]); }, other, stale);
  add_handle_rows<T>(
      rows, "nll_loss", {"log_probs"}, {x},
      [t](const std::vector<Var<T>>& v) { nll_loss(v[0], t); }, other, stale);
  report("cross_entropy", run_rows(rows, snapshot));
}

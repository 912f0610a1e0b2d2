// Reductions along axes: sum, mean, var, logsumexp (reduce.hpp) and amax,
// amin, max, min (extrema.hpp). References: fixtures from torch 1.13
// (support/fixtures/make_reduce.py) and long-double loops written here.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <xtensor/xview.hpp>
#include <xtgrad/engine/ops/elementwise.hpp>
#include <xtgrad/engine/ops/extrema.hpp>
#include <xtgrad/engine/ops/reduce.hpp>

#include "support/bad_input.hpp"
#include "support/fixtures/reduce_fixtures.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fx = xtgrad::fixtures::reduce;

namespace {

using Dims = std::vector<std::size_t>;
using Axes = std::vector<std::int64_t>;

enum class Op { sum, mean, var0, var1, logsumexp, amax, amin };
const Op k_ops[] = {Op::sum, Op::mean, Op::var0, Op::var1, Op::logsumexp, Op::amax, Op::amin};
const char* name(Op op) {
  switch (op) {
    case Op::sum:
      return "sum";
    case Op::mean:
      return "mean";
    case Op::var0:
      return "var (correction 0)";
    case Op::var1:
      return "var (correction 1)";
    case Op::logsumexp:
      return "logsumexp";
    case Op::amax:
      return "amax";
    case Op::amin:
      return "amin";
  }
  return "?";
}

template <class T>
Var<T> apply(Op op, const Var<T>& x, const Axes& dims, bool keepdim) {
  switch (op) {
    case Op::sum:
      return sum(x, dims, keepdim);
    case Op::mean:
      return mean(x, dims, keepdim);
    case Op::var0:
      return var(x, dims, 0, keepdim);
    case Op::var1:
      return var(x, dims, 1, keepdim);
    case Op::logsumexp:
      return logsumexp(x, dims, keepdim);
    case Op::amax:
      return amax(x, dims, keepdim);
    case Op::amin:
      return amin(x, dims, keepdim);
  }
  return x;
}

// An array of shape `dims` from row-major values (a fixture, or a literal).
template <class T>
xt::xarray<T> shaped(const Dims& dims, const double* values) {
  xt::xarray<T> a = xt::empty<T>(dims);
  for (std::size_t i = 0; i < a.size(); ++i) a.data()[i] = static_cast<T>(values[i]);
  return a;
}
template <class T>
xt::xarray<T> shaped(const Dims& dims, const std::vector<double>& values) {
  xt::xarray<T> a = xt::empty<T>(dims);
  REQUIRE(a.size() == values.size());
  return shaped<T>(dims, values.data());
}
xt::xarray<std::int64_t> shaped_indices(const Dims& dims, const std::int64_t* values) {
  xt::xarray<std::int64_t> a = xt::empty<std::int64_t>(dims);
  std::copy(values, values + a.size(), a.data());
  return a;
}

// ---- A textbook reduction reference: for each input element, its output ----

struct Layout {
  Dims out;                        // the result's shape
  std::vector<std::size_t> of;     // output flat index of each input element
  std::vector<std::size_t> count;  // input elements per output element
};

Layout layout(const Dims& shape, const Axes& dims, bool keepdim) {
  const std::size_t rank = shape.size();
  std::vector<bool> reduced(std::max<std::size_t>(rank, 1), dims.empty());
  for (std::int64_t d : dims)
    reduced[static_cast<std::size_t>(d < 0 ? d + std::max<std::int64_t>(rank, 1) : d)] = true;
  Layout l;
  for (std::size_t k = 0; k < rank; ++k)
    if (!reduced[k])
      l.out.push_back(shape[k]);
    else if (keepdim)
      l.out.push_back(1);
  std::size_t total = 1, out_total = 1;
  for (std::size_t k = 0; k < rank; ++k) total *= shape[k];
  for (std::size_t k = 0; k < rank; ++k) out_total *= reduced[k] ? 1 : shape[k];
  l.count.assign(out_total, 0);
  for (std::size_t i = 0; i < total; ++i) {
    std::size_t rest = i, o = 0, scale = 1;
    for (std::size_t k = rank; k-- > 0;) {
      const std::size_t index = rest % shape[k];
      rest /= shape[k];
      if (!reduced[k]) {
        o += index * scale;
        scale *= shape[k];
      }
    }
    l.of.push_back(o);
    ++l.count[o];
  }
  return l;
}

struct Reference {
  xt::xarray<double> y, dx;
};

// y = op(x) and the gradient of <dy, y>, in long double, element by element.
template <class T>
Reference reference(Op op, const xt::xarray<T>& x, const Axes& dims, bool keepdim,
                    const xt::xarray<double>& dy) {
  const Layout l = layout(Dims(x.shape().begin(), x.shape().end()), dims, keepdim);
  const std::size_t outs = l.count.size();
  std::vector<long double> acc(outs, 0.0L), top(outs, op == Op::amin ? k_inf : -k_inf);
  std::vector<std::size_t> ties(outs, 0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const long double v = x.data()[i];
    acc[l.of[i]] += v;
    top[l.of[i]] = op == Op::amin ? std::min(top[l.of[i]], v) : std::max(top[l.of[i]], v);
  }
  std::vector<long double> mean(outs), sq(outs, 0.0L), lse(outs, 0.0L);
  for (std::size_t o = 0; o < outs; ++o) mean[o] = acc[o] / l.count[o];
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t o = l.of[i];
    const long double v = x.data()[i];
    sq[o] += (v - mean[o]) * (v - mean[o]);
    lse[o] += std::exp(v - top[o]);
    ties[o] += v == top[o];
  }
  Reference r{xt::zeros<double>(l.out), xt::zeros<double>(x.shape())};
  const long double c = op == Op::var1 ? 1 : 0;
  for (std::size_t o = 0; o < outs; ++o) {
    long double y = 0;
    switch (op) {
      case Op::sum:
        y = acc[o];
        break;
      case Op::mean:
        y = mean[o];
        break;
      case Op::var0:
      case Op::var1:
        y = sq[o] / (l.count[o] - c);
        break;
      case Op::logsumexp:
        y = top[o] + std::log(lse[o]);
        break;
      case Op::amax:
      case Op::amin:
        y = top[o];
        break;
    }
    r.y.data()[o] = static_cast<double>(y);
  }
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t o = l.of[i];
    const long double v = x.data()[i], g = dy.data()[o];
    long double d = 0;
    switch (op) {
      case Op::sum:
        d = g;
        break;
      case Op::mean:
        d = g / l.count[o];
        break;
      case Op::var0:
      case Op::var1:
        d = g * 2 * (v - mean[o]) / (l.count[o] - c);
        break;
      case Op::logsumexp:
        d = g * std::exp(v - r.y.data()[o]);
        break;
      case Op::amax:
      case Op::amin:
        d = v == top[o] ? g / ties[o] : 0;
        break;
    }
    r.dx.data()[i] = static_cast<double>(d);
  }
  return r;
}

struct Case {
  Dims shape;
  Axes dims;
  bool keepdim;
};

// Every layout the plan distinguishes: last axis, all axes, a middle axis,
// axes apart, negative axes, axes of extent 1, 0-d, empty kept axes.
const std::vector<Case> k_cases = {{{5}, {0}, false},
                                   {{5}, {-1}, true},
                                   {{5}, {}, false},
                                   {{3, 4}, {1}, false},
                                   {{3, 4}, {0}, true},
                                   {{3, 4}, {}, true},
                                   {{3, 4}, {0, 1}, false},
                                   {{2, 3, 4}, {1}, false},
                                   {{2, 3, 4}, {0, 2}, true},
                                   {{2, 3, 4}, {-1, -3}, false},
                                   {{2, 3, 4}, {2, 1}, false},
                                   {{2, 3, 4, 5}, {1, 3}, false},
                                   {{2, 3, 4, 5}, {0, 2}, true},
                                   {{2, 1, 3}, {1}, false},
                                   {{2, 1, 3}, {0, 1}, true},
                                   {{1, 4, 1}, {0, 2}, false},
                                   {{}, {}, false},
                                   {{}, {0}, true},
                                   {{}, {-1}, false},
                                   {{0, 4}, {1}, false},
                                   {{0, 4}, {1, 0}, true}};

std::string describe(const Case& c) {
  return detail::shape_str(c.shape) + " over " + detail::shape_str(c.dims) +
         (c.keepdim ? " keepdim" : "");
}

// The extreme along one axis and the first index holding it (NaN first).
template <class T>
void reference_max(bool is_max, const xt::xarray<T>& x, std::size_t axis,
                   xt::xarray<double>& values, xt::xarray<std::int64_t>& indices) {
  const Dims shape(x.shape().begin(), x.shape().end());
  std::size_t outer = 1, inner = 1;
  for (std::size_t k = 0; k < axis; ++k) outer *= shape[k];
  for (std::size_t k = axis + 1; k < shape.size(); ++k) inner *= shape[k];
  const std::size_t n = shape[axis];
  for (std::size_t o = 0; o < outer; ++o)
    for (std::size_t i = 0; i < inner; ++i) {
      std::size_t best = 0;
      for (std::size_t j = 1; j < n; ++j) {
        const double v = x.data()[(o * n + j) * inner + i],
                     b = x.data()[(o * n + best) * inner + i];
        if (std::isnan(b)) break;
        if (std::isnan(v) || (is_max ? v > b : v < b)) best = j;
      }
      values.data()[o * inner + i] = x.data()[(o * n + best) * inner + i];
      indices.data()[o * inner + i] = static_cast<std::int64_t>(best);
    }
}

template <class T>
bool same_ieee(const xt::xarray<T>& a, const xt::xarray<double>& b) {
  if (a.shape() != b.shape()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double u = a.data()[i], v = b.data()[i];
    if (std::isnan(v) ? !std::isnan(u) : u != v) return false;
  }
  return true;
}

}  // namespace

// ---- (a) values against torch fixtures and long-double loops ----

TEST_CASE_TEMPLATE("reduce: every op and layout against a long-double loop", T, float, double) {
  std::uint32_t seed = 500;
  for (const Case& c : k_cases)
    for (Op op : k_ops) {
      INFO(name(op), " ", describe(c));
      const bool empty_reduction = c.shape.size() > 0 && c.shape[0] == 0 && c.dims.size() == 2;
      if ((op == Op::amax || op == Op::amin) && empty_reduction) continue;  // an error: see below
      const xt::xarray<T> xv = random_array<T>(c.shape, ++seed, -2.0, 2.0);
      Tape<T> tape;
      auto x = tape.leaf(xv);
      auto y = apply(op, x, c.dims, c.keepdim);
      const xt::xarray<double> dy =
          random_array<double>(Dims(y.shape().begin(), y.shape().end()), ++seed);
      const Reference r = reference(op, xv, c.dims, c.keepdim, dy);
      if (empty_reduction) {  // [0, 4] over every axis: one output, nothing reduced
        REQUIRE(y.size() == 1);
        const double expected = op == Op::sum ? 0.0 : op == Op::logsumexp ? -k_inf : std::nan("");
        CHECK(same_ieee(y.value(), shaped<double>({1, 1}, {expected})));
        continue;
      }
      const bool tiny_var = (op == Op::var1) && r.y.size() > 0 && x.size() == y.size();
      if (tiny_var) {  // one element per output: 0 / 0 = NaN, as torch
        for (std::size_t i = 0; i < y.size(); ++i) CHECK(std::isnan(y.value().data()[i]));
        continue;
      }
      check_close(y.value(), r.y, tolerance<T>(), tolerance<T>());
      tape.backward(y, xt::xarray<T>(xt::cast<T>(dy)));
      check_close(x.grad(), r.dx, 10 * tolerance<T>(), 10 * tolerance<T>());
    }
}

TEST_CASE_TEMPLATE("reduce: var with both corrections matches torch", T, float, double) {
  Tape<T> tape;
  auto x = tape.leaf(shaped<T>({3, 4}, fx::k_var_x));
  const xt::xarray<T> dy = shaped<T>({3}, fx::k_var_dy);
  auto v0 = var(x, 1, 0);
  auto v1 = var(x, std::int64_t(1));  // correction 1 is the default
  check_close(v0.value(), shaped<double>({3}, fx::k_var_dim1_c0), tolerance<T>(), tolerance<T>());
  check_close(v1.value(), shaped<double>({3}, fx::k_var_dim1_c1), tolerance<T>(), tolerance<T>());
  tape.backward(v0, dy);
  check_close(x.grad(), shaped<double>({3, 4}, fx::k_var_dim1_c0_grad), 10 * tolerance<T>(),
              10 * tolerance<T>());
  tape.zero_grad();
  tape.backward(v1, dy);
  check_close(x.grad(), shaped<double>({3, 4}, fx::k_var_dim1_c1_grad), 10 * tolerance<T>(),
              10 * tolerance<T>());
  auto all = var(x, Axes{0, 1});
  CHECK(all.shape() == Shape{});
  check_close(all.value(), shaped<double>({}, fx::k_var_all_c1), tolerance<T>(), tolerance<T>());
  auto k = var(x, 0, 0, true);
  check_close(k.value(), shaped<double>({1, 4}, fx::k_var_dim0_c0_keepdim), tolerance<T>(),
              tolerance<T>());
}

TEST_CASE_TEMPLATE("reduce: var with n <= correction gives torch's NaN, inf and gradients", T,
                   float, double) {
  Tape<T> tape;
  auto one = tape.leaf(shaped<T>({1, 1}, {3.0}));                                        // n = 1
  auto two = tape.leaf(xt::xarray<T>{{1, 2}});                                           // n = 2
  auto none = tape.leaf(xt::xarray<T>(xt::zeros<T>({std::size_t(2), std::size_t(0)})));  // n = 0
  CHECK(std::isnan(var(one, 1, 1).value()(0)));                                          // 0 / 0
  CHECK(var(one, 1, 0).value()(0) == T(0));
  CHECK(std::isnan(var(one, 1, 2).value()(0)));                            // 0 / max(0, -1)
  CHECK(var(two, 1, 2).value()(0) == std::numeric_limits<T>::infinity());  // 0.5 / 0
  CHECK(var(two, 1, -1).value()(0) == doctest::Approx(1.0 / 6.0));         // 0.5 / 3
  auto empty = var(none, 1);
  CHECK(empty.shape() == Shape{2});
  CHECK(std::isnan(empty.value()(0)));
  CHECK(std::isnan(empty.value()(1)));
  // gradients 2 (x - m) / (n - c), with n - c signed, as torch 1.13
  tape.backward(var(two, 1, 2), xt::xarray<T>{1});
  CHECK(two.grad()(0, 0) == -std::numeric_limits<T>::infinity());
  CHECK(two.grad()(0, 1) == std::numeric_limits<T>::infinity());
  tape.zero_grad();
  tape.backward(var(two, 1, 3), xt::xarray<T>{1});
  CHECK(two.grad() == xt::xarray<T>{{1, -1}});
  tape.zero_grad();
  tape.backward(var(one, 1, 1), xt::xarray<T>{1});
  CHECK(std::isnan(one.grad()(0, 0)));  // inf * 0
}

TEST_CASE_TEMPLATE("reduce: var is stable for 1e4 + 1e-3 noise", T, float, double) {
  xt::xarray<T> xv = random_array<T>({4, 1000}, 77, -1.0, 1.0);
  for (auto& v : xv) v = static_cast<T>(1e4 + 1e-3 * v);
  Tape<T> tape;
  auto x = tape.leaf(xv);
  auto y = var(x, -1);
  const xt::xarray<double> dy = {1.0, -2.0, 0.5, 3.0};
  const Reference r = reference(Op::var1, xv, {-1}, false, dy);
  check_close(y.value(), r.y, 1e-6, 0.0);  // ~3e-7 exactly; a one-pass float sum gives garbage
  tape.backward(y, xt::xarray<T>(xt::cast<T>(dy)));
  check_close(x.grad(), r.dx, 1e-4, 1e-12);
}

TEST_CASE_TEMPLATE("reduce: sum and mean over several axes with keepdim match torch", T, float,
                   double) {
  Tape<T> tape;
  auto x = tape.leaf(shaped<T>({2, 3, 4, 5}, fx::k_sum4_x));
  const auto close = [](const Var<T>& y, const Dims& dims, const double* expected) {
    REQUIRE(y.shape() == Shape(dims.begin(), dims.end()));
    check_close(y.value(), shaped<double>(dims, expected), tolerance<T>(), tolerance<T>());
  };
  close(sum(x, {1, 3}, true), {2, 1, 4, 1}, fx::k_sum4_13_keepdim);
  close(sum(x, {-1, 0}), {3, 4}, fx::k_sum4_m1_0);
  close(mean(x, {0, 2}, true), {1, 3, 1, 5}, fx::k_mean4_02_keepdim);
  close(mean(x, {1, 2}), {2, 5}, fx::k_mean4_12);
  close(var(x, {1, 3}, 0), {2, 4}, fx::k_var4_13_c0);
  close(amax(x, {0, 2}), {3, 5}, fx::k_amax4_02);
  close(logsumexp(x, {1, 3}), {2, 4}, fx::k_lse4_13);
  // dims = {} is every axis (torch 1.13's dim=[]), the same as the whole-tensor sum
  auto all = sum(x, Axes{});
  CHECK(all.shape() == Shape{});
  CHECK(all.value()() == sum(x).value()());
  CHECK(sum(x, {}, true).shape() == Shape{1, 1, 1, 1});
  // the single-axis overloads are the one-element dims
  CHECK(sum(x, 2).value() == sum(x, Axes{2}).value());
  CHECK(mean(x, -1, true).value() == mean(x, Axes{-1}, true).value());
  CHECK(logsumexp(x, 1).value() == logsumexp(x, Axes{1}).value());
  CHECK(amin(x, 3).value() == amin(x, Axes{3}).value());
}

TEST_CASE_TEMPLATE("reduce: sum and mean gradients are dy broadcast over the reduced axes", T,
                   float, double) {
  Tape<T> tape;
  auto x = tape.leaf(xt::xarray<T>{{{1, 2}, {3, 4}, {5, 6}}});  // [1, 3, 2]
  auto s = sum(x, {0, 2}, true);                                // [1, 3, 1]
  CHECK(s.value() == shaped<T>({1, 3, 1}, {3, 7, 11}));
  tape.backward(s, shaped<T>({1, 3, 1}, {1, -2, 4}));
  CHECK(x.grad() == xt::xarray<T>{{{1, 1}, {-2, -2}, {4, 4}}});
  tape.zero_grad();
  auto m = mean(x, 1);  // [1, 2]
  CHECK(m.value() == xt::xarray<T>{{3, 4}});
  tape.backward(m, xt::xarray<T>{{3, 6}});
  CHECK(x.grad() == xt::xarray<T>{{{1, 2}, {1, 2}, {1, 2}}});
}

TEST_CASE_TEMPLATE("reduce: amax and amin spread the gradient over ties, as torch", T, float,
                   double) {
  Tape<T> tape;
  auto x = tape.leaf(shaped<T>({2, 3, 4}, fx::k_ties_x));
  const xt::xarray<T> dy02 = shaped<T>({3}, fx::k_ties_dy02);
  auto mx = amax(x, {0, 2});
  check_close(mx.value(), shaped<double>({3}, fx::k_amax_02), 0.0, 0.0);
  tape.backward(mx, dy02);
  check_close(x.grad(), shaped<double>({2, 3, 4}, fx::k_amax_02_grad), tolerance<T>(),
              tolerance<T>());
  tape.zero_grad();
  auto mn = amin(x, {0, 2});
  check_close(mn.value(), shaped<double>({3}, fx::k_amin_02), 0.0, 0.0);
  tape.backward(mn, dy02);
  check_close(x.grad(), shaped<double>({2, 3, 4}, fx::k_amin_02_grad), tolerance<T>(),
              tolerance<T>());
  tape.zero_grad();
  auto last = amax(x, -1, true);
  check_close(last.value(), shaped<double>({2, 3, 1}, fx::k_amax_last_keepdim), 0.0, 0.0);
  tape.backward(last, shaped<T>({2, 3, 1}, fx::k_ties_dy_last));
  check_close(x.grad(), shaped<double>({2, 3, 4}, fx::k_amax_last_keepdim_grad), tolerance<T>(),
              tolerance<T>());
  // hand-checked: [1, 3, 3, 0] gives [0, 0.5, 0.5, 0]
  auto row = tape.leaf(xt::xarray<T>{1, 3, 3, 0});
  tape.backward(amax(row, 0), xt::xarray<T>(T(1)));
  CHECK(row.grad() == xt::xarray<T>{0, 0.5, 0.5, 0});
}

TEST_CASE_TEMPLATE("reduce: max and min return torch's first index on ties and route the gradient",
                   T, float, double) {
  const xt::xarray<T> xv = shaped<T>({2, 3, 4}, fx::k_ties_x);
  const double* dys[2][3] = {{fx::k_max_dim0_dy, fx::k_max_dim1_dy, fx::k_max_dim2_dy},
                             {fx::k_min_dim0_dy, fx::k_min_dim1_dy, fx::k_min_dim2_dy}};
  const double* values[2][3] = {
      {fx::k_max_dim0_values, fx::k_max_dim1_values, fx::k_max_dim2_values},
      {fx::k_min_dim0_values, fx::k_min_dim1_values, fx::k_min_dim2_values}};
  const std::int64_t* indices[2][3] = {
      {fx::k_max_dim0_indices, fx::k_max_dim1_indices, fx::k_max_dim2_indices},
      {fx::k_min_dim0_indices, fx::k_min_dim1_indices, fx::k_min_dim2_indices}};
  const double* grads[2][3] = {{fx::k_max_dim0_grad, fx::k_max_dim1_grad, fx::k_max_dim2_grad},
                               {fx::k_min_dim0_grad, fx::k_min_dim1_grad, fx::k_min_dim2_grad}};
  for (int m = 0; m < 2; ++m)
    for (std::size_t dim = 0; dim < 3; ++dim) {
      INFO((m == 0 ? "max" : "min"), " dim ", dim);
      Dims out = {2, 3, 4};
      out.erase(out.begin() + static_cast<std::ptrdiff_t>(dim));
      Tape<T> tape;
      auto x = tape.leaf(xv);
      // a negative dim for dim 2, to cover both spellings
      const std::int64_t d = dim == 2 ? -1 : static_cast<std::int64_t>(dim);
      ValuesIndices<T> r = m == 0 ? max(x, d) : min(x, d);
      check_close(r.values.value(), shaped<double>(out, values[m][dim]), 0.0, 0.0);
      CHECK(r.indices == shaped_indices(out, indices[m][dim]));
      tape.backward(r.values, shaped<T>(out, dys[m][dim]));
      check_close(x.grad(), shaped<double>({2, 3, 4}, grads[m][dim]), tolerance<T>(),
                  tolerance<T>());
    }
  Tape<T> tape;
  auto row = tape.leaf(xt::xarray<T>{{1, 3, 3, 0}, {2, 2, 2, 2}});
  ValuesIndices<T> r = max(row, 1, true);
  CHECK(r.values.shape() == Shape{2, 1});
  const std::int64_t expected[] = {1, 0};
  CHECK(r.indices == shaped_indices({2, 1}, expected));
  ValuesIndices<T> s = min(row, -1);
  CHECK(s.indices == xt::xarray<std::int64_t>{3, 0});
}

TEST_CASE_TEMPLATE("reduce: NaN is the max and the min, as torch", T, float, double) {
  const T nan = std::numeric_limits<T>::quiet_NaN();
  Tape<T> tape;
  auto x = tape.leaf(xt::xarray<T>{{1, nan, 3, nan}, {1, 2, 3, 4}});
  auto a = amax(x, 1);
  CHECK(std::isnan(a.value()(0)));
  CHECK(a.value()(1) == T(4));
  CHECK(std::isnan(amin(x, 1).value()(0)));
  ValuesIndices<T> m = max(x, 1);
  CHECK(std::isnan(m.values.value()(0)));
  CHECK(m.indices == xt::xarray<std::int64_t>{1, 3});  // the first NaN
  ValuesIndices<T> n = min(x, 1);
  CHECK(n.indices == xt::xarray<std::int64_t>{1, 0});
  // along axis 0 (whole rows compared at once): still the first NaN of each column
  auto c = tape.leaf(xt::xarray<T>{{1, nan, 5}, {nan, 2, 7}, {nan, nan, 6}});
  ValuesIndices<T> cm = max(c, 0);
  CHECK(cm.indices == xt::xarray<std::int64_t>{1, 0, 1});
  CHECK(min(c, 0).indices == xt::xarray<std::int64_t>{1, 0, 0});
  CHECK(std::isnan(amax(c, 0).value()(0)));
  CHECK(amin(c, 0).value()(2) == T(5));
  tape.backward(m.values, xt::xarray<T>{1, 1});
  CHECK(x.grad() == xt::xarray<T>{{0, 1, 0, 0}, {0, 0, 0, 1}});
  tape.zero_grad();
  tape.backward(a, xt::xarray<T>{1, 1});  // torch: dy * mask / count, count = 0 -> NaN
  for (std::size_t j = 0; j < 4; ++j) CHECK(std::isnan(x.grad()(0, j)));
  CHECK(x.grad()(1, 3) == T(1));
  CHECK(x.grad()(1, 0) == T(0));
  // a whole tensor: lse and var propagate NaN too
  CHECK(std::isnan(logsumexp(x, 1).value()(0)));
  CHECK(std::isnan(var(x, 1).value()(0)));
  CHECK(std::isnan(sum(x, 1).value()(0)));
}

TEST_CASE_TEMPLATE("reduce: logsumexp is stable at +-1000 and all -inf rows, as torch", T, float,
                   double) {
  Tape<T> tape;
  auto x = tape.leaf(shaped<T>({5, 4}, fx::k_lse_x));
  auto y = logsumexp(x, 1);
  check_close(y.value(), shaped<double>({5}, fx::k_lse_dim1), tolerance<T>(), tolerance<T>());
  CHECK(y.value()(1) == -std::numeric_limits<T>::infinity());
  tape.backward(y, shaped<T>({5}, fx::k_lse_dy));
  check_close(x.grad(), shaped<double>({5, 4}, fx::k_lse_dim1_grad), 10 * tolerance<T>(),
              10 * tolerance<T>());
  for (std::size_t j = 0; j < 4; ++j) CHECK(x.grad()(1, j) == T(0));  // not NaN

  auto x3 = tape.leaf(shaped<T>({2, 3, 4}, fx::k_lse3_x));
  auto y3 = logsumexp(x3, {0, 2}, true);
  check_close(y3.value(), shaped<double>({1, 3, 1}, fx::k_lse3_02_keepdim), tolerance<T>(),
              tolerance<T>());
  tape.backward(y3, shaped<T>({1, 3, 1}, fx::k_lse3_dy));
  check_close(x3.grad(), shaped<double>({2, 3, 4}, fx::k_lse3_02_keepdim_grad), 10 * tolerance<T>(),
              10 * tolerance<T>());

  // +inf gives +inf; an empty row gives -inf
  auto inf = tape.leaf(xt::xarray<T>{{std::numeric_limits<T>::infinity(), 1}});
  CHECK(logsumexp(inf, 1).value()(0) == std::numeric_limits<T>::infinity());
  auto none = tape.leaf(xt::xarray<T>(xt::zeros<T>({std::size_t(3), std::size_t(0)})));
  auto e = logsumexp(none, 1);
  CHECK(e.shape() == Shape{3});
  for (std::size_t i = 0; i < 3; ++i) CHECK(e.value()(i) == -std::numeric_limits<T>::infinity());
}

// ---- (b) gradcheck ----

TEST_CASE("reduce: gradcheck every op over every layout") {
  for (const Case& c : k_cases)
    for (Op op : k_ops) {
      if (c.shape.size() > 0 && c.shape[0] == 0 && (op == Op::amax || op == Op::amin)) continue;
      const std::vector<std::size_t> counts = layout(c.shape, c.dims, c.keepdim).count;
      if (op == Op::var1 && !counts.empty() && counts[0] == 1) continue;  // 0 / 0
      INFO(name(op), " ", describe(c));
      const Axes dims = c.dims;
      const bool keepdim = c.keepdim;
      check_gradients(
          [op, dims, keepdim](const std::vector<Var<double>>& v) {
            return apply(op, v[0], dims, keepdim);
          },
          {random_array(c.shape, 40, -2.0, 2.0)});  // distinct values: no ties
    }
  for (std::int64_t dim : {0, 1, -1})
    for (bool is_max : {true, false}) {
      INFO((is_max ? "max" : "min"), " dim ", dim);
      check_gradients(
          [dim, is_max](const std::vector<Var<double>>& v) {
            return is_max ? max(v[0], dim).values : min(v[0], dim, true).values;
          },
          {random_array({3, 4, 2}, 41)});
    }
}

// ---- (c) edge shapes ----

TEST_CASE_TEMPLATE("reduce: [0, D] and zero-size axes give torch's identities or errors", T, float,
                   double) {
  Tape<T> tape;
  auto x = tape.leaf(xt::xarray<T>(xt::zeros<T>({std::size_t(0), std::size_t(4)})));
  // over the empty axis: one output per column
  CHECK(sum(x, 0).value() == xt::zeros<T>({4}));
  CHECK(std::isnan(mean(x, 0).value()(2)));
  CHECK(std::isnan(var(x, 0, 0).value()(3)));
  CHECK(logsumexp(x, 0).value()(0) == -std::numeric_limits<T>::infinity());
  CHECK_THROWS_WITH_PARTS(amax(x, 0), std::invalid_argument,
                          {"xtgrad::amax", "'dims'", "axis 0", "[0, 4]", "zero-size"});
  CHECK_THROWS_WITH_PARTS(max(x, 0), std::invalid_argument,
                          {"xtgrad::max", "'dim'", "axis 0", "[0, 4]", "zero-size"});
  // along the non-empty axis: an empty result, and an empty gradient
  for (Op op : k_ops) {
    INFO(name(op));
    auto y = apply(op, x, {1}, true);
    CHECK(y.shape() == Shape{0, 1});
    tape.backward(y, xt::xarray<T>(xt::zeros<T>({std::size_t(0), std::size_t(1)})));
    CHECK(x.grad().shape() == Shape{0, 4});
  }
  ValuesIndices<T> m = min(x, 1);
  CHECK(m.values.shape() == Shape{0});
  CHECK(m.indices.shape() == Shape{0});
  // over the empty axis, backward has nothing to write
  auto s = sum(x, 0);
  tape.backward(s, xt::xarray<T>{1, 2, 3, 4});
  CHECK(x.grad().size() == 0);
}

TEST_CASE_TEMPLATE("reduce: 0-d inputs take dim 0 and -1 and give a 0-d result, as torch", T, float,
                   double) {
  Tape<T> tape;
  auto x = tape.leaf(xt::xarray<T>(T(2.5)));
  for (Op op : k_ops) {
    INFO(name(op));
    auto y = apply(op, x, {0}, true);
    CHECK(y.shape() == Shape{});
    if (op == Op::var1)
      CHECK(std::isnan(y.value()()));
    else
      CHECK(y.value()() == T(op == Op::var0 ? 0 : 2.5));
  }
  ValuesIndices<T> m = max(x, -1, true);
  CHECK(m.values.shape() == Shape{});
  CHECK(m.indices.shape() == Shape{});
  CHECK(m.indices() == 0);
  tape.backward(m.values);
  CHECK(x.grad()() == T(1));
}

TEST_CASE_TEMPLATE("reduce: transposed and stepped views give the contiguous result", T, float,
                   double) {
  const xt::xarray<T> m = random_array<T>({3, 4, 5}, 61);
  const xt::xarray<T> m_t = xt::transpose(m);  // [5, 4, 3]
  const xt::xarray<T> v = random_array<T>({4, 10}, 62);
  const xt::xarray<T> v_s = xt::view(v, xt::all(), xt::range(0, 10, 2));  // [4, 5]
  for (Op op : k_ops) {
    INFO(name(op));
    Tape<T> strided, contiguous;
    auto a1 = strided.leaf(xt::transpose(m));
    auto b1 = strided.leaf(xt::view(v, xt::all(), xt::range(0, 10, 2)));
    auto a2 = contiguous.leaf(m_t);
    auto b2 = contiguous.leaf(v_s);
    auto y1 = apply(op, a1, {0, -1}, false);
    auto y2 = apply(op, a2, {0, -1}, false);
    auto z1 = apply(op, b1, {-1}, true);
    auto z2 = apply(op, b2, {-1}, true);
    CHECK(y1.value() == y2.value());
    CHECK(z1.value() == z2.value());
    const xt::xarray<T> dy = random_array<T>({4}, 63), dz = random_array<T>({4, 1}, 64);
    strided.backward(y1, dy);
    contiguous.backward(y2, dy);
    strided.backward(z1, dz);
    contiguous.backward(z2, dz);
    CHECK(a1.grad() == a2.grad());
    CHECK(b1.grad() == b2.grad());
  }
  Tape<T> strided, contiguous;
  auto a1 = strided.leaf(xt::transpose(m));
  auto a2 = contiguous.leaf(m_t);
  ValuesIndices<T> r1 = max(a1, 1), r2 = max(a2, 1);
  CHECK(r1.values.value() == r2.values.value());
  CHECK(r1.indices == r2.indices);
}

// ---- (d) bad input ----

TEST_CASE_TEMPLATE("bad input: reduce", T, float, double) {
  Tape<T> tape, other, cleared;
  const Var<T> stale = cleared.leaf(xt::xarray<T>{1, 2});
  cleared.clear();
  Var<T> x = tape.leaf(random_array<T>({2, 3}, 1));
  Var<T> empty = tape.leaf(xt::xarray<T>(xt::zeros<T>({std::size_t(2), std::size_t(0)})));
  Var<T> scalar = tape.leaf(xt::xarray<T>(T(1)));
  Var<T> empty00 = tape.leaf(xt::xarray<T>(xt::zeros<T>({std::size_t(0), std::size_t(0)})));
  tape.backward(sum(x, 1), xt::xarray<T>{1, 2});  // x holds a nonzero gradient
  const auto snapshot = snapshot_of<T>({&tape, &other}, {x, empty, scalar, empty00});
  std::vector<Row> rows;
  const auto bad = row_adder(rows);
  const auto IA = Expect::invalid_argument;
  const std::vector<std::pair<std::string, std::function<void(const Var<T>&, Axes)>>> ops = {
      {"sum", [](const Var<T>& v, Axes d) { sum(v, d); }},
      {"mean", [](const Var<T>& v, Axes d) { mean(v, d, true); }},
      {"var", [](const Var<T>& v, Axes d) { var(v, d, 0); }},
      {"logsumexp", [](const Var<T>& v, Axes d) { logsumexp(v, d); }},
      {"amax", [](const Var<T>& v, Axes d) { amax(v, d); }},
      {"amin", [](const Var<T>& v, Axes d) { amin(v, d, true); }}};
  for (const auto& [op, f] : ops) {
    const auto call = f;
    bad(op + ": axis 2 of a rank-2 tensor", [&x, call] { call(x, {2}); }, IA,
        {"xtgrad::" + op, "'dims'", "is 2", "[-2, 2)", "rank 2"});
    bad(op + ": axis -3 of a rank-2 tensor",
        [&x, call] {
          call(x, {0, -3});
        },
        IA, {"xtgrad::" + op, "'dims'", "is -3", "[-2, 2)"});
    bad(op + ": axis 1 twice",
        [&x, call] {
          call(x, {1, -1});
        },
        IA, {"xtgrad::" + op, "'dims'", "axis 1 twice", "-1", "at most once"});
    bad(op + ": axis 1 of a 0-d tensor", [&scalar, call] { call(scalar, {1}); }, IA,
        {"xtgrad::" + op, "'dims'", "is 1", "0-d", "0 or -1"});
    add_handle_rows<T>(
        rows, op, {"x"}, {x}, [call](const std::vector<Var<T>>& v) { call(v[0], {0}); }, other,
        stale);
  }
  for (const std::string op : {"amax", "amin"}) {
    const auto call = op == "amax" ? ops[4].second : ops[5].second;
    bad(op + ": over an axis of extent 0", [&empty, call] { call(empty, {1}); }, IA,
        {"xtgrad::" + op, "'dims'", "axis 1", "extent 0", "[2, 0]", "zero-size"});
    bad(op + ": over every axis of an empty tensor", [&empty, call] { call(empty, {}); }, IA,
        {"xtgrad::" + op, "'dims'", "axis 1", "[2, 0]"});
    bad(op + ": over an axis of extent 0, the result empty too",
        [&empty00, call] { call(empty00, {1}); }, IA,
        {"xtgrad::" + op, "'dims'", "axis 1", "[0, 0]", "zero-size"});
  }
  for (const bool is_max : {true, false}) {
    const std::string op = is_max ? "max" : "min";
    const auto call = [is_max](const Var<T>& v, std::int64_t d) {
      return is_max ? max(v, d) : min(v, d);
    };
    bad(op + ": dim 2 of a rank-2 tensor", [&x, call] { call(x, 2); }, IA,
        {"xtgrad::" + op, "'dim'", "is 2", "[-2, 2)"});
    bad(op + ": dim -3", [&x, call] { call(x, -3); }, IA, {"xtgrad::" + op, "'dim'", "is -3"});
    bad(op + ": over an axis of extent 0", [&empty, call] { call(empty, -1); }, IA,
        {"xtgrad::" + op, "'dim'", "axis 1", "extent 0", "[2, 0]", "zero-size"});
    bad(op + ": over an axis of extent 0, the result empty too",
        [&empty00, call] { call(empty00, 0); }, IA,
        {"xtgrad::" + op, "'dim'", "axis 0", "[0, 0]", "zero-size"});
    add_handle_rows<T>(
        rows, op, {"x"}, {x}, [call](const std::vector<Var<T>>& v) { call(v[0], 0); }, other,
        stale);
  }
  report("reduce", run_rows(rows, snapshot));
}

// ---- (e) anomaly mode ----

TEST_CASE_TEMPLATE("reduce: anomaly mode names the op whose result is not finite", T, float,
                   double) {
  Tape<T> tape;
  auto one = tape.leaf(shaped<T>({1, 1}, {3.0}));
  auto big =
      tape.leaf(xt::xarray<T>{{std::numeric_limits<T>::max(), std::numeric_limits<T>::max()}});
  auto empty = tape.leaf(xt::xarray<T>(xt::zeros<T>({std::size_t(2), std::size_t(0)})));
  auto with_inf = tape.leaf(xt::xarray<T>{{1, std::numeric_limits<T>::infinity()}});
  auto with_nan = tape.leaf(xt::xarray<T>{{1, std::numeric_limits<T>::quiet_NaN()}});
  tape.set_detect_anomaly(true);
  check_forward_anomaly(tape, "sum", [&] { sum(big, 1); });      // overflow from finite input
  check_forward_anomaly(tape, "mean", [&] { mean(empty, 1); });  // 0 / 0
  check_forward_anomaly(tape, "var", [&] { var(one, 1); });      // n <= correction
  check_forward_anomaly(tape, "logsumexp", [&] { logsumexp(with_nan, -1); });
  check_forward_anomaly(tape, "amax", [&] { amax(with_nan, {0, 1}); });
  check_forward_anomaly(tape, "amin", [&] { amin(with_nan, 1); });
  check_forward_anomaly(tape, "max", [&] { max(with_nan, 1); });
  check_forward_anomaly(tape, "min", [&] { min(with_nan, 0, true); });
  CHECK_NOTHROW(logsumexp(big, 1));        // stable: finite
  CHECK_NOTHROW(logsumexp(with_inf, -1));  // an Inf already in the input is no anomaly
}

// ---- (f) accumulation, and inputs without a gradient ----

TEST_CASE_TEMPLATE("reduce: two backwards over one recording give twice the gradient", T, float,
                   double) {
  const xt::xarray<T> xv = random_array<T>({3, 4, 2}, 71);
  for (Op op : k_ops) {
    INFO(name(op));
    Tape<T> tape;
    auto x = tape.leaf(xv);
    auto y = apply(op, x, {0, 2}, false);
    const xt::xarray<T> dy = random_array<T>({4}, 72);
    tape.backward(y, dy);
    const xt::xarray<T> once = x.grad();
    CHECK(xt::amax(xt::abs(once))() > T(0));
    tape.backward(y, dy);
    check_close(x.grad(), xt::xarray<T>(T(2) * once), tolerance<T>(), tolerance<T>());
  }
  for (bool is_max : {true, false}) {
    Tape<T> tape;
    auto x = tape.leaf(xv);
    ValuesIndices<T> r = is_max ? max(x, 1) : min(x, 1);
    const xt::xarray<T> dy = random_array<T>({3, 2}, 73);
    tape.backward(r.values, dy);
    const xt::xarray<T> once = x.grad();
    tape.backward(r.values, dy);
    CHECK(x.grad() == xt::xarray<T>(T(2) * once));
  }
  // one Var reduced by several ops in one graph: the later rules accumulate
  Tape<T> tape;
  auto x = tape.leaf(xv);
  std::vector<Var<T>> parts;
  xt::xarray<T> separate = xt::zeros<T>(xv.shape());
  for (Op op : k_ops) {
    parts.push_back(sum(apply(op, x, {1}, false), Axes{}));
    tape.zero_grad();
    tape.backward(parts.back());
    separate += x.grad();
  }
  Var<T> total = parts[0];
  for (std::size_t k = 1; k < parts.size(); ++k) total = add(total, parts[k]);
  tape.zero_grad();
  tape.backward(total);
  check_close(x.grad(), separate, tolerance<T>(), tolerance<T>());
}

TEST_CASE_TEMPLATE("reduce: an input without requires_grad gets none, recording off records none",
                   T, float, double) {
  Tape<T> tape;
  auto x = tape.leaf(random_array<T>({3, 4}, 81), false);
  for (Op op : k_ops) CHECK_FALSE(apply(op, x, {1}, false).requires_grad());
  CHECK_FALSE(max(x, 1).values.requires_grad());
  auto w = tape.leaf(random_array<T>({3, 4}, 82));
  {
    NoGradGuard<T> guard(tape);
    auto y = var(w, 1);
    CHECK_FALSE(y.requires_grad());
    CHECK(y.shape() == Shape{3});
  }
}

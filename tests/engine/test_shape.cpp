// reshape, flatten, permute, transpose and expand: values and gradients
// against PyTorch fixtures and plain index loops, gradcheck, edge shapes,
// anomaly mode and the bad-input rows.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xoperation.hpp>
#include <xtensor/xview.hpp>
#include <xtgrad/engine/ops/elementwise.hpp>
#include <xtgrad/engine/ops/reduce.hpp>
#include <xtgrad/engine/ops/shape.hpp>

#include "support/bad_input.hpp"
#include "support/fixtures/shape_fixtures.hpp"
#include "support/shape_helpers.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fx = xtgrad::fixtures::shape;

namespace {

using Perm = std::vector<std::int64_t>;

// y = x permuted by `perm` (all non-negative), by an index loop:
// y[i_0, .., i_(r-1)] = x[j] with j[perm[k]] = i_k.
xt::xarray<double> permute_reference(const xt::xarray<double>& x, const Perm& perm) {
  const Dims xd = dims_of(x);
  Dims yd(perm.size());
  for (std::size_t k = 0; k < perm.size(); ++k) yd[k] = xd[static_cast<std::size_t>(perm[k])];
  xt::xarray<double> y = xt::empty<double>(yd);
  for (std::size_t i = 0; i < y.size(); ++i) {
    const Dims yi = unravel_index(i, yd);
    Dims xi(perm.size());
    for (std::size_t k = 0; k < perm.size(); ++k) xi[static_cast<std::size_t>(perm[k])] = yi[k];
    y.data()[i] = x.data()[ravel_index(xi, xd)];
  }
  return y;
}

// The inverse permutation.
Perm inverse_of(const Perm& perm) {
  Perm inv(perm.size());
  for (std::size_t k = 0; k < perm.size(); ++k)
    inv[static_cast<std::size_t>(perm[k])] = std::int64_t(k);
  return inv;
}

}  // namespace

TEST_CASE_TEMPLATE("shape: reshape and flatten keep the row-major order, -1 is inferred", T, float,
                   double) {
  Tape<T> tape;
  xt::xarray<T> xv = xt::empty<T>({2, 3, 4});
  for (std::size_t i = 0; i < xv.size(); ++i) xv.data()[i] = T(i);
  auto x = tape.leaf(xv);

  auto a = reshape(x, {4, -1});
  CHECK(a.shape() == Shape{4, 6});
  CHECK(a.value() == xt::xarray<T>{{0, 1, 2, 3, 4, 5},
                                   {6, 7, 8, 9, 10, 11},
                                   {12, 13, 14, 15, 16, 17},
                                   {18, 19, 20, 21, 22, 23}});
  CHECK(reshape(x, {-1}).shape() == Shape{24});
  CHECK(reshape(x, {3, 2, -1, 2}).shape() == Shape{3, 2, 2, 2});
  CHECK(flatten(x).shape() == Shape{24});
  CHECK(flatten(x, 1).shape() == Shape{2, 12});
  CHECK(flatten(x, 0, 1).shape() == Shape{6, 4});
  CHECK(flatten(x, -2, -1).shape() == Shape{2, 12});
  CHECK(flatten(x, 1, 1).shape() == Shape{2, 3, 4});
  const xt::xarray<T> f = flatten(x, 0, -2).value();
  for (std::size_t i = 0; i < 24; ++i) CHECK(f.data()[i] == T(i));

  // dx = dy in the same row-major order, and a second backward adds it again.
  const xt::xarray<T> dy = random_array<T>({4, 6}, 3);
  tape.backward(a, dy);
  REQUIRE(x.grad().shape() == Shape{2, 3, 4});
  for (std::size_t i = 0; i < 24; ++i) CHECK(x.grad().data()[i] == dy.data()[i]);
  tape.backward(a, dy);
  for (std::size_t i = 0; i < 24; ++i) CHECK(x.grad().data()[i] == T(2) * dy.data()[i]);

  tape.zero_grad();
  auto g = flatten(x, 1, 2);
  const xt::xarray<T> dg = random_array<T>({2, 12}, 4);
  tape.backward(g, dg);
  for (std::size_t i = 0; i < 24; ++i) CHECK(x.grad().data()[i] == dg.data()[i]);
}

TEST_CASE_TEMPLATE("shape: permute and transpose match torch on [2, 3, 4]", T, float, double) {
  struct Case {
    const char* name;
    Perm perm;  // for permute; transpose cases also give dims
    std::int64_t d0, d1;
    const double *y, *dy, *dx;
  };
  const std::vector<Case> cases = {{"permute(2, 0, 1)",
                                    {2, 0, 1},
                                    0,
                                    0,
                                    fx::k_permute_201_y,
                                    fx::k_permute_201_dy,
                                    fx::k_permute_201_dx},
                                   {"permute(1, 2, 0)",
                                    {1, 2, 0},
                                    0,
                                    0,
                                    fx::k_permute_120_y,
                                    fx::k_permute_120_dy,
                                    fx::k_permute_120_dx},
                                   {"transpose(0, 2)",
                                    {},
                                    0,
                                    2,
                                    fx::k_transpose_02_y,
                                    fx::k_transpose_02_dy,
                                    fx::k_transpose_02_dx},
                                   {"transpose(-1, -2)",
                                    {},
                                    -1,
                                    -2,
                                    fx::k_transpose_m1m2_y,
                                    fx::k_transpose_m1m2_dy,
                                    fx::k_transpose_m1m2_dx}};
  for (const Case& c : cases) {
    INFO(c.name);
    Tape<T> tape;
    auto x = tape.leaf(from_fixture<T>(fx::k_perm_x, {2, 3, 4}));
    auto y = c.perm.empty() ? transpose(x, c.d0, c.d1) : permute(x, c.perm);
    const Dims yd = dims_of(y.value());
    check_close(y.value(), from_fixture<double>(c.y, yd), tolerance<T>(), tolerance<T>());
    const xt::xarray<T> dy = from_fixture<T>(c.dy, yd);
    tape.backward(y, dy);
    check_close(x.grad(), from_fixture<double>(c.dx, {2, 3, 4}), tolerance<T>(), tolerance<T>());
    tape.backward(y, dy);  // leaves accumulate
    check_close(x.grad(), xt::xarray<double>(2.0 * from_fixture<double>(c.dx, {2, 3, 4})),
                tolerance<T>(), tolerance<T>());
  }
}

TEST_CASE_TEMPLATE("shape: permute matches an index loop, tiled transposes included", T, float,
                   double) {
  struct Case {
    Dims shape;
    Perm perm;
  };
  // Tile edges (37, 45 are not multiples of 32), leading batch axes, size-1
  // axes, a contiguous tail, empty tensors and the identity.
  const std::vector<Case> cases = {
      {{37, 45}, {1, 0}},           {{3, 37, 45}, {0, 2, 1}},     {{2, 2, 33, 40}, {0, 1, 3, 2}},
      {{2, 3, 4, 5}, {3, 1, 0, 2}}, {{2, 3, 4, 5}, {1, 0, 2, 3}}, {{2, 3, 4, 5}, {0, 3, 1, 2}},
      {{1, 5, 1, 3}, {3, 2, 1, 0}}, {{4, 1, 6}, {2, 1, 0}},       {{0, 3}, {1, 0}},
      {{3, 0, 2}, {2, 0, 1}},       {{2, 3, 4}, {0, 1, 2}},       {{7}, {0}}};
  std::uint32_t seed = 40;
  for (const Case& c : cases) {
    INFO(detail::shape_str(c.shape), " permute ", detail::shape_str(c.perm));
    const xt::xarray<T> xv = random_array<T>(c.shape, ++seed);
    Tape<T> tape;
    auto x = tape.leaf(xv);
    auto y = permute(x, c.perm);
    const xt::xarray<double> expected = permute_reference(xt::cast<double>(xv), c.perm);
    check_close(y.value(), expected, 0.0, 0.0);  // a copy: bit-exact
    const xt::xarray<T> dy = random_array<T>(dims_of(y.value()), ++seed);
    const xt::xarray<double> dx = permute_reference(xt::cast<double>(dy), inverse_of(c.perm));
    tape.backward(y, dy);
    check_close(x.grad(), dx, 0.0, 0.0);
    tape.backward(y, dy);  // the accumulating kernels
    check_close(x.grad(), xt::xarray<double>(2.0 * dx), tolerance<T>(), 0.0);
  }
}

TEST_CASE_TEMPLATE("shape: expand repeats size-1 and new axes, its gradient sums them back", T,
                   float, double) {
  Tape<T> tape;
  xt::xarray<T> col = xt::empty<T>({3, 1});
  col(0, 0) = 1;
  col(1, 0) = 2;
  col(2, 0) = 3;
  auto x = tape.leaf(col);
  auto y = expand(x, {2, -1, 4});
  REQUIRE(y.shape() == Shape{2, 3, 4});
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 3; ++j)
      for (std::size_t k = 0; k < 4; ++k) CHECK(y.value()(i, j, k) == T(j + 1));
  const xt::xarray<T> dy = random_array<T>({2, 3, 4}, 5);
  tape.backward(y, dy);
  for (std::size_t j = 0; j < 3; ++j) {
    long double s = 0;
    for (std::size_t i = 0; i < 2; ++i)
      for (std::size_t k = 0; k < 4; ++k) s += dy(i, j, k);
    CHECK(double(x.grad()(j, 0)) == doctest::Approx(double(s)).epsilon(tolerance<T>()));
  }

  // A row [1, 3] expanded along its first axis and a new one; keeping sizes.
  Tape<T> t2;
  auto r = t2.leaf(xt::xarray<T>{{1, 2, 3}});
  CHECK(expand(r, {2, 1, 3}).value() == xt::xarray<T>{{{1, 2, 3}}, {{1, 2, 3}}});
  CHECK(expand(r, {-1, 3}).value() == r.value());
  CHECK(expand(r, {4, 3}).value() == xt::xarray<T>{{1, 2, 3}, {1, 2, 3}, {1, 2, 3}, {1, 2, 3}});
  auto e = expand(r, {2, 5, 3});
  t2.backward(e, xt::ones<T>({2, 5, 3}));
  CHECK(r.grad() == xt::xarray<T>{{10, 10, 10}});
  t2.backward(e, xt::ones<T>({2, 5, 3}));
  CHECK(r.grad() == xt::xarray<T>{{20, 20, 20}});
  // 0-d to [2, 3]; a size-1 axis to 0 gives an empty result and a zero gradient.
  auto s = t2.leaf(xt::xarray<T>(T(4)));
  CHECK(expand(s, {2, 3}).value() == xt::xarray<T>{{4, 4, 4}, {4, 4, 4}});
  auto z = expand(r, {0, 3});
  CHECK(z.shape() == Shape{0, 3});
  t2.zero_grad();
  t2.backward(z, xt::zeros<T>({0, 3}));
  CHECK(r.grad() == xt::zeros<T>({1, 3}));
}

TEST_CASE_TEMPLATE("shape: two backwards over one recording give twice the gradient", T, float,
                   double) {
  using F = std::function<Var<T>(const Var<T>&)>;
  const std::vector<std::pair<const char*, F>> ops = {
      {"reshape",
       [](const Var<T>& x) {
         return reshape(x, {3, -1});
       }},
      {"flatten", [](const Var<T>& x) { return flatten(x, 0, 1); }},
      {"permute",
       [](const Var<T>& x) {
         return permute(x, {1, 2, 0});
       }},
      {"transpose", [](const Var<T>& x) { return transpose(x, -1, -2); }},
      {"expand", [](const Var<T>& x) {
         return expand(x, {2, 2, 3, 4});
       }}};
  for (const auto& entry : ops) {
    // not structured bindings: doctest's message macros capture them in lambdas (not C++17)
    const auto& name = std::get<0>(entry);
    const auto& f = std::get<1>(entry);
    INFO(name);
    Tape<T> tape;
    auto x = tape.leaf(random_array<T>({2, 3, 4}, 7));
    auto y = f(x);
    const xt::xarray<T> dy = random_array<T>(dims_of(y.value()), 8);
    tape.backward(y, dy);
    const xt::xarray<T> once = x.grad();
    CHECK(xt::any(xt::not_equal(once, T(0))));
    tape.backward(y, dy);
    check_close(x.grad(), xt::xarray<T>(T(2) * once), tolerance<T>(), 0.0);
  }
}

TEST_CASE("shape: gradcheck of reshape, flatten, permute, transpose and expand") {
  using V = std::vector<Var<double>>;
  const xt::xarray<double> x = random_array({2, 3, 4}, 11);
  check_gradients([](const V& v) { return reshape(v[0], {4, -1}); }, {x});
  check_gradients([](const V& v) { return flatten(v[0], 1); }, {x});
  check_gradients([](const V& v) { return permute(v[0], {2, 0, 1}); }, {x});
  check_gradients([](const V& v) { return permute(v[0], {-1, 1, 0}); }, {x});
  check_gradients([](const V& v) { return transpose(v[0], -1, -2); }, {x});
  check_gradients([](const V& v) { return transpose(v[0], 0, 2); },
                  {random_array({40, 3, 35}, 12)});
  check_gradients([](const V& v) { return expand(v[0], {2, 3, -1}); }, {random_array({3, 1}, 13)});
  check_gradients([](const V& v) { return expand(v[0], {3, 2, 4}); }, {random_array({2, 4}, 14)});
  // Reuse: x used twice through different views accumulates both paths.
  check_gradients(
      [](const V& v) {
        return mul(transpose(v[0], 0, 1), reshape(v[0], {3, 2}));
      },
      {random_array({2, 3}, 15)});
}

TEST_CASE_TEMPLATE("shape: edge shapes [D], [0, D], 0-d, negative dims and strided views", T, float,
                   double) {
  Tape<T> tape;
  auto v = tape.leaf(random_array<T>({5}, 1));
  CHECK(reshape(v, {5, 1}).shape() == Shape{5, 1});
  CHECK(transpose(v, 0, -1).value() == v.value());
  CHECK(flatten(v).value() == v.value());
  CHECK(expand(v, {2, 5}).shape() == Shape{2, 5});

  auto e = tape.leaf(xt::xarray<T>(xt::zeros<T>({std::size_t(0), std::size_t(4)})));
  CHECK(reshape(e, {4, 0}).shape() == Shape{4, 0});
  CHECK(reshape(e, {-1}).shape() == Shape{0});
  CHECK(reshape(e, {-1, 2}).shape() == Shape{0, 2});
  CHECK(permute(e, {1, 0}).shape() == Shape{4, 0});
  CHECK(flatten(e).shape() == Shape{0});
  auto et = transpose(e, -2, -1);
  tape.backward(et, xt::zeros<T>({std::size_t(4), std::size_t(0)}));
  CHECK(e.grad().shape() == Shape{0, 4});

  auto s = tape.leaf(xt::xarray<T>(T(2.5)));
  CHECK(flatten(s).shape() == Shape{1});  // torch: a 0-d tensor flattens to [1]
  CHECK(flatten(s, -1, 0).shape() == Shape{1});
  CHECK(reshape(s, {1, 1}).value()(0, 0) == T(2.5));
  CHECK(reshape(reshape(s, {1}), {}).shape() == Shape{});
  CHECK(permute(s, {}).value()() == T(2.5));

  // A strided view recorded as a leaf equals its contiguous copy.
  const xt::xarray<T> m = random_array<T>({4, 6}, 2);
  Tape<T> strided, contiguous;
  auto a = strided.leaf(xt::view(m, xt::range(0, 4, 2), xt::all()));  // [2, 6]
  auto b = contiguous.leaf(xt::xarray<T>(xt::view(m, xt::range(0, 4, 2), xt::all())));
  auto ya = transpose(reshape(a, {2, 3, 2}), 0, -1);
  auto yb = transpose(reshape(b, {2, 3, 2}), 0, -1);
  CHECK(ya.value() == yb.value());
  const xt::xarray<T> dy = random_array<T>({2, 3, 2}, 3);
  strided.backward(ya, dy);
  contiguous.backward(yb, dy);
  CHECK(a.grad() == b.grad());
  auto at = strided.leaf(xt::transpose(m));
  CHECK(permute(at, {1, 0}).value() == m);
}

TEST_CASE_TEMPLATE("shape: anomaly mode names the op for a non-finite input", T, float, double) {
  Tape<T> tape;
  auto x = tape.leaf(xt::xarray<T>{{1, std::numeric_limits<T>::quiet_NaN()}, {3, 4}});
  auto r = tape.leaf(xt::xarray<T>{{std::numeric_limits<T>::infinity(), 1}});
  tape.set_detect_anomaly(true);
  const std::size_t before = tape.size();
  check_forward_anomaly(tape, "reshape", [&] { reshape(x, {4}); });
  check_forward_anomaly(tape, "flatten", [&] { flatten(x); });
  check_forward_anomaly(tape, "permute", [&] { permute(x, {1, 0}); });
  check_forward_anomaly(tape, "transpose", [&] { transpose(x, 0, 1); });
  check_forward_anomaly(tape, "expand", [&] { expand(x, {3, 2, 2}); });
  CHECK(tape.size() == before);
  CHECK(std::isinf(expand(r, {3, 2}).value()(2, 0)));  // an Inf already in r is no anomaly
  tape.set_detect_anomaly(false);                      // off, NaN and Inf pass through as IEEE says
  CHECK(std::isnan(transpose(x, 0, 1).value()(1, 0)));
  CHECK(std::isinf(expand(r, {3, 2}).value()(2, 0)));
}

TEST_CASE_TEMPLATE("bad input: shape", T, float, double) {
  Tape<T> tape, other, cleared;
  const Var<T> stale = cleared.leaf(xt::xarray<T>{1, 2});
  cleared.clear();
  Var<T> x = tape.leaf(random_array<T>({2, 3}, 1));
  Var<T> c = tape.leaf(random_array<T>({2, 3, 4}, 2));
  Var<T> col = tape.leaf(random_array<T>({3, 1}, 3));
  Var<T> empty = tape.leaf(xt::xarray<T>(xt::zeros<T>({std::size_t(0), std::size_t(3)})));
  Var<T> scalar = tape.leaf(xt::xarray<T>(T(1)));
  tape.backward(sum(x));
  const std::vector<Var<T>> leaves = {x, c, col, empty, scalar};
  const auto snapshot = snapshot_of<T>({&tape}, leaves);
  std::vector<Row> rows;
  const auto bad = row_adder(rows);
  const auto IA = Expect::invalid_argument;
  bad("reshape: element count differs",
      [&] {
        reshape(x, {4, 2});
      },
      IA, {"xtgrad::reshape", "'shape'", "[4, 2]", "[2, 3]", "6 elements"});
  bad("reshape: two -1",
      [&] {
        reshape(c, {-1, 2, -1});
      },
      IA, {"xtgrad::reshape", "'shape'", "[-1, 2, -1]", "[2, 3, 4]", "at most one -1"});
  bad("reshape: -2",
      [&] {
        reshape(x, {-2, -3});
      },
      IA, {"xtgrad::reshape", "'shape'", "[-2, -3]", ">= 0"});
  bad("reshape: -1 does not divide",
      [&] {
        reshape(x, {4, -1});
      },
      IA, {"xtgrad::reshape", "'shape'", "[4, -1]", "[2, 3]"});
  bad("reshape: ambiguous -1 with a 0",
      [&] {
        reshape(empty, {-1, 0});
      },
      IA, {"xtgrad::reshape", "'shape'", "[-1, 0]", "[0, 3]", "ambiguous"});
  bad("flatten: start after end", [&] { flatten(c, 2, 1); }, IA,
      {"xtgrad::flatten", "'start_dim'", "2", "end_dim 1", "[2, 3, 4]"});
  bad("flatten: start_dim out of range", [&] { flatten(c, 3); }, IA,
      {"xtgrad::flatten", "'start_dim'", "is 3", "[-3, 3)"});
  bad("flatten: end_dim out of range", [&] { flatten(c, 0, -4); }, IA,
      {"xtgrad::flatten", "'end_dim'", "is -4", "[-3, 3)"});
  bad("flatten: 0-d with dim 1", [&] { flatten(scalar, 1); }, IA,
      {"xtgrad::flatten", "'start_dim'", "is 1"});
  bad("permute: too few dims",
      [&] {
        permute(c, {1, 0});
      },
      IA, {"xtgrad::permute", "'dims'", "[1, 0]", "all 3 axes", "[2, 3, 4]"});
  bad("permute: a repeated axis",
      [&] {
        permute(c, {0, 2, -1});
      },
      IA, {"xtgrad::permute", "'dims'", "[0, 2, -1]", "axis 2 twice"});
  bad("permute: axis out of range",
      [&] {
        permute(x, {0, 2});
      },
      IA, {"xtgrad::permute", "'dims'", "is 2", "[-2, 2)"});
  bad("transpose: dim0 out of range", [&] { transpose(x, 2, 0); }, IA,
      {"xtgrad::transpose", "'dim0'", "is 2", "[-2, 2)"});
  bad("transpose: dim1 out of range", [&] { transpose(x, 0, -3); }, IA,
      {"xtgrad::transpose", "'dim1'", "is -3", "[-2, 2)"});
  bad("transpose: 0-d", [&] { transpose(scalar, 0, 0); }, IA,
      {"xtgrad::transpose", "'dim0'", "0-d tensor has no axis"});
  bad("expand: fewer sizes than x's rank",
      [&] {
        expand(c, {3, 4});
      },
      IA, {"xtgrad::expand", "'shape'", "[3, 4]", "[2, 3, 4]", "at least 3"});
  bad("expand: a size-3 axis cannot change",
      [&] {
        expand(col, {2, 3});
      },
      IA, {"xtgrad::expand", "'shape'", "[2, 3]", "[3, 1]", "entry 0 is 2", "expected 3"});
  bad("expand: a non-singleton axis changed",
      [&] {
        expand(x, {3, 3});
      },
      IA, {"xtgrad::expand", "'shape'", "entry 0 is 3", "expected 2", "size 1"});
  bad("expand: -1 for a new axis",
      [&] {
        expand(x, {-1, 2, 3});
      },
      IA, {"xtgrad::expand", "'shape'", "entry 0 is -1", "new axis"});
  bad("expand: -2",
      [&] {
        expand(col, {3, -2});
      },
      IA, {"xtgrad::expand", "'shape'", "entry 1 is -2"});
  for (const char* fn : {"reshape", "flatten", "permute", "transpose", "expand"}) {
    const std::string op = fn;
    add_handle_rows<T>(
        rows, op, {"x"}, {x},
        [op](const std::vector<Var<T>>& a) {
          if (op == "reshape") reshape(a[0], {6});
          if (op == "flatten") flatten(a[0]);
          if (op == "permute") permute(a[0], {1, 0});
          if (op == "transpose") transpose(a[0], 0, 1);
          if (op == "expand") expand(a[0], {2, 3});
        },
        other, stale);
  }
  report("shape", run_rows(rows, snapshot));
}

TEST_CASE("shape: reshape takes sizes from shape() and -1 in one list, signed or unsigned") {
  Tape<double> tape;
  const Var<double> x = tape.leaf(random_array({2, 3, 4}, 1));
  const Shape s = x.shape();
  CHECK(reshape(x, {s[0], s[1] * s[2]}).shape() == Shape{2, 12});  // std::size_t, no narrowing
  CHECK(reshape(x, {s[0], -1}).shape() == Shape{2, 12});           // mixed with a -1
  CHECK(reshape(x, {-1, 4}).shape() == Shape{6, 4});
  CHECK(reshape(reshape(x, {-1}), s).shape() == s);  // a Shape
  CHECK(reshape(x, std::vector<std::size_t>{4, 6}).shape() == Shape{4, 6});
  CHECK(reshape(x, std::vector<std::int64_t>{4, -1}).shape() == Shape{4, 6});
  // A wrapped unsigned size is refused, never read as -1.
  CHECK_THROWS_WITH_PARTS(reshape(x, {s[0] - 3, s[1] * s[2] * 2}), std::invalid_argument,
                          {"xtgrad::reshape", "'shape'", "18446744073709551615"});
  CHECK(tape.size() == 8);  // x and seven reshapes; the refused call records nothing
}

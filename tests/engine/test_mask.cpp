// masked_fill, where, triu, tril and the mask builders causal_mask and
// length_mask. References: hand-computed cases (torch 1.13's printed results
// for tril / triu), and xtensor's own broadcasting (xt::where, xt::sum) for
// the broadcast layouts.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xview.hpp>
#include <xtgrad/engine/ops/elementwise.hpp>
#include <xtgrad/engine/ops/mask.hpp>
#include <xtgrad/engine/ops/reduce.hpp>
#include <xtgrad/engine/threads.hpp>

#include "support/bad_input.hpp"
#include "support/shape_helpers.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

namespace {

xt::xarray<bool> mask_of(const Dims& shape, std::initializer_list<double> values) {
  return shaped_as<bool>(shape, values);
}

// Deterministic random mask (about half true).
xt::xarray<bool> random_mask(const Dims& shape, std::uint32_t seed) {
  std::mt19937 generator(seed);
  xt::xarray<bool> m = xt::empty<bool>(shape);
  for (auto& element : m) element = (generator() & 1u) != 0;
  return m;
}

// g [..] summed over the axes along which an operand of shape `dims` was
// broadcast to g's shape (xtensor's reductions: an independent reference).
xt::xarray<double> reduce_to(const xt::xarray<double>& g, const Dims& dims) {
  if (g.size() == 0) return xt::zeros<double>(dims);  // (xtensor's sum reads past an empty array)
  xt::xarray<double> r = g;
  while (r.dimension() > dims.size()) r = xt::eval(xt::sum(r, {std::size_t(0)}));
  for (std::size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] != 1 || r.shape()[k] == 1) continue;
    Dims kept = dims_of(r);
    kept[k] = 1;
    xt::xarray<double> s = xt::sum(r, {k});
    s.reshape(kept);
    r = s;
  }
  return r;
}

// where's broadcast layouts: cond, a, b.
struct WhereShapes {
  Dims cond, a, b;
};
const std::vector<WhereShapes> k_where_shapes = {
    {{2, 3}, {2, 3}, {2, 3}}, {{3}, {2, 3}, {2, 3}},    {{2, 1}, {3}, {}},
    {{}, {2, 3}, {3}},        {{4, 1, 3}, {2, 1}, {3}}, {{2, 3}, {1}, {2, 1}},
    {{1, 4}, {3, 1}, {1, 1}}, {{2, 3, 4}, {4}, {3, 1}}, {{}, {}, {}},
    {{0, 3}, {3}, {}},        {{3}, {0, 1}, {1}},       {{5, 1, 2}, {1, 4, 1}, {2}},
};

}  // namespace

// ---------------------------------------------------------------- masked_fill

TEST_CASE_TEMPLATE("masked_fill: hand-computed values - filled elements get gradient 0", T, float,
                   double) {
  Tape<T> tape;
  const xt::xarray<T> xv = {{1, 2, 3}, {4, 5, 6}};
  const xt::xarray<T> dy = {{0.5, -1, 2}, {3, 0.25, -2}};
  auto x = tape.leaf(xv);

  SUBCASE("mask [3] broadcast over rows, -inf (attention scores)") {
    auto y = masked_fill(x, mask_of({3}, {1, 0, 1}), -k_inf);
    const T ninf = -std::numeric_limits<T>::infinity();
    CHECK(y.value() == xt::xarray<T>{{ninf, 2, ninf}, {ninf, 5, ninf}});
    tape.backward(y, dy);
    CHECK(x.grad() == xt::xarray<T>{{0, -1, 0}, {0, 0.25, 0}});
  }
  SUBCASE("mask [2, 1] broadcast over columns, a finite value") {
    auto y = masked_fill(x, mask_of({2, 1}, {0, 1}), 7.5);
    CHECK(y.value() == xt::xarray<T>{{1, 2, 3}, {7.5, 7.5, 7.5}});
    tape.backward(y, dy);
    CHECK(x.grad() == xt::xarray<T>{{0.5, -1, 2}, {0, 0, 0}});
  }
  SUBCASE("mask of x's shape, +inf") {
    auto y = masked_fill(x, mask_of({2, 3}, {0, 1, 0, 0, 0, 1}), k_inf);
    const T inf = std::numeric_limits<T>::infinity();
    CHECK(y.value() == xt::xarray<T>{{1, inf, 3}, {4, 5, inf}});
    tape.backward(y, dy);
    CHECK(x.grad() == xt::xarray<T>{{0.5, 0, 2}, {3, 0.25, 0}});
  }
  SUBCASE("0-d masks fill everything or nothing") {
    xt::xarray<bool> on = xt::empty<bool>(Dims{}), off = xt::empty<bool>(Dims{});
    on() = true;
    off() = false;
    auto all = masked_fill(x, on, -2.0);
    CHECK(all.value() == xt::xarray<T>(xt::full_like(xv, T(-2))));
    auto none = masked_fill(x, off, -2.0);
    CHECK(none.value() == xv);
    tape.backward(add(all, none), dy);
    CHECK(x.grad() == dy);  // only through `none`
  }
}

TEST_CASE_TEMPLATE("masked_fill: a NaN value is filled as given - a NaN x under the mask is gone",
                   T, float, double) {
  Tape<T> tape;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  auto x = tape.leaf(xt::xarray<T>{1, nan, 3, nan});
  const xt::xarray<bool> mask = mask_of({4}, {1, 1, 0, 0});
  auto y = masked_fill(x, mask, k_nan);
  const double expected_y[] = {k_nan, k_nan, 3, k_nan};
  check_ieee(y.value(), expected_y, 4, 0.0, 0.0);
  auto z = masked_fill(x, mask, 0.0);
  const double expected_z[] = {0, 0, 3, k_nan};
  check_ieee(z.value(), expected_z, 4, 0.0, 0.0);
  tape.backward(z, xt::xarray<T>{nan, 2, 3, 4});
  const double expected_dx[] = {0, 0, 3, 4};  // exactly 0 where filled, even for a NaN dy
  check_ieee(x.grad(), expected_dx, 4, 0.0, 0.0);
}

TEST_CASE_TEMPLATE("masked_fill: broadcast layouts against xt::where", T, float, double) {
  const std::vector<std::pair<Dims, Dims>> layouts = {{{2, 3}, {2, 3}},
                                                      {{2, 3}, {3}},
                                                      {{2, 3}, {2, 1}},
                                                      {{2, 3}, {}},
                                                      {{2, 3}, {1}},
                                                      {{4, 2, 3}, {2, 1}},
                                                      {{3, 2, 4, 5}, {1, 4, 1}},
                                                      {{0, 3}, {3}},
                                                      {{2, 0}, {1}},
                                                      {{}, {}},
                                                      {{5, 1, 4}, {1, 4}}};
  std::uint32_t seed = 10;
  for (const auto& layout : layouts) {
    const Dims& xd = layout.first;
    const Dims& md = layout.second;
    INFO("x ", detail::shape_str(xd), " mask ", detail::shape_str(md));
    const xt::xarray<T> xv = random_array<T>(xd, ++seed);
    const xt::xarray<T> dy = random_array<T>(xd, ++seed);
    const xt::xarray<bool> mask = random_mask(md, ++seed);
    Tape<T> tape;
    auto x = tape.leaf(xv);
    auto y = masked_fill(x, mask, -3.25);
    const xt::xarray<T> expected = xt::where(mask, T(-3.25), xv);
    CHECK(y.value() == expected);
    tape.backward(y, dy);
    const xt::xarray<T> expected_dx = xt::where(mask, T(0), dy);
    CHECK(x.grad() == expected_dx);
  }
}

// torch's out-of-place masked_fill broadcasts x and mask together: x may be
// repeated up to a larger mask, and dx is summed back to x's shape.
TEST_CASE_TEMPLATE("masked_fill: x broadcast up to a larger mask, as torch's", T, float, double) {
  const std::vector<std::pair<Dims, Dims>> layouts = {{{2, 3}, {3, 1, 3}}, {{2, 3}, {1, 2, 3}},
                                                      {{}, {2}},           {{3}, {2, 3}},
                                                      {{2, 1}, {1, 4}},    {{1, 3}, {0, 3}}};
  std::uint32_t seed = 90;
  for (const auto& layout : layouts) {
    const Dims& xd = layout.first;
    const Dims& md = layout.second;
    INFO("x ", detail::shape_str(xd), " mask ", detail::shape_str(md));
    const xt::xarray<T> xv = random_array<T>(xd, ++seed);
    const xt::xarray<bool> mask = random_mask(md, ++seed);
    const xt::xarray<T> expected = xt::where(mask, T(-3.25), xv);
    const xt::xarray<T> dy = random_array<T>(dims_of(expected), ++seed);
    Tape<T> tape;
    auto x = tape.leaf(xv);
    auto y = masked_fill(x, mask, -3.25);
    REQUIRE(dims_of(y.value()) == dims_of(expected));
    CHECK(y.value() == expected);
    tape.backward(y, dy);
    tape.backward(y, dy);  // accumulates
    const xt::xarray<double> dyd = xt::cast<double>(dy);
    check_close(x.grad(), 2.0 * reduce_to(xt::where(mask, 0.0, dyd), xd), tolerance<T>(),
                tolerance<T>());
  }
  check_gradients(
      [](const std::vector<Var<double>>& v) {
        return masked_fill(v[0], mask_of({2, 1, 3}, {1, 0, 1, 0, 0, 1}), 2.5);
      },
      {random_array({4, 1}, 3)});
}

TEST_CASE("masked_fill: gradcheck") {
  check_gradients(
      [](const std::vector<Var<double>>& v) {
        return masked_fill(v[0], mask_of({3, 1, 4}, {1, 0, 1, 1, 0, 0, 1, 0, 0, 1, 1, 0}), 2.5);
      },
      {random_array({2, 3, 2, 4}, 1)});
  check_gradients(
      [](const std::vector<Var<double>>& v) {
        return masked_fill(v[0], mask_of({4}, {0, 1, 1, 0}), -100.0);
      },
      {random_array({3, 4}, 2)});
}

// ---------------------------------------------------------------- where

TEST_CASE_TEMPLATE("where: hand-computed broadcasting of cond, a and a 0-d b", T, float, double) {
  Tape<T> tape;
  auto a = tape.leaf(xt::xarray<T>{10, 20, 30});
  xt::xarray<T> b0 = xt::empty<T>(Dims{});
  b0() = -1;
  auto b = tape.leaf(b0);
  auto y = xtgrad::where(mask_of({2, 1}, {1, 0}), a, b);  // row 0 from a, row 1 from b
  CHECK(y.value() == xt::xarray<T>{{10, 20, 30}, {-1, -1, -1}});
  tape.backward(y, xt::xarray<T>{{1, 2, 3}, {4, 5, 6}});
  CHECK(a.grad() == xt::xarray<T>{1, 2, 3});
  CHECK(b.grad().dimension() == 0);
  CHECK(b.grad()() == T(4 + 5 + 6));

  Tape<T> tape2;  // cond [3] against a [2, 1] and b [2, 3]
  auto c = tape2.leaf(shaped_as<T>({2, 1}, {7, 8}));
  auto d = tape2.leaf(xt::xarray<T>{{1, 2, 3}, {4, 5, 6}});
  auto z = xtgrad::where(mask_of({3}, {0, 1, 1}), c, d);
  CHECK(z.value() == xt::xarray<T>{{1, 7, 7}, {4, 8, 8}});
  tape2.backward(z, xt::xarray<T>{{1, 2, 3}, {4, 5, 6}});
  CHECK(c.grad() == shaped_as<T>({2, 1}, {5, 11}));
  CHECK(d.grad() == xt::xarray<T>{{1, 0, 0}, {4, 0, 0}});
}

TEST_CASE_TEMPLATE("where: every broadcast layout against xtensor's broadcasting", T, float,
                   double) {
  std::uint32_t seed = 50;
  for (const WhereShapes& s : k_where_shapes) {
    INFO("cond ", detail::shape_str(s.cond), " a ", detail::shape_str(s.a), " b ",
         detail::shape_str(s.b));
    const xt::xarray<bool> cond = random_mask(s.cond, ++seed);
    const xt::xarray<T> av = random_array<T>(s.a, ++seed), bv = random_array<T>(s.b, ++seed);
    const xt::xarray<T> expected = xt::where(cond, av, bv);
    const xt::xarray<T> dy = random_array<T>(dims_of(expected), ++seed);
    Tape<T> tape;
    auto a = tape.leaf(av);
    auto b = tape.leaf(bv);
    auto y = xtgrad::where(cond, a, b);
    REQUIRE(dims_of(y.value()) == dims_of(expected));
    CHECK(y.value() == expected);
    tape.backward(y, dy);
    const xt::xarray<double> dyd = xt::cast<double>(dy);
    check_close(a.grad(), reduce_to(xt::where(cond, dyd, 0.0), s.a), tolerance<T>(),
                tolerance<T>());
    check_close(b.grad(), reduce_to(xt::where(cond, 0.0, dyd), s.b), tolerance<T>(),
                tolerance<T>());
  }
}

TEST_CASE("where: gradcheck over broadcast layouts") {
  std::uint32_t seed = 80;
  for (const WhereShapes& s : k_where_shapes) {
    INFO("cond ", detail::shape_str(s.cond), " a ", detail::shape_str(s.a), " b ",
         detail::shape_str(s.b));
    const xt::xarray<bool> cond = random_mask(s.cond, ++seed);
    check_gradients(
        [cond](const std::vector<Var<double>>& v) { return xtgrad::where(cond, v[0], v[1]); },
        {random_array(s.a, ++seed), random_array(s.b, ++seed)});
  }
}

TEST_CASE_TEMPLATE("where: the same Var as a and b gets dy - gradients accumulate", T, float,
                   double) {
  Tape<T> tape;
  const xt::xarray<T> dy = {{1, 2}, {3, 4}};
  auto x = tape.leaf(xt::xarray<T>{{5, 6}, {7, 8}});
  auto y = xtgrad::where(mask_of({2}, {1, 0}), x, x);
  CHECK(y.value() == x.value());
  tape.backward(y, dy);
  CHECK(x.grad() == dy);
  tape.backward(y, dy);  // a leaf accumulates across backward calls
  CHECK(x.grad() == xt::xarray<T>(T(2) * dy));

  Tape<T> tape2;  // where's rule accumulating onto a gradient already there
  auto a = tape2.leaf(xt::xarray<T>{{1, 2}, {3, 4}});
  auto b = tape2.leaf(xt::xarray<T>{9, 9});
  auto z = add(xtgrad::where(mask_of({2, 1}, {0, 1}), a, b), a);
  tape2.backward(z, dy);
  CHECK(a.grad() == xt::xarray<T>{{1, 2}, {6, 8}});
  CHECK(b.grad() == xt::xarray<T>{1, 2});
}

// ---------------------------------------------------------------- triu / tril

TEST_CASE_TEMPLATE("tril and triu: torch's printed results and selected gradients", T, float,
                   double) {
  Tape<T> tape;
  // torch.tril(torch.ones(2, 3, 4), diagonal=-1)
  auto ones = tape.leaf(xt::xarray<T>(xt::ones<T>({2, 3, 4})));
  auto l = tril(ones, -1);
  CHECK(l.value() == xt::xarray<T>{{{0, 0, 0, 0}, {1, 0, 0, 0}, {1, 1, 0, 0}},
                                   {{0, 0, 0, 0}, {1, 0, 0, 0}, {1, 1, 0, 0}}});
  // torch.triu(torch.ones(3, 4), diagonal=2)
  auto m = tape.leaf(xt::xarray<T>(xt::ones<T>({3, 4})));
  auto u = triu(m, 2);
  CHECK(u.value() == xt::xarray<T>{{0, 0, 1, 1}, {0, 0, 0, 1}, {0, 0, 0, 0}});

  auto x = tape.leaf(xt::xarray<T>{{1, 2, 3}, {4, 5, 6}, {7, 8, 9}});
  const xt::xarray<T> dy = {{-1, -2, -3}, {-4, -5, -6}, {-7, -8, -9}};
  auto t0 = tril(x);
  CHECK(t0.value() == xt::xarray<T>{{1, 0, 0}, {4, 5, 0}, {7, 8, 9}});
  tape.backward(t0, dy);
  CHECK(x.grad() == xt::xarray<T>{{-1, 0, 0}, {-4, -5, 0}, {-7, -8, -9}});
  tape.zero_grad();
  auto t1 = triu(x, 1);
  CHECK(t1.value() == xt::xarray<T>{{0, 2, 3}, {0, 0, 6}, {0, 0, 0}});
  tape.backward(t1, dy);
  CHECK(x.grad() == xt::xarray<T>{{0, -2, -3}, {0, 0, -6}, {0, 0, 0}});
  tape.backward(t1, dy);  // accumulates
  CHECK(x.grad() == xt::xarray<T>{{0, -4, -6}, {0, 0, -12}, {0, 0, 0}});
}

TEST_CASE_TEMPLATE("tril and triu: every diagonal and edge shape against j - i", T, float, double) {
  constexpr std::int64_t k_min = std::numeric_limits<std::int64_t>::min();
  constexpr std::int64_t k_max = std::numeric_limits<std::int64_t>::max();
  const std::vector<Dims> shapes = {{3, 5}, {5, 3}, {2, 3, 4, 4}, {1, 1}, {1, 6},
                                    {0, 3}, {3, 0}, {2, 0, 4},    {4, 1}};
  std::uint32_t seed = 200;
  for (const Dims& shape : shapes)
    for (std::int64_t d : {std::int64_t(0), std::int64_t(1), std::int64_t(-1), std::int64_t(2),
                           std::int64_t(-3), std::int64_t(7), std::int64_t(-7), k_min, k_max}) {
      INFO(detail::shape_str(shape), " diagonal ", d);
      const xt::xarray<T> xv = random_array<T>(shape, ++seed);
      const xt::xarray<T> dy = random_array<T>(shape, ++seed);
      xt::xarray<T> lower = xt::zeros<T>(shape), upper = xt::zeros<T>(shape);
      xt::xarray<T> d_lower = xt::zeros<T>(shape), d_upper = xt::zeros<T>(shape);
      const std::size_t cols = shape.back(), rows = shape[shape.size() - 2];
      for (std::size_t f = 0; f < xv.size(); ++f) {
        const auto i = static_cast<std::int64_t>((f / cols) % rows);
        const auto j = static_cast<std::int64_t>(f % cols);
        if (j - i <= d) {  // j - i is small: no overflow against any int64 d
          lower.data()[f] = xv.data()[f];
          d_lower.data()[f] = dy.data()[f];
        }
        if (j - i >= d) {
          upper.data()[f] = xv.data()[f];
          d_upper.data()[f] = dy.data()[f];
        }
      }
      Tape<T> tape;
      auto x = tape.leaf(xv);
      auto l = tril(x, d);
      CHECK(l.value() == lower);
      tape.backward(l, dy);
      CHECK(x.grad() == d_lower);
      tape.zero_grad();
      auto u = triu(x, d);
      CHECK(u.value() == upper);
      tape.backward(u, dy);
      CHECK(x.grad() == d_upper);
    }
}

TEST_CASE("tril and triu: gradcheck with leading axes") {
  check_gradients([](const std::vector<Var<double>>& v) { return tril(v[0], -1); },
                  {random_array({2, 3, 4}, 31)});
  check_gradients([](const std::vector<Var<double>>& v) { return triu(v[0], 1); },
                  {random_array({3, 5, 2}, 32)});
}

TEST_CASE_TEMPLATE("tril and triu: a large stack (threads) and a strided view", T, float, double) {
  const Dims shape = {3, 300, 1024};  // above the parallel threshold
  const int before = get_num_threads();
  set_num_threads(2);  // two chunks, whatever the machine
  const xt::xarray<T> xv = random_array<T>(shape, 41);
  Tape<T> tape;
  auto x = tape.leaf(xv);
  auto y = tril(x, 5);
  bool same = true;
  for (std::size_t f = 0; f < xv.size(); ++f) {
    const std::size_t i = (f / 1024) % 300, j = f % 1024;
    same = same && y.value().data()[f] == (j <= i + 5 ? xv.data()[f] : T(0));
  }
  CHECK(same);
  // The same bits on one thread, and the gradient too.
  const xt::xarray<T> dy = random_array<T>(shape, 43);
  tape.backward(y, dy);
  set_num_threads(1);
  Tape<T> serial;
  auto xs = serial.leaf(xv);
  auto ys = tril(xs, 5);
  serial.backward(ys, dy);
  set_num_threads(before);
  CHECK(ys.value() == y.value());
  CHECK(xs.grad() == x.grad());

  const xt::xarray<T> m = random_array<T>({4, 3}, 42);
  Tape<T> strided, contiguous;
  auto a = strided.leaf(xt::transpose(m));
  auto b = contiguous.leaf(xt::xarray<T>(xt::transpose(m)));
  CHECK(triu(a).value() == triu(b).value());
}

// ---------------------------------------------------------------- mask builders

TEST_CASE("causal_mask: torch.ones(r, c).tril(diagonal) != 0") {
  CHECK(causal_mask(3, 4) == mask_of({3, 4}, {1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0}));
  CHECK(causal_mask(3, 2, 1) == mask_of({3, 2}, {1, 1, 1, 1, 1, 1}));
  CHECK(causal_mask(2, 3, -1) == mask_of({2, 3}, {0, 0, 0, 1, 0, 0}));
  // Tq = 2 queries at the end of Tk = 4 keys: diagonal Tk - Tq (bottom-right alignment)
  CHECK(causal_mask(2, 4, 2) == mask_of({2, 4}, {1, 1, 1, 0, 1, 1, 1, 1}));
  CHECK(causal_mask(2, 2, std::numeric_limits<std::int64_t>::min()) ==
        mask_of({2, 2}, {0, 0, 0, 0}));
  CHECK(causal_mask(2, 2, std::numeric_limits<std::int64_t>::max()) ==
        mask_of({2, 2}, {1, 1, 1, 1}));
  CHECK(causal_mask(0, 3).shape() == Shape{0, 3});
  CHECK(causal_mask(3, 0).shape() == Shape{3, 0});
}

TEST_CASE("length_mask: true for t < lengths[b]") {
  const Indices lengths = {2, 0, 3, 1};
  CHECK(length_mask(lengths, 3) == mask_of({4, 3}, {1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0}));
  CHECK(length_mask(Indices{0, 0}, 0).shape() == Shape{2, 0});
  CHECK(length_mask(Indices(xt::empty<std::int64_t>(Dims{0})), 5).shape() == Shape{0, 5});
}

// ---------------------------------------------------------------- errors

TEST_CASE_TEMPLATE("bad input: masked_fill, where, triu, tril, length_mask", T, float, double) {
  Tape<T> tape, other, cleared;
  const Var<T> stale = cleared.leaf(xt::xarray<T>{1, 2});
  cleared.clear();
  Var<T> x = tape.leaf(random_array<T>({2, 3}, 1));  // [2, 3]
  Var<T> v = tape.leaf(random_array<T>({3}, 2));     // [3]
  Var<T> w = tape.leaf(random_array<T>({4, 3}, 3));  // [4, 3]
  Var<T> s = tape.leaf(xt::xarray<T>(T(0.5)));       // 0-d
  tape.backward(add(add(sum(x), sum(v)), add(sum(w), s)),
                xt::xarray<T>(T(1)));  // leaves hold gradients
  const auto snapshot = snapshot_of<T>({&tape, &other}, {x, v, w, s});
  std::vector<Row> rows;
  const auto bad = row_adder(rows);
  const auto IA = Expect::invalid_argument;
  const xt::xarray<bool> m22 = random_mask({2, 2}, 1), m2 = random_mask({2}, 4),
                         m23 = random_mask({2, 3}, 6), m41 = random_mask({4, 1}, 7);

  bad("masked_fill: mask [2, 2] for x [2, 3]", [&] { masked_fill(x, m22, 0.0); }, IA,
      {"masked_fill", "'mask'", "[2, 2]", "broadcasts with the shape [2, 3] of argument 'x'",
       "axis -1 has 2 in 'mask' and 3 in 'x'"});
  bad("masked_fill: mask [2] for x [3]", [&] { masked_fill(v, m2, 0.0); }, IA,
      {"masked_fill", "'mask'", "[2]", "[3]", "axis -1"});
  if (std::is_same_v<T,
                     float>) {  // torch: "value cannot be converted to type float without overflow"
    bad("masked_fill: 1e300 into float", [&] { masked_fill(x, m23, 1e300); }, IA,
        {"masked_fill", "'value'", "1e+300", "overflows"});
    bad("masked_fill: -1e39 into float", [&] { masked_fill(x, m23, -1e39); }, IA,
        {"masked_fill", "'value'", "-1e+39", "overflows"});
  }
  add_handle_rows<T>(
      rows, "masked_fill", {"x"}, {x},
      [m23](const std::vector<Var<T>>& a) { masked_fill(a[0], m23, 0.0); }, other, stale);

  bad("where: a [2, 3] and b [4, 3]", [&] { xtgrad::where(m23, x, w); }, IA,
      {"where", "'b'", "'a'", "[2, 3]", "[4, 3]", "axis -2"});
  bad("where: cond [4, 1] against a and b [2, 3]", [&] { xtgrad::where(m41, x, v); }, IA,
      {"where", "'cond'", "[4, 1]", "[2, 3]", "axis -2 has 4 in 'cond' and 2 in 'a' and 'b'"});
  bad("where: cond [2] against a [3] and a 0-d b", [&] { xtgrad::where(m2, v, s); }, IA,
      {"where", "'cond'", "[2]", "[3]"});
  add_handle_rows<T>(
      rows, "where", {"a", "b"}, {x, x},
      [m23](const std::vector<Var<T>>& a) { xtgrad::where(m23, a[0], a[1]); }, other, stale);

  for (const std::string op : {"tril", "triu"}) {
    const auto f = [op](const Var<T>& a, std::int64_t d) {
      return op == "tril" ? tril(a, d) : triu(a, d);
    };
    bad(op + ": 1-d x", [&, f] { f(v, 0); }, IA, {op, "'x'", "[3]", "rank >= 2"});
    bad(op + ": 0-d x", [&, f] { f(s, 1); }, IA, {op, "'x'", "[]", "rank >= 2"});
    add_handle_rows<T>(
        rows, op, {"x"}, {x}, [f](const std::vector<Var<T>>& a) { f(a[0], 0); }, other, stale);
  }

  bad("length_mask: a negative length",
      [] {
        length_mask(Indices{2, -1}, 3);
      },
      IA, {"length_mask", "'lengths'", "holds -1 at position 1", "[0, 3]"});
  bad("length_mask: a length beyond max_length",
      [] {
        length_mask(Indices{2, 4}, 3);
      },
      IA, {"length_mask", "'lengths'", "holds 4 at position 1", "[0, 3]"});
  bad("length_mask: 2-d lengths",
      [] {
        length_mask(Indices{{1, 2}}, 3);
      },
      IA, {"length_mask", "'lengths'", "[1, 2]", "1-d"});
  bad("length_mask: 0-d lengths", [] { length_mask(Indices(std::int64_t(2)), 3); }, IA,
      {"length_mask", "'lengths'", "[]", "1-d"});
  report("mask", run_rows(rows, snapshot));
}

TEST_CASE("masked_fill: the extremes of float are fine, and any finite value for double") {
  Tape<float> tape;
  auto x = tape.leaf(xt::xarray<float>(xt::zeros<float>({2})));
  const xt::xarray<bool> mask = mask_of({2}, {1, 0});
  const float max = std::numeric_limits<float>::max();
  CHECK(masked_fill(x, mask, double(max)).value()(0) == max);
  CHECK(masked_fill(x, mask, -double(max)).value()(0) == -max);
  Tape<double> dtape;
  auto xd = dtape.leaf(xt::xarray<double>(xt::zeros<double>({2})));
  CHECK(masked_fill(xd, mask, 1e300).value()(0) == 1e300);
}

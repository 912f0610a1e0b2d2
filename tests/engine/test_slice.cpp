// slice, concat, stack, split and chunk: values and gradients against
// PyTorch fixtures and hand-computed numbers, gradcheck, edge shapes,
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
#include <xtgrad/engine/ops/slice.hpp>

#include "support/bad_input.hpp"
#include "support/fixtures/shape_fixtures.hpp"
#include "support/shape_helpers.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fx = xtgrad::fixtures::shape;

namespace {

constexpr std::int64_t k_end = std::numeric_limits<std::int64_t>::max();

struct SliceFixture {
  const std::int64_t* length;
  const double *y, *dy, *dx;
};
const SliceFixture k_slices[] = {
    {fx::k_slice_0_len, fx::k_slice_0_y, fx::k_slice_0_dy, fx::k_slice_0_dx},
    {fx::k_slice_1_len, fx::k_slice_1_y, fx::k_slice_1_dy, fx::k_slice_1_dx},
    {fx::k_slice_2_len, fx::k_slice_2_y, fx::k_slice_2_dy, fx::k_slice_2_dx},
    {fx::k_slice_3_len, fx::k_slice_3_y, fx::k_slice_3_dy, fx::k_slice_3_dx},
    {fx::k_slice_4_len, fx::k_slice_4_y, fx::k_slice_4_dy, fx::k_slice_4_dx},
    {fx::k_slice_5_len, fx::k_slice_5_y, fx::k_slice_5_dy, fx::k_slice_5_dx},
    {fx::k_slice_6_len, fx::k_slice_6_y, fx::k_slice_6_dy, fx::k_slice_6_dx},
    {fx::k_slice_7_len, fx::k_slice_7_y, fx::k_slice_7_dy, fx::k_slice_7_dx},
    {fx::k_slice_8_len, fx::k_slice_8_y, fx::k_slice_8_dy, fx::k_slice_8_dx}};

std::vector<std::size_t> sizes_of(const std::vector<Var<double>>& pieces, std::size_t axis) {
  std::vector<std::size_t> sizes;
  for (const auto& p : pieces) sizes.push_back(p.shape()[axis]);
  return sizes;
}

}  // namespace

TEST_CASE_TEMPLATE("slice: Python bounds, negative and out of range, match torch", T, float,
                   double) {
  for (std::size_t c = 0; c < std::size(k_slices); ++c) {
    const std::int64_t start = fx::k_slice_cases[3 * c], stop = fx::k_slice_cases[3 * c + 1],
                       step = fx::k_slice_cases[3 * c + 2];
    INFO("x[:, ", start, ":", stop, ":", step, ", :]");
    const SliceFixture& f = k_slices[c];
    const Dims yd = {2, static_cast<std::size_t>(f.length[0]), 3};
    for (std::int64_t dim : {1, -2}) {
      Tape<T> tape;
      auto x = tape.leaf(from_fixture<T>(fx::k_slice_x, {2, 7, 3}));
      auto y = slice(x, dim, start, stop, step);
      check_close(y.value(), from_fixture<T>(f.y, yd), 0.0, 0.0);  // a copy: exact
      const xt::xarray<T> dy = from_fixture<T>(f.dy, yd);
      tape.backward(y, dy);
      const xt::xarray<double> dx = from_fixture<double>(f.dx, {2, 7, 3});
      check_close(x.grad(), dx, tolerance<T>(), 0.0);
      tape.backward(y, dy);
      check_close(x.grad(), xt::xarray<double>(2.0 * dx), tolerance<T>(), 0.0);
    }
  }
  // "to the end", and along the first and last axes by hand.
  Tape<T> tape;
  auto v = tape.leaf(xt::xarray<T>{0, 1, 2, 3, 4, 5, 6});
  CHECK(slice(v, 0, 2, k_end).value() == xt::xarray<T>{2, 3, 4, 5, 6});
  CHECK(slice(v, -1, -2, k_end, 1).value() == xt::xarray<T>{5, 6});
  CHECK(slice(v, 0, std::numeric_limits<std::int64_t>::min(), k_end, 3).value() ==
        xt::xarray<T>{0, 3, 6});
  auto m = tape.leaf(xt::xarray<T>{{1, 2, 3}, {4, 5, 6}});
  CHECK(slice(m, -1, 0, 3, 2).value() == xt::xarray<T>{{1, 3}, {4, 6}});
  auto row = slice(m, 0, 1, 2);
  CHECK(row.value() == xt::xarray<T>{{4, 5, 6}});
  tape.backward(row, xt::xarray<T>{{7, 8, 9}});
  CHECK(m.grad() == xt::xarray<T>{{0, 0, 0}, {7, 8, 9}});
}

TEST_CASE_TEMPLATE("slice: concat and stack join along any axis, gradients split back", T, float,
                   double) {
  Tape<T> tape;
  auto a = tape.leaf(xt::xarray<T>{{1, 2}, {3, 4}});
  auto b = tape.leaf(shaped_as<T>({2, 1}, {5, 6}));
  auto c = tape.leaf(xt::xarray<T>{{7, 8, 9}, {10, 11, 12}});
  auto y = concat({a, b, c}, 1);  // a braced list deduces T
  CHECK(y.value() == xt::xarray<T>{{1, 2, 5, 7, 8, 9}, {3, 4, 6, 10, 11, 12}});
  const xt::xarray<T> dy = {{1, 2, 3, 4, 5, 6}, {7, 8, 9, 10, 11, 12}};
  tape.backward(y, dy);
  CHECK(a.grad() == xt::xarray<T>{{1, 2}, {7, 8}});
  CHECK(b.grad() == shaped_as<T>({2, 1}, {3, 9}));
  CHECK(c.grad() == xt::xarray<T>{{4, 5, 6}, {10, 11, 12}});
  tape.backward(y, dy);
  CHECK(b.grad() == shaped_as<T>({2, 1}, {6, 18}));

  tape.zero_grad();  // the same Var twice: its gradient sums both uses
  auto r2 = concat<T>({a, a}, 0);
  CHECK(r2.value() == xt::xarray<T>{{1, 2}, {3, 4}, {1, 2}, {3, 4}});
  tape.backward(r2, xt::xarray<T>{{1, 2}, {3, 4}, {10, 20}, {30, 40}});
  CHECK(a.grad() == xt::xarray<T>{{11, 22}, {33, 44}});

  // stack: a new axis at 0, 1 and -1.
  tape.zero_grad();
  auto p = tape.leaf(xt::xarray<T>{1, 2, 3});
  auto q = tape.leaf(xt::xarray<T>{4, 5, 6});
  CHECK(stack({p, q}).value() == xt::xarray<T>{{1, 2, 3}, {4, 5, 6}});
  auto s1 = stack<T>({p, q, p}, 1);
  CHECK(s1.value() == xt::xarray<T>{{1, 4, 1}, {2, 5, 2}, {3, 6, 3}});
  CHECK(stack<T>({p, q}, -1).value() == xt::xarray<T>{{1, 4}, {2, 5}, {3, 6}});
  tape.backward(s1, xt::xarray<T>{{1, 2, 3}, {4, 5, 6}, {7, 8, 9}});
  CHECK(p.grad() == xt::xarray<T>{4, 10, 16});
  CHECK(q.grad() == xt::xarray<T>{2, 5, 8});
  // 3-d: stack of [2, 3] along axis 1 gives [2, k, 3].
  auto m = tape.leaf(random_array<T>({2, 3}, 4));
  auto n = tape.leaf(random_array<T>({2, 3}, 5));
  auto s = stack<T>({m, n}, 1);
  REQUIRE(s.shape() == Shape{2, 2, 3});
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 3; ++j) {
      CHECK(s.value()(i, 0, j) == m.value()(i, j));
      CHECK(s.value()(i, 1, j) == n.value()(i, j));
    }
  // 0-d tensors stack into [k].
  auto z0 = tape.leaf(xt::xarray<T>(T(1.5)));
  auto z1 = tape.leaf(xt::xarray<T>(T(-2)));
  CHECK(stack<T>({z0, z1}).value() == xt::xarray<T>{1.5, -2});
}

TEST_CASE("slice: split and chunk sizes match torch, divisible or not") {
  Tape<double> tape;
  std::size_t at = 0;
  for (std::size_t c = 0; c < std::size(fx::k_split_cases) / 3; ++c) {
    const std::int64_t n = fx::k_split_cases[3 * c], k = fx::k_split_cases[3 * c + 1];
    const auto count = static_cast<std::size_t>(fx::k_split_cases[3 * c + 2]);
    INFO("split(", n, ", ", k, ")");
    auto x = tape.leaf(xt::xarray<double>(xt::zeros<double>({std::size_t(2), std::size_t(n)})));
    const auto sizes = sizes_of(split(x, k, 1), 1);
    REQUIRE(sizes.size() == count);
    for (std::size_t i = 0; i < count; ++i)
      CHECK(sizes[i] == std::size_t(fx::k_split_sizes[at + i]));
    at += count;
  }
  at = 0;
  for (std::size_t c = 0; c < std::size(fx::k_chunk_cases) / 3; ++c) {
    const std::int64_t n = fx::k_chunk_cases[3 * c], k = fx::k_chunk_cases[3 * c + 1];
    const auto count = static_cast<std::size_t>(fx::k_chunk_cases[3 * c + 2]);
    INFO("chunk(", n, ", ", k, ")");
    auto x = tape.leaf(xt::xarray<double>(xt::zeros<double>({std::size_t(n), std::size_t(2)})));
    const auto sizes = sizes_of(chunk(x, k, 0), 0);
    REQUIRE(sizes.size() == count);
    for (std::size_t i = 0; i < count; ++i)
      CHECK(sizes[i] == std::size_t(fx::k_chunk_sizes[at + i]));
    at += count;
  }
  auto x = tape.leaf(xt::xarray<double>(xt::zeros<double>({std::size_t(3), std::size_t(5)})));
  CHECK(sizes_of(split(x, {0, 3, 2}, -1), 1) == std::vector<std::size_t>{0, 3, 2});
  CHECK(sizes_of(split(x, std::vector<std::int64_t>{3}, 0), 0) == std::vector<std::size_t>{3});
}

TEST_CASE_TEMPLATE("slice: split and chunk pieces hold x's values, gradients flow from any subset",
                   T, float, double) {
  Tape<T> tape;
  auto x = tape.leaf(xt::xarray<T>{{0, 1, 2, 3, 4}, {5, 6, 7, 8, 9}});
  auto parts = split(x, 2, -1);  // [2, 2], [2, 2], [2, 1]
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].value() == xt::xarray<T>{{0, 1}, {5, 6}});
  CHECK(parts[1].value() == xt::xarray<T>{{2, 3}, {7, 8}});
  CHECK(parts[2].value() == shaped_as<T>({2, 1}, {4, 9}));
  // Only the last piece: every other position of dx is 0.
  tape.backward(parts[2], shaped_as<T>({2, 1}, {3, 4}));
  CHECK(x.grad() == xt::xarray<T>{{0, 0, 0, 0, 3}, {0, 0, 0, 0, 4}});
  // Two pieces through one result: the first rule writes, the second adds.
  tape.zero_grad();
  auto y = add(parts[0], parts[1]);
  tape.backward(y, xt::xarray<T>{{1, 2}, {3, 4}});
  CHECK(x.grad() == xt::xarray<T>{{1, 2, 1, 2, 0}, {3, 4, 3, 4, 0}});
  tape.backward(y, xt::xarray<T>{{1, 2}, {3, 4}});
  CHECK(x.grad() == xt::xarray<T>{{2, 4, 2, 4, 0}, {6, 8, 6, 8, 0}});

  tape.zero_grad();
  auto rows = chunk(x, 2, 0);
  REQUIRE(rows.size() == 2);
  CHECK(rows[1].value() == xt::xarray<T>{{5, 6, 7, 8, 9}});
  auto sizes = split(x, {1, 4}, 1);
  CHECK(sizes[1].value() == xt::xarray<T>{{1, 2, 3, 4}, {6, 7, 8, 9}});
  tape.backward(sum(mul(rows[1], rows[1])));
  CHECK(x.grad() == xt::xarray<T>{{0, 0, 0, 0, 0}, {10, 12, 14, 16, 18}});
}

TEST_CASE_TEMPLATE("slice: two backwards over one recording give twice the gradient", T, float,
                   double) {
  using F = std::function<Var<T>(const Var<T>&, const Var<T>&)>;
  const std::vector<std::pair<const char*, F>> ops = {
      {"slice", [](const Var<T>& x, const Var<T>&) { return slice(x, 1, -3, 100, 2); }},
      {"concat",
       [](const Var<T>& x, const Var<T>& w) {
         return concat<T>({x, w, x}, 0);
       }},
      {"stack",
       [](const Var<T>& x, const Var<T>& w) {
         return stack<T>({w, x}, -1);
       }},
      {"split",
       [](const Var<T>& x, const Var<T>&) {
         return split(x, {1, 3}, -1)[1];
       }},
      {"chunk", [](const Var<T>& x, const Var<T>&) { return chunk(x, 3, 1)[0]; }}};
  for (const auto& entry : ops) {
    // not structured bindings: doctest's message macros capture them in lambdas (not C++17)
    const auto& name = std::get<0>(entry);
    const auto& f = std::get<1>(entry);
    INFO(name);
    Tape<T> tape;
    auto x = tape.leaf(random_array<T>({3, 4}, 7));
    auto w = tape.leaf(random_array<T>({3, 4}, 8));
    auto y = f(x, w);
    const xt::xarray<T> dy = random_array<T>(dims_of(y.value()), 9);
    tape.backward(y, dy);
    const xt::xarray<T> once = x.grad();
    CHECK(xt::any(xt::not_equal(once, T(0))));
    tape.backward(y, dy);
    check_close(x.grad(), xt::xarray<T>(T(2) * once), tolerance<T>(), 0.0);
  }
}

TEST_CASE("slice: gradcheck of slice, concat, stack, split and chunk") {
  using V = std::vector<Var<double>>;
  const xt::xarray<double> x = random_array({3, 7, 2}, 21);
  check_gradients([](const V& v) { return slice(v[0], 1, -5, 100, 2); }, {x});
  check_gradients([](const V& v) { return slice(v[0], -1, 1, 2); }, {x});
  // Along the last axis (rows of one element) with a step, forward and backward.
  check_gradients([](const V& v) { return slice(v[0], -1, -6, 100, 2); },
                  {random_array({3, 7}, 26)});
  check_gradients(
      [](const V& v) {
        return concat<double>({v[0], v[1], v[0]}, 1);
      },
      {random_array({3, 2, 2}, 22), random_array({3, 4, 2}, 23)});
  check_gradients(
      [](const V& v) {
        return stack<double>({v[0], v[1]}, 2);
      },
      {random_array({3, 2}, 24), random_array({3, 2}, 25)});
  check_gradients(
      [](const V& v) {
        auto p = split(v[0], 3, 1);  // 3, 3, 1
        return add(mul(p[0], p[1]), p[2]);
      },
      {x});
  check_gradients(
      [](const V& v) {
        auto p = chunk(v[0], 3, 0);
        return mul(p[2], p[0]);
      },
      {x});
}

TEST_CASE_TEMPLATE("slice: edge shapes [D], [0, D], 3-d, strided views and the legacy [0]", T,
                   float, double) {
  Tape<T> tape;
  auto e = tape.leaf(xt::xarray<T>(xt::zeros<T>({std::size_t(0), std::size_t(4)})));
  CHECK(slice(e, 1, 1, 3).shape() == Shape{0, 2});
  CHECK(slice(e, 0, 0, 5).shape() == Shape{0, 4});
  auto d = tape.leaf(random_array<T>({3, 4}, 1));
  auto ed = concat<T>({e, d, e}, 0);
  CHECK(ed.value() == d.value());
  CHECK(stack<T>({e, e}, 1).shape() == Shape{0, 2, 4});
  CHECK(chunk(e, 3, 0).size() == 3);
  CHECK(split(e, 2, 1).size() == 2);
  tape.backward(ed, xt::ones<T>({3, 4}), retain_graph);  // d is used after the next leaf
  CHECK(d.grad() == xt::ones<T>({3, 4}));
  CHECK(e.grad().shape() == Shape{0, 4});
  // torch 1.13 skips 1-d [0] tensors in cat, whatever the other ranks.
  auto legacy = tape.leaf(xt::xarray<T>(xt::zeros<T>({std::size_t(0)})));
  CHECK(concat<T>({legacy, d, legacy}, 1).value() == d.value());
  CHECK(concat<T>({legacy}, 0).shape() == Shape{0});
  // [D] and a 3-d x sliced along its middle axis.
  auto v = tape.leaf(xt::xarray<T>{1, 2, 3, 4});
  CHECK(concat<T>({v, v}).value() == xt::xarray<T>{1, 2, 3, 4, 1, 2, 3, 4});
  auto c = tape.leaf(random_array<T>({2, 5, 3}, 2));
  auto mid = slice(c, -2, 1, 5, 3);  // positions 1 and 4
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t k = 0; k < 3; ++k) {
      CHECK(mid.value()(i, 0, k) == c.value()(i, 1, k));
      CHECK(mid.value()(i, 1, k) == c.value()(i, 4, k));
    }
  // A strided view recorded as a leaf equals its contiguous copy.
  const xt::xarray<T> m = random_array<T>({4, 6}, 3);
  Tape<T> strided, contiguous;
  auto a = strided.leaf(xt::transpose(m));
  auto b = contiguous.leaf(xt::xarray<T>(xt::transpose(m)));
  auto ya = concat<T>(split(a, 2, 0), 1);
  auto yb = concat<T>(split(b, 2, 0), 1);
  CHECK(ya.value() == yb.value());
  const xt::xarray<T> dy = random_array<T>({2, 12}, 4);
  strided.backward(ya, dy);
  contiguous.backward(yb, dy);
  CHECK(a.grad() == b.grad());
}

TEST_CASE_TEMPLATE("slice: anomaly mode names the op for a non-finite input", T, float, double) {
  Tape<T> tape;
  auto x = tape.leaf(xt::xarray<T>{{1, std::numeric_limits<T>::quiet_NaN()}, {3, 4}});
  auto y = tape.leaf(xt::xarray<T>{{1, 2}, {3, 4}});
  tape.set_detect_anomaly(true);
  const std::size_t before = tape.size();
  check_forward_anomaly(tape, "slice", [&] { slice(x, 1, 1, 2); });
  check_forward_anomaly(tape, "concat", [&] { concat<T>({y, x}, 0); });
  check_forward_anomaly(tape, "stack", [&] { stack<T>({x, y}, 0); });
  check_forward_anomaly(tape, "split", [&] { split(x, 1, 1); });
  check_forward_anomaly(tape, "chunk", [&] { chunk(x, 2, 0); });
  CHECK(tape.size() == before);  // not even split's finite first piece
  // A piece without the NaN is fine: only slices that contain it throw.
  CHECK(slice(x, 1, 0, 1).value() == shaped_as<T>({2, 1}, {1, 3}));
}

TEST_CASE_TEMPLATE("bad input: slice", T, float, double) {
  Tape<T> tape, other, cleared;
  const Var<T> stale = cleared.leaf(xt::xarray<T>{1, 2});
  cleared.clear();
  Var<T> x = tape.leaf(random_array<T>({2, 3}, 1));
  Var<T> w = tape.leaf(random_array<T>({2, 4}, 2));
  Var<T> c = tape.leaf(random_array<T>({2, 3, 4}, 3));
  Var<T> scalar = tape.leaf(xt::xarray<T>(T(1)));
  Var<T> foreign = other.leaf(random_array<T>({2, 3}, 4));
  tape.backward(sum(x));
  const std::vector<Var<T>> leaves = {x, w, c, scalar};
  const auto snapshot = snapshot_of<T>({&tape, &other}, leaves);
  std::vector<Row> rows;
  const auto bad = row_adder(rows);
  const auto IA = Expect::invalid_argument;
  const auto LE = Expect::logic_error;
  bad("slice: step 0", [&] { slice(x, 1, 0, 2, 0); }, IA,
      {"xtgrad::slice", "'step'", "is 0", ">= 1"});
  bad("slice: step -1", [&] { slice(x, 1, 0, 2, -1); }, IA, {"xtgrad::slice", "'step'", "is -1"});
  bad("slice: dim out of range", [&] { slice(x, 2, 0, 1); }, IA,
      {"xtgrad::slice", "'dim'", "is 2", "[-2, 2)"});
  bad("slice: 0-d x", [&] { slice(scalar, 0, 0, 1); }, IA,
      {"xtgrad::slice", "'dim'", "0-d tensor has no axis"});
  bad("concat: empty list", [&] { concat<T>({}, 0); }, IA, {"xtgrad::concat", "'xs'", "is empty"});
  bad("concat: sizes differ off dim",
      [&] {
        concat<T>({x, w}, 0);
      },
      IA, {"xtgrad::concat", "'xs[1]'", "[2, 4]", "[*, 3]", "xs[0]", "dim 0"});
  bad("concat: ranks differ",
      [&] {
        concat<T>({x, c}, 1);
      },
      IA, {"xtgrad::concat", "'xs[1]'", "[2, 3, 4]", "[2, *]"});
  bad("concat: a 0-d tensor",
      [&] {
        concat<T>({scalar, scalar}, 0);
      },
      IA, {"xtgrad::concat", "'xs[0]'", "has shape []", "0-d"});
  bad("concat: dim out of range",
      [&] {
        concat<T>({x, x}, -3);
      },
      IA, {"xtgrad::concat", "'dim'", "is -3", "[-2, 2)"});
  bad("concat: an empty Var",
      [&] {
        concat<T>({x, Var<T>()}, 0);
      },
      LE, {"xtgrad::concat", "'xs[1]'", "empty Var handle"});
  bad("concat: a stale Var", [&] { concat<T>({stale}, 0); }, LE,
      {"xtgrad::concat", "'xs[0]'", "cleared"});
  bad("concat: two tapes",
      [&] {
        concat<T>({x, x, foreign}, 0);
      },
      LE, {"xtgrad::concat", "'xs[0]'", "'xs[2]'", "different tapes"});
  bad("stack: empty list", [&] { stack<T>({}, 0); }, IA, {"xtgrad::stack", "'xs'", "is empty"});
  bad("stack: shapes differ",
      [&] {
        stack<T>({x, x, w}, 0);
      },
      IA, {"xtgrad::stack", "'xs[2]'", "[2, 4]", "expected [2, 3]"});
  bad("stack: dim out of range",
      [&] {
        stack<T>({x, x}, 3);
      },
      IA, {"xtgrad::stack", "'dim'", "is 3", "[-3, 3)"});
  bad("stack: two tapes",
      [&] {
        stack<T>({foreign, x}, 0);
      },
      LE, {"xtgrad::stack", "'xs[1]'", "different tapes"});
  bad("split: split_size 0", [&] { split(x, 0, 1); }, IA,
      {"xtgrad::split", "'split_size'", "is 0", "[2, 3]", "dim 1"});
  bad("split: split_size -1", [&] { split(x, -1, 1); }, IA,
      {"xtgrad::split", "'split_size'", "is -1"});
  bad("split: sizes do not sum",
      [&] {
        split(x, {1, 1}, 1);
      },
      IA, {"xtgrad::split", "'split_sizes'", "[1, 1]", "sum to 3", "[2, 3]"});
  bad("split: a negative size",
      [&] {
        split(x, {-1, 4}, 1);
      },
      IA, {"xtgrad::split", "'split_sizes'", "[-1, 4]", ">= 0"});
  bad("split: dim out of range", [&] { split(x, 1, 5); }, IA, {"xtgrad::split", "'dim'", "is 5"});
  bad("chunk: 0 chunks", [&] { chunk(x, 0, 1); }, IA,
      {"xtgrad::chunk", "'chunks'", "is 0", ">= 1"});
  bad("chunk: -2 chunks", [&] { chunk(x, -2, 1); }, IA, {"xtgrad::chunk", "'chunks'", "is -2"});
  bad("chunk: 0-d x", [&] { chunk(scalar, 1, 0); }, IA, {"xtgrad::chunk", "'dim'", "0-d"});
  add_handle_rows<T>(
      rows, "slice", {"x"}, {x}, [](const std::vector<Var<T>>& a) { slice(a[0], 0, 0, 1); }, other,
      stale);
  add_handle_rows<T>(
      rows, "split", {"x"}, {x}, [](const std::vector<Var<T>>& a) { split(a[0], 1, 0); }, other,
      stale);
  add_handle_rows<T>(
      rows, "chunk", {"x"}, {x}, [](const std::vector<Var<T>>& a) { chunk(a[0], 2, 0); }, other,
      stale);
  report("slice", run_rows(rows, snapshot));
}

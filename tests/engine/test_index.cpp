// index_select, gather, index_add and scatter_add: values and gradients
// (repeated indices) against
// PyTorch fixtures and index loops, gradcheck, edge shapes, anomaly mode and
// the bad-input rows.
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
#include <xtgrad/engine/ops/index.hpp>
#include <xtgrad/engine/ops/reduce.hpp>

#include "support/bad_input.hpp"
#include "support/fixtures/shape_fixtures.hpp"
#include "support/shape_helpers.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fx = xtgrad::fixtures::shape;

namespace {

// torch.gather by its definition: y[i] = x[i with coordinate dim = index[i]].
xt::xarray<double> gather_reference(const xt::xarray<double>& x, std::size_t dim,
                                    const Indices& index) {
  const Dims xd = dims_of(x), id = dims_of(index);
  xt::xarray<double> y = xt::empty<double>(id);
  for (std::size_t p = 0; p < index.size(); ++p) {
    Dims at = unravel_index(p, id);
    at[dim] = static_cast<std::size_t>(index.data()[p]);
    y.data()[p] = x.data()[ravel_index(at, xd)];
  }
  return y;
}

}  // namespace

TEST_CASE_TEMPLATE("index: index_select with repeated indices matches torch", T, float, double) {
  struct Case {
    std::int64_t dim;
    const std::int64_t* index;
    std::size_t k;
    const double *y, *dy, *dx;
  };
  const Case cases[] = {{0, fx::k_index_select_0_index, 4, fx::k_index_select_0_y,
                         fx::k_index_select_0_dy, fx::k_index_select_0_dx},
                        {1, fx::k_index_select_1_index, 5, fx::k_index_select_1_y,
                         fx::k_index_select_1_dy, fx::k_index_select_1_dx}};
  for (const Case& c : cases) {
    for (std::int64_t dim : {c.dim, c.dim - 2}) {
      INFO("dim ", dim);
      Tape<T> tape;
      auto x = tape.leaf(from_fixture<T>(fx::k_index_x, {3, 4}));
      const Indices index = indices_from(c.index, {c.k});
      auto y = index_select(x, dim, index);
      const Dims yd = c.dim == 0 ? Dims{c.k, 4} : Dims{3, c.k};
      check_close(y.value(), from_fixture<T>(c.y, yd), 0.0, 0.0);  // a copy: exact
      const xt::xarray<T> dy = from_fixture<T>(c.dy, yd);
      tape.backward(y, dy);
      const xt::xarray<double> dx = from_fixture<double>(c.dx, {3, 4});
      check_close(x.grad(), dx, tolerance<T>(), tolerance<T>());
      tape.backward(y, dy);  // leaves accumulate
      check_close(x.grad(), xt::xarray<double>(2.0 * dx), tolerance<T>(), tolerance<T>());
    }
  }
  // By hand: rows 1, 1, 0 of a [2, 2]; the repeated row gets both gradients.
  Tape<T> tape;
  auto x = tape.leaf(xt::xarray<T>{{1, 2}, {3, 4}});
  auto y = index_select(x, 0, Indices{1, 1, 0});
  CHECK(y.value() == xt::xarray<T>{{3, 4}, {3, 4}, {1, 2}});
  tape.backward(y, xt::xarray<T>{{1, 2}, {10, 20}, {100, 200}});
  CHECK(x.grad() == xt::xarray<T>{{100, 200}, {11, 22}});
}

TEST_CASE_TEMPLATE("index: gather along each axis of [3, 4, 2] matches torch", T, float, double) {
  struct Case {
    std::int64_t dim;
    const std::int64_t *shape, *index;
    const double *y, *dy, *dx;
  };
  const Case cases[] = {{0, fx::k_gather_0_index_shape, fx::k_gather_0_index, fx::k_gather_0_y,
                         fx::k_gather_0_dy, fx::k_gather_0_dx},
                        {1, fx::k_gather_1_index_shape, fx::k_gather_1_index, fx::k_gather_1_y,
                         fx::k_gather_1_dy, fx::k_gather_1_dx},
                        {2, fx::k_gather_2_index_shape, fx::k_gather_2_index, fx::k_gather_2_y,
                         fx::k_gather_2_dy, fx::k_gather_2_dx}};
  for (const Case& c : cases) {
    for (std::int64_t dim : {c.dim, c.dim - 3}) {
      INFO("dim ", dim);
      const Dims id = {std::size_t(c.shape[0]), std::size_t(c.shape[1]), std::size_t(c.shape[2])};
      const Indices index = indices_from(c.index, id);
      Tape<T> tape;
      auto x = tape.leaf(from_fixture<T>(fx::k_gather_x, {3, 4, 2}));
      auto y = gather(x, dim, index);
      check_close(y.value(), from_fixture<T>(c.y, id), 0.0, 0.0);
      const xt::xarray<T> dy = from_fixture<T>(c.dy, id);
      tape.backward(y, dy);
      const xt::xarray<double> dx = from_fixture<double>(c.dx, {3, 4, 2});
      check_close(x.grad(), dx, tolerance<T>(), tolerance<T>());
      tape.backward(y, dy);
      check_close(x.grad(), xt::xarray<double>(2.0 * dx), tolerance<T>(), tolerance<T>());
    }
  }
}

TEST_CASE_TEMPLATE("index: index_add and scatter_add with repeated indices match torch", T, float,
                   double) {
  struct Case {
    const char* op;
    std::int64_t dim;
    Dims x_dims, source_dims;
    const std::int64_t* index;
    const double *x, *source, *y, *dy, *dx, *dsource;
  };
  const Case cases[] = {{"index_add",
                         1,
                         {3, 4},
                         {3, 5},
                         fx::k_index_add_index,
                         fx::k_index_add_x,
                         fx::k_index_add_source,
                         fx::k_index_add_y,
                         fx::k_index_add_dy,
                         fx::k_index_add_dx,
                         fx::k_index_add_dsource},
                        {"scatter_add",
                         0,
                         {3, 4, 2},
                         {5, 3, 2},
                         fx::k_scatter_add_index,
                         fx::k_scatter_add_x,
                         fx::k_scatter_add_source,
                         fx::k_scatter_add_y,
                         fx::k_scatter_add_dy,
                         fx::k_scatter_add_dx,
                         fx::k_scatter_add_dsource}};
  for (const Case& c : cases) {
    const bool is_index_add = std::string(c.op) == "index_add";
    const Indices index = is_index_add ? indices_from(c.index, {c.source_dims[1]})
                                       : indices_from(c.index, c.source_dims);
    for (std::int64_t dim : {c.dim, c.dim - static_cast<std::int64_t>(c.x_dims.size())}) {
      INFO(std::string(c.op), " dim ", dim);
      Tape<T> tape;
      auto x = tape.leaf(from_fixture<T>(c.x, c.x_dims));
      auto source = tape.leaf(from_fixture<T>(c.source, c.source_dims));
      auto y = is_index_add ? index_add(x, dim, index, source) : scatter_add(x, dim, index, source);
      check_close(y.value(), from_fixture<T>(c.y, c.x_dims), tolerance<T>(), tolerance<T>());
      const xt::xarray<T> dy = from_fixture<T>(c.dy, c.x_dims);
      tape.backward(y, dy);
      const xt::xarray<double> dx = from_fixture<double>(c.dx, c.x_dims);
      const xt::xarray<double> dsource = from_fixture<double>(c.dsource, c.source_dims);
      // dy itself and elements of dy: exact in double, float's rounding of the fixture in float
      check_close(x.grad(), dx, tolerance<T>(), 0.0);
      check_close(source.grad(), dsource, tolerance<T>(), 0.0);
      tape.backward(y, dy);  // leaves accumulate
      check_close(x.grad(), xt::xarray<double>(2.0 * dx), tolerance<T>(), tolerance<T>());
      check_close(source.grad(), xt::xarray<double>(2.0 * dsource), tolerance<T>(), tolerance<T>());
    }
  }
  // By hand: rows 1, 1 and 0 of a [2, 2] receive source rows 0 + 1 and 2.
  Tape<T> tape;
  auto x = tape.leaf(xt::xarray<T>{{1, 2}, {3, 4}});
  auto source = tape.leaf(xt::xarray<T>{{10, 20}, {100, 200}, {1000, 2000}});
  CHECK(index_add(x, 0, Indices{1, 1, 0}, source).value() ==
        xt::xarray<T>{{1001, 2002}, {113, 224}});
  // scatter_add along the last axis: y[i][index[i][j]] += source[i][j]
  auto z = scatter_add(x, 1, indices_as({2, 2}, {1, 1, 0, 1}),
                       tape.leaf(xt::xarray<T>{{10, 20}, {100, 200}}));
  CHECK(z.value() == xt::xarray<T>{{1, 32}, {103, 204}});
}

TEST_CASE_TEMPLATE("index: gather matches its definition on 1-d, 2-d and 4-d shapes", T, float,
                   double) {
  struct Case {
    Dims x, index;
    std::size_t dim;
  };
  const std::vector<Case> cases = {{{5}, {8}, 0},
                                   {{3, 4}, {3, 4}, 1},
                                   {{3, 4}, {2, 2}, 0},
                                   {{2, 3, 4, 5}, {2, 2, 4, 3}, 1},
                                   {{2, 3, 4, 5}, {1, 3, 2, 7}, 3},
                                   {{3, 4}, {0, 4}, 1},
                                   {{3, 4}, {3, 0}, 0}};
  std::uint32_t seed = 60;
  for (const Case& c : cases) {
    INFO("x ", detail::shape_str(c.x), " index ", detail::shape_str(c.index), " dim ", c.dim);
    const xt::xarray<T> xv = random_array<T>(c.x, ++seed);
    Indices index = xt::empty<std::int64_t>(c.index);
    std::uint32_t state = ++seed;
    for (auto& v : index)
      v = std::int64_t((state = state * 1103515245u + 12345u) >> 16) % std::int64_t(c.x[c.dim]);
    Tape<T> tape;
    auto x = tape.leaf(xv);
    auto y = gather(x, std::int64_t(c.dim), index);
    check_close(y.value(), gather_reference(xt::cast<double>(xv), c.dim, index), 0.0, 0.0);
    // The gradient: dx = sum over the positions that read each element.
    const xt::xarray<T> dy = random_array<T>(c.index, ++seed);
    xt::xarray<double> dx = xt::zeros<double>(c.x);
    for (std::size_t p = 0; p < index.size(); ++p) {
      Dims at = unravel_index(p, c.index);
      at[c.dim] = static_cast<std::size_t>(index.data()[p]);
      dx.data()[ravel_index(at, c.x)] += dy.data()[p];
    }
    tape.backward(y, dy);
    check_close(x.grad(), dx, tolerance<T>(), tolerance<T>());
  }
}

TEST_CASE_TEMPLATE("index: two backwards over one recording give twice the gradient", T, float,
                   double) {
  Tape<T> tape;
  auto x = tape.leaf(random_array<T>({3, 4}, 7));
  auto y = add(index_select(x, -1, Indices{3, 3, 0}),
               gather(x, 1, indices_as({3, 3}, {1, 1, 2, 0, 3, 3, 2, 2, 2})));
  const xt::xarray<T> dy = random_array<T>({3, 3}, 8);
  tape.backward(y, dy);
  const xt::xarray<T> once = x.grad();
  CHECK(xt::any(xt::not_equal(once, T(0))));
  tape.backward(y, dy);
  check_close(x.grad(), xt::xarray<T>(T(2) * once), tolerance<T>(), 0.0);
}

TEST_CASE("index: gradcheck of index_select, gather, index_add and scatter_add") {
  using V = std::vector<Var<double>>;
  const xt::xarray<double> x = random_array({3, 4, 2}, 31);
  check_gradients([](const V& v) { return index_select(v[0], 1, Indices{3, 0, 3, 3, 1}); }, {x});
  check_gradients([](const V& v) { return index_select(v[0], -1, Indices{1, 1}); }, {x});
  const Indices index = indices_from(fx::k_gather_1_index, {2, 6, 1});
  check_gradients([index](const V& v) { return gather(v[0], 1, index); }, {x});
  check_gradients(
      [](const V& v) {
        return index_add(v[0], 1, Indices{3, 0, 3}, v[1]);
      },
      {x, random_array({3, 3, 2}, 34)});
  check_gradients([index](const V& v) { return scatter_add(v[0], 1, index, v[1]); },
                  {x, random_array({2, 6, 1}, 35)});
  check_gradients(
      [](const V& v) {
        return gather(v[0], 0, indices_as({2, 2}, {2, 0, 2, 2}));
      },
      {random_array({3, 2}, 32)});
  // Reuse: the same x read twice through indices, and multiplied.
  check_gradients(
      [](const V& v) {
        return mul(index_select(v[0], 0, Indices{0, 0}),
                   gather(v[0], 0, indices_as({2, 2}, {1, 0, 1, 1})));
      },
      {random_array({2, 2}, 33)});
}

TEST_CASE_TEMPLATE("index: edge shapes [D], [0, D], empty indices, 0-d index, strided views", T,
                   float, double) {
  Tape<T> tape;
  auto v = tape.leaf(xt::xarray<T>{10, 20, 30});
  CHECK(index_select(v, 0, Indices{2, 0}).value() == xt::xarray<T>{30, 10});
  CHECK(gather(v, -1, Indices{1, 1, 1, 2}).value() == xt::xarray<T>{20, 20, 20, 30});
  Indices one = xt::empty<std::int64_t>(Dims{});
  one() = 1;
  auto r = index_select(tape.leaf(xt::xarray<T>{{1, 2}, {3, 4}}), 0, one);  // 0-d index: [1]
  CHECK(r.value() == xt::xarray<T>{{3, 4}});

  auto e = tape.leaf(xt::xarray<T>(xt::zeros<T>({std::size_t(0), std::size_t(3)})));
  CHECK(index_select(e, 1, Indices{2, 2}).shape() == Shape{0, 2});
  auto z = index_select(v, 0, Indices(xt::empty<std::int64_t>(Dims{0})));
  CHECK(z.shape() == Shape{0});
  tape.backward(z, xt::zeros<T>({std::size_t(0)}));
  CHECK(v.grad() == xt::zeros<T>({3}));  // zeros, not garbage
  auto ge = gather(e, 0, Indices(xt::empty<std::int64_t>(Dims{0, 3})));
  CHECK(ge.shape() == Shape{0, 3});

  // A 3-d x along its middle axis, and a strided view equal to its copy.
  const xt::xarray<T> m = random_array<T>({4, 6}, 2);
  Tape<T> strided, contiguous;
  auto a = strided.leaf(xt::view(m, xt::all(), xt::range(0, 6, 2)));  // [4, 3]
  auto b = contiguous.leaf(xt::xarray<T>(xt::view(m, xt::all(), xt::range(0, 6, 2))));
  const Indices idx = {{2, 0, 1}, {1, 1, 1}};
  auto ya = add(gather(a, 0, idx), index_select(a, 0, Indices{3, 3}));
  auto yb = add(gather(b, 0, idx), index_select(b, 0, Indices{3, 3}));
  CHECK(ya.value() == yb.value());
  const xt::xarray<T> dy = random_array<T>({2, 3}, 3);
  strided.backward(ya, dy);
  contiguous.backward(yb, dy);
  CHECK(a.grad() == b.grad());
  auto c = tape.leaf(random_array<T>({2, 4, 3}, 4));
  auto s = index_select(c, 1, Indices{3, 1});
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t k = 0; k < 3; ++k) {
      CHECK(s.value()(i, 0, k) == c.value()(i, 3, k));
      CHECK(s.value()(i, 1, k) == c.value()(i, 1, k));
    }
}

TEST_CASE_TEMPLATE("index: anomaly mode names the op for a non-finite input", T, float, double) {
  Tape<T> tape;
  auto x = tape.leaf(xt::xarray<T>{{1, std::numeric_limits<T>::quiet_NaN()}, {3, 4}});
  tape.set_detect_anomaly(true);
  const std::size_t before = tape.size();
  check_forward_anomaly(tape, "index_select", [&] { index_select(x, 1, Indices{1}); });
  check_forward_anomaly(tape, "gather", [&] { gather(x, 1, indices_as({2, 1}, {1, 0})); });
  CHECK(tape.size() == before);
  // Indices that avoid the NaN read only finite values.
  CHECK(gather(x, 1, indices_as({2, 1}, {0, 1})).value() == shaped_as<T>({2, 1}, {1, 4}));
}

TEST_CASE_TEMPLATE("bad input: index", T, float, double) {
  Tape<T> tape, other, cleared;
  const Var<T> stale = cleared.leaf(xt::xarray<T>{1, 2});
  cleared.clear();
  Var<T> x = tape.leaf(random_array<T>({2, 3}, 1));
  Var<T> scalar = tape.leaf(xt::xarray<T>(T(1)));
  const Var<T> rows_3 = tape.leaf(random_array<T>({2, 2}, 2));
  const Var<T> row_pair = tape.leaf(random_array<T>({1, 2}, 3));
  tape.backward(sum(x));
  const std::vector<Var<T>> leaves = {x, scalar};
  const auto snapshot = snapshot_of<T>({&tape}, leaves);
  std::vector<Row> rows;
  const auto bad = row_adder(rows);
  const auto IA = Expect::invalid_argument;
  bad("index_select: index 3 of 3",
      [&] {
        index_select(x, 1, Indices{0, 3});
      },
      IA, {"xtgrad::index_select", "'index'", "holds 3 at flat position 1", "[0, 3)"});
  bad("index_select: a negative index",
      [&] {
        index_select(x, 0, Indices{1, 0, -1});
      },
      IA, {"xtgrad::index_select", "'index'", "holds -1 at flat position 2", "[0, 2)"});
  bad("index_select: a 2-d index",
      [&] {
        index_select(x, 0, indices_as({2, 1}, {0, 1}));
      },
      IA, {"xtgrad::index_select", "'index'", "[2, 1]", "1-d"});
  bad("index_select: dim out of range", [&] { index_select(x, 2, Indices{0}); }, IA,
      {"xtgrad::index_select", "'dim'", "is 2", "[-2, 2)"});
  bad("index_select: 0-d x", [&] { index_select(scalar, 0, Indices{0}); }, IA,
      {"xtgrad::index_select", "'dim'", "0-d"});
  bad("gather: an index out of range",
      [&] {
        gather(x, 1, indices_as({2, 2}, {0, 1, 2, 7}));
      },
      IA, {"xtgrad::gather", "'index'", "holds 7 at flat position 3", "[0, 3)"});
  bad("gather: a negative index",
      [&] {
        gather(x, 0, indices_as({1, 3}, {0, -2, 1}));
      },
      IA, {"xtgrad::gather", "'index'", "holds -2 at flat position 1", "[0, 2)"});
  bad("gather: index of another rank",
      [&] {
        gather(x, 1, Indices{0, 1});
      },
      IA, {"xtgrad::gather", "'index'", "has shape [2]", "rank of x of shape [2, 3]"});
  bad("gather: index larger off dim",
      [&] {
        gather(x, 1, indices_as({3, 1}, {0, 1, 0}));
      },
      IA, {"xtgrad::gather", "'index'", "has shape [3, 1]", "[2, 3]", "but dim 1"});
  bad("gather: dim out of range",
      [&] {
        gather(x, -3, indices_as({1, 1}, {0}));
      },
      IA, {"xtgrad::gather", "'dim'", "is -3", "[-2, 2)"});
  bad("gather: 0-d x", [&] { gather(scalar, 0, Indices(xt::zeros<std::int64_t>(Dims{}))); }, IA,
      {"xtgrad::gather", "'dim'", "0-d"});
  bad("index_add: source of the wrong shape",
      [&] {
        index_add(x, 1, Indices{0, 2}, x);
      },
      IA, {"xtgrad::index_add", "'source'", "[2, 3]", "[2, 2]"});
  bad("index_add: an index out of range",
      [&] {
        index_add(x, 1, Indices{0, 3}, rows_3);
      },
      IA, {"xtgrad::index_add", "'index'", "holds 3 at flat position 1", "[0, 3)"});
  bad("index_add: a 2-d index",
      [&] {
        index_add(x, 0, indices_as({2, 1}, {0, 1}), x);
      },
      IA, {"xtgrad::index_add", "'index'", "[2, 1]", "1-d"});
  bad("scatter_add: source of another shape than the index",
      [&] {
        scatter_add(x, 1, indices_as({2, 2}, {0, 1, 2, 0}), x);
      },
      IA, {"xtgrad::scatter_add", "'source'", "[2, 3]", "index's shape [2, 2]"});
  bad("scatter_add: a negative index",
      [&] {
        scatter_add(x, 0, indices_as({1, 2}, {0, -1}), row_pair);
      },
      IA, {"xtgrad::scatter_add", "'index'", "holds -1 at flat position 1", "[0, 2)"});
  bad("scatter_add: index of another rank",
      [&] {
        scatter_add(x, 1, Indices{0, 1}, rows_3);
      },
      IA, {"xtgrad::scatter_add", "'index'", "has shape [2]", "rank of x of shape [2, 3]"});
  add_handle_rows<T>(
      rows, "index_select", {"x"}, {x},
      [](const std::vector<Var<T>>& a) { index_select(a[0], 0, Indices{0}); }, other, stale);
  add_handle_rows<T>(
      rows, "gather", {"x"}, {x},
      [](const std::vector<Var<T>>& a) {
        gather(a[0], 0, indices_as({1, 1}, {0}));
      },
      other, stale);
  report("index", run_rows(rows, snapshot));
}

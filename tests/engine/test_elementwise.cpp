// add, sub, mul, div, scale, the scalar overloads (add_scalar, rsub,
// div_scalar, rdiv) and their operators; NumPy broadcasting and
// detail::sum_to_shape, the reduction of a gradient to an operand's shape.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xview.hpp>
#include <xtgrad/engine/ops/elementwise.hpp>
#include <xtgrad/engine/ops/support/broadcast.hpp>

#include "support/bad_input.hpp"
#include "support/fixtures/math_fixtures.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

namespace {

using Dims = std::vector<std::size_t>;

enum class Op { add, sub, mul, div };
const char* name(Op op) {
  return op == Op::add ? "add" : op == Op::sub ? "sub" : op == Op::mul ? "mul" : "div";
}

template <class T>
Var<T> apply(Op op, const Var<T>& a, const Var<T>& b) {
  return op == Op::add   ? add(a, b)
         : op == Op::sub ? sub(a, b)
         : op == Op::mul ? mul(a, b)
                         : div(a, b);
}

double scalar_op(Op op, double a, double b) {
  return op == Op::add ? a + b : op == Op::sub ? a - b : op == Op::mul ? a * b : a / b;
}

// Operand b of an op: kept away from 0 for div.
template <class T>
xt::xarray<T> operand_b(Op op, const std::vector<std::size_t>& shape, std::uint32_t seed) {
  return op == Op::div ? random_away_from_zero<T>(shape, seed, 0.5, 1.5)
                       : random_array<T>(shape, seed);
}

constexpr Op k_ops[] = {Op::add, Op::sub, Op::mul, Op::div};

// ---- A textbook broadcasting reference, element by element ----

Dims broadcast_dims(const Dims& a, const Dims& b) {
  const std::size_t rank = std::max(a.size(), b.size());
  Dims out(rank);
  for (std::size_t k = 0; k < rank; ++k) {
    const std::size_t na = k < rank - a.size() ? 1 : a[k - (rank - a.size())];
    const std::size_t nb = k < rank - b.size() ? 1 : b[k - (rank - b.size())];
    out[k] = na == 1 ? nb : na;
  }
  return out;
}

// Flat index into an operand of shape `dims` of the result element with
// multi-index `index`: missing leading axes are dropped, size-1 axes read 0.
std::size_t source_of(const Dims& index, const Dims& dims) {
  std::size_t flat = 0;
  const std::size_t skip = index.size() - dims.size();
  for (std::size_t k = 0; k < dims.size(); ++k)
    flat = flat * dims[k] + (dims[k] == 1 ? 0 : index[skip + k]);
  return flat;
}

Dims unravel(std::size_t flat, const Dims& dims) {
  Dims index(dims.size());
  for (std::size_t k = dims.size(); k-- > 0;) {
    index[k] = flat % dims[k];
    flat /= dims[k];
  }
  return index;
}

Dims dims_of(const Shape& s) {
  return Dims(s.begin(), s.end());
}

// An array of the given shape from its elements in row-major order (nested
// braces such as {{2}, {3}} are ambiguous for xt::xarray).
template <class T>
xt::xarray<T> shaped(const Dims& dims, std::initializer_list<T> values) {
  xt::xarray<T> a = xt::empty<T>(dims);
  REQUIRE(a.size() == values.size());
  std::copy(values.begin(), values.end(), a.data());
  return a;
}

struct Reference {
  xt::xarray<double> y, da, db;
};

// y = op(a, b) and the gradients of <dy, y>, by looping over every element of y.
template <class T>
Reference reference(Op op, const xt::xarray<T>& a, const xt::xarray<T>& b,
                    const xt::xarray<T>& dy) {
  const Dims ad = dims_of(a.shape()), bd = dims_of(b.shape());
  const Dims yd = broadcast_dims(ad, bd);
  Reference r{xt::zeros<double>(yd), xt::zeros<double>(ad), xt::zeros<double>(bd)};
  for (std::size_t i = 0; i < r.y.size(); ++i) {
    const Dims index = unravel(i, yd);
    const std::size_t ia = source_of(index, ad), ib = source_of(index, bd);
    const double av = a.data()[ia], bv = b.data()[ib], g = dy.data()[i];
    r.y.data()[i] = scalar_op(op, av, bv);
    r.da.data()[ia] += op == Op::mul ? g * bv : op == Op::div ? g / bv : g;
    r.db.data()[ib] += op == Op::mul   ? g * av
                       : op == Op::sub ? -g
                       : op == Op::div ? -g * av / (bv * bv)
                                       : g;
  }
  return r;
}

// Operand shapes covering every plan layout: equal, bias rows, columns,
// scalars ([] and [1]), broadcasting on both sides, empty results.
const std::vector<std::pair<Dims, Dims>> k_shape_pairs = {{{2, 3}, {2, 3}},
                                                          {{2, 3}, {3}},
                                                          {{3}, {2, 3}},
                                                          {{2, 1}, {1, 3}},
                                                          {{4, 1, 3}, {2, 3}},
                                                          {{2, 3}, {2, 1}},
                                                          {{2, 3}, {1}},
                                                          {{2, 3}, {}},
                                                          {{}, {2, 3}},
                                                          {{}, {}},
                                                          {{1}, {}},
                                                          {{1, 1}, {3}},
                                                          {{2, 3, 4}, {3, 1}},
                                                          {{2, 3, 4}, {2, 1, 4}},
                                                          {{5, 1, 4, 1}, {3, 1, 2}},
                                                          {{2, 1, 3}, {1, 4, 1}},
                                                          {{2, 3, 4}, {4}},
                                                          {{0, 3}, {3}},
                                                          {{3, 0}, {1}},
                                                          {{0}, {}}};

std::string describe(const Dims& a, const Dims& b) {
  return detail::shape_str(a) + " with " + detail::shape_str(b);
}

}  // namespace

TEST_CASE_TEMPLATE("elementwise: equal shapes match hand-computed values and gradients", T, float,
                   double) {
  Tape<T> tape;
  const xt::xarray<T> av = {{1, 2, 3}, {4, 5, 6}};
  const xt::xarray<T> bv = {{0.5, -1, 2}, {3, 0.25, -2}};
  const xt::xarray<T> dy = {{1, 2, 3}, {-1, -2, -3}};
  auto a = tape.leaf(av);
  auto b = tape.leaf(bv);

  auto s = add(a, b);
  CHECK(s.value() == xt::xarray<T>{{1.5, 1, 5}, {7, 5.25, 4}});
  tape.backward(s, dy);
  CHECK(a.grad() == dy);
  CHECK(b.grad() == dy);

  tape.zero_grad();
  auto d = sub(a, b);
  CHECK(d.value() == xt::xarray<T>{{0.5, 3, 1}, {1, 4.75, 8}});
  tape.backward(d, dy);
  CHECK(a.grad() == dy);
  CHECK(b.grad() == xt::xarray<T>{{-1, -2, -3}, {1, 2, 3}});

  tape.zero_grad();
  auto p = mul(a, b);
  CHECK(p.value() == xt::xarray<T>{{0.5, -2, 6}, {12, 1.25, -12}});
  tape.backward(p, dy);
  CHECK(a.grad() == xt::xarray<T>{{0.5, -2, 6}, {-3, -0.5, 6}});  // dy * b
  CHECK(b.grad() == xt::xarray<T>{{1, 4, 9}, {-4, -10, -18}});    // dy * a
}

TEST_CASE_TEMPLATE("elementwise: broadcasting matches hand-computed values and gradients", T, float,
                   double) {
  Tape<T> tape;
  const xt::xarray<T> dy = {{1, 2, 3}, {4, 5, 6}};

  SUBCASE("[2, 3] + [3]: a bias, its gradient is the column sums") {
    auto a = tape.leaf(xt::xarray<T>{{1, 2, 3}, {4, 5, 6}});
    auto b = tape.leaf(xt::xarray<T>{10, 20, 30});
    auto y = add(a, b);
    CHECK(y.value() == xt::xarray<T>{{11, 22, 33}, {14, 25, 36}});
    tape.backward(y, dy);
    CHECK(a.grad() == dy);
    CHECK(b.grad() == xt::xarray<T>{5, 7, 9});
  }
  SUBCASE("[2, 1] * [1, 3]: an outer product") {
    auto a = tape.leaf(shaped<T>({2, 1}, {2, 3}));
    auto b = tape.leaf(xt::xarray<T>{{1, 10, 100}});
    auto y = mul(a, b);
    CHECK(y.value() == xt::xarray<T>{{2, 20, 200}, {3, 30, 300}});
    tape.backward(y, dy);
    CHECK(a.grad() == shaped<T>({2, 1}, {321, 654}));  // sum_j dy[i, j] b[j]
    CHECK(b.grad() == xt::xarray<T>{{14, 19, 24}});    // sum_i dy[i, j] a[i]
  }
  SUBCASE("[3] - [2, 3]: the first operand is the repeated one") {
    auto a = tape.leaf(xt::xarray<T>{1, 1, 1});
    auto b = tape.leaf(xt::xarray<T>{{1, 2, 3}, {4, 5, 6}});
    auto y = sub(a, b);
    CHECK(y.value() == xt::xarray<T>{{0, -1, -2}, {-3, -4, -5}});
    tape.backward(y, dy);
    CHECK(a.grad() == xt::xarray<T>{5, 7, 9});
    CHECK(b.grad() == xt::xarray<T>{{-1, -2, -3}, {-4, -5, -6}});
  }
  SUBCASE("[2, 3] * []: a 0-d operand is a scalar") {
    auto a = tape.leaf(xt::xarray<T>{{1, 2, 3}, {4, 5, 6}});
    xt::xarray<T> two = xt::empty<T>(Dims{});
    two() = 2.5;
    auto b = tape.leaf(two);
    auto y = mul(a, b);
    CHECK(y.value() == xt::xarray<T>{{2.5, 5, 7.5}, {10, 12.5, 15}});
    tape.backward(y, dy);
    CHECK(a.grad() == xt::xarray<T>{{2.5, 5, 7.5}, {10, 12.5, 15}});
    CHECK(b.grad().dimension() == 0);
    CHECK(b.grad()() == T(1 + 4 + 9 + 16 + 25 + 36));  // sum dy * a
  }
}

TEST_CASE_TEMPLATE("elementwise: every broadcast layout matches an element-by-element reference", T,
                   float, double) {
  std::uint32_t seed = 100;
  for (const auto& shapes : k_shape_pairs) {
    // Named references, not structured bindings: INFO captures them in a
    // lambda, which C++17 allows only for variables.
    const Dims& ad = shapes.first;
    const Dims& bd = shapes.second;
    for (Op op : k_ops) {
      INFO(name(op), " ", describe(ad, bd));
      const xt::xarray<T> av = random_array<T>(ad, ++seed);
      const xt::xarray<T> bv = operand_b<T>(op, bd, ++seed);
      const xt::xarray<T> dy = random_array<T>(broadcast_dims(ad, bd), ++seed);
      const Reference r = reference(op, av, bv, dy);
      Tape<T> tape;
      auto a = tape.leaf(av);
      auto b = tape.leaf(bv);
      auto y = apply(op, a, b);
      check_close(y.value(), r.y, tolerance<T>(), tolerance<T>());
      tape.backward(y, dy);
      check_close(a.grad(), r.da, tolerance<T>(), tolerance<T>());
      check_close(b.grad(), r.db, tolerance<T>(), tolerance<T>());
    }
  }
}

TEST_CASE("elementwise: gradcheck for every op and broadcast layout") {
  for (const auto& shapes : k_shape_pairs) {
    // Named references, not structured bindings: INFO captures them in a
    // lambda, which C++17 allows only for variables.
    const Dims& ad = shapes.first;
    const Dims& bd = shapes.second;
    for (Op op : k_ops) {
      INFO(name(op), " ", describe(ad, bd));
      check_gradients(
          [op = op](const std::vector<Var<double>>& v) { return apply(op, v[0], v[1]); },
          {random_array(ad, 7), operand_b<double>(op, bd, 8)});
    }
  }
  for (const Dims& dims : {Dims{5}, Dims{2, 3}, Dims{}, Dims{2, 3, 4}}) {
    INFO("scale ", detail::shape_str(dims));
    check_gradients([](const std::vector<Var<double>>& v) { return scale(v[0], -1.75); },
                    {random_array(dims, 9)});
  }
  // A chain that reuses inputs: y = (x * w + b) * x - w.
  check_gradients(
      [](const std::vector<Var<double>>& v) {
        return sub(mul(add(mul(v[0], v[1]), v[2]), v[0]), v[1]);
      },
      {random_array({4, 3}, 10), random_array({3}, 11), random_array({4, 1}, 12)});
}

TEST_CASE_TEMPLATE("elementwise: the same Var twice accumulates both uses", T, float, double) {
  Tape<T> tape;
  const xt::xarray<T> xv = {{1.5, -2, 3}, {0.25, 4, -1}};
  const xt::xarray<T> dy = {{1, 2, 3}, {4, 5, 6}};
  auto x = tape.leaf(xv);

  auto square = mul(x, x);
  CHECK(square.value() == xt::xarray<T>{{2.25, 4, 9}, {0.0625, 16, 1}});
  tape.backward(square, dy);
  CHECK(x.grad() == xt::xarray<T>{{3, -8, 18}, {2, 40, -12}});  // 2 x dy

  tape.zero_grad();
  tape.backward(add(x, x), dy);
  CHECK(x.grad() == xt::xarray<T>(T(2) * dy));

  tape.zero_grad();
  auto zero = sub(x, x);
  CHECK(zero.value() == xt::zeros<T>({2, 3}));
  tape.backward(zero, dy);
  CHECK(x.grad() == xt::zeros<T>({2, 3}));

  // Repeated through a broadcast: z = x * x[0] with x of shape [1, 3] and [3].
  Tape<T> tape2;
  auto r = tape2.leaf(xt::xarray<T>{{1, 2, 3}});
  tape2.backward(mul(r, r), xt::xarray<T>{{1, 1, 1}});
  CHECK(r.grad() == xt::xarray<T>{{2, 4, 6}});
}

TEST_CASE_TEMPLATE("elementwise: edge shapes [D], [0, D] and [2, 3, D]", T, float, double) {
  constexpr std::size_t d = 5;
  Tape<T> tape;

  SUBCASE("[D] with [D]") {
    const xt::xarray<T> av = random_array<T>({d}, 1), bv = random_array<T>({d}, 2);
    auto a = tape.leaf(av);
    auto b = tape.leaf(bv);
    auto y = mul(a, b);
    REQUIRE(y.shape() == Shape{d});
    for (std::size_t i = 0; i < d; ++i) CHECK(y.value()(i) == av(i) * bv(i));
  }

  SUBCASE("[0, D] + [D]: an empty result, and the bias gradient is zeros, not stale") {
    // A first step fills the kept gradient buffers with nonzero values...
    auto a0 = tape.leaf(random_array<T>({3, d}, 3));
    auto b0 = tape.leaf(random_array<T>({d}, 4));
    tape.backward(add(a0, b0), xt::ones<T>(Dims{3, d}));
    CHECK(b0.grad() == xt::xarray<T>(T(3) * xt::ones<T>({d})));
    // ...which the next recording reuses: the empty sum must overwrite them.
    tape.clear();
    auto a = tape.leaf(xt::xarray<T>(xt::zeros<T>({std::size_t(0), d})));
    auto b = tape.leaf(random_array<T>({d}, 5));
    auto y = add(a, b);
    CHECK(y.shape() == Shape{0, d});
    tape.backward(y, xt::zeros<T>({std::size_t(0), d}));
    CHECK(a.grad().shape() == Shape{0, d});
    CHECK(b.grad() == xt::zeros<T>({d}));
    auto z = mul(b, a);
    CHECK(z.shape() == Shape{0, d});
  }

  SUBCASE("[2, 3, D] + [D] and * [3, 1]") {
    const xt::xarray<T> xv = random_array<T>({2, 3, d}, 6), bv = random_array<T>({d}, 7),
                        cv = random_array<T>({3, 1}, 8), dy = random_array<T>({2, 3, d}, 9);
    auto x = tape.leaf(xv);
    auto b = tape.leaf(bv);
    auto c = tape.leaf(cv);
    auto y = mul(add(x, b), c);
    REQUIRE(y.shape() == Shape{2, 3, d});
    xt::xarray<double> expected = xt::zeros<double>(Dims{2, 3, d});
    xt::xarray<double> db = xt::zeros<double>(Dims{d}), dc = xt::zeros<double>(Dims{3, 1});
    for (std::size_t i = 0; i < 2; ++i)
      for (std::size_t j = 0; j < 3; ++j)
        for (std::size_t k = 0; k < d; ++k) {
          expected(i, j, k) = (double(xv(i, j, k)) + bv(k)) * cv(j, 0);
          db(k) += double(dy(i, j, k)) * cv(j, 0);
          dc(j, 0) += double(dy(i, j, k)) * (double(xv(i, j, k)) + bv(k));
        }
    check_close(y.value(), expected, tolerance<T>(), tolerance<T>());
    tape.backward(y, dy);
    check_close(b.grad(), db, tolerance<T>(), tolerance<T>());
    check_close(c.grad(), dc, tolerance<T>(), tolerance<T>());
  }
}

TEST_CASE_TEMPLATE("elementwise: transposed and stepped views give the contiguous result", T, float,
                   double) {
  const xt::xarray<T> m = random_array<T>({3, 4}, 11);  // transposed: [4, 3]
  const xt::xarray<T> v = random_array<T>({6}, 12);     // stepped: [3]
  const xt::xarray<T> dy = random_array<T>({4, 3}, 13);
  const xt::xarray<T> m_t = xt::transpose(m);
  const xt::xarray<T> v_s = xt::view(v, xt::range(0, 6, 2));
  REQUIRE(v_s.shape() == Shape{3});

  for (Op op : k_ops) {
    INFO(name(op));
    Tape<T> strided, contiguous;
    auto a1 = strided.leaf(xt::transpose(m));
    auto b1 = strided.leaf(xt::view(v, xt::range(0, 6, 2)));
    auto a2 = contiguous.leaf(m_t);
    auto b2 = contiguous.leaf(v_s);
    auto y1 = apply(op, a1, b1);
    auto y2 = apply(op, a2, b2);
    CHECK(y1.value() == y2.value());
    strided.backward(y1, dy);
    contiguous.backward(y2, dy);
    CHECK(a1.grad() == a2.grad());
    CHECK(b1.grad() == b2.grad());
  }
}

TEST_CASE("elementwise: shapes that do not broadcast throw, naming op, arguments and shapes") {
  Tape<double> tape;
  auto a = tape.leaf(xt::zeros<double>({2, 3}));
  auto b = tape.leaf(xt::zeros<double>({4, 3}));
  auto c = tape.leaf(xt::zeros<double>({2}));
  auto d = tape.leaf(xt::zeros<double>({4, 1, 3}));
  auto e = tape.leaf(xt::zeros<double>({4, 2, 2}));
  CHECK_THROWS_WITH_PARTS(add(a, b), std::invalid_argument,
                          {"xtgrad::add", "'a'", "'b'", "[2, 3]", "[4, 3]", "axis -2"});
  CHECK_THROWS_WITH_PARTS(sub(a, c), std::invalid_argument,
                          {"xtgrad::sub", "'a'", "'b'", "[2, 3]", "[2]", "axis -1"});
  CHECK_THROWS_WITH_PARTS(mul(d, e), std::invalid_argument,
                          {"xtgrad::mul", "'a'", "'b'", "[4, 1, 3]", "[4, 2, 2]"});
  CHECK_THROWS_WITH_PARTS(a * b, std::invalid_argument, {"xtgrad::mul", "[2, 3]", "[4, 3]"});
  CHECK(tape.size() == 5);  // nothing was recorded by the failed calls

  Tape<double> other;
  auto f = other.leaf(xt::zeros<double>({2, 3}));
  CHECK_THROWS_WITH_PARTS(add(a, f), std::logic_error, {"xtgrad::add", "'a'", "'b'", "different"});
  CHECK_THROWS_WITH_PARTS(scale(Var<double>(), 2.0), std::logic_error, {"xtgrad::scale", "'a'"});
}

TEST_CASE_TEMPLATE("elementwise: inputs are unchanged by forward and backward", T, float, double) {
  xt::xarray<T> m = random_array<T>({3, 4}, 21);
  xt::xarray<T> v = random_array<T>({6}, 22);
  const xt::xarray<T> m_before = m, v_before = v;
  for (Op op : k_ops) {
    INFO(name(op));
    Tape<T> tape;
    auto a = tape.leaf(xt::transpose(m));                 // [4, 3]
    auto b = tape.leaf(xt::view(v, xt::range(0, 6, 2)));  // [3]
    auto c = tape.leaf(xt::view(m, xt::all(), 1));        // [3]
    const xt::xarray<T> a_value = a.value(), b_value = b.value(), c_value = c.value();
    auto y = scale(apply(op, apply(op, a, b), c), T(3));
    tape.backward(y, random_array<T>({4, 3}, 23));
    CHECK(m == m_before);
    CHECK(v == v_before);
    CHECK(a.value() == a_value);
    CHECK(b.value() == b_value);
    CHECK(c.value() == c_value);
  }
}

TEST_CASE_TEMPLATE("elementwise: operators are thin wrappers of the functions", T, float, double) {
  Tape<T> tape;
  const xt::xarray<T> av = {{1, -2, 3}, {4, 5, -6}};
  const xt::xarray<T> bv = {0.5, 2, -1};
  const xt::xarray<T> dy = {{1, 2, 3}, {4, 5, 6}};
  auto a = tape.leaf(av);
  auto b = tape.leaf(bv);
  CHECK((a + b).value() == add(a, b).value());
  CHECK((a - b).value() == sub(a, b).value());
  CHECK((a * b).value() == mul(a, b).value());
  CHECK((a * 2.5).value() == xt::xarray<T>{{2.5, -5, 7.5}, {10, 12.5, -15}});
  CHECK((T(2.5) * a).value() == (a * T(2.5)).value());
  CHECK((-a).value() == xt::xarray<T>{{-1, 2, -3}, {-4, -5, 6}});

  tape.backward(a * T(-3) + b, dy);
  CHECK(a.grad() == xt::xarray<T>{{-3, -6, -9}, {-12, -15, -18}});
  CHECK(b.grad() == xt::xarray<T>{5, 7, 9});
  tape.zero_grad();
  tape.backward(-a, dy);
  CHECK(a.grad() == xt::xarray<T>(-dy));
}

TEST_CASE_TEMPLATE("elementwise: an operand without requires_grad gets no gradient", T, float,
                   double) {
  Tape<T> tape;
  auto a = tape.leaf(xt::xarray<T>{{1, 2, 3}, {4, 5, 6}});
  auto b = tape.leaf(xt::xarray<T>{10, 20, 30}, false);
  auto y = mul(a, b);
  CHECK(y.requires_grad());
  tape.backward(y, xt::ones<T>({2, 3}));
  CHECK(a.grad() == xt::xarray<T>{{10, 20, 30}, {10, 20, 30}});
  CHECK(b.grad() == xt::zeros<T>({3}));

  auto constant = add(b, b);
  CHECK_FALSE(constant.requires_grad());
  {
    NoGradGuard<T> no_grad(tape);
    auto z = sub(a, b);
    CHECK_FALSE(z.requires_grad());
    CHECK(z.value() == xt::xarray<T>{{-9, -18, -27}, {-6, -15, -24}});
  }
}

TEST_CASE_TEMPLATE("elementwise: sum_to_shape reduces exactly the broadcast axes", T, float,
                   double) {
  // g [2, 3, 4] with g[i, j, k] = 100 i + 10 j + k: every reduction is easy to write down.
  xt::xarray<T> g = xt::empty<T>({2, 3, 4});
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 3; ++j)
      for (std::size_t k = 0; k < 4; ++k) g(i, j, k) = T(100 * i + 10 * j + k);

  const auto reduce = [&](Dims dims, bool accumulate, T scale_by = T(1)) {
    xt::xarray<T> buffer = xt::empty<T>(dims);
    buffer.fill(T(1000));  // garbage when overwriting, an existing gradient when accumulating
    detail::sum_to_shape(g, GradSlot<T>{buffer, accumulate}, scale_by);
    return buffer;
  };
  CHECK(reduce({2, 3, 4}, false) == g);                                 // equal shapes
  CHECK(reduce({2, 3, 4}, true, T(-1)) == xt::xarray<T>(T(1000) - g));  // one accumulating pass
  CHECK(reduce({4}, false) == xt::xarray<T>{360, 366, 372, 378});       // bias rows
  CHECK(reduce({4}, true) == xt::xarray<T>{1360, 1366, 1372, 1378});
  CHECK(reduce({1, 3, 1}, false) == shaped<T>({1, 3, 1}, {412, 492, 572}));
  CHECK(reduce({2, 1, 1}, false) == shaped<T>({2, 1, 1}, {138, 1338}));
  CHECK(reduce({3, 4}, false) ==
        xt::xarray<T>{{100, 102, 104, 106}, {120, 122, 124, 126}, {140, 142, 144, 146}});
  CHECK(reduce({2, 1, 4}, false, T(0.5)) ==
        xt::xarray<T>{{{15, 16.5, 18, 19.5}}, {{165, 166.5, 168, 169.5}}});
  const xt::xarray<T> all = reduce({}, false);
  CHECK(all.dimension() == 0);
  CHECK(all() == T(1476));  // 12 * (0 + 100) + 8 * (0 + 10 + 20) + 6 * (0 + 1 + 2 + 3)
  CHECK(reduce({1}, true) == xt::xarray<T>{2476});
}

namespace {

namespace fx = xtgrad::fixtures::math;

// A few ulp of T, relative.
template <class T>
constexpr double ulps() {
  return std::is_same_v<T, float> ? 1e-6 : 1e-14;
}

template <class T>
xt::xarray<T> from(const double* values, const Dims& shape) {
  xt::xarray<T> a = xt::empty<T>(shape);
  for (std::size_t i = 0; i < a.size(); ++i) a.data()[i] = static_cast<T>(values[i]);
  return a;
}

enum class ScalarOp { add, rsub, div, rdiv };

template <class T>
Var<T> apply(ScalarOp op, const Var<T>& x, T s) {
  switch (op) {
    case ScalarOp::add:
      return add_scalar(x, s);
    case ScalarOp::rsub:
      return rsub(x, s);
    case ScalarOp::div:
      return div_scalar(x, s);
    case ScalarOp::rdiv:
      break;
  }
  return rdiv(x, s);
}

// y and dy/dx of each scalar op, in long double, written out here.
std::pair<long double, long double> scalar_reference(ScalarOp op, long double x, long double s) {
  switch (op) {
    case ScalarOp::add:
      return {x + s, 1};
    case ScalarOp::rsub:
      return {s - x, -1};
    case ScalarOp::div:
      return {x / s, 1 / s};
    case ScalarOp::rdiv:
      break;
  }
  return {s / x, -s / (x * x)};
}

constexpr ScalarOp k_scalar_ops[] = {ScalarOp::add, ScalarOp::rsub, ScalarOp::div, ScalarOp::rdiv};
const char* name(ScalarOp op) {
  return op == ScalarOp::add    ? "add_scalar"
         : op == ScalarOp::rsub ? "rsub"
         : op == ScalarOp::div  ? "div_scalar"
                                : "rdiv";
}

}  // namespace

TEST_CASE_TEMPLATE("elementwise: div matches PyTorch with broadcasting, values and gradients", T,
                   float, double) {
  struct Case {
    const char* name;
    Dims a_shape, b_shape;
    const double *a, *b, *dy, *y, *da, *db;
  };
#define XTGRAD_DIV_CASE(n, as, bs)                                                  \
  Case {                                                                            \
#n, as, bs, fx::n##_a, fx::n##_b, fx::n##_dy, fx::n##_y, fx::n##_da, fx::n##_db \
  }
  const std::vector<Case> cases = {XTGRAD_DIV_CASE(div_rows, (Dims{2, 3}), (Dims{3})),
                                   XTGRAD_DIV_CASE(div_first, (Dims{3}), (Dims{2, 3})),
                                   XTGRAD_DIV_CASE(div_outer, (Dims{2, 1}), (Dims{1, 3})),
                                   XTGRAD_DIV_CASE(div_scalar_b, (Dims{2, 3}), (Dims{})),
                                   XTGRAD_DIV_CASE(div_zero, (Dims{4}), (Dims{4}))};
#undef XTGRAD_DIV_CASE
  for (const Case& c : cases) {
    INFO(std::string(c.name));
    Tape<T> tape;
    auto a = tape.leaf(from<T>(c.a, c.a_shape));
    auto b = tape.leaf(from<T>(c.b, c.b_shape));
    auto y = a / b;
    const Dims y_shape = broadcast_dims(c.a_shape, c.b_shape);
    REQUIRE(y.shape() == Shape(y_shape.begin(), y_shape.end()));
    check_ieee(y.value(), c.y, y.size(), ulps<T>(), 0.0);
    tape.backward(y, from<T>(c.dy, y_shape));
    check_ieee(a.grad(), c.da, a.size(), ulps<T>(), 0.0);
    check_ieee(b.grad(), c.db, b.size(), ulps<T>(), 0.0);
  }
}

TEST_CASE_TEMPLATE("elementwise: div(x, x) is 1 with gradient exactly 0", T, float, double) {
  Tape<T> tape;
  auto x = tape.leaf(random_away_from_zero<T>({3, 4}, 81, 0.1, 3.0));
  auto y = div(x, x);
  CHECK(y.value() == xt::ones<T>({3, 4}));
  tape.backward(y, random_array<T>({3, 4}, 82));
  CHECK(x.grad() == xt::zeros<T>({3, 4}));
}

TEST_CASE_TEMPLATE("elementwise: scalar overloads match PyTorch and a long-double loop", T, float,
                   double) {
  const std::size_t n = std::size(fx::scalar_x);
  const double* y_fixture[] = {fx::add_scalar_y, fx::rsub_y, fx::div_scalar_y, fx::rdiv_y};
  const double* dx_fixture[] = {fx::add_scalar_dx, fx::rsub_dx, fx::div_scalar_dx, fx::rdiv_dx};
  for (std::size_t k = 0; k < 4; ++k) {
    const ScalarOp op = k_scalar_ops[k];
    INFO(name(op));
    Tape<T> tape;
    auto x = tape.leaf(from<T>(fx::scalar_x, {n}));
    auto y = apply(op, x, T(1.5));
    check_ieee(y.value(), y_fixture[k], n, ulps<T>(), 0.0);
    tape.backward(y, from<T>(fx::scalar_dy, {n}));
    check_ieee(x.grad(), dx_fixture[k], n, ulps<T>(), 0.0);

    const xt::xarray<T> xv = random_away_from_zero<T>({2, 3, 7}, 83, 0.2, 3.0);
    const xt::xarray<T> dy = random_array<T>({2, 3, 7}, 84);
    xt::xarray<double> y_ref = xt::empty<double>({2, 3, 7}), dx_ref = y_ref;
    for (std::size_t i = 0; i < xv.size(); ++i) {
      const auto [value, slope] = scalar_reference(op, xv.data()[i], -0.75L);
      y_ref.data()[i] = static_cast<double>(value);
      dx_ref.data()[i] = static_cast<double>(slope * dy.data()[i]);
    }
    Tape<T> tape2;
    auto x2 = tape2.leaf(xv);
    auto y2 = apply(op, x2, T(-0.75));
    check_close(y2.value(), y_ref, ulps<T>(), 0.0);
    tape2.backward(y2, dy);
    check_close(x2.grad(), dx_ref, ulps<T>(), 0.0);
  }
}

TEST_CASE_TEMPLATE("elementwise: scalar operators are the functions, one node each", T, float,
                   double) {
  Tape<T> tape;
  auto x = tape.leaf(xt::xarray<T>{{1, -2, 4}, {0.5, 8, -0.25}});
  const std::size_t before = tape.size();
  auto sum1 = x + 1.0;  // a double for a Var<float> too
  CHECK(tape.size() == before + 1);
  CHECK(sum1.value() == add_scalar(x, T(1)).value());
  CHECK((2.5 + x).value() == xt::xarray<T>{{3.5, 0.5, 6.5}, {3, 10.5, 2.25}});
  CHECK((x - 0.5).value() == xt::xarray<T>{{0.5, -2.5, 3.5}, {0, 7.5, -0.75}});
  CHECK((3.0 - x).value() == xt::xarray<T>{{2, 5, -1}, {2.5, -5, 3.25}});
  CHECK((x / 4.0).value() == xt::xarray<T>{{0.25, -0.5, 1}, {0.125, 2, -0.0625}});
  CHECK((2.0 / x).value() == xt::xarray<T>{{2, -1, 0.5}, {4, 0.25, -8}});
  CHECK((x / x).value() == div(x, x).value());
  const std::size_t after = tape.size();
  auto r = 2.0 / x;
  CHECK(tape.size() == after + 1);  // one node, not a constant leaf and a broadcast

  tape.backward(r, xt::ones<T>({2, 3}));  // d(2 / x) = -2 / x^2
  CHECK(x.grad() == xt::xarray<T>{{-2, -0.5, -0.125}, {-8, -0.03125, -32}});
  tape.zero_grad();
  tape.backward(3.0 - x / 4.0 + 1.0, xt::ones<T>({2, 3}));
  CHECK(x.grad() == xt::xarray<T>(T(-0.25) * xt::ones<T>({2, 3})));
}

TEST_CASE("elementwise: gradcheck of the scalar overloads") {
  for (ScalarOp op : k_scalar_ops)
    for (const Dims& dims : {Dims{5}, Dims{2, 3}, Dims{}, Dims{2, 3, 4}}) {
      INFO(name(op), " ", detail::shape_str(dims));
      check_gradients([op](const std::vector<Var<double>>& v) { return apply(op, v[0], -1.25); },
                      {random_away_from_zero(dims, 85, 0.3, 2.0)});
    }
  // A chain that reuses x: (1 - x) / (x / 3) + 2 / x.
  check_gradients(
      [](const std::vector<Var<double>>& v) { return (1.0 - v[0]) / (v[0] / 3.0) + 2.0 / v[0]; },
      {random_away_from_zero({4, 3}, 86, 0.3, 2.0)});
}

TEST_CASE_TEMPLATE("elementwise: div and the scalar overloads on edge shapes and views", T, float,
                   double) {
  for (ScalarOp op : k_scalar_ops) {
    INFO(name(op));
    for (const Dims& dims : {Dims{5}, Dims{0, 5}, Dims{2, 3, 5}, Dims{}}) {
      Tape<T> tape;
      auto x = tape.leaf(random_away_from_zero<T>(dims, 87, 0.3, 2.0));
      auto y = apply(op, x, T(2));
      REQUIRE(y.shape() == x.shape());
      tape.backward(y, random_array<T>(dims, 88));
      CHECK(x.grad().shape() == x.shape());
    }
    const xt::xarray<T> m = random_away_from_zero<T>({3, 8}, 89, 0.3, 2.0);
    const xt::xarray<T> copy = xt::transpose(xt::view(m, xt::all(), xt::range(0, 8, 2)));
    const xt::xarray<T> dy = random_array<T>({4, 3}, 90);
    Tape<T> strided, contiguous;
    auto a = strided.leaf(xt::transpose(xt::view(m, xt::all(), xt::range(0, 8, 2))));
    auto b = contiguous.leaf(copy);
    auto ya = apply(op, a, T(2));
    auto yb = apply(op, b, T(2));
    CHECK(ya.value() == yb.value());
    strided.backward(ya, dy);
    contiguous.backward(yb, dy);
    CHECK(a.grad() == b.grad());
  }
  // div of [0, D] by [D]: an empty result, and the divisor's gradient is zeros.
  Tape<T> tape;
  auto a = tape.leaf(xt::xarray<T>(xt::zeros<T>({std::size_t(0), std::size_t(4)})));
  auto b = tape.leaf(random_away_from_zero<T>({4}, 91));
  auto y = div(a, b);
  CHECK(y.shape() == Shape{0, 4});
  tape.backward(y, xt::zeros<T>({std::size_t(0), std::size_t(4)}));
  CHECK(b.grad() == xt::zeros<T>({4}));
}

TEST_CASE_TEMPLATE("elementwise: div and scalar gradients accumulate over two backwards", T, float,
                   double) {
  Tape<T> tape;
  auto a = tape.leaf(random_array<T>({4, 3}, 92));
  auto b = tape.leaf(random_away_from_zero<T>({3}, 93, 0.5, 1.5));
  auto c = tape.leaf(random_away_from_zero<T>({4, 1}, 94, 0.5, 1.5));
  auto y = add(div(a, b), div(c, b)) + (2.0 / c) - (b / 3.0) + rsub(a, T(1));
  const xt::xarray<T> dy = random_array<T>({4, 3}, 95);
  tape.backward(y, dy);
  const xt::xarray<T> ga = a.grad(), gb = b.grad(), gc = c.grad();
  tape.backward(y, dy);
  // Each leaf is reached several times, so the second pass adds in another
  // order than the first: equal up to rounding.
  check_close(a.grad(), xt::xarray<T>(T(2) * ga), ulps<T>(), ulps<T>());
  check_close(b.grad(), xt::xarray<T>(T(2) * gb), ulps<T>(), ulps<T>());
  check_close(c.grad(), xt::xarray<T>(T(2) * gc), ulps<T>(), ulps<T>());

  auto constant = tape.leaf(a.value(), false);
  CHECK_FALSE((constant / 2.0).requires_grad());
  CHECK_FALSE(div(constant, constant).requires_grad());
}

TEST_CASE("elementwise: anomaly mode names div and the scalar ops that divide by zero") {
  Tape<double> tape;
  auto a = tape.leaf(xt::xarray<double>{1.0, 2.0});
  auto z = tape.leaf(xt::xarray<double>{1.0, 0.0});
  tape.set_detect_anomaly(true);
  const std::vector<std::pair<std::string, std::function<void()>>> cases = {
      {"div", [&] { div(a, z); }},
      {"div_scalar", [&] { div_scalar(a, 0.0); }},
      {"rdiv", [&] { rdiv(z, 1.0); }},
      {"add_scalar", [&] { add_scalar(a, std::numeric_limits<double>::infinity()); }},
      {"rsub", [&] { rsub(a, std::nan("")); }}};
  for (const auto& [op, call] : cases) check_forward_anomaly(tape, op, call);
}

TEST_CASE_TEMPLATE("bad input: elementwise", T, float, double) {
  Tape<T> tape, other, cleared;
  const Var<T> stale = cleared.leaf(xt::xarray<T>{1, 2});
  cleared.clear();
  Var<T> a = tape.leaf(random_array<T>({2, 3}, 96));
  Var<T> b = tape.leaf(random_away_from_zero<T>({3}, 97));
  Var<T> c = tape.leaf(random_away_from_zero<T>({4, 3}, 98));
  Var<T> d = tape.leaf(random_away_from_zero<T>({2}, 99));
  tape.backward(div(a, b), xt::ones<T>({2, 3}));  // a and b hold nonzero gradients
  const auto snapshot = snapshot_of<T>({&tape, &other}, {a, b, c, d});
  std::vector<Row> rows;
  const auto bad = row_adder(rows);
  const auto IA = Expect::invalid_argument;
  for (Op op : k_ops) {
    const std::string fn = name(op);
    bad(fn + ": [2, 3] with [4, 3]", [&, op] { apply(op, a, c); }, IA,
        {"xtgrad::" + fn, "'a'", "'b'", "[2, 3]", "[4, 3]", "axis -2"});
    bad(fn + ": [2, 3] with [2]", [&, op] { apply(op, a, d); }, IA,
        {"xtgrad::" + fn, "'b'", "[2, 3]", "[2]", "axis -1"});
    add_handle_rows<T>(
        rows, fn, {"a", "b"}, {a, b}, [op](const std::vector<Var<T>>& v) { apply(op, v[0], v[1]); },
        other, stale);
  }
  bad("operator/: [2, 3] with [4, 3]", [&] { a / c; }, IA, {"xtgrad::div", "[2, 3]", "[4, 3]"});
  add_handle_rows<T>(
      rows, "scale", {"a"}, {a}, [](const std::vector<Var<T>>& v) { scale(v[0], T(2)); }, other,
      stale);
  for (ScalarOp op : k_scalar_ops)
    add_handle_rows<T>(
        rows, name(op), {"x"}, {a}, [op](const std::vector<Var<T>>& v) { apply(op, v[0], T(2)); },
        other, stale);
  report("elementwise", run_rows(rows, snapshot));
}

// add, sub, mul, scale and their operators; NumPy broadcasting and
// detail::sum_to_shape, the reduction of a gradient to an operand's shape.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xview.hpp>
#include <xtgrad/engine/kernels/broadcast.hpp>
#include <xtgrad/engine/ops/elementwise.hpp>

#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

namespace {

using Dims = std::vector<std::size_t>;

enum class Op { add, sub, mul };
const char* name(Op op) {
  return op == Op::add ? "add" : op == Op::sub ? "sub" : "mul";
}

template <class T>
Var<T> apply(Op op, const Var<T>& a, const Var<T>& b) {
  return op == Op::add ? add(a, b) : op == Op::sub ? sub(a, b) : mul(a, b);
}

double scalar_op(Op op, double a, double b) {
  return op == Op::add ? a + b : op == Op::sub ? a - b : a * b;
}

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
    r.da.data()[ia] += op == Op::mul ? g * bv : g;
    r.db.data()[ib] += op == Op::mul ? g * av : op == Op::sub ? -g : g;
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
    for (Op op : {Op::add, Op::sub, Op::mul}) {
      INFO(name(op), " ", describe(ad, bd));
      const xt::xarray<T> av = random_array<T>(ad, ++seed);
      const xt::xarray<T> bv = random_array<T>(bd, ++seed);
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
    for (Op op : {Op::add, Op::sub, Op::mul}) {
      INFO(name(op), " ", describe(ad, bd));
      check_gradients(
          [op = op](const std::vector<Var<double>>& v) { return apply(op, v[0], v[1]); },
          {random_array(ad, 7), random_array(bd, 8)});
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

  for (Op op : {Op::add, Op::sub, Op::mul}) {
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
  for (Op op : {Op::add, Op::sub, Op::mul}) {
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

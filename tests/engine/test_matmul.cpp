// matmul: 2-D, batched with broadcast batch axes, and 1-D operands, against
// hand-computed numbers, torch fixtures and a long-double loop.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xview.hpp>
#include <xtgrad/engine/errors.hpp>
#include <xtgrad/engine/ops/matmul.hpp>
#include <xtgrad/engine/ops/reduce.hpp>

#include "support/bad_input.hpp"
#include "support/fixtures/fixture_array.hpp"
#include "support/fixtures/matmul_fixtures.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

namespace {

using Dims = std::vector<std::size_t>;

struct Reference {
  xt::xarray<double> y, da, db;
};

// The batch axes of a result and of each operand (rank >= 2) aligned to it,
// with NumPy broadcasting written out.
struct BatchDims {
  Dims batch, a_batch, b_batch, y;
};

BatchDims batch_dims(const Dims& ad, const Dims& bd) {
  const std::size_t rank = std::max(ad.size(), bd.size()) - 2;
  BatchDims d{Dims(rank), Dims(rank, 1), Dims(rank, 1), {}};
  for (std::size_t i = 0; i < rank; ++i) {
    if (i + ad.size() - 2 >= rank) d.a_batch[i] = ad[i + ad.size() - 2 - rank];
    if (i + bd.size() - 2 >= rank) d.b_batch[i] = bd[i + bd.size() - 2 - rank];
    d.batch[i] = d.a_batch[i] == 1 ? d.b_batch[i] : d.a_batch[i];
  }
  d.y = d.batch;
  d.y.push_back(ad[ad.size() - 2]);
  d.y.push_back(bd.back());
  return d;
}

// y = a . b per batch and the gradients of <dy, y>, for operands of rank >= 2,
// by a plain long-double loop over every batch of the result: each batch axis
// of an operand reads index 0 where the operand has size 1.
template <class T>
Reference reference(const xt::xarray<T>& a, const xt::xarray<T>& b, const xt::xarray<T>& dy) {
  const Dims ad(a.shape().begin(), a.shape().end()), bd(b.shape().begin(), b.shape().end());
  const std::size_t m = ad[ad.size() - 2], k = ad.back(), n = bd.back();
  const BatchDims bdims = batch_dims(ad, bd);
  const std::size_t rank = bdims.batch.size();
  const Dims &batch = bdims.batch, &a_batch = bdims.a_batch, &b_batch = bdims.b_batch,
             &yd = bdims.y;
  REQUIRE(Dims(dy.shape().begin(), dy.shape().end()) == yd);
  Reference r{xt::zeros<double>(yd), xt::zeros<double>(ad), xt::zeros<double>(bd)};
  std::size_t count = 1;
  for (std::size_t s : batch) count *= s;
  for (std::size_t flat = 0; flat < count; ++flat) {
    std::size_t rest = flat, ia = 0, ib = 0, a_step = 1, b_step = 1;
    for (std::size_t axis = rank; axis-- > 0;) {
      const std::size_t j = rest % batch[axis];
      rest /= batch[axis];
      ia += (a_batch[axis] == 1 ? 0 : j) * a_step;
      ib += (b_batch[axis] == 1 ? 0 : j) * b_step;
      a_step *= a_batch[axis];
      b_step *= b_batch[axis];
    }
    const T* am = a.data() + ia * m * k;
    const T* bm = b.data() + ib * k * n;
    const T* g = dy.data() + flat * m * n;
    double* y = r.y.data() + flat * m * n;
    double* da = r.da.data() + ia * m * k;
    double* db = r.db.data() + ib * k * n;
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        long double s = 0;
        for (std::size_t p = 0; p < k; ++p)
          s += static_cast<long double>(am[i * k + p]) * bm[p * n + j];
        y[i * n + j] = static_cast<double>(s);
      }
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t p = 0; p < k; ++p) {
        long double s = 0;
        for (std::size_t j = 0; j < n; ++j)
          s += static_cast<long double>(g[i * n + j]) * bm[p * n + j];
        da[i * k + p] += static_cast<double>(s);
      }
    for (std::size_t p = 0; p < k; ++p)
      for (std::size_t j = 0; j < n; ++j) {
        long double s = 0;
        for (std::size_t i = 0; i < m; ++i)
          s += static_cast<long double>(am[i * k + p]) * g[i * n + j];
        db[p * n + j] += static_cast<double>(s);
      }
  }
  return r;
}

// Shape pairs covering every path: 2-D, equal batches, broadcast on either
// side or both, one b for all batches (one folded GEMM), products above
// detail::k_small_gemm_macs (OpenBLAS), and zero sizes of each kind.
const std::vector<std::pair<Dims, Dims>> k_shape_pairs = {{{2, 3}, {3, 4}},
                                                          {{1, 5}, {5, 1}},
                                                          {{2, 3, 4}, {2, 4, 5}},
                                                          {{2, 2, 3, 4}, {2, 2, 4, 3}},
                                                          {{2, 1, 3, 4}, {3, 4, 2}},
                                                          {{3, 4}, {2, 4, 5}},
                                                          {{2, 3, 4}, {4, 5}},
                                                          {{2, 1, 3, 4}, {1, 3, 4, 2}},
                                                          {{3, 1, 2, 3}, {1, 2, 3, 2}},
                                                          {{1, 2, 3}, {4, 3, 2}},
                                                          {{2, 40, 30}, {30, 20}},
                                                          {{2, 40, 30}, {2, 30, 20}},
                                                          {{3, 40, 30}, {1, 30, 20}},
                                                          {{0, 3, 4}, {4, 2}},
                                                          {{0, 3, 4}, {1, 4, 2}},
                                                          {{2, 1, 3, 4}, {0, 4, 2}},
                                                          {{0, 1, 3, 4}, {1, 2, 4, 2}},
                                                          {{2, 0, 4}, {2, 4, 3}},
                                                          {{2, 3, 0}, {0, 5}},
                                                          {{2, 3, 0}, {2, 0, 5}},
                                                          {{2, 3, 4}, {2, 4, 0}}};

std::string describe(const Dims& a, const Dims& b) {
  return detail::shape_str(a) + " . " + detail::shape_str(b);
}

template <class T>
void check_fixture(const xt::xarray<T>& av, const xt::xarray<T>& bv, const xt::xarray<T>& dy,
                   const xt::xarray<double>& y, const xt::xarray<double>& da,
                   const xt::xarray<double>& db) {
  Tape<T> tape;
  auto a = tape.leaf(av);
  auto b = tape.leaf(bv);
  auto out = matmul(a, b);
  check_close(out.value(), y, tolerance<T>(), tolerance<T>());
  tape.backward(out, dy);
  check_close(a.grad(), da, tolerance<T>(), tolerance<T>());
  check_close(b.grad(), db, tolerance<T>(), tolerance<T>());
}

}  // namespace

TEST_CASE_TEMPLATE("matmul: a 2-D product matches hand-computed values and gradients", T, float,
                   double) {
  Tape<T> tape;
  auto a = tape.leaf(xt::xarray<T>{{1, 2, 3}, {4, 5, 6}});
  auto b = tape.leaf(xt::xarray<T>{{1, -1}, {0, 2}, {3, 0.5}});
  auto y = matmul(a, b);
  CHECK(y.value() == xt::xarray<T>{{10, 4.5}, {22, 9}});
  tape.backward(y, xt::xarray<T>{{1, 2}, {-1, 0.5}});
  // da = dy . b^T, db = a^T . dy
  CHECK(a.grad() == xt::xarray<T>{{-1, 4, 4}, {-1.5, 1, -2.75}});
  CHECK(b.grad() == xt::xarray<T>{{-3, 4}, {-3, 6.5}, {-3, 9}});
}

TEST_CASE_TEMPLATE("matmul: broadcast batch axes and 1-D operands match torch", T, float, double) {
  namespace f = fixtures::matmul;
#define XTGRAD_MATMUL_FIXTURE(name)                                           \
  SUBCASE(#name) {                                                            \
    check_fixture<T>(fixture_array<T>(f::name##_a_shape, f::name##_a),        \
                     fixture_array<T>(f::name##_b_shape, f::name##_b),        \
                     fixture_array<T>(f::name##_y_shape, f::name##_dy),       \
                     fixture_array<double>(f::name##_y_shape, f::name##_y),   \
                     fixture_array<double>(f::name##_a_shape, f::name##_da),  \
                     fixture_array<double>(f::name##_b_shape, f::name##_db)); \
  }
  XTGRAD_MATMUL_FIXTURE(both_broadcast)
  XTGRAD_MATMUL_FIXTURE(shared_b)
  XTGRAD_MATMUL_FIXTURE(shared_a)
  XTGRAD_MATMUL_FIXTURE(vector_a)
  XTGRAD_MATMUL_FIXTURE(vector_b)
#undef XTGRAD_MATMUL_FIXTURE
}

TEST_CASE_TEMPLATE("matmul: every batch layout matches a long-double loop", T, float, double) {
  std::uint32_t seed = 300;
  for (const auto& shapes : k_shape_pairs) {
    const Dims& ad = shapes.first;
    const Dims& bd = shapes.second;
    INFO(describe(ad, bd));
    const xt::xarray<T> av = random_array<T>(ad, ++seed), bv = random_array<T>(bd, ++seed);
    const xt::xarray<T> dy = random_array<T>(batch_dims(ad, bd).y, ++seed);
    const Reference r = reference(av, bv, dy);
    Tape<T> tape;
    // A first recording leaves nonzero gradients in the buffers the second
    // reuses: an empty product must overwrite them with zeros.
    auto a0 = tape.leaf(xt::xarray<T>(xt::ones<T>(ad)));
    auto b0 = tape.leaf(xt::xarray<T>(xt::ones<T>(bd)));
    tape.backward(sum(matmul(a0, b0)));
    tape.clear();
    auto a = tape.leaf(av);
    auto b = tape.leaf(bv);
    auto y = matmul(a, b);
    const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
    check_close(y.value(), r.y, tol, tol);
    tape.backward(y, dy);
    check_close(a.grad(), r.da, tol, tol);
    check_close(b.grad(), r.db, tol, tol);
  }
}

TEST_CASE_TEMPLATE("matmul: 1-D operands are vectors, as in torch", T, float, double) {
  Tape<T> tape;
  auto v = tape.leaf(xt::xarray<T>{1, 2, 3});
  auto w = tape.leaf(xt::xarray<T>{-1, 0.5, 2});
  auto m = tape.leaf(xt::xarray<T>{{1, 0}, {2, 1}, {0, -1}});  // [3, 2]
  auto mt = tape.leaf(xt::xarray<T>{{1, 2, 0}, {0, 1, -1}});   // [2, 3]

  auto vm = matmul(v, m);  // [3] . [3, 2] -> [2]
  CHECK(vm.value() == xt::xarray<T>{5, -1});
  tape.backward(vm, xt::xarray<T>{1, -2});
  CHECK(v.grad() == xt::xarray<T>{1, 0, 2});                    // m . dy
  CHECK(m.grad() == xt::xarray<T>{{1, -2}, {2, -4}, {3, -6}});  // outer(v, dy)

  tape.zero_grad();
  auto mv = matmul(mt, v);  // [2, 3] . [3] -> [2]
  CHECK(mv.value() == xt::xarray<T>{5, -1});
  tape.backward(mv, xt::xarray<T>{1, -2});
  CHECK(mt.grad() == xt::xarray<T>{{1, 2, 3}, {-2, -4, -6}});  // outer(dy, v)
  CHECK(v.grad() == xt::xarray<T>{1, 0, 2});                   // mt^T . dy

  tape.zero_grad();
  auto dot = matmul(v, w);  // [3] . [3] -> []
  REQUIRE(dot.dimension() == 0);
  CHECK(dot.value()() == T(6));
  tape.backward(dot);
  CHECK(v.grad() == w.value());
  CHECK(w.grad() == v.value());
}

TEST_CASE("matmul: gradcheck over both inputs") {
  const std::vector<std::pair<Dims, Dims>> pairs = {
      {{2, 3}, {3, 4}}, {{2, 1, 3, 4}, {3, 4, 2}}, {{3, 4}, {2, 4, 2}}, {{2, 3, 4}, {4, 2}},
      {{4}, {2, 4, 3}}, {{2, 3, 4}, {4}},          {{4}, {4}},          {{2, 40, 30}, {30, 20}}};
  std::uint32_t seed = 40;
  for (const auto& shapes : pairs) {
    const Dims& ad = shapes.first;
    const Dims& bd = shapes.second;
    INFO(describe(ad, bd));
    check_gradients([](const std::vector<Var<double>>& v) { return matmul(v[0], v[1]); },
                    {random_array(ad, ++seed), random_array(bd, ++seed)});
  }
  // The same Var on both sides: d(x . x) = dy . x^T + x^T . dy.
  check_gradients([](const std::vector<Var<double>>& v) { return matmul(v[0], v[0]); },
                  {random_array({2, 3, 3}, 50)});
}

TEST_CASE_TEMPLATE("matmul: the same Var twice gets both gradients", T, float, double) {
  Tape<T> tape;
  auto x = tape.leaf(xt::xarray<T>{{1, 2}, {3, 4}});
  auto y = matmul(x, x);
  CHECK(y.value() == xt::xarray<T>{{7, 10}, {15, 22}});
  tape.backward(y, xt::xarray<T>{{1, 0}, {0, 0}});
  // dy . x^T = [[1, 3], [0, 0]]; x^T . dy = [[1, 0], [2, 0]]
  CHECK(x.grad() == xt::xarray<T>{{2, 3}, {2, 0}});
}

TEST_CASE_TEMPLATE("matmul: a transposed or stepped view gives the contiguous result", T, float,
                   double) {
  const xt::xarray<T> m = random_array<T>({2, 4, 3}, 61);  // transposed on its last two axes
  const xt::xarray<T> big = random_array<T>({8, 5}, 62);   // every other row: [4, 5]
  const xt::xarray<T> dy = random_array<T>({2, 3, 5}, 63);
  const xt::xarray<T> m_t = xt::transpose(m, {0, 2, 1});
  const xt::xarray<T> big_s = xt::view(big, xt::range(0, 8, 2), xt::all());
  Tape<T> strided, contiguous;
  auto a1 = strided.leaf(xt::transpose(m, {0, 2, 1}));
  auto b1 = strided.leaf(xt::view(big, xt::range(0, 8, 2), xt::all()));
  auto a2 = contiguous.leaf(m_t);
  auto b2 = contiguous.leaf(big_s);
  auto y1 = matmul(a1, b1);
  auto y2 = matmul(a2, b2);
  CHECK(y1.value() == y2.value());
  strided.backward(y1, dy);
  contiguous.backward(y2, dy);
  CHECK(a1.grad() == a2.grad());
  CHECK(b1.grad() == b2.grad());
}

TEST_CASE_TEMPLATE("matmul: two backwards over one recording give twice the gradient", T, float,
                   double) {
  // One case per path: per-batch products with a broadcast a, and one folded GEMM.
  for (const auto& shapes :
       std::vector<std::pair<Dims, Dims>>{{{3, 4}, {2, 4, 5}}, {{2, 3, 4}, {4, 5}}}) {
    const Dims& ad = shapes.first;
    const Dims& bd = shapes.second;
    INFO(describe(ad, bd));
    Tape<T> tape;
    auto a = tape.leaf(random_array<T>(ad, 71));
    auto b = tape.leaf(random_array<T>(bd, 72));
    auto y = matmul(a, b);
    const xt::xarray<T> dy = random_array<T>(Dims(y.shape().begin(), y.shape().end()), 73);
    tape.backward(y, dy);
    const xt::xarray<T> da = a.grad(), db = b.grad();
    tape.backward(y, dy);
    check_close(a.grad(), xt::xarray<T>(T(2) * da), tolerance<T>(), tolerance<T>());
    check_close(b.grad(), xt::xarray<T>(T(2) * db), tolerance<T>(), tolerance<T>());
  }
}

TEST_CASE_TEMPLATE("matmul: an operand without requires_grad gets no gradient", T, float, double) {
  Tape<T> tape;
  auto a = tape.leaf(xt::xarray<T>{{1, 2}, {3, 4}});
  auto b = tape.leaf(xt::xarray<T>{{1, 0}, {0, 2}}, false);
  auto y = matmul(a, b);
  CHECK(y.requires_grad());
  tape.backward(y, xt::xarray<T>{{1, 1}, {1, 1}});
  CHECK(a.grad() == xt::xarray<T>{{1, 2}, {1, 2}});
  CHECK(b.grad() == xt::zeros<T>({2, 2}));
  CHECK_FALSE(matmul(b, b).requires_grad());
  NoGradGuard<T> no_grad(tape);
  auto z = matmul(a, b);
  CHECK_FALSE(z.requires_grad());
  CHECK(z.value() == xt::xarray<T>{{1, 4}, {3, 8}});
}

TEST_CASE_TEMPLATE("matmul: anomaly mode names matmul when a product overflows", T, float, double) {
  const T big = std::sqrt(std::numeric_limits<T>::max());  // big * big * 2 overflows
  Tape<T> tape;
  tape.set_detect_anomaly(true);
  auto a = tape.leaf(xt::xarray<T>{{big, big}});
  auto b = tape.leaf(xt::xarray<T>(xt::full_like(xt::xarray<T>(xt::empty<T>({2, 1})), big)));
  check_forward_anomaly(tape, "matmul", [&] { matmul(a, b); });
}

TEST_CASE_TEMPLATE("bad input: matmul", T, float, double) {
  Tape<T> tape, other, cleared;
  const Var<T> stale = cleared.leaf(xt::xarray<T>{{1, 2}});
  cleared.clear();
  Var<T> m23 = tape.leaf(random_array<T>({2, 3}, 1));
  Var<T> m34 = tape.leaf(random_array<T>({3, 4}, 2));
  Var<T> m24 = tape.leaf(random_array<T>({2, 4}, 3));
  Var<T> v3 = tape.leaf(random_array<T>({3}, 4));
  Var<T> v4 = tape.leaf(random_array<T>({4}, 5));
  Var<T> b234 = tape.leaf(random_array<T>({2, 3, 4}, 6));
  Var<T> b223 = tape.leaf(random_array<T>({2, 2, 3}, 7));
  Var<T> b334 = tape.leaf(random_array<T>({3, 3, 4}, 10));
  Var<T> b2123 = tape.leaf(random_array<T>({2, 1, 2, 3}, 8));
  Var<T> b4334 = tape.leaf(random_array<T>({4, 3, 3, 4}, 9));
  Var<T> scalar = tape.leaf(xt::xarray<T>(T(2)));
  const std::vector<Var<T>> leaves = {m23,  m34,  m24,   v3,    v4,    b234,
                                      b223, b334, b2123, b4334, scalar};
  tape.backward(sum(matmul(m23, m34)));  // m23 and m34 hold nonzero gradients

  const auto snapshot = snapshot_of<T>({&tape, &other}, leaves);
  std::vector<Row> rows;
  const auto bad = row_adder(rows);
  const auto IA = Expect::invalid_argument;
  bad("0-d a", [&] { matmul(scalar, m34); }, IA,
      {"xtgrad::matmul", "'a'", "[]", "at least 1 axis", "'b'", "[3, 4]"});
  bad("0-d b", [&] { matmul(m23, scalar); }, IA,
      {"xtgrad::matmul", "'b'", "[]", "at least 1 axis", "'a'", "[2, 3]"});
  bad("inner sizes differ", [&] { matmul(m23, m24); }, IA,
      {"xtgrad::matmul", "'b'", "[2, 4]", "expected [..., 3, N]", "'a'", "[2, 3]"});
  bad("a [K] with the wrong K", [&] { matmul(v4, m34); }, IA,
      {"xtgrad::matmul", "'b'", "[3, 4]", "expected [..., 4, N]", "'a'", "[4]"});
  bad("b [K] with the wrong K", [&] { matmul(m34, v3); }, IA,
      {"xtgrad::matmul", "'b'", "[3]", "expected [4]", "'a'", "[3, 4]"});
  bad("batched, inner sizes differ", [&] { matmul(b234, b234); }, IA,
      {"xtgrad::matmul", "'b'", "[2, 3, 4]", "expected [..., 4, N]", "'a'"});
  bad("batch axes that do not broadcast", [&] { matmul(b223, b334); }, IA,
      {"xtgrad::matmul", "'b'", "[3, 3, 4]", "'a'", "[2, 2, 3]", "batch axis -1", "2 in 'a'",
       "3 in 'b'"});
  bad("leading batch axes that do not broadcast", [&] { matmul(b2123, b4334); }, IA,
      {"xtgrad::matmul", "'b'", "[4, 3, 3, 4]", "[2, 1, 2, 3]", "batch axis -2"});
  add_handle_rows<T>(
      rows, "matmul", {"a", "b"}, {m23, m34},
      [](const std::vector<Var<T>>& v) { matmul(v[0], v[1]); }, other, stale);
  report("matmul", run_rows(rows, snapshot));
}

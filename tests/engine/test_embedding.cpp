// embedding: the table lookup of torch.nn.functional.embedding, its
// scatter-add gradient over repeated indices and padding_idx.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include <xtensor/xview.hpp>
#include <xtgrad/engine/ops/embedding.hpp>
#include <xtgrad/engine/ops/reduce.hpp>

#include "support/bad_input.hpp"
#include "support/fixtures/embedding_fixtures.hpp"
#include "support/fixtures/fixture_array.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

namespace {

using Dims = std::vector<std::size_t>;

// The lookup and its gradient written out: y[p, :] = w[i[p], :], and
// dw[v, :] = sum of dy[p, :] over the p with i[p] == v, except at `padding`.
struct Reference {
  xt::xarray<double> y, dw;
};

template <class T>
Reference reference(const Indices& indices, const xt::xarray<T>& w, const xt::xarray<T>& dy,
                    std::int64_t padding) {
  const std::size_t rows = w.shape()[0], dim = w.shape()[1];
  Dims y_dims(indices.shape().begin(), indices.shape().end());
  y_dims.push_back(dim);
  Reference r{xt::zeros<double>(y_dims), xt::zeros<double>({rows, dim})};
  for (std::size_t p = 0; p < indices.size(); ++p) {
    const auto v = static_cast<std::size_t>(indices.data()[p]);
    for (std::size_t j = 0; j < dim; ++j) {
      r.y.data()[p * dim + j] = w(v, j);
      if (indices.data()[p] != padding) r.dw(v, j) += dy.data()[p * dim + j];
    }
  }
  return r;
}

}  // namespace

TEST_CASE_TEMPLATE("embedding: hand-computed rows and a gradient summed over repeats", T, float,
                   double) {
  Tape<T> tape;
  auto w = tape.leaf(xt::xarray<T>{{1, 2}, {3, 4}, {5, 6}, {7, 8}});
  const Indices idx = {3, 1, 3};
  auto y = embedding(idx, w);
  CHECK(y.value() == xt::xarray<T>{{7, 8}, {3, 4}, {7, 8}});
  tape.backward(y, xt::xarray<T>{{1, 2}, {10, 20}, {100, 200}});
  CHECK(w.grad() == xt::xarray<T>{{0, 0}, {10, 20}, {0, 0}, {101, 202}});

  tape.zero_grad();
  auto padded = embedding(idx, w, std::int64_t(3));  // row 3 is padding: no gradient
  CHECK(padded.value() == y.value());                // its value is still weight's row
  tape.backward(padded, xt::xarray<T>{{1, 2}, {10, 20}, {100, 200}});
  CHECK(w.grad() == xt::xarray<T>{{0, 0}, {10, 20}, {0, 0}, {0, 0}});
}

TEST_CASE_TEMPLATE("embedding: repeated indices and padding_idx match torch", T, float, double) {
  namespace f = fixtures::embedding;
  const auto check = [](const Indices& indices, const xt::xarray<T>& weight,
                        const xt::xarray<T>& dy, std::optional<std::int64_t> padding,
                        const xt::xarray<double>& y, const xt::xarray<double>& dw) {
    Tape<T> tape;
    auto w = tape.leaf(weight);
    auto out = embedding(indices, w, padding);
    check_close(out.value(), y, tolerance<T>(), tolerance<T>());
    tape.backward(out, dy);
    check_close(w.grad(), dw, tolerance<T>(), tolerance<T>());
  };
#define XTGRAD_EMBEDDING_FIXTURE(name, padding)                                    \
  SUBCASE(#name) {                                                                 \
    check(fixture_array<std::int64_t>(f::name##_indices_shape, f::name##_indices), \
          fixture_array<T>(f::name##_weight_shape, f::name##_weight),              \
          fixture_array<T>(f::name##_y_shape, f::name##_dy), padding,              \
          fixture_array<double>(f::name##_y_shape, f::name##_y),                   \
          fixture_array<double>(f::name##_weight_shape, f::name##_dweight));       \
  }
  XTGRAD_EMBEDDING_FIXTURE(repeated, std::nullopt)
  XTGRAD_EMBEDDING_FIXTURE(padding, f::padding_padding_idx)
  XTGRAD_EMBEDDING_FIXTURE(negative_padding, f::negative_padding_padding_idx)
#undef XTGRAD_EMBEDDING_FIXTURE
}

TEST_CASE_TEMPLATE("embedding: index shapes, padding rows and empty lookups match a plain loop", T,
                   float, double) {
  struct Case {
    Dims indices, weight;
    std::optional<std::int64_t> padding;
  };
  std::uint32_t seed = 10;
  for (const Case& c : std::vector<Case>{{{7}, {5, 3}, std::nullopt},
                                         {{2, 3, 4}, {6, 2}, std::int64_t(2)},
                                         {{4, 5}, {3, 4}, std::int64_t(-3)},  // row 0
                                         {{}, {4, 3}, std::nullopt},          // 0-d: [D]
                                         {{0}, {4, 3}, std::nullopt},         // [0, D]
                                         {{2, 0}, {4, 3}, std::int64_t(1)},   // [2, 0, D]
                                         {{6}, {4, 0}, std::nullopt},         // D = 0
                                         {{40}, {3, 70}, std::int64_t(1)}}) {
    INFO("indices ", detail::shape_str(c.indices), " weight ", detail::shape_str(c.weight));
    Indices idx = xt::empty<std::int64_t>(c.indices);
    std::mt19937 generator(++seed);
    for (auto& v : idx) v = static_cast<std::int64_t>(generator() % c.weight[0]);
    const std::int64_t padding =
        c.padding ? (*c.padding < 0 ? *c.padding + std::int64_t(c.weight[0]) : *c.padding) : -1;
    const xt::xarray<T> wv = random_array<T>(c.weight, ++seed);
    Dims y_dims = c.indices;
    y_dims.push_back(c.weight[1]);
    const xt::xarray<T> dy = random_array<T>(y_dims, ++seed);
    const Reference r = reference(idx, wv, dy, padding);
    Tape<T> tape;
    // Leave nonzero gradients in the buffers the next recording reuses.
    auto w0 = tape.leaf(xt::xarray<T>(xt::ones<T>(c.weight)));
    tape.backward(sum(w0));
    tape.clear();
    auto w = tape.leaf(wv);
    auto y = embedding(idx, w, c.padding);
    REQUIRE(Dims(y.shape().begin(), y.shape().end()) == y_dims);
    CHECK(y.value() == xt::xarray<T>(xt::cast<T>(r.y)));
    tape.backward(y, dy);
    check_close(w.grad(), r.dw, tolerance<T>(), tolerance<T>());
  }
}

TEST_CASE("embedding: gradcheck of the weight") {
  const Indices idx = {{2, 0, 2}, {3, 2, 0}};  // rows 0 and 2 repeated, row 1 unused
  check_gradients([idx](const std::vector<Var<double>>& v) { return embedding(idx, v[0]); },
                  {random_array({4, 3}, 5)});
  // A padding row that no index uses has no effect on the result either.
  check_gradients(
      [idx](const std::vector<Var<double>>& v) { return embedding(idx, v[0], std::int64_t(-3)); },
      {random_array({4, 3}, 6)});
}

TEST_CASE("embedding: a float row used a million times is summed in double") {
  constexpr std::size_t n = 1 << 20;
  Tape<float> tape;
  xt::xarray<float> table = xt::empty<float>({2, 1});
  table(0, 0) = 1;
  table(1, 0) = 2;
  auto w = tape.leaf(table);
  const Indices idx = xt::zeros<std::int64_t>({n});
  auto y = embedding(idx, w);
  const xt::xarray<float> dy = xt::full_like(y.value(), 0.1f);
  tape.backward(y, dy);
  const double exact = static_cast<double>(0.1f) * n;       // 104857.6015625
  CHECK(std::abs(w.grad()(0, 0) - exact) <= exact * 1e-7);  // a float running sum is off by ~1e-3
  CHECK(w.grad()(1, 0) == 0.0f);
}

TEST_CASE_TEMPLATE("embedding: a transposed weight gives the contiguous result", T, float, double) {
  const xt::xarray<T> m = random_array<T>({3, 5}, 21);  // transposed: [5, 3]
  const xt::xarray<T> m_t = xt::transpose(m);
  const Indices idx = {{4, 0}, {4, 2}};
  const xt::xarray<T> dy = random_array<T>({2, 2, 3}, 22);
  Tape<T> strided, contiguous;
  auto w1 = strided.leaf(xt::transpose(m));
  auto w2 = contiguous.leaf(m_t);
  auto y1 = embedding(xt::view(Indices{{4, 0, 1}, {4, 2, 3}}, xt::all(), xt::range(0, 2)), w1);
  auto y2 = embedding(idx, w2);
  CHECK(y1.value() == y2.value());
  strided.backward(y1, dy);
  contiguous.backward(y2, dy);
  CHECK(w1.grad() == w2.grad());
}

TEST_CASE_TEMPLATE("embedding: two backwards over one recording give twice the gradient", T, float,
                   double) {
  Tape<T> tape;
  auto w = tape.leaf(random_array<T>({5, 4}, 31));
  const Indices idx = {1, 4, 1, 0, 2, 1};
  auto y = embedding(idx, w, std::int64_t(2));
  const xt::xarray<T> dy = random_array<T>({6, 4}, 32);
  tape.backward(y, dy);
  const xt::xarray<T> once = w.grad();
  CHECK(xt::view(once, 2, xt::all()) == xt::zeros<T>({4}));  // padding
  CHECK(xt::view(once, 3, xt::all()) == xt::zeros<T>({4}));  // unused
  tape.backward(y, dy);
  check_close(w.grad(), xt::xarray<T>(T(2) * once), tolerance<T>(), tolerance<T>());
}

TEST_CASE_TEMPLATE("embedding: a weight without requires_grad records no gradient", T, float,
                   double) {
  Tape<T> tape;
  auto w = tape.leaf(xt::xarray<T>{{1, 2}, {3, 4}}, false);
  auto y = embedding(Indices{1, 1, 0}, w);
  CHECK_FALSE(y.requires_grad());
  CHECK(y.value() == xt::xarray<T>{{3, 4}, {3, 4}, {1, 2}});
  auto v = tape.leaf(xt::xarray<T>{{1, 2}, {3, 4}});
  NoGradGuard<T> no_grad(tape);
  CHECK_FALSE(embedding(Indices{0}, v).requires_grad());
}

TEST_CASE_TEMPLATE("embedding: anomaly mode names embedding for a looked-up non-finite row", T,
                   float, double) {
  Tape<T> tape;
  xt::xarray<T> table = {{1, 2}, {3, 4}};
  table(1, 0) = std::numeric_limits<T>::quiet_NaN();
  auto w = tape.leaf(table);  // recorded before anomaly mode is on
  tape.set_detect_anomaly(true);
  CHECK(embedding(Indices{0, 0}, w).value() == xt::xarray<T>{{1, 2}, {1, 2}});  // row 1 unread
  check_forward_anomaly(tape, "embedding", [&] { embedding(Indices{0, 1}, w); });
}

TEST_CASE_TEMPLATE("bad input: embedding", T, float, double) {
  Tape<T> tape, other, cleared;
  const Var<T> stale = cleared.leaf(xt::xarray<T>{{1, 2}});
  cleared.clear();
  Var<T> w = tape.leaf(random_array<T>({5, 3}, 1));
  Var<T> v5 = tape.leaf(random_array<T>({5}, 2));
  Var<T> c3 = tape.leaf(random_array<T>({2, 5, 3}, 3));
  Var<T> scalar = tape.leaf(xt::xarray<T>(T(1)));
  const std::vector<Var<T>> leaves = {w, v5, c3, scalar};
  tape.backward(sum(embedding(Indices{1, 1, 4}, w)));  // w holds a nonzero gradient
  const Indices good = {0, 4};

  const auto snapshot = snapshot_of<T>({&tape, &other}, leaves);
  std::vector<Row> rows;
  const auto bad = row_adder(rows);
  const auto IA = Expect::invalid_argument;
  bad("1-d weight", [&] { embedding(good, v5); }, IA,
      {"xtgrad::embedding", "'weight'", "[5]", "expected [num_embeddings, embedding_dim]"});
  bad("3-d weight", [&] { embedding(good, c3); }, IA,
      {"xtgrad::embedding", "'weight'", "[2, 5, 3]", "[num_embeddings, embedding_dim]"});
  bad("0-d weight", [&] { embedding(good, scalar); }, IA,
      {"xtgrad::embedding", "'weight'", "[]", "[num_embeddings, embedding_dim]"});
  bad("an index equal to V",
      [&] {
        embedding(Indices{0, 1, 5}, w);
      },
      IA, {"xtgrad::embedding", "'indices'", "holds 5", "flat position 2", "[0, 5)"});
  bad("a negative index",
      [&] {
        embedding(Indices{{0, 1}, {-1, 2}}, w);
      },
      IA, {"xtgrad::embedding", "'indices'", "holds -1", "flat position 2", "[0, 5)"});
  bad("a huge 0-d index", [&] { embedding(Indices(std::int64_t(1) << 40), w); }, IA,
      {"xtgrad::embedding", "'indices'", "holds 1099511627776", "flat position 0"});
  bad("padding_idx equal to V", [&] { embedding(good, w, std::int64_t(5)); }, IA,
      {"xtgrad::embedding", "'padding_idx'", "is 5", "[-5, 5)", "[5, 3]"});
  bad("padding_idx below -V", [&] { embedding(good, w, std::int64_t(-6)); }, IA,
      {"xtgrad::embedding", "'padding_idx'", "is -6", "[-5, 5)"});
  bad("an index out of range with a valid padding_idx",
      [&] { embedding(Indices{7}, w, std::int64_t(0)); }, IA,
      {"xtgrad::embedding", "'indices'", "holds 7"});
  add_handle_rows<T>(
      rows, "embedding", {"weight"}, {w},
      [good](const std::vector<Var<T>>& v) { embedding(good, v[0]); }, other, stale);
  report("embedding", run_rows(rows, snapshot));
}

TEST_CASE_TEMPLATE("embedding_dense_backward: the scatter-add of embedding's gradient", T, float,
                   double) {
  struct Case {
    Dims indices;
    std::size_t rows, dim;
    std::optional<std::int64_t> padding;
  };
  std::uint32_t seed = 60;
  for (const Case& c : std::vector<Case>{{{7}, 5, 3, std::nullopt},
                                         {{2, 3, 4}, 6, 2, std::int64_t(2)},
                                         {{4, 5}, 3, 4, std::int64_t(-3)},
                                         {{}, 4, 3, std::nullopt},
                                         {{0}, 4, 3, std::int64_t(1)}}) {
    INFO("indices ", detail::shape_str(c.indices), " rows ", c.rows);
    Indices idx = xt::empty<std::int64_t>(c.indices);
    std::mt19937 generator(++seed);
    for (auto& v : idx) v = static_cast<std::int64_t>(generator() % c.rows);
    const std::int64_t padding =
        c.padding ? (*c.padding < 0 ? *c.padding + std::int64_t(c.rows) : *c.padding) : -1;
    Dims g_dims = c.indices;
    g_dims.push_back(c.dim);
    const xt::xarray<T> g = random_array<T>(g_dims, ++seed);
    const xt::xarray<T> w = random_array<T>({c.rows, c.dim}, ++seed);
    const xt::xarray<T> dy = random_array<T>({c.rows, c.dim}, ++seed);
    // y is the gradient `reference` gives the table; its own gradient is the
    // lookup of dy, 0 at the padding positions
    const Reference r = reference(idx, w, g, padding);
    xt::xarray<double> dg = xt::zeros<double>(g_dims);
    for (std::size_t p = 0; p < idx.size(); ++p)
      for (std::size_t j = 0; j < c.dim; ++j)
        if (idx.data()[p] != padding)
          dg.data()[p * c.dim + j] = dy(static_cast<std::size_t>(idx.data()[p]), j);
    Tape<T> tape;
    auto gv = tape.leaf(g);
    auto y = embedding_dense_backward(gv, idx, c.rows, c.padding);
    check_close(y.value(), r.dw, tolerance<T>(), tolerance<T>());
    tape.backward(y, dy);
    CHECK(gv.grad() == xt::xarray<T>(xt::cast<T>(dg)));
  }
}

TEST_CASE("embedding_dense_backward: gradcheck, with and without padding_idx") {
  const Indices idx = {{2, 0, 2}, {3, 2, 0}};
  for (std::optional<std::int64_t> padding : {std::optional<std::int64_t>{}, {std::int64_t(2)}})
    check_gradients(
        [idx, padding](const std::vector<Var<double>>& v) {
          return embedding_dense_backward(v[0], idx, 4, padding);
        },
        {random_array({2, 3, 5}, 6)});
}

TEST_CASE_TEMPLATE("bad input: embedding_dense_backward", T, float, double) {
  Tape<T> tape, other, cleared;
  const Var<T> stale = cleared.leaf(xt::xarray<T>{{1, 2}});
  cleared.clear();
  Var<T> g = tape.leaf(random_array<T>({2, 3}, 1));
  Var<T> g3 = tape.leaf(random_array<T>({3, 2, 3}, 2));
  const std::vector<Var<T>> leaves = {g, g3};
  const Indices good = {0, 4};

  const auto snapshot = snapshot_of<T>({&tape, &other}, leaves);
  std::vector<Row> rows;
  const auto bad = row_adder(rows);
  const auto IA = Expect::invalid_argument;
  bad("grad_output not indices.shape + [D]", [&] { embedding_dense_backward(g3, good, 5); }, IA,
      {"xtgrad::embedding_dense_backward", "'grad_output'", "[3, 2, 3]", "[2]"});
  bad("an index equal to num_weights",
      [&] {
        embedding_dense_backward(g, Indices{0, 5}, 5);
      },
      IA, {"xtgrad::embedding_dense_backward", "'indices'", "holds 5", "[0, 5)"});
  bad("padding_idx equal to num_weights",
      [&] { embedding_dense_backward(g, good, 5, std::int64_t(5)); }, IA,
      {"xtgrad::embedding_dense_backward", "'padding_idx'", "is 5", "[-5, 5)"});
  add_handle_rows<T>(
      rows, "embedding_dense_backward", {"grad_output"}, {g},
      [good](const std::vector<Var<T>>& v) { embedding_dense_backward(v[0], good, 5); }, other,
      stale);
  report("embedding_dense_backward", run_rows(rows, snapshot));
}

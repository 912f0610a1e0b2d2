// NaN stays NaN in scaled_dot_product_attention: a NaN in a query, a key, a
// value or an additive mask gives NaN exactly where softmax(scale q k^T +
// mask) v composed of the unfused ops gives it, in the output and in every
// gradient, and the other elements keep their values. (A row that sees no
// key gives 0 instead: test_attention.cpp.)

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include <xtgrad/engine/ops/attention.hpp>

#include "support/attention_reference.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

namespace {

constexpr double k_nan = std::numeric_limits<double>::quiet_NaN();

// [B, H, Tq, D] queries against 70 keys: two key tiles for every vector
// width, so that a NaN in the first tile meets a finite second one.
const std::vector<std::size_t> k_q{1, 2, 5, 6}, k_k{1, 2, 70, 6}, k_v{1, 2, 70, 4};
const std::vector<std::size_t> k_mask{5, 70};

struct Inputs {
  xt::xarray<double> q = random_array<double>(k_q, 31), k = random_array<double>(k_k, 32),
                     v = random_array<double>(k_v, 33), dy = random_array<double>({1, 2, 5, 4}, 34),
                     mask = random_additive<double>(k_mask, 35);
};

struct Outcome {
  std::vector<xt::xarray<double>> arrays;  // y, dq, dk, dv
};

template <class T>
Outcome fused(const Inputs& in) {
  Tape<T> tape;
  const auto leaf = [&](const xt::xarray<double>& a) {
    return tape.leaf(xt::xarray<T>(xt::cast<T>(a)));
  };
  Var<T> q = leaf(in.q), k = leaf(in.k), v = leaf(in.v);
  Var<T> y =
      scaled_dot_product_attention(q, k, v, AttentionMask<T>(xt::xarray<T>(xt::cast<T>(in.mask))));
  tape.backward(y, xt::xarray<T>(xt::cast<T>(in.dy)));
  Outcome out;
  for (const Var<T>* x : {&y, &q, &k, &v})
    out.arrays.push_back(xt::cast<double>(x == &y ? x->value() : x->grad()));
  return out;
}

Outcome composed(const Inputs& in) {
  Tape<double> tape;
  Var<double> q = tape.leaf(in.q), k = tape.leaf(in.k), v = tape.leaf(in.v);
  const xt::xarray<double> bias = in.mask;
  Var<double> y =
      composed_attention(tape, q, k, v, &bias, 1.0 / std::sqrt(6.0), 0.0, k_attention_key);
  tape.backward(y, in.dy);
  return {{y.value(), q.grad(), k.grad(), v.grad()}};
}

// The same NaN elements; the others within rtol of the composition.
void check_same(const Outcome& got, const Outcome& expected, double rtol) {
  const char* names[] = {"y", "dq", "dk", "dv"};
  for (std::size_t a = 0; a < 4; ++a) {
    INFO(names[a]);
    const xt::xarray<double>& g = got.arrays[a];
    const xt::xarray<double>& e = expected.arrays[a];
    REQUIRE(g.shape() == e.shape());
    std::size_t nans = 0, mismatches = 0;
    xt::xarray<double> g_finite = g, e_finite = e;
    for (std::size_t i = 0; i < e.size(); ++i) {
      nans += std::isnan(e.data()[i]) ? 1 : 0;
      mismatches += std::isnan(g.data()[i]) != std::isnan(e.data()[i]) ? 1 : 0;
      if (std::isnan(e.data()[i])) g_finite.data()[i] = e_finite.data()[i] = 0.0;
    }
    INFO(nans << " NaN of " << e.size() << " in the composition");
    CHECK(mismatches == 0);
    if (mismatches == 0) check_relative(g_finite, e_finite, rtol);
  }
}

}  // namespace

TEST_CASE_TEMPLATE(
    "attention: a NaN in q, k, v or an additive mask gives NaN where the composition does", T,
    float, double) {
  const double rtol = sizeof(T) == 4 ? 2e-6 : 1e-12;
  struct Case {
    std::string name;
    void (*poison)(Inputs&);
  };
  const std::vector<Case> cases = {
      {"a query row (head 0, row 2)", [](Inputs& in) { in.q(0, 0, 2, 1) = k_nan; }},
      {"a key in the second tile (head 1, key 66)", [](Inputs& in) { in.k(0, 1, 66, 0) = k_nan; }},
      {"a value in the first tile (head 0, key 3)", [](Inputs& in) { in.v(0, 0, 3, 2) = k_nan; }},
      {"one mask element (row 1, key 4)", [](Inputs& in) { in.mask(1, 4) = k_nan; }},
      // Every visible score of row 3 NaN: the max of the row is -inf.
      {"a mask row of NaN and -inf (row 3)",
       [](Inputs& in) {
         for (std::size_t j = 0; j < 70; ++j)
           in.mask(3, j) = j % 2 ? k_nan : -std::numeric_limits<double>::infinity();
       }},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    Inputs in;
    c.poison(in);
    check_same(fused<T>(in), composed(in), rtol);
  }
}

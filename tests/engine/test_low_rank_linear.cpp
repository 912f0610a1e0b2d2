// low_rank_linear (ops/low_rank_linear.hpp): the composition of linear,
// linear, scale and add bit for bit (values and every gradient, float and
// double, both layouts), gradcheck and gradgradcheck, and its shape errors.
#include <doctest/doctest.h>

#include <xtgrad/engine/engine.hpp>

#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

namespace {

using Arrays = std::vector<xt::xarray<double>>;

// x [2, 3, 4], W, b [5], h [2, 3, 2], B [5, 2].
Arrays inputs(WeightLayout layout) {
  const std::vector<std::size_t> w = layout == WeightLayout::out_in
                                         ? std::vector<std::size_t>{5, 4}
                                         : std::vector<std::size_t>{4, 5};
  return {random_array({2, 3, 4}, 1), random_array(w, 2), random_array({5}, 3),
          random_array({2, 3, 2}, 4), random_array({5, 2}, 5)};
}

// The op, or its composition, on leaves of `values`; the value and each input's gradient.
template <class T>
std::vector<xt::xarray<T>> run(const Arrays& values, WeightLayout layout, bool fused) {
  Tape<T> tape;
  std::vector<Var<T>> v;
  for (const xt::xarray<double>& a : values) v.push_back(tape.leaf(xt::xarray<T>(xt::cast<T>(a))));
  const T s = T(2.5);
  const Var<T> y = fused ? low_rank_linear(v[0], v[1], v[2], layout, v[3], v[4], s)
                         : add(linear(v[0], v[1], v[2], layout), scale(linear(v[3], v[4]), s));
  tape.backward(y, xt::xarray<T>(xt::cast<T>(random_array({2, 3, 5}, 6))));
  std::vector<xt::xarray<T>> out{y.value()};
  for (const Var<T>& input : v) out.push_back(input.grad());
  return out;
}

}  // namespace

TEST_CASE_TEMPLATE("low_rank_linear: the composition's bits, value and gradients", T, float,
                   double) {
  for (const WeightLayout layout : {WeightLayout::out_in, WeightLayout::in_out}) {
    const Arrays values = inputs(layout);
    const std::vector<xt::xarray<T>> fused = run<T>(values, layout, true);
    const std::vector<xt::xarray<T>> composed = run<T>(values, layout, false);
    for (std::size_t i = 0; i < fused.size(); ++i) {
      CAPTURE(i);
      CHECK(fused[i] == composed[i]);
    }
  }
}

TEST_CASE("low_rank_linear: gradcheck and gradgradcheck over every input") {
  for (const WeightLayout layout : {WeightLayout::out_in, WeightLayout::in_out}) {
    const auto f = [layout](const std::vector<Var<double>>& v) {
      return low_rank_linear(v[0], v[1], v[2], layout, v[3], v[4], 0.75);
    };
    check_gradients(f, inputs(layout));
    const GradcheckResult second = gradgradcheck(f, inputs(layout));
    INFO(second.report());
    CHECK(second.passed);
  }
}

TEST_CASE("low_rank_linear: h and b_low_rank are checked against x and the weight") {
  Tape<double> tape;
  const Var<double> x = tape.leaf(random_array({3, 4}, 1)), w = tape.leaf(random_array({5, 4}, 2));
  const Var<double> h = tape.leaf(random_array({3, 2}, 3)), b = tape.leaf(random_array({5, 2}, 4));
  const Var<double> h_bad = tape.leaf(random_array({2, 2}, 5));
  const Var<double> b_bad = tape.leaf(random_array({5, 3}, 6));
  const std::size_t before = tape.size();
  CHECK(message_of(
            [&] { low_rank_linear(x, w, std::nullopt, WeightLayout::out_in, h_bad, b, 1.0); }) ==
        "xtgrad::low_rank_linear: argument 'h' has shape [2, 2], expected x's leading axes and a "
        "rank >= 1, x has shape [3, 4]");
  CHECK(message_of([&] {
          low_rank_linear(x, w, std::nullopt, WeightLayout::out_in, h, b_bad, 1.0);
        }) == "xtgrad::low_rank_linear: argument 'b_low_rank' has shape [5, 3], expected [5, 2]");
  CHECK(tape.size() == before);
}

// Anomaly mode and deliberate masking: a -inf written by masked_fill, an
// additive -inf mask and softmax over a masked row are no anomaly (the
// attention docs/higher_order_gradients.md recommends for a second
// derivative runs in anomaly mode), while a NaN, and an infinity born of
// finite inputs, still throw.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include <xtgrad/engine/engine.hpp>

#include "support/test_helpers.hpp"

using namespace xtgrad;
using xtgrad::testing::random_array;

namespace {

constexpr double k_inf = std::numeric_limits<double>::infinity();

// softmax(masked scores) v, summed squared: the composed attention of one head.
Var<double> attention_loss(const Var<double>& masked, const Var<double>& v) {
  return sum(square(matmul(softmax(masked, -1), v)));
}

}  // namespace

TEST_CASE("anomaly masking: masked_fill with -inf, softmax and two backwards pass") {
  Tape<double> tape;
  DetectAnomalyGuard<double> guard(tape);
  const Var<double> q = tape.leaf(random_array({4, 3}, 1));
  const Var<double> k = tape.leaf(random_array({4, 3}, 2));
  const Var<double> v = tape.leaf(random_array({4, 3}, 3));
  const xt::xarray<bool> blocked = !causal_mask(4, 4);
  const Var<double> scores = matmul(q, transpose(k, 0, 1));
  const Var<double> masked = masked_fill(scores, blocked, -k_inf);
  CHECK(masked.value()(0, 3) == -k_inf);
  const Var<double> loss = attention_loss(masked, v);
  const std::vector<Var<double>> g = grad(tape, {loss}, {q}, GradOptions<double>{{}, true});
  CHECK_NOTHROW(tape.backward(sum(square(g[0]))));
  CHECK(std::isfinite(xt::sum(q.grad())()));
  CHECK_NOTHROW(tape.backward(loss));
}

TEST_CASE("anomaly masking: an additive -inf mask leaf is no anomaly") {
  Tape<double> tape;
  DetectAnomalyGuard<double> guard(tape);
  xt::xarray<double> additive = xt::zeros<double>({3, 3});
  additive(0, 1) = additive(0, 2) = additive(1, 2) = -k_inf;
  const Var<double> scores = tape.leaf(random_array({3, 3}, 4));
  const Var<double> mask = tape.leaf(additive, false);
  const Var<double> v = tape.leaf(random_array({3, 2}, 5));
  const Var<double> loss = attention_loss(add(scores, mask), v);
  CHECK_NOTHROW(tape.backward(loss));
  CHECK(scores.grad()(0, 1) == 0.0);
}

TEST_CASE("anomaly masking: a NaN, and an infinity born of finite inputs, still throw") {
  Tape<double> tape;
  DetectAnomalyGuard<double> guard(tape);
  const Var<double> zero = tape.leaf(xt::xarray<double>{0.0, 1.0});
  const Var<double> inf = tape.leaf(xt::xarray<double>{k_inf, 2.0});  // user data: no anomaly
  CHECK_THROWS_WITH_PARTS(mul(zero, inf), AnomalyError, {"'mul'", "nan at [0]"});  // 0 * inf
  CHECK_THROWS_WITH_PARTS(log(zero), AnomalyError, {"'log'", "-inf at [0]"});      // log(0) from 0
  const xt::xarray<bool> first = {true, false};
  CHECK_THROWS_WITH_PARTS(masked_fill(zero, first, std::nan("")), AnomalyError,
                          {"'masked_fill'", "nan at [0]"});
  CHECK(tape.size() == 2);  // nothing recorded by the refused ops
}

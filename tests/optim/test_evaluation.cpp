// training/evaluation.hpp: CrossEntropyScore against the cross-entropy and
// argmax written out by hand, NextTokenEvaluator's windows (every token but
// the first predicted once, in batches of one length) through a model whose
// logits are known, and the unigram baseline against its formula.

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include <xtgrad/training/evaluation.hpp>

#include "support/test_helpers.hpp"

using namespace xtgrad;

namespace {

int g_argc = 1;
char g_name[] = "test";
char* g_args[] = {g_name, nullptr};
char** g_argv = g_args;

constexpr std::size_t k_vocab = 5;

// logits [B, T, V]: `sure` at the id after each input id (mod V), 0 elsewhere;
// records the [B, T] of every call.
struct NextIdModel {
  double sure = 10.0;
  mutable std::vector<std::vector<std::size_t>> calls;
  xt::xarray<float> infer(const Indices& tokens) const {
    const std::size_t B = tokens.shape()[0], T = tokens.shape()[1];
    calls.push_back({B, T});
    xt::xarray<float> logits = xt::zeros<float>({B, T, k_vocab});
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t t = 0; t < T; ++t)
        logits(b, t, static_cast<std::size_t>(tokens(b, t) + 1) % k_vocab) = float(sure);
    return logits;
  }
};

}  // namespace

TEST_CASE(
    "evaluation: CrossEntropyScore adds each row's cross-entropy, first-argmax hits and "
    "predictions") {
  training::CrossEntropyScore<double> score;
  const xt::xarray<double> logits = {{1.0, 2.0, 3.0}, {0.5, 0.5, -1.0}};  // row 1 ties at 0 and 1
  score.add(logits, Indices{2, 1});
  const xt::xarray<double> more = {{{4.0, 0.0, 0.0}}};  // [1, 1, 3]: leading axes are rows
  score.add(more, Indices{0});
  const double row0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 3.0;
  const double row1 = std::log(2.0 * std::exp(0.5) + std::exp(-1.0)) - 0.5;
  const double row2 = std::log(std::exp(4.0) + 2.0) - 4.0;
  CHECK(score.rows == 3);
  CHECK(score.loss_sum == doctest::Approx(row0 + row1 + row2).epsilon(1e-14));
  CHECK(score.mean_loss() == doctest::Approx((row0 + row1 + row2) / 3).epsilon(1e-14));
  CHECK(score.correct == 2);  // row 1's first argmax is 0, not its target 1
  CHECK(score.accuracy() == doctest::Approx(2.0 / 3.0));
  CHECK(score.predictions == std::vector<std::size_t>{2, 0, 0});
}

TEST_CASE(
    "evaluation: CrossEntropyScore refuses other row counts and targets outside the classes") {
  training::CrossEntropyScore<float> score;
  const xt::xarray<float> logits = xt::zeros<float>({2, 3});
  CHECK_THROWS_WITH_PARTS(score.add(logits, Indices{0}), std::invalid_argument,
                          {"CrossEntropyScore::add", "'logits'", "[2, 3]", "1 rows"});
  CHECK_THROWS_WITH_PARTS(score.add(logits, Indices{0, 3}), std::invalid_argument,
                          {"CrossEntropyScore::add", "'targets'", "holds 3", "[0, 3)"});
  CHECK(score.rows == 0);
  CHECK(score.predictions.empty());
}

TEST_CASE("evaluation: NextTokenEvaluator predicts every token but the first once, in batches") {
  training::Parallel parallel(g_argc, g_argv);  // one process
  Indices text = Indices::from_shape({23});
  for (std::size_t i = 0; i < text.size(); ++i) text(i) = std::int64_t(i % k_vocab);
  // windows of 4 + 1 tokens from 0, 4, ..., 20: five of T = 4, the last of T = 2
  const training::NextTokenEvaluator evaluator(text, 4, 2, 2);
  NextIdModel model;
  // Every target is the id after its input: the loss of a logit `sure` against V - 1 zeros.
  const double right = std::log(std::exp(model.sure) + double(k_vocab - 1)) - model.sure;
  CHECK(evaluator.full(model, parallel) == doctest::Approx(right).epsilon(1e-6));
  CHECK(model.calls == std::vector<std::vector<std::size_t>>{{2, 4}, {2, 4}, {1, 4}, {1, 2}});
  model.calls.clear();
  model.sure = 0.0;  // uniform: log V per token
  CHECK(evaluator.periodic(model, parallel) == doctest::Approx(std::log(double(k_vocab))));
  CHECK(model.calls == std::vector<std::vector<std::size_t>>{{2, 4}});  // two of the five
}

TEST_CASE(
    "evaluation: unigram_cross_entropy scores the held-out tokens but the first by add-one "
    "counts") {
  // counts + 1: id 0 -> 3, id 1 -> 2, id 2 -> 1, of 3 + 3
  const double h = training::unigram_cross_entropy(Indices{0, 0, 1}, Indices{2, 0, 1}, 3);
  CHECK(h == doctest::Approx(-(std::log(3.0 / 6.0) + std::log(2.0 / 6.0)) / 2).epsilon(1e-14));
  CHECK_THROWS_WITH_PARTS(training::unigram_cross_entropy(Indices{0}, Indices{1}, 3),
                          std::invalid_argument,
                          {"unigram_cross_entropy", "'held_out'", "at least 2"});
  CHECK_THROWS_WITH_PARTS(training::unigram_cross_entropy(Indices{0, 3}, Indices{1, 2}, 3),
                          std::invalid_argument, {"unigram_cross_entropy", "'train'", "holds 3"});
}

// Training at MatmulPrecision::bf16 (matmul_precision.hpp) follows training
// in float: a small GPT and an FFN, each trained from the same initial
// weights on the same data at both precisions, have loss curves that stay
// close step by step and end close, while the two runs are not the same
// computation (bf16 moves the first loss and the first gradients by more
// than float rounding could). The models are sized so that their products
// reach oneDNN's bf16 matmul (more than 16384 multiply-adds and 8 rows).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <xtgrad/engine/engine.hpp>
#include <xtgrad/engine/kernels/onednn_gemm.hpp>
#include <xtgrad/engine/matmul_precision.hpp>
#include <xtgrad/modules/feed_forward.hpp>
#include <xtgrad/modules/gpt.hpp>
#include <xtgrad/optim/adamw.hpp>

#include "support/precision_scope.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using xtgrad::testing::PrecisionScope;
using xtgrad::testing::random_array;

namespace {

bool bf16_supported() {
  if (matmul_precision_supported(MatmulPrecision::bf16)) return true;
  MESSAGE("bf16 training skipped: matmul_precision_supported(bf16) is false ("
          << (detail::onednn_compiled() ? "oneDNN has no native bf16 kernel on this CPU"
                                        : "built without oneDNN")
          << ")");
  return false;
}

struct Run {
  std::vector<float> losses;
  std::vector<xt::xarray<float>> first_grads;
};

// The largest |bf16 - f32| / f32 over the steps' losses.
double worst_relative_gap(const Run& f32, const Run& bf16) {
  double worst = 0;
  for (std::size_t i = 0; i < f32.losses.size(); ++i)
    worst = std::max(worst, std::abs(double(bf16.losses[i]) - f32.losses[i]) / f32.losses[i]);
  return worst;
}

// ||a - b|| / ||a|| over all the first step's gradients.
double gradient_gap(const Run& f32, const Run& bf16) {
  double norm = 0, diff = 0;
  for (std::size_t i = 0; i < f32.first_grads.size(); ++i)
    for (std::size_t j = 0; j < f32.first_grads[i].size(); ++j) {
      const double a = f32.first_grads[i].data()[j], b = bf16.first_grads[i].data()[j];
      norm += a * a;
      diff += (a - b) * (a - b);
    }
  return std::sqrt(diff / norm);
}

GPTConfig small_gpt() {
  GPTConfig c;
  c.vocab_size = 32;
  c.block_size = 32;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 64;
  c.style = GPTStyle::gpt2;
  return c;
}

// Batch b of [4, 32] tokens and their next tokens: a few interleaved
// arithmetic sequences, so that the model can learn them.
std::pair<Indices, Indices> gpt_batch(std::size_t b, std::int64_t vocab) {
  Indices tokens = Indices::from_shape({4, 32}), targets = Indices::from_shape({128});
  for (std::size_t r = 0; r < 4; ++r)
    for (std::size_t t = 0; t <= 32; ++t) {
      const auto token = static_cast<std::int64_t>((3 * (r + b) + (r % 2 + 1) * t) % vocab);
      if (t < 32) tokens.data()[r * 32 + t] = token;
      if (t > 0) targets.data()[r * 32 + t - 1] = token;
    }
  return {tokens, targets};
}

Run train_gpt(MatmulPrecision precision, int steps) {
  const PrecisionScope scope(precision);
  Generator generator(7);
  GPT<float> model(small_gpt(), generator);
  optim::AdamW<float> adamw(model.parameters(), optim::AdamWOptions(3e-3));
  const auto vocab = static_cast<std::int64_t>(small_gpt().vocab_size);
  Run run;
  for (int step = 0; step < steps; ++step) {
    const auto [tokens, targets] = gpt_batch(static_cast<std::size_t>(step) % 8, vocab);
    model.zero_grad();
    Tape<float> tape;
    const Var<float> logits = model.forward(tape, tokens);
    const Var<float> loss = cross_entropy(reshape(logits, {-1, vocab}), targets);
    tape.backward(loss);
    run.losses.push_back(loss.value()());
    if (step == 0)
      for (const Parameter<float>* p : model.parameters()) run.first_grads.push_back(p->grad);
    adamw.step();
  }
  return run;
}

// A two-layer GELU FFN [64 -> 256 -> 64] fitted to a fixed random teacher
// (another such FFN) on 256 rows by mean squared error.
Run train_ffn(MatmulPrecision precision, int steps) {
  const PrecisionScope scope(precision);
  Generator student_init(11), teacher_init(12);
  FeedForward<float> student(64, 256, Activation::gelu, student_init);
  FeedForward<float> teacher(64, 256, Activation::gelu, teacher_init);
  const xt::xarray<float> x = random_array<float>({256, 64}, 13);
  xt::xarray<float> target;
  {
    const PrecisionScope exact(MatmulPrecision::highest);  // the same target for both runs
    Tape<float> tape;
    target = teacher.forward(tape.leaf(x, false)).value();
  }
  optim::AdamW<float> adamw(student.parameters(), optim::AdamWOptions(3e-3));
  Run run;
  for (int step = 0; step < steps; ++step) {
    student.zero_grad();
    Tape<float> tape;
    const Var<float> loss = mse(student.forward(tape.leaf(x, false)), tape.leaf(target, false));
    tape.backward(loss);
    run.losses.push_back(loss.value()());
    if (step == 0)
      for (const Parameter<float>* p : student.parameters()) run.first_grads.push_back(p->grad);
    adamw.step();
  }
  return run;
}

void check_curves(const Run& f32, const Run& bf16, double step_tolerance, double end_tolerance) {
  // both learn
  CHECK(f32.losses.back() < 0.5 * f32.losses.front());
  CHECK(bf16.losses.back() < 0.5 * bf16.losses.front());
  // close at every step and at the end
  const double worst = worst_relative_gap(f32, bf16);
  MESSAGE("largest relative gap between the loss curves: " << worst);
  CHECK(worst <= step_tolerance);
  CHECK(std::abs(double(bf16.losses.back()) - f32.losses.back()) / f32.losses.back() <=
        end_tolerance);
  // and bf16 ran: its first gradients differ from float's by more than
  // float's rounding (about 1e-7 relative), as bf16's 2^-9 per operand does
  const double gap = gradient_gap(f32, bf16);
  MESSAGE("relative 2-norm gap of the first step's gradients: " << gap);
  CHECK(gap > 1e-4);
  CHECK(gap < 5e-2);
}

}  // namespace

TEST_CASE("bf16 training: a small GPT's loss curve follows float's") {
  if (!bf16_supported()) return;
  const int steps = 40;
  check_curves(train_gpt(MatmulPrecision::highest, steps), train_gpt(MatmulPrecision::bf16, steps),
               1e-2, 1e-2);
}

TEST_CASE("bf16 training: an FFN's loss curve follows float's") {
  if (!bf16_supported()) return;
  const int steps = 40;
  check_curves(train_ffn(MatmulPrecision::highest, steps), train_ffn(MatmulPrecision::bf16, steps),
               1e-2, 1e-2);
}

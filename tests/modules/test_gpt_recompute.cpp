// GPT::set_recompute_every: a GPT whose blocks run under activation
// recomputes trains with the gradients of the plain one, bit for bit in
// double (dropout on and off, both block styles, groups of 1 and 2 blocks),
// its dropout steps advance the same way, and its tape keeps fewer elements.

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/gpt.hpp>

#include "support/bit_equal.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using xtgrad::testing::bit_equal;
using xtgrad::testing::random_array;

namespace {

// Three blocks, so that groups of 2 leave a shorter last group.
GPTConfig small(GPTStyle style, double dropout) {
  GPTConfig c;
  c.vocab_size = 13;
  c.block_size = 8;
  c.n_layer = 3;
  c.n_head = 4;
  c.n_embd = 8;
  c.style = style;
  c.dropout = dropout;
  if (style == GPTStyle::llama) {
    c.n_kv_head = 2;
    c.ffn_hidden = 12;
  }
  return c;
}

// A model with its parameters spread out (the 0.02 initialization gives
// near-uniform logits), the same for the same config.
GPT<double> model_of(const GPTConfig& c) {
  Generator g(29);
  GPT<double> m(c, g);
  std::uint32_t seed = 40;
  for (Parameter<double>* p : m.parameters())
    p->value = random_array<double>(
        std::vector<std::size_t>(p->value.shape().begin(), p->value.shape().end()), seed++, -0.5,
        0.5);
  return m;
}

Indices ids(const Shape& shape, std::int64_t vocab, std::int64_t offset) {
  Indices t = Indices::from_shape(shape);
  for (std::size_t i = 0; i < t.size(); ++i)
    t.data()[i] = (static_cast<std::int64_t>(i * 7) + offset) % vocab;
  return t;
}

std::vector<std::uint64_t> dropout_steps(Module<double>& m) {
  std::vector<std::uint64_t> steps;
  for (const auto& entry : m.named_modules())
    if (const auto* d = dynamic_cast<const Dropout<double>*>(entry.second))
      steps.push_back(d->step());
  return steps;
}

struct StepResult {
  xt::xarray<double> loss;
  std::vector<xt::xarray<double>> grads;
};

// One training step of next-token cross-entropy over [2, 6] tokens.
StepResult train_step(GPT<double>& model) {
  const auto vocab = static_cast<std::int64_t>(model.gpt_config().vocab_size);
  model.zero_grad();
  Tape<double> tape;
  const Var<double> logits = model.forward(tape, ids({2, 6}, vocab, 1));  // [2, 6, V]
  const Var<double> loss = cross_entropy(reshape(logits, {-1, vocab}), ids({12}, vocab, 2));
  tape.backward(loss);
  StepResult r{loss.value(), {}};
  for (const Parameter<double>* p : model.parameters()) r.grads.push_back(p->grad);
  return r;
}

// The elements of the values a tape holds for backward (a Parameter's node
// holds the Parameter's own value, no copy: not counted), and those of the
// nodes of one op.
std::size_t kept_elements(const Tape<double>& tape, const std::string& op = "") {
  std::size_t n = 0;
  for (std::size_t i = 0; i < tape.size(); ++i)
    if (tape.node_param(i) == nullptr && (op.empty() || op == tape.node_op(i)))
      n += tape.value(i).size();
  return n;
}

std::size_t count_nodes(const Tape<double>& tape, const std::string& op) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < tape.size(); ++i) n += op == tape.node_op(i) ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("GPT recompute: the gradients of the plain model, bit for bit, both styles") {
  for (const GPTStyle style : {GPTStyle::gpt2, GPTStyle::llama})
    for (const double dropout : {0.0, 0.2})
      for (const std::size_t every : {1, 2}) {
        INFO("style " << style_name(style) << ", dropout " << dropout << ", every " << every);
        GPT<double> plain = model_of(small(style, dropout));
        GPT<double> net = model_of(small(style, dropout));
        net.set_recompute_every(every);
        CHECK(net.recompute_every() == every);
        CHECK(plain.recompute_every() == 0);
        for (int step = 0; step < 2; ++step) {  // new dropout masks every step
          INFO("step " << step);
          const StepResult a = train_step(net), b = train_step(plain);
          CHECK(bit_equal(a.loss, b.loss));
          REQUIRE(a.grads.size() == b.grads.size());
          for (std::size_t k = 0; k < a.grads.size(); ++k) {
            INFO("parameter " << k);
            CHECK(bit_equal(a.grads[k], b.grads[k]));
          }
          CHECK(dropout_steps(net) == dropout_steps(plain));
        }
        if (dropout > 0.0) {  // the masks did change between steps
          const std::vector<std::uint64_t> steps = dropout_steps(net);
          CHECK(steps.front() == 2);
        }
      }
}

TEST_CASE("GPT recompute: the tape keeps the groups' outputs instead of the blocks' values") {
  for (const GPTStyle style : {GPTStyle::gpt2, GPTStyle::llama}) {
    INFO("style " << style_name(style));
    const GPTConfig c = small(style, 0.1);
    const Indices tokens = ids({2, 6}, 13, 3);
    GPT<double> plain = model_of(c);
    Tape<double> plain_tape;
    plain.forward(plain_tape, tokens);
    CHECK(count_nodes(plain_tape, "recompute") == 0);
    for (const std::size_t every : {1, 2, 3}) {
      INFO("every " << every);
      GPT<double> net = model_of(c);
      net.set_recompute_every(every);
      Tape<double> tape;
      net.forward(tape, tokens);
      const std::size_t groups = (c.n_layer + every - 1) / every;
      CHECK(count_nodes(tape, "recompute") == groups);
      // Each group keeps its output [2, 6, C] and nothing of its inside.
      CHECK(kept_elements(tape, "recompute_output") == groups * 2 * 6 * c.n_embd);
      CHECK(kept_elements(tape, "recompute") == 0);
      CHECK(kept_elements(tape) * 2 < kept_elements(plain_tape));
    }
  }
}

TEST_CASE("GPT recompute: inference, generation and the config are untouched") {
  GPT<double> plain = model_of(small(GPTStyle::gpt2, 0.2));
  GPT<double> net = model_of(small(GPTStyle::gpt2, 0.2));
  net.set_recompute_every(1);
  const Indices tokens = ids({2, 5}, 13, 4);
  CHECK(bit_equal(net.infer(tokens), plain.infer(tokens)));
  CHECK(net.generate({1, 2}, 4, 0.8, std::nullopt, 7) ==
        plain.generate({1, 2}, 4, 0.8, std::nullopt, 7));
  // A tape that does not record runs the blocks plainly (no recompute node).
  Tape<double> tape;
  NoGradGuard<double> no_grad(tape);
  net.forward(tape, tokens);
  CHECK(count_nodes(tape, "recompute") == 0);
  CHECK(net.config() == plain.config());
  net.set_recompute_every(0);
  CHECK(net.recompute_every() == 0);
}

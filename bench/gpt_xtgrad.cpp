// The xtgrad side of bench_attention's GPT rows: modules/gpt.hpp's GPT<float>
// (GPT-2 style, no dropout), cross_entropy over the B * T logits, backward,
// optim::AdamW over every parameter, zero_grad; one tape reused. Also
// bench_checkpoint's xtgrad GPT, with GPT::set_recompute_every.
#include <algorithm>
#include <array>
#include <iomanip>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>

#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/gpt.hpp>
#include <xtgrad/optim/optim.hpp>

#include "attention_cases.hpp"

namespace xtgrad::bench {

namespace {

constexpr unsigned k_seed = 1024;

Indices random_tokens(const Shape& shape, std::size_t vocab, unsigned seed) {
  std::mt19937 engine(seed);
  std::uniform_int_distribution<std::int64_t> id(0, static_cast<std::int64_t>(vocab) - 1);
  Indices tokens = Indices::from_shape(shape);
  for (std::int64_t& t : tokens) t = id(engine);
  return tokens;
}

// Bytes of the values a tape holds (a Parameter's node holds none of its own).
double tape_bytes(const Tape<float>& tape) {
  double bytes = 0;
  for (std::size_t i = 0; i < tape.size(); ++i)
    if (tape.node_param(i) == nullptr)
      bytes += static_cast<double>(tape.value(i).size() * sizeof(float));
  return bytes;
}

struct GptState {
  std::unique_ptr<GPT<float>> model;
  std::optional<optim::AdamW<float>> optimizer;
  Indices tokens;   // [B, T]
  Indices targets;  // [B * T]
  std::int64_t vocab = 0;
  Tape<float> tape;
  double kept_bytes = 0;
  Profiler* profiler = nullptr;  // set: the optimizer's calls are timed regions too

  void forward_backward() {
    tape.clear();
    const Var<float> logits = model->forward(tape, tokens);  // [B, T, vocab]
    const Var<float> loss = cross_entropy(reshape(logits, {-1, vocab}), targets);
    kept_bytes = tape_bytes(tape);
    tape.backward(loss);
  }
  void optimizer_step() {
    {
      std::optional<ProfileRegion> region;
      if (profiler) region.emplace(*profiler, "optimizer.step");
      optimizer->step();
    }
    std::optional<ProfileRegion> region;
    if (profiler) region.emplace(*profiler, "optimizer.zero_grad");
    optimizer->zero_grad();
  }
};

std::shared_ptr<GptState> make_state(const GptShape& shape, std::size_t checkpoint_every) {
  GPTConfig config;
  config.vocab_size = shape.vocab_size;
  config.block_size = shape.block_size;
  config.n_layer = shape.n_layer;
  config.n_head = shape.n_head;
  config.n_embd = shape.n_embd;
  auto state = std::make_shared<GptState>();
  Generator generator(k_seed);
  state->model = std::make_unique<GPT<float>>(config, generator);
  state->model->train(true);
  state->model->set_recompute_every(checkpoint_every);
  state->optimizer.emplace(state->model->parameters(),
                           optim::AdamWOptions(k_gpt_lr).weight_decay(k_gpt_weight_decay));
  state->tokens = random_tokens({shape.batch, shape.tokens}, shape.vocab_size, k_seed + 1);
  state->targets = random_tokens({shape.batch * shape.tokens}, shape.vocab_size, k_seed + 2);
  state->vocab = static_cast<std::int64_t>(shape.vocab_size);
  return state;
}

// The share of the steps' wall time in the GEMM ops' rows, forward and
// backward, and the rest (attention, norms, the loss, the optimizer, ...).
std::string gemm_share_line(const Profiler& profiler) {
  const std::array<std::string, 4> gemm_ops{"linear", "matmul", "activation_linear",
                                            "gated_linear"};
  double gemm = 0;
  for (const ProfileRow& row : profiler.rows()) {
    const std::string op = row.kind == ProfileRow::Kind::backward
                               ? row.name.substr(0, row.name.rfind(".backward"))
                               : row.name;
    if (row.kind != ProfileRow::Kind::region && row.kind != ProfileRow::Kind::outside &&
        std::find(gemm_ops.begin(), gemm_ops.end(), op) != gemm_ops.end())
      gemm += row.share;
  }
  std::ostringstream line;
  line << std::fixed << std::setprecision(1) << "GEMM ops (" << gemm_ops[0] << ", " << gemm_ops[1]
       << ", " << gemm_ops[2] << ", " << gemm_ops[3] << ", forward and backward): " << 100 * gemm
       << "% of the step; outside them: " << 100 * (1 - gemm) << "%\n";
  return line.str();
}

}  // namespace

Runner xtgrad_gpt_step(const GptShape& shape) {
  const std::shared_ptr<GptState> state = make_state(shape, 0);
  return [state] {
    state->forward_backward();
    state->optimizer_step();
  };
}

std::string xtgrad_gpt_profile(const GptShape& shape, int warmup, int steps) {
  const std::shared_ptr<GptState> state = make_state(shape, 0);
  for (int s = 0; s < warmup; ++s) state->forward_backward(), state->optimizer_step();
  Profiler profiler;
  state->profiler = &profiler;
  {
    ProfilerGuard<float> guard(state->tape, profiler);
    for (int s = 0; s < steps; ++s) {
      ProfileStep step(profiler);
      state->forward_backward();
      state->optimizer_step();
    }
  }
  state->profiler = nullptr;
  return profiler.table() + gemm_share_line(profiler);
}

GptStepParts xtgrad_gpt_step_parts(const GptShape& shape, std::size_t checkpoint_every) {
  const std::shared_ptr<GptState> state = make_state(shape, checkpoint_every);
  return {[state] { state->forward_backward(); }, [state] { state->optimizer_step(); },
          [state] { return state->kept_bytes; }};
}

}  // namespace xtgrad::bench

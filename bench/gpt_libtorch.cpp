// The LibTorch side of bench_attention's GPT rows: nanoGPT's GPT-2 model
// (Karpathy, nanoGPT model.py) written with LibTorch's C++ API, without
// dropout: token and position Embedding, n_layer pre-norm blocks
//   x = x + c_proj(attention(c_attn(ln_1(x))))
//   x = x + mlp_proj(gelu_tanh(c_fc(ln_2(x))))
// ln_f and an lm_head tied to wte; the attention is composed_attention with
// the causal mask, as in the attention rows. A training step: cross_entropy
// over the B * T logits, backward, torch::optim::AdamW, gradients set to none.
// Also bench_checkpoint's LibTorch GPT.
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "attention_cases.hpp"
#include "attention_libtorch.hpp"

namespace xtgrad::bench {

namespace {

constexpr std::int64_t k_seed = 11;

struct BlockImpl : torch::nn::Module {
  std::int64_t n_head, n_embd;
  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  torch::nn::Linear c_attn{nullptr}, c_proj{nullptr}, c_fc{nullptr}, mlp_proj{nullptr};

  BlockImpl(std::int64_t n_embd_, std::int64_t n_head_) : n_head(n_head_), n_embd(n_embd_) {
    ln_1 = register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({n_embd})));
    c_attn = register_module("c_attn", torch::nn::Linear(n_embd, 3 * n_embd));
    c_proj = register_module("c_proj", torch::nn::Linear(n_embd, n_embd));
    ln_2 = register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({n_embd})));
    c_fc = register_module("c_fc", torch::nn::Linear(n_embd, 4 * n_embd));
    mlp_proj = register_module("mlp_proj", torch::nn::Linear(4 * n_embd, n_embd));
  }

  // x [B, T, C]; blocked [T, T] (true = may not attend)
  torch::Tensor forward(torch::Tensor x, const torch::Tensor& blocked) {
    const std::int64_t b = x.size(0), t = x.size(1), head_dim = n_embd / n_head;
    const std::vector<torch::Tensor> qkv = c_attn(ln_1(x)).split(n_embd, 2);  // 3 x [B, T, C]
    const auto heads = [&](const torch::Tensor& part) {  // [B, T, C] -> [B, H, T, Dh]
      return part.view({b, t, n_head, head_dim}).transpose(1, 2);
    };
    const torch::Tensor y = composed_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), blocked)
                                .transpose(1, 2)
                                .contiguous()
                                .view({b, t, n_embd});
    x = x + c_proj(y);
    return x + mlp_proj(torch::gelu(c_fc(ln_2(x)), "tanh"));
  }
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  std::vector<Block> blocks;
  torch::nn::LayerNorm ln_f{nullptr};

  explicit GptImpl(const GptShape& s) {
    const auto vocab = static_cast<std::int64_t>(s.vocab_size);
    const auto n_embd = static_cast<std::int64_t>(s.n_embd);
    wte = register_module("wte", torch::nn::Embedding(vocab, n_embd));
    wpe = register_module("wpe",
                          torch::nn::Embedding(static_cast<std::int64_t>(s.block_size), n_embd));
    for (std::size_t l = 0; l < s.n_layer; ++l)
      blocks.push_back(register_module("h_" + std::to_string(l),
                                       Block(n_embd, static_cast<std::int64_t>(s.n_head))));
    ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({n_embd})));
  }

  // tokens [B, T] (int64) -> logits [B, T, vocab]
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& positions,
                        const torch::Tensor& blocked) {
    torch::Tensor x = wte(tokens) + wpe(positions);
    for (Block& block : blocks) x = block->forward(x, blocked);
    return torch::nn::functional::linear(ln_f(x), wte->weight);  // tied lm_head
  }
};
TORCH_MODULE(Gpt);

struct GptState {
  Gpt model{nullptr};
  std::vector<torch::Tensor> parameters;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  torch::Tensor tokens, targets, positions, blocked;

  void forward_backward() {
    const torch::Tensor logits = model->forward(tokens, positions, blocked);
    const torch::Tensor loss = torch::nn::functional::cross_entropy(
        logits.view({-1, logits.size(-1)}), targets.view({-1}));
    // zero_grad(set_to_none=True), as nanoGPT (LibTorch 1.13's fills with zeros).
    for (torch::Tensor& p : parameters) p.mutable_grad() = torch::Tensor();
    loss.backward();
  }
  void optimizer_step() { optimizer->step(); }
};

std::shared_ptr<GptState> make_state(const GptShape& shape) {
  torch::manual_seed(k_seed);
  auto state = std::make_shared<GptState>();
  state->model = Gpt(shape);
  state->model->train(true);
  state->parameters = state->model->parameters();
  state->optimizer = std::make_unique<torch::optim::AdamW>(
      state->parameters, torch::optim::AdamWOptions(k_gpt_lr).weight_decay(k_gpt_weight_decay));
  const auto b = static_cast<std::int64_t>(shape.batch);
  const auto t = static_cast<std::int64_t>(shape.tokens);
  const auto vocab = static_cast<std::int64_t>(shape.vocab_size);
  state->tokens = torch::randint(vocab, {b, t}, torch::kLong);
  state->targets = torch::randint(vocab, {b, t}, torch::kLong);
  state->positions = torch::arange(t, torch::kLong);
  state->blocked = causal_blocked_mask(t);
  return state;
}

}  // namespace

Runner libtorch_gpt_step(const GptShape& shape) {
  const std::shared_ptr<GptState> state = make_state(shape);
  return [state] {
    state->forward_backward();
    state->optimizer_step();
  };
}

GptStepParts libtorch_gpt_step_parts(const GptShape& shape) {
  const std::shared_ptr<GptState> state = make_state(shape);
  return {[state] { state->forward_backward(); }, [state] { state->optimizer_step(); }, {}};
}

}  // namespace xtgrad::bench

#pragma once
// The model of train_gpt: xtgrad's GPT (modules/gpt.hpp) in the GPT-2 style
// (learned positions, pre-LayerNorm blocks, gelu_tanh FFN of 4 n_embd,
// lm_head tied to the token embedding) over the character vocabulary:
// tokens [B, T] -> logits [B, T, vocab], T <= block_size.
//
// With --experts E (> 0) every block's FFN is a sparse mixture of E experts
// (GPTConfig::num_experts, modules/gpt.hpp): each character goes to its
// --experts-per-token k experts, gelu_tanh-gated FFNs of --expert-hidden
// channels each (default 4 n_embd), the k weights renormalized; the training
// loss adds --aux-loss-coef times the layers' summed load-balancing loss
// (GPTConfig::router_aux_loss_coef; no z-loss). A dense FFN of width F and k
// experts of width 2F / 3k have the same active parameters per character
// (2 C F = 3 C H k, biases and the router aside).

#include <cstddef>
#include <vector>

#include <nlohmann/json.hpp>
#include <xtgrad/modules/gpt.hpp>
#include <xtgrad/optim/optim.hpp>

namespace gpt_demo {

struct ModelOptions {
  std::size_t n_layer = 4;
  std::size_t n_head = 4;
  std::size_t n_embd = 96;
  std::size_t block_size = 64;
  double dropout = 0.0;
  std::size_t experts = 0;            // E; 0: dense FFNs
  std::size_t experts_per_token = 2;  // k
  std::size_t expert_hidden = 0;      // each expert's width; 0: 4 n_embd
  double aux_loss_coef = 0.01;        // of the load-balancing loss
};
// A dense model's sizes (summary.json, the saved identity; run_state.cpp adds the experts').
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ModelOptions, n_layer, n_head, n_embd, block_size, dropout)

// The GPTConfig of `options` over a vocabulary of `vocab_size`;
// std::invalid_argument when n_head does not divide n_embd, --experts is 1
// or --experts-per-token is not in 1 .. --experts.
xtgrad::GPTConfig gpt_config(const ModelOptions& options, std::size_t vocab_size);

// Of the model's values (xtgrad::parameter_count: a tied lm_head counted
// once), the ones a token reads: without the experts it is not routed to.
std::size_t active_parameter_count(xtgrad::GPT<float>& model);

}  // namespace gpt_demo

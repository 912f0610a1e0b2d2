#pragma once
// The model of train_gpt: xtgrad's GPT (modules/gpt.hpp) in the GPT-2 style
// (learned positions, pre-LayerNorm blocks, gelu_tanh FFN of 4 n_embd,
// lm_head tied to the token embedding) over the character vocabulary:
// tokens [B, T] -> logits [B, T, vocab], T <= block_size.
//
// AdamW's two parameter groups, as nanoGPT makes them: weight decay on the
// parameters of rank >= 2 (the embeddings and the weight matrices), none on
// the biases and the LayerNorm weights.

#include <cstddef>
#include <vector>

#include <xtgrad/modules/gpt.hpp>
#include <xtgrad/optim/optim.hpp>

namespace gpt_demo {

struct ModelOptions {
  std::size_t n_layer = 4;
  std::size_t n_head = 4;
  std::size_t n_embd = 96;
  std::size_t block_size = 64;
  double dropout = 0.0;
};

// The GPTConfig of `options` over a vocabulary of `vocab_size`;
// std::invalid_argument when n_head does not divide n_embd.
xtgrad::GPTConfig gpt_config(const ModelOptions& options, std::size_t vocab_size);

// Number of trainable values (a tied lm_head counted once).
std::size_t parameter_count(xtgrad::Module<float>& model);

std::vector<xtgrad::optim::AdamWParamGroup<float>> decay_groups(xtgrad::Module<float>& model,
                                                                double lr, double weight_decay,
                                                                double beta2);

}  // namespace gpt_demo

#pragma once
// A Hugging Face GPT-2 config.json as a GPTConfig (hf_gpt2.hpp loads the
// weights).
//
// gpt2_config_from_json reads a GPT2Config config.json: vocab_size (or
// n_vocab), n_positions (or n_ctx), n_embd, n_layer, n_head (required,
// positive integers), layer_norm_epsilon (default 1e-5), n_inner (null: 4
// n_embd), tie_word_embeddings (default true), resid_pdrop (default 0.1; GPT
// has one dropout p for embeddings, attention and residuals: call eval() for
// inference), activation_function (default "gelu_new"; "gelu_new" and
// "gelu_pytorch_tanh" are the tanh GELU GPT uses, anything else is refused),
// scale_attn_weights (must be true when present), scale_attn_by_inverse_layer_idx
// (must be false when present), model_type (must be "gpt2" when present).
// Other keys are ignored. Errors: std::invalid_argument naming the file and
// the key; std::runtime_error when the file cannot be read.

#include <filesystem>

#include "../gpt.hpp"

namespace xtgrad {

GPTConfig gpt2_config_from_json(const std::filesystem::path& path);

}  // namespace xtgrad

#pragma once
// The config.json of a Hugging Face LLaMA-family checkpoint (LlamaConfig,
// MistralConfig, Qwen2Config) as LlamaConfig, and back; hf_llama.hpp loads
// the weights into GPT's llama style.
//
// llama_config_from_json reads:
//   model_type               "llama" (default), "mistral" or "qwen2"
//   vocab_size, hidden_size, intermediate_size, num_hidden_layers,
//   num_attention_heads, max_position_embeddings      required, positive integers
//   num_key_value_heads      default (or null) num_attention_heads; divides it
//   head_dim                 when present and not null, must be
//                            hidden_size / num_attention_heads (GPT's head size)
//   rms_norm_eps             default 1e-6
//   rope_theta               default 10000
//   rope_scaling             null, or an object whose "rope_type" (or older "type") is
//                            "default" (no scaling), "linear" (factor) or "llama3"
//                            (factor, low_freq_factor, high_freq_factor,
//                            original_max_position_embeddings, all required); any other type
//                            ("dynamic", "yarn", "longrope", ...) is refused naming it
//   tie_word_embeddings      default false
//   attention_bias           default false: biases on q/k/v_proj and o_proj (llama,
//                            mistral); Qwen2 always has q/k/v biases and no o_proj bias
//   mlp_bias                 must be false when present
//   hidden_act               default "silu"; "silu" or "swish" only
//   attention_dropout        must be 0 when present (GPT applies one dropout to
//                            embeddings, attention and residuals; HF has none but this)
//   sliding_window           mistral, and qwen2 when use_sliding_window is true: kept
//                            (null: none); load_llama refuses a window smaller than the
//                            context it builds
//   torch_dtype              default "float32"; "float32", "float16", "bfloat16" or
//                            "float64" (recorded only: tensors convert by their own dtype)
// Other keys (architectures, bos/eos ids, initializer_range, pretraining_tp, which
// splits the same products, ...) are ignored. Errors: std::invalid_argument
// "xtgrad::llama_config_from_json: config '<path>': \"<key>\" ..." naming the key;
// std::runtime_error when the file cannot be read.
//
// llama_config_json writes the keys above (the architecture of model_type,
// rope_scaling as read, null sliding_window when there is none) as
// save_pretrained would, so that transformers' AutoConfig reads it.

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>

#include "../gpt.hpp"

namespace xtgrad {

struct LlamaConfig {
  std::string model_type = "llama";
  std::size_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0,
              num_attention_heads = 0, num_key_value_heads = 0, max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false, o_bias = false;      // attention_bias, or Qwen2's q/k/v biases
  std::optional<std::size_t> sliding_window;  // when it applies (see above)
  std::string torch_dtype = "float32";
};

// `function` names the caller in messages (load_llama passes its own name).
LlamaConfig llama_config_from_json(const std::filesystem::path& path,
                                   const std::string& function = "llama_config_from_json");

// The config.json text of `config` (see above).
std::string llama_config_json(const LlamaConfig& config);

// GPT's llama style for `config`, with block_size positions (dropout 0).
GPTConfig llama_gpt_config(const LlamaConfig& config, std::size_t block_size);

}  // namespace xtgrad

#pragma once
// The activation of a Hugging Face checkpoint, from its config.json: the
// name transformers/activations.py (ACT2FN) gives it, as xtgrad's Activation.
//
//   "gelu_new", "gelu_pytorch_tanh"  gelu_tanh     0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//   "gelu"                           gelu          x Phi(x), exact
//   "quick_gelu"                     gelu_sigmoid  x sigmoid(1.702 x)
//   "relu"                           relu
//   "silu", "swish"                  silu          x sigmoid(x)
//
// Other names ("gelu_fast", "gelu_10", "mish", ...) are refused: xtgrad has
// no activation that computes exactly what they compute.

#include <filesystem>
#include <string>

#include "../../engine/activation.hpp"

namespace xtgrad {

// The Activation of a Hugging Face activation name (above); std::invalid_argument
// naming `function` and listing the names it knows for any other.
Activation hf_activation(const std::string& name, const std::string& function = "hf_activation");

// The activation that the config.json at `config_json` sets under `key`
// ("activation_function" for GPT-2, "hidden_act" for LLaMA). When the key is
// absent (save_pretrained leaves out values equal to the model's defaults),
// `fallback` is taken, provided the config's "model_type", if it has one,
// is `model_type`: the default belongs to that model. Errors
// (std::invalid_argument naming `function` and the file): not a JSON object,
// the value not a string or not a known name, the key absent from another
// model's config. std::runtime_error when the file cannot be read.
Activation hf_config_activation(const std::filesystem::path& config_json, const std::string& key,
                                const std::string& model_type, const std::string& fallback,
                                const std::string& function = "hf_config_activation");

}  // namespace xtgrad

#pragma once
// The MLP of a Hugging Face LLaMA or GPT-2 layer, loaded into GatedFFN or
// FeedForward from a safetensors file or a TensorMap (a state dict), with
// the layouts converted. Names are `prefix` + "." + the Hugging Face name;
// `prefix` is the MLP's path in the checkpoint, such as "model.layers.0.mlp"
// (llama_mlp_prefix(0)) or "h.0.mlp" (gpt2_mlp_prefix(0); "transformer.h.0.mlp"
// in a GPT2LMHeadModel checkpoint); a trailing '.' is allowed, "" means none.
//
// LLaMA (transformers/models/llama/modeling_llama.py, LlamaMLP):
//   y = down_proj(act(gate_proj(x)) * up_proj(x)),  act = SiLU ("silu"),
//   nn.Linear weights [out, in], no biases (unless the config sets mlp_bias).
//   GatedFFN(hidden_size, intermediate_size, hidden_size, Activation::silu):
//     w_up   = up_proj.weight^T    [d_in, d_hidden]    (file: [d_hidden, d_in])
//     w_gate = gate_proj.weight^T  [d_in, d_hidden]    (file: [d_hidden, d_in])
//     w_down = down_proj.weight^T  [d_hidden, d_out]   (file: [d_out, d_hidden])
//   and b_up / b_gate / b_down = up_proj.bias / gate_proj.bias / down_proj.bias
//   for the biases the module has. A bias in the file that the module lacks,
//   or the reverse, is refused.
//
// GPT-2 (transformers/models/gpt2/modeling_gpt2.py, GPT2MLP, and
// pytorch_utils.Conv1D, which computes x W + b with W stored [in, out]):
//   y = c_proj(act(c_fc(x))),  act = "gelu_new", the tanh approximation
//   (Activation::gelu_tanh; FeedForward's default is the exact GELU).
//   FeedForward(n_embd, 4 * n_embd, Activation::gelu_tanh):
//     w1.weight = c_fc.weight^T    [d_ff, d_model]   (file: [d_model, d_ff])
//     w1.bias   = c_fc.bias        [d_ff]
//     w2.weight = c_proj.weight^T  [d_model, d_ff]   (file: [d_ff, d_model])
//     w2.bias   = c_proj.bias      [d_model]
//
// The activation is the module's own: construct it as above. The overloads
// taking the checkpoint's config.json check it against the config before
// anything is read (hf_config.hpp): GPT-2's "activation_function" (absent:
// GPT2Config's default "gelu_new") and LLaMA's "hidden_act" (absent:
// "silu"), where "gelu_new" and "gelu_pytorch_tanh" are gelu_tanh, "gelu"
// the exact gelu, "relu" relu, "silu" and "swish" silu. A module built with
// another activation is refused (a FeedForward with its default exact GELU
// would give slightly wrong outputs for GPT-2, silently).
//
// All or nothing: every name and shape is checked (std::invalid_argument
// naming the tensor and both shapes) before any parameter changes. A layer
// that is not there is refused naming the MLP layers the file or state dict
// has ("no tensor under 'model.layers.7.mlp.' ...; the LLaMA MLP layers it
// has are 'model.layers.0.mlp', ..., 'model.layers.3.mlp' (4 in all)").
// dtypes are converted as Module::load_state_dict converts them (torch's
// copy_): F32, F16 and BF16 into double exactly, F64 into float rounded to
// nearest. Gradients are left as they are. The path overloads read only the
// MLP's tensors.

#include <cstddef>
#include <filesystem>
#include <string>

#include "../../io/safetensors.hpp"
#include "../feed_forward.hpp"
#include "../gated_ffn.hpp"
#include "hf_config.hpp"

namespace xtgrad {

// "model.layers.<layer>.mlp" and "h.<layer>.mlp".
std::string llama_mlp_prefix(std::size_t layer);
std::string gpt2_mlp_prefix(std::size_t layer);

template <class T>
void load_llama_mlp(GatedFFN<T>& ffn, const TensorMap& tensors, const std::string& prefix);
template <class T>
void load_llama_mlp(GatedFFN<T>& ffn, const std::filesystem::path& file, const std::string& prefix);
// As above, after checking ffn.activation() against config_json's "hidden_act".
template <class T>
void load_llama_mlp(GatedFFN<T>& ffn, const TensorMap& tensors, const std::string& prefix,
                    const std::filesystem::path& config_json);
template <class T>
void load_llama_mlp(GatedFFN<T>& ffn, const std::filesystem::path& file, const std::string& prefix,
                    const std::filesystem::path& config_json);

template <class T>
void load_gpt2_mlp(FeedForward<T>& ffn, const TensorMap& tensors, const std::string& prefix);
template <class T>
void load_gpt2_mlp(FeedForward<T>& ffn, const std::filesystem::path& file,
                   const std::string& prefix);
// As above, after checking ffn.activation() against config_json's "activation_function".
template <class T>
void load_gpt2_mlp(FeedForward<T>& ffn, const TensorMap& tensors, const std::string& prefix,
                   const std::filesystem::path& config_json);
template <class T>
void load_gpt2_mlp(FeedForward<T>& ffn, const std::filesystem::path& file,
                   const std::string& prefix, const std::filesystem::path& config_json);

#define XTGRAD_HF_MLP_EXTERN(T)                                                              \
  extern template void load_llama_mlp(GatedFFN<T>&, const TensorMap&, const std::string&);   \
  extern template void load_llama_mlp(GatedFFN<T>&, const std::filesystem::path&,            \
                                      const std::string&);                                   \
  extern template void load_llama_mlp(GatedFFN<T>&, const TensorMap&, const std::string&,    \
                                      const std::filesystem::path&);                         \
  extern template void load_llama_mlp(GatedFFN<T>&, const std::filesystem::path&,            \
                                      const std::string&, const std::filesystem::path&);     \
  extern template void load_gpt2_mlp(FeedForward<T>&, const TensorMap&, const std::string&); \
  extern template void load_gpt2_mlp(FeedForward<T>&, const std::filesystem::path&,          \
                                     const std::string&);                                    \
  extern template void load_gpt2_mlp(FeedForward<T>&, const TensorMap&, const std::string&,  \
                                     const std::filesystem::path&);                          \
  extern template void load_gpt2_mlp(FeedForward<T>&, const std::filesystem::path&,          \
                                     const std::string&, const std::filesystem::path&);
XTGRAD_HF_MLP_EXTERN(float)
XTGRAD_HF_MLP_EXTERN(double)
#undef XTGRAD_HF_MLP_EXTERN

}  // namespace xtgrad

#pragma once
// Hugging Face GPT-2 checkpoints (transformers/models/gpt2/modeling_gpt2.py)
// into and out of GPT (gpt2 style), and LLaMA attention weights
// (modeling_llama.py LlamaAttention) into CausalSelfAttention (llama layout).
//
// Names. HF GPT2Model's state dict, optionally under "transformer." (as
// GPT2LMHeadModel saves it; chosen by whether "transformer.wte.weight" is
// present), against GPT's: the same names and layouts (Conv1D [in, out]),
// docs/modules.md lists them:
//   wte.weight, wpe.weight, h.<l>.ln_1.*, h.<l>.attn.c_attn.*, h.<l>.attn.c_proj.*,
//   h.<l>.ln_2.*, h.<l>.mlp.c_fc.*, h.<l>.mlp.c_proj.*, ln_f.weight, ln_f.bias
// (so that, after stripping "transformer.", GPT's load_state_dict takes the
// parameters of such a file too; load_gpt2 also handles the buffers and the
// tied head below, and reads only what it needs from a file), and
//   lm_head.weight (never prefixed) = lm_head.weight when the model is not tied;
//     for a tied model it may be present (GPT2LMHeadModel.state_dict() has it)
//     and must then equal wte.weight.
// HF's non-parameter buffers h.<l>.attn.bias (the causal triangle) and
// h.<l>.attn.masked_bias are skipped. Any other name is refused, as is a
// missing one, a shape that differs (the message names the tensor, both
// shapes and the layout) or a dtype that is not T (F32 / F16 / BF16 for
// float, F64 for double). All or nothing: everything is checked before any
// parameter changes; gradients are left as they are.
//
// gpt2_config_from_json (hf_gpt2_config.hpp) reads its config.json.
//
// LLaMA attention: under `prefix` (llama_attention_prefix(l) =
// "model.layers.<l>.self_attn"), q_proj.weight [H Dh, C], k_proj.weight and
// v_proj.weight [Hkv Dh, C], o_proj.weight [C, H Dh], nn.Linear's [out, in]
// as CausalSelfAttention's llama layout stores them; biases (attention_bias)
// are refused. The path overloads read only the tensors they need, after
// checking every name, dtype and shape the file's header declares against
// the model (a file declaring tensors of another size costs its header, not
// their size); their messages name load_gpt2 or load_llama_attention.

#include <cstddef>
#include <filesystem>
#include <string>

#include "../../io/safetensors.hpp"
#include "../attention.hpp"
#include "../gpt.hpp"
#include "../tensor_dict.hpp"
#include "../transformer_block.hpp"
#include "hf_gpt2_config.hpp"

namespace xtgrad {

template <class T>
void load_gpt2(GPT<T>& model, const TensorMap& tensors);
template <class T>
void load_gpt2(GPT<T>& model, const std::filesystem::path& file);

// One block (gpt2 style) from the tensors under `prefix` ("h.0", or
// "transformer.h.0"); names outside the prefix are ignored.
template <class T>
void load_gpt2_block(TransformerBlock<T>& block, const TensorMap& tensors,
                     const std::string& prefix);

// The model's parameters in HF GPT2Model names (no "transformer." prefix, no
// buffers; lm_head.weight only when not tied), HF layouts.
template <class T>
TensorDict<T> export_gpt2(const GPT<T>& model);
// export_gpt2 written as a safetensors file with metadata {"format": "pt"}.
template <class T>
void save_gpt2(const GPT<T>& model, const std::filesystem::path& file);

std::string llama_attention_prefix(std::size_t layer);
template <class T>
void load_llama_attention(CausalSelfAttention<T>& attention, const TensorMap& tensors,
                          const std::string& prefix);
template <class T>
void load_llama_attention(CausalSelfAttention<T>& attention, const std::filesystem::path& file,
                          const std::string& prefix);

#define XTGRAD_HF_GPT2_EXTERN(T)                                                                   \
  extern template void load_gpt2(GPT<T>&, const TensorMap&);                                       \
  extern template void load_gpt2(GPT<T>&, const std::filesystem::path&);                           \
  extern template void load_gpt2_block(TransformerBlock<T>&, const TensorMap&,                     \
                                       const std::string&);                                        \
  extern template TensorDict<T> export_gpt2(const GPT<T>&);                                        \
  extern template void save_gpt2(const GPT<T>&, const std::filesystem::path&);                     \
  extern template void load_llama_attention(CausalSelfAttention<T>&, const TensorMap&,             \
                                            const std::string&);                                   \
  extern template void load_llama_attention(CausalSelfAttention<T>&, const std::filesystem::path&, \
                                            const std::string&);
XTGRAD_HF_GPT2_EXTERN(float)
XTGRAD_HF_GPT2_EXTERN(double)
#undef XTGRAD_HF_GPT2_EXTERN

}  // namespace xtgrad

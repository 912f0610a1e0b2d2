#pragma once
// Whole Hugging Face LLaMA-family checkpoints (LlamaForCausalLM,
// MistralForCausalLM, Qwen2ForCausalLM: transformers/models/llama/modeling_llama.py
// and its copies) into and out of GPT's llama style.
//
// LlamaForCausalLM<T>(LlamaConfig, [block_size]) is a thin module around a
// GPT<T> (member `gpt`, llama style, built by llama_gpt_config with hf_mlp):
// forward, infer, make_cache and generate are GPT's. It lists GPT's
// parameters under Hugging Face's names, in its order, with its layouts, so
// that its state_dict() is LlamaForCausalLM.state_dict() and loads one:
//   model.embed_tokens.weight                      gpt.wte              [V, C]
//   model.layers.<l>.self_attn.{q,k,v,o}_proj.weight (.bias with the biases)
//                                                  gpt.h[l].attn        [out, in]
//   model.layers.<l>.mlp.{gate,up,down}_proj.weight gpt.h[l].mlp (GatedExpert) [out, in]
//   model.layers.<l>.input_layernorm.weight        gpt.h[l].ln_1        [C]
//   model.layers.<l>.post_attention_layernorm.weight gpt.h[l].ln_2      [C]
//   model.norm.weight                              gpt.ln_f             [C]
//   lm_head.weight                                 gpt.lm_head (untied) [V, C]
// (and the dropouts, p = 0, as children, so that train() / eval() reach them).
// llama_state_dict(model) is that dict, built from load_llama's own list of
// the checkpoint's tensors (export_llama writes it).
//
// load_llama<T>(dir, options) reads dir/config.json (llama_config_from_json,
// hf_llama_config.hpp) and the weights from dir/model.safetensors, or from the
// shards dir/model.safetensors.index.json maps them to ("weight_map": name ->
// file in dir). First the header of every file is checked against the config:
// every name known (the buffers model.layers.<l>.self_attn.rotary_emb.inv_freq
// of older checkpoints skipped), in the file the index names, declared once,
// of the expected shape, and every parameter present; then the model is built
// and the tensors are read one at a time (memory: the model plus one tensor),
// F32, F16, BF16 and F64 converted to T (F64 into float rounded to nearest).
// With tie_word_embeddings the head is the embedding; an lm_head.weight in
// the files is then read and must equal it. The model is returned only
// whole: on any error nothing is returned.
//
// options.block_size: the context GPT is built for (its positions, and the
// capacity of make_cache), default max_position_embeddings, at most that.
// A sliding window (Mistral; Qwen2 with use_sliding_window) smaller than it
// is refused: GPT attends to every earlier position.
//
// export_llama(model, dir) writes dir/config.json (llama_config_json, its
// torch_dtype "float32" for float, "float64" for double) and
// dir/model.safetensors with llama_state_dict in the model's own dtype (F32
// or F64: exact, so that load_llama reads back the same bits) and metadata
// {"format": "pt"}, as save_pretrained lays them out; transformers'
// from_pretrained reads the directory. dir is created if missing; a directory
// holding model.safetensors.index.json is refused (the index would win over
// the new file). Each file is written atomically.
//
// Errors: std::invalid_argument "xtgrad::load_llama: ..." naming the file and
// the tensor: a missing config.json or weights file, a shard the index names
// that is missing, a tensor missing, unexpected, declared twice or in another
// file than the index says, a shape that differs (both shapes and the
// layout), a dtype xtgrad does not read, a truncated file (its header
// declares data past its end); and the config's refusals. std::runtime_error
// for I/O failures.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "../gpt.hpp"
#include "../tensor_dict.hpp"
#include "hf_llama_config.hpp"

namespace xtgrad {

struct LlamaLoadOptions {
  std::optional<std::size_t> block_size;  // default max_position_embeddings
};

template <class T>
class LlamaForCausalLM : public Module<T> {
  LlamaConfig config_;  // first: gpt is built from it

 public:
  explicit LlamaForCausalLM(const LlamaConfig& config,
                            std::optional<std::size_t> block_size = std::nullopt);

  Var<T> forward(Tape<T>& tape, const Indices& tokens) { return gpt.forward(tape, tokens); }
  Var<T> forward(Tape<T>& tape, const Indices& tokens, KvCache<T>& cache) {
    return gpt.forward(tape, tokens, cache);
  }
  using Module<T>::forward;
  xt::xarray<T> infer(const Indices& tokens) const { return gpt.infer(tokens); }
  KvCache<T> make_cache(std::size_t batch = 1) const { return gpt.make_cache(batch); }
  std::vector<std::int64_t> generate(const std::vector<std::int64_t>& prompt,
                                     std::size_t max_new_tokens, double temperature = 1.0,
                                     std::optional<std::size_t> top_k = std::nullopt,
                                     std::uint64_t seed = 0) const {
    return gpt.generate(prompt, max_new_tokens, temperature, top_k, seed);
  }
  std::vector<std::vector<std::int64_t>> generate(
      const std::vector<std::vector<std::int64_t>>& prompts,
      const GenerationOptions& options) const {
    return gpt.generate(prompts, options);
  }

  const LlamaConfig& llama_config() const { return config_; }
  ModuleConfig config() const override;

  GPT<T> gpt;

 protected:
  void collect_parameters(const std::string& prefix,
                          typename Module<T>::NamedParameters& out) override;
};

template <class T>
LlamaForCausalLM<T> load_llama(const std::filesystem::path& dir,
                               const LlamaLoadOptions& options = {});

// The parameters in Hugging Face's names and layouts, in its order.
template <class T>
TensorDict<T> llama_state_dict(const LlamaForCausalLM<T>& model);

template <class T>
void export_llama(const LlamaForCausalLM<T>& model, const std::filesystem::path& dir);

extern template class LlamaForCausalLM<float>;
extern template class LlamaForCausalLM<double>;
extern template LlamaForCausalLM<float> load_llama(const std::filesystem::path&,
                                                   const LlamaLoadOptions&);
extern template LlamaForCausalLM<double> load_llama(const std::filesystem::path&,
                                                    const LlamaLoadOptions&);
extern template TensorDict<float> llama_state_dict(const LlamaForCausalLM<float>&);
extern template TensorDict<double> llama_state_dict(const LlamaForCausalLM<double>&);
extern template void export_llama(const LlamaForCausalLM<float>&, const std::filesystem::path&);
extern template void export_llama(const LlamaForCausalLM<double>&, const std::filesystem::path&);

}  // namespace xtgrad

#pragma once
// CausalSelfAttention, built on the engine's attention ops (attention.hpp
// describes the head layout both attention modules share).
//
// ---- CausalSelfAttention<T>(n_embd C, {n_heads H, n_kv_heads Hkv, layout,
//      rotary, rope_theta, attn_dropout, resid_dropout}, [generator])
// Decoder self-attention with the causal mask, Dh = C / H, Hkv dividing H
// (grouped-query attention, Ainslie et al. 2023: query head h reads key/value
// head h / (H / Hkv); Hkv = H by default). Layouts, with Hugging Face's names:
//   gpt2  (modeling_gpt2.py GPT2Attention): c_attn = Conv1D [C, (H + 2 Hkv) Dh]
//         + bias, whose output is [q | k | v]; c_proj = Conv1D [C, C] + bias.
//         Without rotary and with Hkv = H the fused output goes to
//         packed_qkv_attention directly.
//   llama (modeling_llama.py LlamaAttention): q_proj [H Dh, C], k_proj and
//         v_proj [Hkv Dh, C], o_proj [C, H Dh], nn.Linear layout, no bias.
//         qkv_bias: q_proj, k_proj and v_proj with biases (Qwen2; LLaMA's
//         attention_bias); o_bias: o_proj with a bias (LLaMA's attention_bias).
// rotary: apply_rotary (rotate_half convention, theta = rope_theta, the
// frequencies scaled by rope_scaling) on q and k with the position of each row. attn_dropout is on the probabilities and
// resid_dropout on the output (children "attn_dropout", "resid_dropout").
// Initialization: every weight normal(0, 0.02), biases 0, as HF's
// _init_weights for GPT-2 and LLaMA (initializer_range 0.02); GPT rescales
// the output projections (see gpt.hpp).
//
// forward(x [B, T, C]) -> [B, T, C].
// forward(x, cache, layer): incremental decoding on a tape that does not
// record (std::logic_error otherwise): the rows of x are positions
// cache.length(layer) .. + T - 1 (their rotary angles too); their keys and
// values are appended to the cache and each row attends to every cached
// position up to its own (from its batch row's start in a padded cache,
// kv_cache.hpp). Inference only: no dropout.
//
// Errors (std::invalid_argument, before anything is recorded or cached): zero
// sizes, heads not dividing the width, n_kv_heads not dividing n_heads, a
// probability outside [0, 1], rope_theta <= 0, an odd head size with rotary,
// rope_scaling as apply_rotary refuses it, qkv_bias or o_bias in the gpt2 layout;
// an input that is not [B, T, width], a cache of the wrong batch, heads or
// head size, or one that is full.

#include <cstddef>
#include <optional>
#include <string>

#include "../engine/ops/rotary.hpp"
#include "conv1d.hpp"
#include "dropout.hpp"
#include "kv_cache.hpp"
#include "linear.hpp"

namespace xtgrad {

enum class AttentionLayout { gpt2, llama };

struct CausalSelfAttentionOptions {
  std::size_t n_heads = 1;
  std::optional<std::size_t> n_kv_heads;  // default n_heads
  AttentionLayout layout = AttentionLayout::gpt2;
  bool rotary = false;
  double rope_theta = 10000.0;
  double attn_dropout = 0.0;
  double resid_dropout = 0.0;
  bool qkv_bias = false;     // llama layout
  bool o_bias = false;       // llama layout
  RopeScaling rope_scaling;  // with rotary
};

namespace detail {
class WideCount;
// The parameter elements of CausalSelfAttention(n_embd, options), counted
// without wrapping (checked_size.hpp); n_heads > 0, n_kv_heads defaults to it.
WideCount causal_self_attention_parameters(std::size_t n_embd,
                                           const CausalSelfAttentionOptions& options);
// Adds a rope scaling other than none to a module's config, as "rope_scaling"
// (its type: "linear", "llama3") and its factors; none adds nothing, so that
// the configs of modules without scaling stay as they were.
void add_rope_scaling(ModuleConfig& config, const RopeScaling& scaling);
}  // namespace detail

template <class T>
class CausalSelfAttention : public Module<T> {
 public:
  CausalSelfAttention(std::size_t n_embd, CausalSelfAttentionOptions options);
  CausalSelfAttention(std::size_t n_embd, CausalSelfAttentionOptions options, Generator& generator);

  Var<T> forward(const Var<T>& x) override;
  Var<T> forward(const Var<T>& x, KvCache<T>& cache, std::size_t layer = 0);
  ModuleConfig config() const override;

  std::size_t n_embd() const { return n_embd_; }
  std::size_t n_heads() const { return options_.n_heads; }
  std::size_t n_kv_heads() const { return *options_.n_kv_heads; }
  std::size_t head_dim() const { return n_embd_ / options_.n_heads; }
  // The options, n_kv_heads filled in.
  const CausalSelfAttentionOptions& options() const { return options_; }

  std::optional<Conv1D<T>> c_attn, c_proj;                  // gpt2 layout
  std::optional<Linear<T>> q_proj, k_proj, v_proj, o_proj;  // llama layout
  Dropout<T> attn_dropout, resid_dropout;

 protected:
  void collect_parameters(const std::string& prefix,
                          typename Module<T>::NamedParameters& out) override;

 private:
  struct Heads;
  void check_input(const char* owner, const Var<T>& x) const;
  Heads project(const Var<T>& x);
  Var<T> output(const Var<T>& y, std::size_t batch, std::size_t t);

  std::size_t n_embd_;
  CausalSelfAttentionOptions options_;
};

extern template class CausalSelfAttention<float>;
extern template class CausalSelfAttention<double>;

}  // namespace xtgrad

#pragma once
// The attention modules: MultiheadAttention (torch.nn.MultiheadAttention)
// and CausalSelfAttention (the attention of GPT-2 and LLaMA decoders). Both
// compose engine ops (ops/attention.hpp: scaled_dot_product_attention,
// packed_qkv_attention; ops/rotary.hpp; ops/linear.hpp, shape, slice); the
// derivatives are those ops'. Head h of a projection of width H * Dh is
// columns h*Dh .. (h+1)*Dh - 1; heads are laid out [B, H, T, Dh] between the
// projections, and the attention is softmax(q k^T / sqrt(Dh) + mask) v.
//
// ---- MultiheadAttention<T>(embed_dim E, num_heads H, {bias, dropout}, [generator])
// torch.nn.MultiheadAttention(E, H, dropout, bias, batch_first=True) (torch
// 1.13, torch/nn/modules/activation.py; kdim = vdim = E, no bias_kv, no
// zero_attn), with its parameter names and initialization:
//   in_proj_weight [3E, E]  xavier_uniform_ (bound sqrt(6 / (E + 3E)))
//   in_proj_bias   [3E]     0               (when bias)
//   out_proj.weight [E, E]  nn.Linear's uniform(+-1/sqrt(E))
//   out_proj.bias   [E]     0               (when bias)
//   q = query Wq^T + bq, k = key Wk^T + bk, v = value Wv^T + bv with
//   Wq, Wk, Wv = rows [0, E), [E, 2E), [2E, 3E) of in_proj_weight;
//   y = merge_heads(attention(q, k, v)) out_proj.weight^T + out_proj.bias.
// forward(query [B, Tq, E], key [B, Tk, E], value [B, Tk, E], masks) -> [B, Tq, E];
// forward(x) is self-attention (query = key = value = x, one fused projection).
// Masks (MhaMasks), torch's conventions, which are the reverse of
// scaled_dot_product_attention's for booleans:
//   key_padding_mask [B, Tk] bool: true = this key is padding, ignore it;
//   attn_mask [Tq, Tk] or [B * H, Tq, Tk]: bool, true = not allowed; or float,
//   added to the scaled scores (-inf blocks);
//   is_causal: key j is visible to query i only when j <= i (on top of the others).
// A query whose keys are all masked gives 0 (torch 1.13 gives NaN there).
// `dropout` is on the attention probabilities, in training only (torch's
// functional dropout; the mask is the counter-based one of the "dropout" child).
// The attention weights (torch's need_weights) are not returned.
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
// rotary: apply_rotary (rotate_half convention, theta = rope_theta) on q and k
// with the position of each row. attn_dropout is on the probabilities and
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
// position up to its own. Inference only: no dropout.
//
// Errors (std::invalid_argument, before anything is recorded or cached): zero
// sizes, heads not dividing the width, n_kv_heads not dividing n_heads, a
// probability outside [0, 1], rope_theta <= 0, an odd head size with rotary;
// an input that is not [B, T, width], masks of the wrong shape, a cache of the
// wrong batch, heads or head size, or one that is full.

#include <cstddef>
#include <optional>
#include <variant>

#include <xtensor/xarray.hpp>

#include "conv1d.hpp"
#include "dropout.hpp"
#include "kv_cache.hpp"
#include "linear.hpp"

namespace xtgrad {

struct MultiheadAttentionOptions {
  bool bias = true;
  double dropout = 0.0;
};

template <class T>
struct MhaMasks {
  std::optional<xt::xarray<bool>> key_padding_mask;  // [B, Tk], true = ignore
  std::variant<std::monostate, xt::xarray<bool>, xt::xarray<T>> attn_mask;  // see above
  bool is_causal = false;
};

template <class T>
class MultiheadAttention : public Module<T> {
 public:
  MultiheadAttention(std::size_t embed_dim, std::size_t num_heads,
                     MultiheadAttentionOptions options = {});
  MultiheadAttention(std::size_t embed_dim, std::size_t num_heads,
                     MultiheadAttentionOptions options, Generator& generator);

  Var<T> forward(const Var<T>& query, const Var<T>& key, const Var<T>& value,
                 const MhaMasks<NoDeduce<T>>& masks = {});
  Var<T> forward(const Var<T>& x, const MhaMasks<NoDeduce<T>>& masks);
  Var<T> forward(const Var<T>& x) override;
  ModuleConfig config() const override;

  std::size_t embed_dim() const { return in_proj_weight.value.shape()[1]; }
  std::size_t num_heads() const { return num_heads_; }
  const MultiheadAttentionOptions& options() const { return options_; }

  Parameter<T> in_proj_weight;  // [3E, E]
  Parameter<T> in_proj_bias;    // [3E], when options().bias
  Linear<T> out_proj;           // E -> E
  Dropout<T> dropout;           // on the attention probabilities

 protected:
  void collect_parameters(const std::string& prefix,
                          typename Module<T>::NamedParameters& out) override;

 private:
  std::size_t num_heads_;
  MultiheadAttentionOptions options_;
};

enum class AttentionLayout { gpt2, llama };

struct CausalSelfAttentionOptions {
  std::size_t n_heads = 1;
  std::optional<std::size_t> n_kv_heads;  // default n_heads
  AttentionLayout layout = AttentionLayout::gpt2;
  bool rotary = false;
  double rope_theta = 10000.0;
  double attn_dropout = 0.0;
  double resid_dropout = 0.0;
};

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

extern template class MultiheadAttention<float>;
extern template class MultiheadAttention<double>;
extern template class CausalSelfAttention<float>;
extern template class CausalSelfAttention<double>;

}  // namespace xtgrad

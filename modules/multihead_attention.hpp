#pragma once
// MultiheadAttention, built on the engine's attention ops (attention.hpp
// describes the head layout both attention modules share).
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
// Unbatched input, as torch: query [Tq, E], key and value [Tk, E] (all three
// 2-D), key_padding_mask [Tk], attn_mask [Tq, Tk] or [H, Tq, Tk] -> [Tq, E],
// the same values as the batch of one.
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
// Errors (std::invalid_argument, before anything is recorded): zero sizes,
// heads not dividing the width, a probability outside [0, 1]; an input that
// is not [B, T, width] (or [T, width] for all three), masks of the wrong shape.

#include <cstddef>
#include <optional>
#include <string>
#include <variant>

#include <xtensor/xarray.hpp>

#include "dropout.hpp"
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
  Var<T> unbatched(const Var<T>& query, const Var<T>& key, const Var<T>& value,
                   const MhaMasks<NoDeduce<T>>& masks);

  std::size_t num_heads_;
  MultiheadAttentionOptions options_;
};

extern template class MultiheadAttention<float>;
extern template class MultiheadAttention<double>;

}  // namespace xtgrad

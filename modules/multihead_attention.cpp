// MultiheadAttention (multihead_attention.hpp): torch.nn.MultiheadAttention(batch_first=True).
#include "multihead_attention.hpp"

#include <cmath>
#include <limits>
#include <string>

#include "../engine/check.hpp"
#include "../engine/checked_size.hpp"
#include "../engine/ops/attention.hpp"
#include "../engine/ops/linear.hpp"
#include "../engine/ops/shape.hpp"
#include "../engine/ops/slice.hpp"

namespace xtgrad {

namespace {

constexpr const char* k_mha_owner = "MultiheadAttention";

template <class T>
xt::xarray<T> xavier_uniform(std::size_t fan_out, std::size_t fan_in, Generator& generator) {
  // torch.nn.init.xavier_uniform_: bound = sqrt(6 / (fan_in + fan_out)).
  const double bound = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  std::uniform_real_distribution<double> uniform(-bound, bound);
  xt::xarray<T> values = xt::empty<T>(std::vector<std::size_t>{fan_out, fan_in});
  for (auto& v : values) v = static_cast<T>(uniform(generator));
  return values;
}

// in_proj_weight [3E, E], in_proj_bias [3E], out_proj [E, E] + [E], without wrapping.
detail::WideCount mha_parameters(std::size_t embed_dim, bool bias) {
  const detail::WideCount e(embed_dim);
  return e * e * 4 + (bias ? e * 4 : detail::WideCount(0));
}

// The arguments checked, the parameters' bytes of `element_size` each within memory.
std::size_t checked_width(std::size_t embed_dim, std::size_t num_heads,
                          const MultiheadAttentionOptions& options, std::size_t element_size) {
  detail::check_positive_size(k_mha_owner, "embed_dim", embed_dim);
  detail::check_positive_size(k_mha_owner, "num_heads", num_heads);
  if (embed_dim % num_heads != 0)
    detail::fail_argument(k_mha_owner, "num_heads",
                          "is " + std::to_string(num_heads) + ", which does not divide embed_dim " +
                              std::to_string(embed_dim));
  detail::check_probability(k_mha_owner, "dropout", options.dropout);
  detail::check_bytes(k_mha_owner, "argument 'embed_dim'", "parameters",
                      mha_parameters(embed_dim, options.bias), element_size);
  return embed_dim;
}

void check_input(const char* name, const Shape& shape, std::size_t batch, std::size_t e) {
  if (shape.size() != 3 || shape[2] != e || (batch != 0 && shape[0] != batch))
    detail::fail_shape(k_mha_owner, name, shape,
                       "[" + (batch ? std::to_string(batch) : std::string("B")) + ", T, " +
                           std::to_string(e) + "]");
}

// The masks of `masks` checked against B, H, Tq, Tk.
template <class T>
void check_masks(const MhaMasks<T>& masks, std::size_t b, std::size_t h, std::size_t tq,
                 std::size_t tk) {
  if (masks.key_padding_mask) {
    const auto& kpm = *masks.key_padding_mask;
    if (kpm.dimension() != 2 || kpm.shape()[0] != b || kpm.shape()[1] != tk)
      detail::fail_shape(k_mha_owner, "key_padding_mask", kpm.shape(),
                         "[" + std::to_string(b) + ", " + std::to_string(tk) + "] (batch, keys)");
  }
  const auto check_attn = [&](const auto& mask) {
    const auto& s = mask.shape();
    const bool two_d = s.size() == 2 && s[0] == tq && s[1] == tk;
    const bool three_d = s.size() == 3 && s[0] == b * h && s[1] == tq && s[2] == tk;
    if (!two_d && !three_d)
      detail::fail_shape(k_mha_owner, "attn_mask", s,
                         "[" + std::to_string(tq) + ", " + std::to_string(tk) + "] or [" +
                             std::to_string(b * h) + ", " + std::to_string(tq) + ", " +
                             std::to_string(tk) + "] (batch * heads, queries, keys)");
  };
  if (const auto* m = std::get_if<xt::xarray<bool>>(&masks.attn_mask)) check_attn(*m);
  if (const auto* m = std::get_if<xt::xarray<T>>(&masks.attn_mask)) check_attn(*m);
}

// torch's masks merged into one mask of scaled_dot_product_attention,
// [B or 1, H or 1, Tq, Tk]: boolean (true = may attend) unless attn_mask is
// additive, in which case masked keys add -inf.
template <class T>
AttentionMask<T> merged_mask(const MhaMasks<T>& masks, std::size_t b, std::size_t h, std::size_t tq,
                             std::size_t tk) {
  const auto* bool_attn = std::get_if<xt::xarray<bool>>(&masks.attn_mask);
  const auto* float_attn = std::get_if<xt::xarray<T>>(&masks.attn_mask);
  const bool per_head =
      (bool_attn && bool_attn->dimension() == 3) || (float_attn && float_attn->dimension() == 3);
  const bool padding = masks.key_padding_mask.has_value();
  if (!bool_attn && !float_attn && !padding && !masks.is_causal) return {};
  const std::size_t nb = (per_head || padding) ? b : 1, nh = per_head ? h : 1;
  // blocked(bi, hi, i, j): whether query i may not see key j in batch bi, head hi.
  const auto blocked = [&](std::size_t bi, std::size_t hi, std::size_t i, std::size_t j) {
    if (masks.is_causal && j > i) return true;
    if (padding && (*masks.key_padding_mask)(bi, j)) return true;
    if (bool_attn)
      return bool(bool_attn->dimension() == 2 ? (*bool_attn)(i, j)
                                              : (*bool_attn)(bi * h + hi, i, j));
    return false;
  };
  const auto attn_value = [&](std::size_t bi, std::size_t hi, std::size_t i, std::size_t j) {
    return float_attn->dimension() == 2 ? (*float_attn)(i, j) : (*float_attn)(bi * h + hi, i, j);
  };
  const std::vector<std::size_t> shape = {nb, nh, tq, tk};
  if (float_attn) {
    xt::xarray<T> additive = xt::empty<T>(shape);
    for (std::size_t bi = 0; bi < nb; ++bi)
      for (std::size_t hi = 0; hi < nh; ++hi)
        for (std::size_t i = 0; i < tq; ++i)
          for (std::size_t j = 0; j < tk; ++j)
            additive(bi, hi, i, j) = blocked(bi, hi, i, j) ? -std::numeric_limits<T>::infinity()
                                                           : attn_value(bi, hi, i, j);
    return AttentionMask<T>(std::move(additive));
  }
  xt::xarray<bool> keep = xt::empty<bool>(shape);
  for (std::size_t bi = 0; bi < nb; ++bi)
    for (std::size_t hi = 0; hi < nh; ++hi)
      for (std::size_t i = 0; i < tq; ++i)
        for (std::size_t j = 0; j < tk; ++j) keep(bi, hi, i, j) = !blocked(bi, hi, i, j);
  return AttentionMask<T>(std::move(keep));
}

// [B, T, H * Dh] -> [B, H, T, Dh], and back.
template <class T>
Var<T> split_heads(const Var<T>& x, std::size_t heads) {
  const auto& s = x.shape();
  const auto dh = static_cast<std::int64_t>(s[2] / heads);
  return permute(reshape(x, {std::int64_t(s[0]), std::int64_t(s[1]), std::int64_t(heads), dh}),
                 {0, 2, 1, 3});
}

template <class T>
Var<T> merge_heads(const Var<T>& x) {
  const auto& s = x.shape();
  return reshape(permute(x, {0, 2, 1, 3}),
                 {std::int64_t(s[0]), std::int64_t(s[2]), std::int64_t(s[1] * s[3])});
}

}  // namespace

template <class T>
MultiheadAttention<T>::MultiheadAttention(std::size_t embed_dim, std::size_t num_heads,
                                          MultiheadAttentionOptions options)
    : MultiheadAttention(embed_dim, num_heads, options, detail::lvalue(Generator(k_default_seed))) {
}

template <class T>
MultiheadAttention<T>::MultiheadAttention(std::size_t embed_dim, std::size_t num_heads,
                                          MultiheadAttentionOptions options,
                                          Generator& generator) try
    : out_proj(checked_width(embed_dim, num_heads, options, sizeof(T)), embed_dim, options.bias,
               generator),
      dropout(options.dropout, generator),
      num_heads_(num_heads),
      options_(options) {
  // torch's _reset_parameters: xavier_uniform_ in_proj_weight, zero biases
  // (out_proj.weight keeps nn.Linear's initialization).
  in_proj_weight =
      Parameter<T>("in_proj_weight", xavier_uniform<T>(3 * embed_dim, embed_dim, generator));
  if (options.bias) {
    in_proj_bias =
        Parameter<T>("in_proj_bias", xt::zeros<T>(std::vector<std::size_t>{3 * embed_dim}));
    out_proj.bias.value.fill(T(0));
    out_proj.bias.mark_changed();
  }
} catch (const std::bad_alloc& e) {
  detail::rethrow_out_of_memory(k_mha_owner, "parameters", mha_parameters(embed_dim, options.bias),
                                sizeof(T), e);
}

template <class T>
Var<T> MultiheadAttention<T>::forward(const Var<T>& x) {
  return forward(x, x, x, {});
}

template <class T>
Var<T> MultiheadAttention<T>::forward(const Var<T>& x, const MhaMasks<NoDeduce<T>>& masks) {
  return forward(x, x, x, masks);
}

template <class T>
Var<T> MultiheadAttention<T>::forward(const Var<T>& query, const Var<T>& key, const Var<T>& value,
                                      const MhaMasks<NoDeduce<T>>& masks) {
  Tape<T>& tape =
      detail::common_tape<T>(k_mha_owner, {{"query", &query}, {"key", &key}, {"value", &value}});
  const std::size_t e = embed_dim(), h = num_heads_;
  if (query.dimension() == 2) return unbatched(query, key, value, masks);
  check_input("query", query.shape(), 0, e);
  const std::size_t b = query.shape()[0], tq = query.shape()[1];
  check_input("key", key.shape(), b, e);
  check_input("value", value.shape(), b, e);
  const std::size_t tk = key.shape()[1];
  if (value.shape()[1] != tk)
    detail::fail_shape(k_mha_owner, "value", value.shape(),
                       detail::shape_str(key.shape()) + " (key's shape)");
  check_masks(masks, b, h, tq, tk);
  // Every check done: from here on the tape is written.
  const AttentionMask<T> mask = merged_mask(masks, b, h, tq, tk);
  const std::optional<DropoutKey> key_of_dropout =
      dropout.next_key(detail::elements_per_row({b, h, tq, tk}, tk));
  const double p = key_of_dropout ? dropout.p() : 0.0;
  const DropoutKey dk = key_of_dropout.value_or(DropoutKey{});
  const Var<T> w = tape.param(in_proj_weight);
  const std::optional<Var<T>> bias =
      options_.bias ? std::optional<Var<T>>(tape.param(in_proj_bias)) : std::nullopt;
  Var<T> merged;
  const bool self = query.index() == key.index() && key.index() == value.index();
  if (self) {
    // One projection to [B, T, 3E], then the fused attention over its q | k | v.
    merged = packed_qkv_attention(linear(query, w, bias), h, mask, false, p, std::nullopt, dk);
  } else {
    const auto ei = static_cast<std::int64_t>(e);
    const auto project = [&](const Var<T>& x, std::int64_t part) {
      const Var<T> wp = slice(w, 0, part * ei, (part + 1) * ei);
      const std::optional<Var<T>> bp =
          bias ? std::optional<Var<T>>(slice(*bias, 0, part * ei, (part + 1) * ei)) : std::nullopt;
      return split_heads(linear(x, wp, bp), h);
    };
    merged = merge_heads(scaled_dot_product_attention(
        project(query, 0), project(key, 1), project(value, 2), mask, false, p, std::nullopt, dk));
  }
  return out_proj.forward(merged);
}

template <class T>
Var<T> MultiheadAttention<T>::unbatched(const Var<T>& query, const Var<T>& key, const Var<T>& value,
                                        const MhaMasks<NoDeduce<T>>& masks) {
  // torch's unbatched form: query [Tq, E], key and value [Tk, E], key_padding_mask
  // [Tk], attn_mask [Tq, Tk] or [H, Tq, Tk]; run as a batch of one. Every shape
  // is checked before anything is recorded.
  const std::size_t e = embed_dim(), h = num_heads_;
  const auto check_2d = [e](const char* name, const Shape& shape) {
    if (shape.size() != 2 || shape[1] != e)
      detail::fail_shape(k_mha_owner, name, shape,
                         "[T, " + std::to_string(e) + "] (unbatched, as query)");
  };
  check_2d("query", query.shape());
  check_2d("key", key.shape());
  check_2d("value", value.shape());
  const std::size_t tq = query.shape()[0], tk = key.shape()[0];
  if (value.shape()[0] != tk)
    detail::fail_shape(k_mha_owner, "value", value.shape(),
                       detail::shape_str(key.shape()) + " (key's shape)");
  MhaMasks<T> batched = masks;
  if (masks.key_padding_mask) {
    const xt::xarray<bool>& kpm = *masks.key_padding_mask;
    if (kpm.dimension() != 1 || kpm.size() != tk)
      detail::fail_shape(k_mha_owner, "key_padding_mask", kpm.shape(),
                         "[" + std::to_string(tk) + "] (keys; unbatched)");
    batched.key_padding_mask->reshape({std::size_t(1), tk});
  }
  check_masks(batched, 1, h, tq, tk);
  // One reshape per distinct input, so that self-attention keeps its fused projection.
  const auto one_batch = [](const Var<T>& x) {
    return reshape(x, {1, std::int64_t(x.shape()[0]), std::int64_t(x.shape()[1])});
  };
  const Var<T> q = one_batch(query);
  const Var<T> k = key.index() == query.index() ? q : one_batch(key);
  const Var<T> v = value.index() == query.index() ? q
                   : value.index() == key.index() ? k
                                                  : one_batch(value);
  return reshape(forward(q, k, v, batched), {std::int64_t(tq), std::int64_t(e)});  // [Tq, E]
}

template <class T>
void MultiheadAttention<T>::collect_parameters(const std::string& prefix,
                                               typename Module<T>::NamedParameters& out) {
  this->add_parameter(prefix, in_proj_weight, out);
  if (options_.bias) this->add_parameter(prefix, in_proj_bias, out);
  this->add_child(prefix, "out_proj", out_proj, out);
  this->add_child(prefix, "dropout", dropout, out);
}

template <class T>
ModuleConfig MultiheadAttention<T>::config() const {
  return ModuleConfig("MultiheadAttention")
      .add("embed_dim", embed_dim())
      .add("num_heads", num_heads_)
      .add("bias", options_.bias)
      .add("dropout", options_.dropout);
}

template class MultiheadAttention<float>;
template class MultiheadAttention<double>;

}  // namespace xtgrad

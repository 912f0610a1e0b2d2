// CausalSelfAttention (causal_self_attention.hpp): GPT-2's and LLaMA's decoder attention.
#include "causal_self_attention.hpp"

#include <cmath>
#include <string>

#include "../engine/checked_size.hpp"
#include "../engine/ops/attention.hpp"
#include "../engine/ops/mask.hpp"
#include "../engine/ops/rotary.hpp"
#include "../engine/ops/shape.hpp"
#include "../engine/ops/slice.hpp"

namespace xtgrad {

namespace {

constexpr const char* k_attention_owner = "CausalSelfAttention";
// HF's initializer_range for GPT-2 and LLaMA.
constexpr double k_attention_init_std = 0.02;

constexpr const char* k_attention_sizes = "arguments 'n_embd', 'n_heads' and 'n_kv_heads'";

// The options checked, n_kv_heads filled in, the parameters' bytes of
// `element_size` each within memory; returns them.
CausalSelfAttentionOptions checked(std::size_t n_embd, CausalSelfAttentionOptions options,
                                   std::size_t element_size) {
  detail::check_positive_size(k_attention_owner, "n_embd", n_embd);
  detail::check_positive_size(k_attention_owner, "n_heads", options.n_heads);
  const detail::Check check(k_attention_owner);
  check.argument(n_embd % options.n_heads == 0, "n_heads", "is ", options.n_heads,
                 ", which does not divide n_embd ", n_embd);
  if (!options.n_kv_heads) options.n_kv_heads = options.n_heads;
  detail::check_positive_size(k_attention_owner, "n_kv_heads", *options.n_kv_heads);
  check.argument(options.n_heads % *options.n_kv_heads == 0, "n_kv_heads", "is ",
                 *options.n_kv_heads, ", which does not divide n_heads ", options.n_heads);
  check.argument(
      options.layout == AttentionLayout::gpt2 || options.layout == AttentionLayout::llama, "layout",
      "is not gpt2 or llama");
  check.argument(!options.rotary || (n_embd / options.n_heads) % 2 == 0, "rotary",
                 "needs an even head size, but n_embd / n_heads is ", n_embd / options.n_heads);
  check.argument(options.rope_theta > 0.0 && std::isfinite(options.rope_theta), "rope_theta", "is ",
                 options.rope_theta, ", expected a finite theta > 0");
  detail::check_rope_scaling(k_attention_owner, "rope_scaling", options.rope_scaling);
  check.argument(options.layout == AttentionLayout::llama || !(options.qkv_bias || options.o_bias),
                 "qkv_bias",
                 "or o_bias is set, but the gpt2 layout has its own biases (c_attn, "
                 "c_proj); expected them in the llama layout only");
  detail::check_probability(k_attention_owner, "attn_dropout", options.attn_dropout);
  detail::check_probability(k_attention_owner, "resid_dropout", options.resid_dropout);
  detail::check_bytes(k_attention_owner, k_attention_sizes, "parameters",
                      detail::causal_self_attention_parameters(n_embd, options), element_size);
  return options;
}

template <class T>
Linear<T> projection(std::size_t in, std::size_t out, bool bias, Generator& generator) {
  Linear<T> linear(in, out, bias, generator);
  linear.weight.set_value(detail::normal<T>({out, in}, k_attention_init_std, generator));
  if (bias) linear.bias.set_value(xt::zeros<T>({out}));
  return linear;
}

// [B, T, n * Dh] -> [B, n, T, Dh].
template <class T>
Var<T> split_heads(const Var<T>& x, std::size_t n) {
  const auto& s = x.shape();
  return permute(
      reshape(x, {std::int64_t(s[0]), std::int64_t(s[1]), std::int64_t(n), std::int64_t(s[2] / n)}),
      {0, 2, 1, 3});
}

}  // namespace

detail::WideCount detail::causal_self_attention_parameters(
    std::size_t n_embd, const CausalSelfAttentionOptions& options) {
  const std::size_t h = options.n_heads, hkv = options.n_kv_heads.value_or(h);
  if (h == 0) return WideCount(0);
  const std::size_t dh = n_embd / h;
  const WideCount qkv = (WideCount(h) + WideCount(2) * hkv) * dh;  // h * dh <= n_embd
  if (options.layout == AttentionLayout::gpt2)  // c_attn [C, qkv] + [qkv], c_proj [C, C] + [C]
    return WideCount(n_embd) * qkv + qkv + WideCount(n_embd) * n_embd + n_embd;
  // q, k, v [., C] (+ [.]), o_proj [C, h dh] (+ [C])
  return WideCount(n_embd) * qkv + WideCount(h) * dh * n_embd +
         (options.qkv_bias ? qkv : WideCount(0)) + WideCount(options.o_bias ? n_embd : 0);
}

void detail::add_rope_scaling(ModuleConfig& config, const RopeScaling& scaling) {
  if (scaling.type == RopeScaling::Type::none) return;
  const bool llama3 = scaling.type == RopeScaling::Type::llama3;
  config.add("rope_scaling", llama3 ? "llama3" : "linear").add("rope_factor", scaling.factor);
  if (!llama3) return;
  config.add("rope_low_freq_factor", scaling.low_freq_factor)
      .add("rope_high_freq_factor", scaling.high_freq_factor)
      .add("rope_original_max_position_embeddings", scaling.original_max_position_embeddings);
}

// q [B, H, T, Dh], k and v [B, Hkv, T, Dh] (before rotary); or, for the
// packed path, the fused [B, T, 3C] projection alone.
template <class T>
struct CausalSelfAttention<T>::Heads {
  Var<T> q, k, v;
  std::optional<Var<T>> packed;
};

template <class T>
CausalSelfAttention<T>::CausalSelfAttention(std::size_t n_embd, CausalSelfAttentionOptions options)
    : CausalSelfAttention(n_embd, options, detail::lvalue(Generator(k_default_seed))) {}

template <class T>
CausalSelfAttention<T>::CausalSelfAttention(std::size_t n_embd, CausalSelfAttentionOptions options,
                                            Generator& generator) try
    : n_embd_(n_embd), options_(checked(n_embd, options, sizeof(T))) {
  const std::size_t dh = head_dim(), h = n_heads(), hkv = n_kv_heads();
  if (options_.layout == AttentionLayout::gpt2) {
    c_attn.emplace((h + 2 * hkv) * dh, n_embd, generator, k_attention_init_std);
    c_proj.emplace(n_embd, n_embd, generator, k_attention_init_std);
  } else {
    q_proj.emplace(projection<T>(n_embd, h * dh, options_.qkv_bias, generator));
    k_proj.emplace(projection<T>(n_embd, hkv * dh, options_.qkv_bias, generator));
    v_proj.emplace(projection<T>(n_embd, hkv * dh, options_.qkv_bias, generator));
    o_proj.emplace(projection<T>(h * dh, n_embd, options_.o_bias, generator));
  }
  attn_dropout = Dropout<T>(options_.attn_dropout, generator);
  resid_dropout = Dropout<T>(options_.resid_dropout, generator);
} catch (const std::bad_alloc& e) {
  detail::rethrow_out_of_memory(k_attention_owner, "parameters",
                                detail::causal_self_attention_parameters(n_embd, options),
                                sizeof(T), e);
}

template <class T>
void CausalSelfAttention<T>::check_input(const char* owner, const Var<T>& x) const {
  const Shape& s = x.shape();
  detail::Check(owner).shape(s.size() == 3 && s[2] == n_embd_, "x", s, "[B, T, ", n_embd_, "]");
}

template <class T>
typename CausalSelfAttention<T>::Heads CausalSelfAttention<T>::project(const Var<T>& x) {
  const std::size_t h = n_heads(), hkv = n_kv_heads(), dh = head_dim();
  if (options_.layout == AttentionLayout::llama)
    return {split_heads(q_proj->forward(x), h), split_heads(k_proj->forward(x), hkv),
            split_heads(v_proj->forward(x), hkv), std::nullopt};
  const Var<T> qkv = c_attn->forward(x);  // [B, T, (H + 2 Hkv) Dh]
  if (!options_.rotary && hkv == h) return {Var<T>(), Var<T>(), Var<T>(), qkv};
  const auto q_end = std::int64_t(h * dh), k_end = std::int64_t((h + hkv) * dh);
  const auto v_end = std::int64_t((h + 2 * hkv) * dh);
  return {split_heads(slice(qkv, 2, 0, q_end), h), split_heads(slice(qkv, 2, q_end, k_end), hkv),
          split_heads(slice(qkv, 2, k_end, v_end), hkv), std::nullopt};
}

template <class T>
Var<T> CausalSelfAttention<T>::output(const Var<T>& y, std::size_t batch, std::size_t t) {
  // y [B, H, T, Dh] -> [B, T, C] -> output projection.
  const Var<T> merged = reshape(permute(y, {0, 2, 1, 3}),
                                {std::int64_t(batch), std::int64_t(t), std::int64_t(n_embd_)});
  return options_.layout == AttentionLayout::gpt2 ? c_proj->forward(merged)
                                                  : o_proj->forward(merged);
}

template <class T>
Var<T> CausalSelfAttention<T>::forward(const Var<T>& x) {
  x.tape_for(k_attention_owner, "x");
  check_input(k_attention_owner, x);
  const std::size_t b = x.shape()[0], t = x.shape()[1], h = n_heads();
  const std::optional<DropoutKey> key =
      attn_dropout.next_key(detail::elements_per_row({b, h, t, t}, t));
  const double p = key ? attn_dropout.p() : 0.0;
  const DropoutKey dk = key.value_or(DropoutKey{});
  Heads heads = project(x);
  Var<T> out;
  if (heads.packed) {
    // [B, T, 3C] -> [B, T, C], heads merged: only the gpt2 layout takes this path.
    out = c_proj->forward(packed_qkv_attention(*heads.packed, h, {}, true, p, std::nullopt, dk));
  } else {
    if (options_.rotary) {
      heads.q = apply_rotary(heads.q, 0, options_.rope_theta, options_.rope_scaling);
      heads.k = apply_rotary(heads.k, 0, options_.rope_theta, options_.rope_scaling);
    }
    out = output(scaled_dot_product_attention(heads.q, heads.k, heads.v, {}, true, p, std::nullopt,
                                              dk, n_kv_heads() != h),
                 b, t);
  }
  return resid_dropout.forward(out);
}

template <class T>
Var<T> CausalSelfAttention<T>::forward(const Var<T>& x, KvCache<T>& cache, std::size_t layer) {
  const detail::Check check(k_attention_owner);
  Tape<T>& tape = x.tape_for(k_attention_owner, "x");
  check.logic(!tape.grad_enabled(),
              "forward with a KvCache is inference: record on a tape whose recording is off "
              "(NoGradGuard)");
  check_input(k_attention_owner, x);
  const std::size_t b = x.shape()[0], t = x.shape()[1], h = n_heads();
  check.argument(
      cache.batch() == b && cache.n_kv_heads() == n_kv_heads() && cache.head_dim() == head_dim(),
      "cache", "holds batch ", cache.batch(), ", ", cache.n_kv_heads(), " key/value heads of size ",
      cache.head_dim(), ", expected batch ", b, ", ", n_kv_heads(), " heads of size ", head_dim());
  cache.check_append(k_attention_owner, layer, t);
  const std::size_t past = cache.length(layer);
  Heads heads = project(x);
  if (heads.packed) {  // the split the packed path does in place
    const auto c = std::int64_t(n_embd_);
    heads.q = split_heads(slice(*heads.packed, 2, 0, c), h);
    heads.k = split_heads(slice(*heads.packed, 2, c, 2 * c), h);
    heads.v = split_heads(slice(*heads.packed, 2, 2 * c, 3 * c), h);
  }
  if (options_.rotary) {
    heads.q = apply_rotary(heads.q, past, options_.rope_theta, options_.rope_scaling);
    heads.k = apply_rotary(heads.k, past, options_.rope_theta, options_.rope_scaling);
  }
  // Row i (position past + i) sees positions 0 .. past + i: tril with diagonal `past`;
  // in a padded cache, only those from its row's start on.
  AttentionMask<T> mask;
  if (cache.padded())
    mask = AttentionMask<T>(cache.padded_causal_mask(layer, t));
  else if (t > 1)
    mask = AttentionMask<T>(causal_mask(t, past + t, static_cast<std::int64_t>(past)));
  cache.store(layer, heads.k.value(), heads.v.value());  // [B, Hkv, T, Dh], checked above
  // the cached keys and values read where they are (scaled_dot_product_attention's bits)
  return output(attention_over_rows(heads.q, cache.rows(layer), mask), b, t);
}

template <class T>
void CausalSelfAttention<T>::collect_parameters(const std::string& prefix,
                                                typename Module<T>::NamedParameters& out) {
  if (options_.layout == AttentionLayout::gpt2) {
    this->add_child(prefix, "c_attn", *c_attn, out);
    this->add_child(prefix, "c_proj", *c_proj, out);
  } else {
    this->add_child(prefix, "q_proj", *q_proj, out);
    this->add_child(prefix, "k_proj", *k_proj, out);
    this->add_child(prefix, "v_proj", *v_proj, out);
    this->add_child(prefix, "o_proj", *o_proj, out);
  }
  this->add_child(prefix, "attn_dropout", attn_dropout, out);
  this->add_child(prefix, "resid_dropout", resid_dropout, out);
}

template <class T>
ModuleConfig CausalSelfAttention<T>::config() const {
  ModuleConfig out = ModuleConfig("CausalSelfAttention")
                         .add("n_embd", n_embd_)
                         .add("n_heads", n_heads())
                         .add("n_kv_heads", n_kv_heads())
                         .add("layout", options_.layout == AttentionLayout::gpt2 ? "gpt2" : "llama")
                         .add("rotary", options_.rotary)
                         .add("rope_theta", options_.rope_theta)
                         .add("attn_dropout", options_.attn_dropout)
                         .add("resid_dropout", options_.resid_dropout);
  // Recorded only when set, so that the configs of attentions without them stay as they were.
  if (options_.qkv_bias) out.add("qkv_bias", true);
  if (options_.o_bias) out.add("o_bias", true);
  detail::add_rope_scaling(out, options_.rope_scaling);
  return out;
}

template class CausalSelfAttention<float>;
template class CausalSelfAttention<double>;

}  // namespace xtgrad

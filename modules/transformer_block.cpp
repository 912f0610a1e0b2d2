#include "transformer_block.hpp"

#include <string>

#include "../engine/ops/elementwise.hpp"

namespace xtgrad {

namespace {

constexpr const char* k_owner = "TransformerBlock";
constexpr std::size_t k_llama_multiple_of = 256;

TransformerBlockOptions checked(std::size_t n_embd, TransformerBlockOptions options) {
  const detail::Check check(k_owner);
  check.argument(options.style == GPTStyle::gpt2 || options.style == GPTStyle::llama, "style",
                 "is not gpt2 or llama");
  detail::check_positive_size(k_owner, "n_embd", n_embd);
  if (options.ffn_hidden) detail::check_positive_size(k_owner, "ffn_hidden", *options.ffn_hidden);
  if (!options.ffn_hidden) options.ffn_hidden = default_ffn_hidden(options.style, n_embd);
  check.argument(options.style != GPTStyle::gpt2 || !options.n_kv_heads ||
                     *options.n_kv_heads == options.n_heads,
                 "n_kv_heads", "is ", options.n_kv_heads.value_or(0),
                 ", but the gpt2 style has n_kv_heads = n_heads (", options.n_heads, ")");
  if (!options.n_kv_heads) options.n_kv_heads = options.n_heads;
  return options;
}

template <class T>
std::variant<LayerNorm<T>, RMSNorm<T>> make_norm(GPTStyle style, std::size_t n, double eps) {
  if (style == GPTStyle::gpt2) return LayerNorm<T>(n, eps);
  return RMSNorm<T>(n, eps);
}

CausalSelfAttentionOptions attention_options(const TransformerBlockOptions& o) {
  CausalSelfAttentionOptions a;
  a.n_heads = o.n_heads;
  a.n_kv_heads = o.n_kv_heads;
  a.layout = o.style == GPTStyle::gpt2 ? AttentionLayout::gpt2 : AttentionLayout::llama;
  a.rotary = o.style == GPTStyle::llama;
  a.rope_theta = o.rope_theta;
  a.attn_dropout = o.dropout;
  a.resid_dropout = o.dropout;
  return a;
}

template <class T>
std::variant<FeedForward<T>, GatedFFN<T>> make_mlp(const TransformerBlockOptions& o, std::size_t n,
                                                   Generator& generator) {
  if (o.style == GPTStyle::gpt2)
    return FeedForward<T>(n, *o.ffn_hidden, Activation::gelu_tanh, 0.0, generator);
  return GatedFFN<T>(n, *o.ffn_hidden, n, Activation::silu, GatedBias::none(), 0.0, generator);
}

// x [B, T, C], checked before the norm records anything.
void check_input(const Shape& x, std::size_t n_embd) {
  detail::Check(k_owner).shape(x.size() == 3 && x[2] == n_embd, "x", x, "[B, T, ", n_embd, "]");
}

}  // namespace

std::size_t default_ffn_hidden(GPTStyle style, std::size_t n_embd) {
  if (style == GPTStyle::gpt2) return 4 * n_embd;
  const std::size_t hidden = 2 * (4 * n_embd) / 3;
  return k_llama_multiple_of * ((hidden + k_llama_multiple_of - 1) / k_llama_multiple_of);
}

const char* style_name(GPTStyle style) {
  return style == GPTStyle::gpt2 ? "gpt2" : "llama";
}

template <class T>
TransformerBlock<T>::TransformerBlock(std::size_t n_embd, TransformerBlockOptions options)
    : TransformerBlock(n_embd, options, detail::lvalue(Generator(k_default_seed))) {}

template <class T>
TransformerBlock<T>::TransformerBlock(std::size_t n_embd, TransformerBlockOptions options,
                                      Generator& generator)
    : n_embd_(n_embd),
      options_(checked(n_embd, options)),
      ln_1(make_norm<T>(options_.style, n_embd, options_.eps)),
      attn(n_embd, attention_options(options_), generator),
      ln_2(make_norm<T>(options_.style, n_embd, options_.eps)),
      mlp(make_mlp<T>(options_, n_embd, generator)),
      dropout(options_.dropout, generator) {}

template <class T>
Var<T> TransformerBlock<T>::forward(const Var<T>& x) {
  x.tape_for(k_owner, "x");
  check_input(x.shape(), n_embd_);
  const Var<T> h = add(x, attn.forward(std::visit([&](auto& n) { return n.forward(x); }, ln_1)));
  const Var<T> normed = std::visit([&](auto& n) { return n.forward(h); }, ln_2);
  return add(h, dropout.forward(std::visit([&](auto& f) { return f.forward(normed); }, mlp)));
}

template <class T>
Var<T> TransformerBlock<T>::forward(const Var<T>& x, KvCache<T>& cache, std::size_t layer) {
  x.tape_for(k_owner, "x");
  check_input(x.shape(), n_embd_);
  const Var<T> h =
      add(x, attn.forward(std::visit([&](auto& n) { return n.forward(x); }, ln_1), cache, layer));
  const Var<T> normed = std::visit([&](auto& n) { return n.forward(h); }, ln_2);
  return add(h, std::visit([&](auto& f) { return f.forward(normed); }, mlp));
}

template <class T>
void TransformerBlock<T>::collect_parameters(const std::string& prefix,
                                             typename Module<T>::NamedParameters& out) {
  std::visit([&](auto& n) { this->add_child(prefix, "ln_1", n, out); }, ln_1);
  this->add_child(prefix, "attn", attn, out);
  std::visit([&](auto& n) { this->add_child(prefix, "ln_2", n, out); }, ln_2);
  std::visit([&](auto& f) { this->add_child(prefix, "mlp", f, out); }, mlp);
  this->add_child(prefix, "dropout", dropout, out);
}

template <class T>
ModuleConfig TransformerBlock<T>::config() const {
  return ModuleConfig("TransformerBlock")
      .add("n_embd", n_embd_)
      .add("style", style_name(options_.style))
      .add("n_heads", options_.n_heads)
      .add("n_kv_heads", *options_.n_kv_heads)
      .add("ffn_hidden", *options_.ffn_hidden)
      .add("dropout", options_.dropout)
      .add("eps", options_.eps)
      .add("rope_theta", options_.rope_theta);
}

template class TransformerBlock<float>;
template class TransformerBlock<double>;

}  // namespace xtgrad

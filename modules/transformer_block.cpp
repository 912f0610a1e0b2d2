#include "transformer_block.hpp"

#include <string>

#include "../engine/checked_size.hpp"
#include "../engine/ops/elementwise.hpp"

namespace xtgrad {

namespace {

constexpr const char* k_block_owner = "TransformerBlock";
constexpr std::size_t k_llama_multiple_of = 256;
constexpr const char* k_block_sizes =
    "arguments 'n_embd', 'n_heads', 'n_kv_heads' and 'ffn_hidden'";

// The options checked and filled in, the parameters' bytes of `element_size`
// each within memory (the attention's own checks come later, in its constructor).
TransformerBlockOptions checked(std::size_t n_embd, TransformerBlockOptions options,
                                std::size_t element_size) {
  const detail::Check check(k_block_owner);
  check.argument(options.style == GPTStyle::gpt2 || options.style == GPTStyle::llama, "style",
                 "is not gpt2 or llama");
  detail::check_positive_size(k_block_owner, "n_embd", n_embd);
  if (options.ffn_hidden)
    detail::check_positive_size(k_block_owner, "ffn_hidden", *options.ffn_hidden);
  if (!options.ffn_hidden)
    options.ffn_hidden = detail::default_ffn_hidden(k_block_owner, options.style, n_embd);
  check.argument(options.style != GPTStyle::gpt2 || !options.n_kv_heads ||
                     *options.n_kv_heads == options.n_heads,
                 "n_kv_heads", "is ", options.n_kv_heads.value_or(0),
                 ", but the gpt2 style has n_kv_heads = n_heads (", options.n_heads, ")");
  check.argument(options.style == GPTStyle::llama || !options.hf_mlp, "hf_mlp",
                 "is set, but the gpt2 style's MLP is GPT2MLP; expected it in the llama "
                 "style only");
  if (!options.n_kv_heads) options.n_kv_heads = options.n_heads;
  if (options.n_heads != 0 && n_embd % options.n_heads == 0)  // else the attention refuses them
    detail::check_bytes(k_block_owner, k_block_sizes, "parameters",
                        detail::transformer_block_parameters(n_embd, options), element_size);
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
  a.qkv_bias = o.qkv_bias;
  a.o_bias = o.o_bias;
  a.rope_scaling = o.rope_scaling;
  a.attn_dropout = o.dropout;
  a.resid_dropout = o.dropout;
  return a;
}

template <class T>
std::variant<GPT2MLP<T>, GatedFFN<T>, GatedExpert<T>, SparseMoe<T>> make_mlp(
    const TransformerBlockOptions& o, std::size_t n, Generator& generator) {
  if (o.moe) return SparseMoe<T>(n, *o.ffn_hidden, *o.moe, generator);
  if (o.style == GPTStyle::gpt2) return GPT2MLP<T>(n, *o.ffn_hidden, generator);
  if (o.hf_mlp)
    return GatedExpert<T>(n, *o.ffn_hidden, Activation::silu, ExpertNames::llama, generator);
  return GatedFFN<T>(n, *o.ffn_hidden, n, Activation::silu, GatedBias::none(), 0.0, generator);
}

// x [B, T, C], checked before the norm records anything.
void check_input(const Shape& x, std::size_t n_embd) {
  detail::Check(k_block_owner)
      .shape(x.size() == 3 && x[2] == n_embd, "x", x, "[B, T, ", n_embd, "]");
}

}  // namespace

std::size_t default_ffn_hidden(GPTStyle style, std::size_t n_embd) {
  return detail::default_ffn_hidden("default_ffn_hidden", style, n_embd);
}

std::size_t detail::default_ffn_hidden(const char* owner, GPTStyle style, std::size_t n_embd) {
  constexpr const char* names = "argument 'n_embd' (the default ffn_hidden)";
  if (style == GPTStyle::gpt2) return checked_multiply(owner, names, 4, n_embd);
  const std::size_t hidden = checked_multiply(owner, names, 8, n_embd) / 3;  // 2 (4 n_embd) / 3
  return k_llama_multiple_of *
         (checked_add(owner, names, hidden, k_llama_multiple_of - 1) / k_llama_multiple_of);
}

detail::WideCount detail::transformer_block_parameters(std::size_t n_embd,
                                                       const TransformerBlockOptions& options) {
  const CausalSelfAttentionOptions attention = attention_options(options);
  const WideCount c(n_embd);
  // (Unfilled, as in a constructor's handler, the gpt2 default bounds the llama one.)
  const WideCount hidden = options.ffn_hidden ? WideCount(*options.ffn_hidden) : c * 4;
  const WideCount norms = options.style == GPTStyle::gpt2 ? c * 4 : c * 2;
  if (options.moe) {  // router [E, C]; E experts of 3 [H, C]; shared expert 3 [Hs, C] + gate [1, C]
    const WideCount experts(options.moe->num_experts);
    const WideCount shared(options.moe->shared_expert_intermediate_size);
    WideCount n = norms + causal_self_attention_parameters(n_embd, attention) + experts * c +
                  experts * c * hidden * 3;
    if (options.moe->shared_expert_intermediate_size > 0) n += c * shared * 3 + c;
    return n;
  }
  // ln_1, ln_2 [C] + [C]; mlp c_fc [C, H] + [H], c_proj [H, C] + [C]
  if (options.style == GPTStyle::gpt2)
    return c * 4 + causal_self_attention_parameters(n_embd, attention) + c * hidden * 2 + hidden +
           c;
  // ln_1, ln_2 [C]; mlp w_up, w_gate [C, H], w_down [H, C]
  return c * 2 + causal_self_attention_parameters(n_embd, attention) + c * hidden * 3;
}

const char* style_name(GPTStyle style) {
  return style == GPTStyle::gpt2 ? "gpt2" : "llama";
}

template <class T>
TransformerBlock<T>::TransformerBlock(std::size_t n_embd, TransformerBlockOptions options)
    : TransformerBlock(n_embd, options, detail::lvalue(Generator(k_default_seed))) {}

template <class T>
TransformerBlock<T>::TransformerBlock(std::size_t n_embd, TransformerBlockOptions options,
                                      Generator& generator) try
    : n_embd_(n_embd),
      options_(checked(n_embd, options, sizeof(T))),
      ln_1(make_norm<T>(options_.style, n_embd, options_.eps)),
      attn(n_embd, attention_options(options_), generator),
      ln_2(make_norm<T>(options_.style, n_embd, options_.eps)),
      mlp(make_mlp<T>(options_, n_embd, generator)),
      dropout(options_.dropout, generator) {
} catch (const std::bad_alloc& e) {
  detail::rethrow_out_of_memory(k_block_owner, "parameters",
                                detail::transformer_block_parameters(n_embd, options), sizeof(T),
                                e);
}

template <class T>
Var<T> TransformerBlock<T>::forward(const Var<T>& x) {
  return run(x, nullptr, 0, false).y;
}

template <class T>
Var<T> TransformerBlock<T>::forward(const Var<T>& x, KvCache<T>& cache, std::size_t layer) {
  return run(x, &cache, layer, false).y;
}

template <class T>
BlockOutput<T> TransformerBlock<T>::forward_with_losses(const Var<T>& x) {
  return run(x, nullptr, 0, true);
}

// h = x + attn(ln_1(x)); y = h + dropout(mlp(ln_2(h))), the dropout left out
// through a cache (inference); the MoE's losses recorded when `losses`.
template <class T>
BlockOutput<T> TransformerBlock<T>::run(const Var<T>& x, KvCache<T>* cache, std::size_t layer,
                                        bool losses) {
  x.tape_for(k_block_owner, "x");
  check_input(x.shape(), n_embd_);
  const Var<T> normed_x = std::visit([&](auto& n) { return n.forward(x); }, ln_1);
  const Var<T> h = add(x, cache ? attn.forward(normed_x, *cache, layer) : attn.forward(normed_x));
  const Var<T> normed = std::visit([&](auto& n) { return n.forward(h); }, ln_2);
  BlockOutput<T> out;
  Var<T> f;
  if (SparseMoe<T>* moe = sparse_moe(); moe && losses) {
    MoeOutput<T> m = moe->forward_with_losses(normed);
    f = m.y;
    out.load_balancing_loss = m.load_balancing_loss;
    out.z_loss = m.z_loss;
  } else {
    f = std::visit([&](auto& ffn) { return ffn.forward(normed); }, mlp);
  }
  out.y = add(h, cache ? f : dropout.forward(f));
  return out;
}

template <class T>
const char* TransformerBlock<T>::mlp_name() const {
  return sparse_moe() && options_.style == GPTStyle::llama ? "block_sparse_moe" : "mlp";
}

template <class T>
void TransformerBlock<T>::collect_parameters(const std::string& prefix,
                                             typename Module<T>::NamedParameters& out) {
  std::visit([&](auto& n) { this->add_child(prefix, "ln_1", n, out); }, ln_1);
  this->add_child(prefix, "attn", attn, out);
  std::visit([&](auto& n) { this->add_child(prefix, "ln_2", n, out); }, ln_2);
  std::visit([&](auto& f) { this->add_child(prefix, mlp_name(), f, out); }, mlp);
  this->add_child(prefix, "dropout", dropout, out);
}

template <class T>
ModuleConfig TransformerBlock<T>::config() const {
  ModuleConfig out = ModuleConfig("TransformerBlock")
                         .add("n_embd", n_embd_)
                         .add("style", style_name(options_.style))
                         .add("n_heads", options_.n_heads)
                         .add("n_kv_heads", *options_.n_kv_heads)
                         .add("ffn_hidden", *options_.ffn_hidden)
                         .add("dropout", options_.dropout);
  detail::add_block_options(out, options_);
  if (const SparseMoe<T>* moe = sparse_moe()) out.children.emplace_back(mlp_name(), moe->config());
  return out;
}

template class TransformerBlock<float>;
template class TransformerBlock<double>;

}  // namespace xtgrad

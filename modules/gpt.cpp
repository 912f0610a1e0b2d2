#include "gpt.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "../engine/checked_size.hpp"
#include "../engine/ops/cross_entropy.hpp"
#include "../engine/ops/elementwise.hpp"
#include "../engine/ops/embedding.hpp"
#include "../engine/ops/linear.hpp"
#include "../engine/ops/shape.hpp"
#include "recompute_modules.hpp"

namespace xtgrad {

namespace {

constexpr const char* k_gpt_owner = "GPT";
constexpr double k_init_std = 0.02;  // HF's initializer_range
constexpr const char* k_gpt_sizes =
    "arguments 'vocab_size', 'block_size', 'n_layer', 'n_embd' and 'ffn_hidden'";

TransformerBlockOptions block_options(const GPTConfig& c, bool sparse = false);

// Whether layer l (0-based) is sparse: Qwen2-MoE's (l + 1) % decoder_sparse_step == 0.
bool sparse_layer(const GPTConfig& c, std::size_t l) {
  return c.num_experts > 0 && (l + 1) % c.decoder_sparse_step == 0;
}

// The parameter elements of a GPT of config `c` (n_kv_head and ffn_hidden
// filled in, or bounded as in TransformerBlock's count), without wrapping.
detail::WideCount gpt_parameters(const GPTConfig& c) {
  using detail::WideCount;
  const WideCount e(c.n_embd);
  WideCount n = WideCount(c.vocab_size) * e;                        // wte [vocab, C]
  if (c.style == GPTStyle::gpt2) n += WideCount(c.block_size) * e;  // wpe [block_size, C]
  const std::size_t sparse = c.num_experts > 0 ? c.n_layer / c.decoder_sparse_step : 0;
  n += WideCount(c.n_layer - sparse) *
       detail::transformer_block_parameters(c.n_embd, block_options(c));
  if (sparse > 0)
    n += WideCount(sparse) * detail::transformer_block_parameters(c.n_embd, block_options(c, true));
  n += c.style == GPTStyle::gpt2 ? e * 2 : e;               // ln_f
  if (!c.tie_embeddings) n += WideCount(c.vocab_size) * e;  // lm_head [vocab, C]
  return n;
}

// The MoE options of a config with num_experts > 0 and n_layer > 0.
void check_moe(const GPTConfig& c) {
  const detail::Check check(k_gpt_owner);
  check.argument(c.num_experts >= 2, "num_experts", "is ", c.num_experts,
                 ", expected 0 (dense) or at least 2 (a mixture of one expert is the dense FFN)");
  check.argument(c.num_experts_per_tok >= 1 && c.num_experts_per_tok <= c.num_experts,
                 "num_experts_per_tok", "is ", c.num_experts_per_tok,
                 ", expected 1 .. num_experts = ", c.num_experts);
  check.argument(c.decoder_sparse_step >= 1 && c.decoder_sparse_step <= c.n_layer,
                 "decoder_sparse_step", "is ", c.decoder_sparse_step,
                 ", expected 1 .. n_layer = ", c.n_layer,
                 " (layer l is sparse when (l + 1) % decoder_sparse_step == 0)");
  if (c.moe_intermediate_size)
    detail::check_positive_size(k_gpt_owner, "moe_intermediate_size", *c.moe_intermediate_size);
  const double cf = c.capacity_factor.value_or(1.0);
  check.argument(std::isfinite(cf) && cf > 0.0, "capacity_factor", "is ", cf,
                 ", expected a finite value > 0 (or none: dropless)");
  check.argument(std::isfinite(c.router_aux_loss_coef) && c.router_aux_loss_coef >= 0.0,
                 "router_aux_loss_coef", "is ", c.router_aux_loss_coef,
                 ", expected a finite value >= 0");
  check.argument(std::isfinite(c.router_z_loss_coef) && c.router_z_loss_coef >= 0.0,
                 "router_z_loss_coef", "is ", c.router_z_loss_coef,
                 ", expected a finite value >= 0");
}

// The config checked, n_kv_head and ffn_hidden filled in, the parameters'
// bytes of `element_size` each within memory.
GPTConfig checked(GPTConfig c, std::size_t element_size) {
  detail::check_positive_size(k_gpt_owner, "vocab_size", c.vocab_size);
  detail::check_positive_size(k_gpt_owner, "block_size", c.block_size);
  detail::check_positive_size(k_gpt_owner, "n_layer", c.n_layer);
  detail::check_positive_size(k_gpt_owner, "n_head", c.n_head);
  detail::check_positive_size(k_gpt_owner, "n_embd", c.n_embd);
  if (c.style != GPTStyle::gpt2 && c.style != GPTStyle::llama)
    detail::fail_argument(k_gpt_owner, "style", "is not gpt2 or llama");
  if (c.n_embd % c.n_head != 0)
    detail::fail_argument(k_gpt_owner, "n_head",
                          "is " + std::to_string(c.n_head) + ", which does not divide n_embd " +
                              std::to_string(c.n_embd));
  if (c.style == GPTStyle::gpt2 && c.n_kv_head && *c.n_kv_head != c.n_head)
    detail::fail_argument(k_gpt_owner, "n_kv_head",
                          "is " + std::to_string(*c.n_kv_head) +
                              ", but the gpt2 style has n_kv_head = n_head (" +
                              std::to_string(c.n_head) + ")");
  if (!c.n_kv_head) c.n_kv_head = c.n_head;
  detail::check_positive_size(k_gpt_owner, "n_kv_head", *c.n_kv_head);
  if (c.n_head % *c.n_kv_head != 0)
    detail::fail_argument(k_gpt_owner, "n_kv_head",
                          "is " + std::to_string(*c.n_kv_head) + ", which does not divide n_head " +
                              std::to_string(c.n_head));
  if (c.ffn_hidden) detail::check_positive_size(k_gpt_owner, "ffn_hidden", *c.ffn_hidden);
  if (!c.ffn_hidden) c.ffn_hidden = detail::default_ffn_hidden(k_gpt_owner, c.style, c.n_embd);
  detail::check_probability(k_gpt_owner, "dropout", c.dropout);
  if (!(c.eps >= 0.0 && std::isfinite(c.eps)))
    detail::fail_argument(k_gpt_owner, "eps",
                          "is " + detail::number_str(c.eps) + ", expected a finite eps >= 0");
  if (c.style == GPTStyle::llama && (c.n_embd / c.n_head) % 2 != 0)
    detail::fail_argument(k_gpt_owner, "n_head",
                          "gives the head size " + std::to_string(c.n_embd / c.n_head) +
                              ", but rotary embeddings (llama style) need an even one");
  if (!(c.rope_theta > 0.0 && std::isfinite(c.rope_theta)))
    detail::fail_argument(
        k_gpt_owner, "rope_theta",
        "is " + detail::number_str(c.rope_theta) + ", expected a finite theta > 0");
  if (c.num_experts > 0) {
    check_moe(c);
    if (!c.moe_intermediate_size) c.moe_intermediate_size = c.ffn_hidden;
  }
  detail::check_bytes(k_gpt_owner, k_gpt_sizes, "parameters", gpt_parameters(c), element_size);
  return c;
}

// The options of a dense block, or of a sparse one: SparseMoe with experts of
// width moe_intermediate_size, SwiGLU (llama) or gelu_tanh-gated (gpt2).
TransformerBlockOptions block_options(const GPTConfig& c, bool sparse) {
  TransformerBlockOptions o;
  o.style = c.style;
  o.n_heads = c.n_head;
  o.n_kv_heads = c.n_kv_head;
  o.ffn_hidden = c.ffn_hidden;
  o.dropout = c.dropout;
  o.eps = c.eps;
  detail::copy_attention_options(o, c);
  o.hf_mlp = c.hf_mlp;
  if (sparse) {
    if (c.moe_intermediate_size) o.ffn_hidden = c.moe_intermediate_size;
    SparseMoeOptions moe;
    moe.num_experts = c.num_experts;
    moe.top_k = c.num_experts_per_tok;
    moe.norm_topk_prob = c.norm_topk_prob;
    moe.activation = c.style == GPTStyle::gpt2 ? Activation::gelu_tanh : Activation::silu;
    moe.capacity_factor = c.capacity_factor;
    o.moe = moe;
  }
  return o;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

template <class T>
GPT<T>::GPT(const GPTConfig& config) : GPT(config, detail::lvalue(Generator(k_default_seed))) {}

template <class T>
GPT<T>::GPT(const GPTConfig& config, Generator& generator) try
    : config_(checked(config, sizeof(T))),
      wte(config_.vocab_size, config_.n_embd, std::nullopt, generator),
      drop(config_.dropout, generator),
      ln_f(config_.style == GPTStyle::gpt2
               ? std::variant<LayerNorm<T>, RMSNorm<T>>(LayerNorm<T>(config_.n_embd, config_.eps))
               : std::variant<LayerNorm<T>, RMSNorm<T>>(RMSNorm<T>(config_.n_embd, config_.eps))) {
  if (config_.style == GPTStyle::gpt2)
    wpe.emplace(config_.block_size, config_.n_embd, std::nullopt, generator);
  h.reserve(config_.n_layer);
  for (std::size_t l = 0; l < config_.n_layer; ++l)
    h.emplace_back(config_.n_embd, block_options(config_, sparse_layer(config_, l)), generator);
  if (!config_.tie_embeddings)
    lm_head.emplace(config_.n_embd, config_.vocab_size, false, generator);
  initialize(generator);
} catch (const std::bad_alloc& e) {
  detail::rethrow_out_of_memory(k_gpt_owner, "parameters", gpt_parameters(config), sizeof(T), e);
}

template <class T>
void GPT<T>::initialize(Generator& generator) {
  typename Module<T>::NamedParameters list;
  GPT<T>::collect_parameters("", list);  // qualified: no virtual call from the constructor
  const double residual_std = k_init_std / std::sqrt(2.0 * static_cast<double>(config_.n_layer));
  for (auto& [name, p] : list) {
    if (name.find("ln_") != std::string::npos) continue;  // norms keep weight 1, bias 0
    const std::string last = name.substr(name.rfind('.') + 1);
    if (last == "bias" || last.rfind("b_", 0) == 0) {
      p->value.fill(T(0));
      p->mark_changed();
      continue;
    }
    const bool residual =
        ends_with(name, "attn.c_proj.weight") || ends_with(name, "attn.o_proj.weight") ||
        ends_with(name, "mlp.c_proj.weight") || ends_with(name, "mlp.w_down") ||
        ends_with(name, "mlp.down_proj.weight") ||
        (name.find(".experts.") != std::string::npos && ends_with(name, ".w2.weight"));
    const std::vector<std::size_t> shape(p->value.shape().begin(), p->value.shape().end());
    p->set_value(detail::normal<T>(shape, residual ? residual_std : k_init_std, generator));
  }
}

template <class T>
void GPT<T>::check_tokens(const detail::Check& check, const Indices& tokens,
                          std::size_t past) const {
  check.shape(tokens.dimension() == 1 || tokens.dimension() == 2, "tokens", tokens.shape(),
              "[B, T] or [T]");
  const std::size_t t = tokens.shape().back();
  const std::size_t block_size = config_.block_size;
  check.shape(t != 0 && tokens.size() != 0, "tokens", tokens.shape(),
              "at least one token per sequence");
  check.argument(past != 0 || t <= block_size, "tokens", "has ", t,
                 " positions, more than block_size ", block_size);
  check.argument(past + t <= block_size, "tokens", "has ", t, " positions after the ", past,
                 " cached, more than block_size ", block_size);
  detail::check_indices(check.function(), "tokens", tokens, config_.vocab_size);
}

template <class T>
void GPT<T>::check_cache(const detail::Check& check, const KvCache<T>& cache,
                         std::size_t batch) const {
  const std::size_t n_layer = config_.n_layer, heads = *config_.n_kv_head;
  const std::size_t head_dim = config_.n_embd / config_.n_head;
  check.argument(cache.n_layers() == n_layer && cache.batch() == batch &&
                     cache.n_kv_heads() == heads && cache.head_dim() == head_dim,
                 "cache", "has ", cache.n_layers(), " layers, batch ", cache.batch(), ", ",
                 cache.n_kv_heads(), " heads of size ", cache.head_dim(), "; expected ", n_layer,
                 ", ", batch, ", ", heads, ", ", head_dim, " (make_cache)");
  for (std::size_t l = 1; l < n_layer; ++l)
    check.argument(cache.length(l) == cache.length(0), "cache", "has layers of different lengths (",
                   cache.length(0), " and ", cache.length(l), ")");
}

template <class T>
Var<T> GPT<T>::forward(Tape<T>& tape, const Indices& tokens) {
  check_tokens(detail::Check("GPT::forward"), tokens, 0);
  return run(tape, tokens, nullptr);
}

template <class T>
Var<T> GPT<T>::forward(Tape<T>& tape, const Indices& tokens, KvCache<T>& cache) {
  const detail::Check check("GPT::forward");
  check.logic(!tape.grad_enabled(),
              "forward with a KvCache is inference: record on a tape whose recording is off "
              "(NoGradGuard)");
  check_cache(check, cache, tokens.dimension() == 2 ? tokens.shape()[0] : 1);
  check_tokens(check, tokens, cache.length(0));
  cache.check_append(check.function(), 0, tokens.shape().back());  // the layers' lengths agree
  return run(tape, tokens, &cache);
}

template <class T>
GPTOutput<T> GPT<T>::forward_with_losses(Tape<T>& tape, const Indices& tokens) {
  const detail::Check check("GPT::forward_with_losses");
  check_tokens(check, tokens, 0);
  bool sparse = false;
  for (std::size_t l = 0; l < h.size(); ++l) sparse = sparse || is_sparse_layer(l);
  check.logic(!sparse || recompute_every_ == 0 || !tape.grad_enabled(),
              "recomputation (set_recompute_every ", recompute_every_,
              ") keeps no auxiliary loss of the sparse layers: set_recompute_every(0) first");
  GPTOutput<T> out;
  out.logits = run(tape, tokens, nullptr, &out);
  // aux_loss = router_aux_loss_coef * load_balancing_loss + router_z_loss_coef * z_loss
  out.aux_loss = add(scale(out.load_balancing_loss, T(config_.router_aux_loss_coef)),
                     scale(out.z_loss, T(config_.router_z_loss_coef)));
  return out;
}

// tokens (checked) -> logits, nanoGPT's GPT.forward: embeddings, dropout, the
// blocks, the final norm, the head; with `losses`, the sparse layers' losses summed there.
template <class T>
Var<T> GPT<T>::run(Tape<T>& tape, const Indices& tokens, KvCache<T>* cache, GPTOutput<T>* losses) {
  const std::size_t t = tokens.shape().back();
  Var<T> x = embed(tape, tokens, cache);  // [B, T, C]
  if (!cache) x = drop.forward(x);
  x = run_blocks(tape, x, cache, losses);
  x = std::visit([&](auto& n) { return n.forward(x); }, ln_f);
  Var<T> logits = lm_head ? lm_head->forward(x)
                          : linear(x, tape.param(wte.weight), std::nullopt, WeightLayout::out_in);
  if (tokens.dimension() == 1)
    logits = reshape(logits, {std::int64_t(t), std::int64_t(config_.vocab_size)});
  return logits;  // [B, T, vocab] or [T, vocab]
}

// wte(tokens) + wpe(past .. past + T - 1), as [B, T, C], past the cached
// positions; in a padded cache each row's positions count from its start
// (kv_cache.hpp), the padding's are 0. The tokens were checked by forward, the
// positions are below block_size by construction: the embedding ops read them
// without another pass of the modules' checks.
template <class T>
Var<T> GPT<T>::embed(Tape<T>& tape, const Indices& tokens, const KvCache<T>* cache) {
  const std::size_t t = tokens.shape().back(), past = cache ? cache->length(0) : 0;
  Var<T> x = embedding(tokens, tape.param(wte.weight));  // [..., T, C]
  if (wpe) {
    const bool padded = cache && cache->padded();
    Indices positions = xt::empty<std::int64_t>(padded ? std::vector<std::size_t>{cache->batch(), t}
                                                       : std::vector<std::size_t>{t});
    for (std::size_t i = 0; i < positions.size(); ++i) {
      const std::size_t slot = past + i % t, start = padded ? cache->start(i / t) : 0;
      positions.flat(i) = std::int64_t(slot >= start ? slot - start : 0);
    }
    x = add(x, embedding(positions, tape.param(wpe->weight)));  // + [T, C] or [B, T, C]
  }
  if (tokens.dimension() == 1) x = reshape(x, {1, std::int64_t(t), std::int64_t(config_.n_embd)});
  return x;
}

// The blocks h: through the cache, plainly, or in groups of recompute_every_
// blocks, each under one recompute (gpt.hpp).
template <class T>
Var<T> GPT<T>::run_blocks(Tape<T>& tape, Var<T> x, KvCache<T>* cache, GPTOutput<T>* losses) {
  if (losses) {  // sum_l load_balancing_loss_l, sum_l z_loss_l (0 without a sparse layer)
    const xt::xarray<T> zero = T(0);
    losses->load_balancing_loss = tape.leaf(zero, false);
    losses->z_loss = tape.leaf(zero, false);
    for (TransformerBlock<T>& block : h) {
      const BlockOutput<T> b = block.forward_with_losses(x);
      x = b.y;
      if (b.load_balancing_loss) {
        losses->load_balancing_loss = add(losses->load_balancing_loss, *b.load_balancing_loss);
        losses->z_loss = add(losses->z_loss, *b.z_loss);
      }
    }
  } else if (cache) {
    for (std::size_t l = 0; l < h.size(); ++l) x = h[l].forward(x, *cache, l);
  } else if (recompute_every_ == 0 || !tape.grad_enabled()) {
    for (TransformerBlock<T>& block : h) x = block.forward(x);
  } else {
    for (std::size_t first = 0; first < h.size(); first += recompute_every_) {
      std::vector<Module<T>*> group;
      for (std::size_t l = first; l < std::min(first + recompute_every_, h.size()); ++l)
        group.push_back(&h[l]);
      x = recompute_modules(group, x);
    }
  }
  return x;
}

template <class T>
xt::xarray<T> GPT<T>::infer(const Indices& tokens) const {
  const detail::InferenceScope inference;
  Tape<T> tape;
  tape.set_grad_enabled(false);
  // forward only reads the parameters when recording is off (see Module::infer).
  const Var<T> y = const_cast<GPT<T>*>(this)->forward(tape, tokens);
  return std::move(tape.value_mut(y.index()));
}

template <class T>
KvCache<T> GPT<T>::make_cache(std::size_t batch) const {
  return KvCache<T>(batch, config_.n_layer, *config_.n_kv_head, config_.n_embd / config_.n_head,
                    config_.block_size);
}

template <class T>
bool GPT<T>::is_sparse_layer(std::size_t l) const {
  return l < h.size() && h[l].sparse_moe() != nullptr;
}

template <class T>
std::vector<MoeStats> GPT<T>::router_stats() const {
  std::vector<MoeStats> out;
  for (const TransformerBlock<T>& block : h)
    out.push_back(block.sparse_moe() ? block.sparse_moe()->router_stats() : MoeStats{});
  return out;
}

template <class T>
void GPT<T>::collect_parameters(const std::string& prefix,
                                typename Module<T>::NamedParameters& out) {
  this->add_child(prefix, "wte", wte, out);
  if (wpe) this->add_child(prefix, "wpe", *wpe, out);
  this->add_child(prefix, "drop", drop, out);
  for (std::size_t l = 0; l < h.size(); ++l)
    this->add_child(prefix, "h." + std::to_string(l), h[l], out);
  std::visit([&](auto& n) { this->add_child(prefix, "ln_f", n, out); }, ln_f);
  if (lm_head) this->add_child(prefix, "lm_head", *lm_head, out);
}

template <class T>
ModuleConfig GPT<T>::config() const {
  ModuleConfig out = ModuleConfig("GPT")
                         .add("vocab_size", config_.vocab_size)
                         .add("block_size", config_.block_size)
                         .add("n_layer", config_.n_layer)
                         .add("n_head", config_.n_head)
                         .add("n_embd", config_.n_embd)
                         .add("n_kv_head", *config_.n_kv_head)
                         .add("ffn_hidden", *config_.ffn_hidden)
                         .add("style", style_name(config_.style))
                         .add("dropout", config_.dropout)
                         .add("tie_embeddings", config_.tie_embeddings);
  detail::add_block_options(out, config_);
  if (config_.num_experts > 0)  // a dense GPT's config stays that of a GPT without MoE
    out.add("num_experts", config_.num_experts)
        .add("num_experts_per_tok", config_.num_experts_per_tok)
        .add("decoder_sparse_step", config_.decoder_sparse_step)
        .add("moe_intermediate_size", *config_.moe_intermediate_size)
        .add("norm_topk_prob", config_.norm_topk_prob)
        .add("capacity_factor", config_.capacity_factor.value_or(0.0))
        .add("router_aux_loss_coef", config_.router_aux_loss_coef)
        .add("router_z_loss_coef", config_.router_z_loss_coef);
  return out;
}

template class GPT<float>;
template class GPT<double>;

template <class T>
Var<T> next_token_loss(const Var<T>& logits, const Indices& targets) {
  const detail::Check check("next_token_loss");
  check.shape(logits.dimension() == 3, "logits", logits.shape(), "[B, T, V]");
  const auto vocab = static_cast<std::int64_t>(logits.shape()[2]);
  return cross_entropy(reshape(logits, {-1, vocab}), targets);
}

template Var<float> next_token_loss(const Var<float>&, const Indices&);
template Var<double> next_token_loss(const Var<double>&, const Indices&);

}  // namespace xtgrad

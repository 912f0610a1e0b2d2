#pragma once
// GPT<T>(GPTConfig, [generator]): a decoder-only Transformer language model.
//
//   gpt2 style (Radford et al. 2019, HF GPT2LMHeadModel; Karpathy's nanoGPT):
//     x = drop(wte[tokens] + wpe[0 .. T-1]);  x = h_l(x) for l < n_layer;
//     logits = ln_f(x) W^T,  W = wte.weight (tie_embeddings) or lm_head.weight
//   llama style (Touvron et al. 2023, HF LlamaForCausalLM): no wpe (rotary
//     positions inside the attention), RMSNorm, SwiGLU, grouped-query attention;
//     optionally attention biases and rope scaling (causal_self_attention.hpp).
// Blocks are TransformerBlock (transformer_block.hpp). Parameter names, as
// HF GPT2Model's where it has them: "wte.weight" [vocab, C], "wpe.weight"
// [block_size, C] (gpt2), "h.<l>.<block names>", "ln_f.weight" (+ "ln_f.bias"
// for gpt2), "lm_head.weight" [vocab, C] when not tied (nn.Linear, no bias).
// pretrained/hf_gpt2.hpp loads and exports HF GPT-2 checkpoints,
// pretrained/hf_llama.hpp whole LLaMA-family ones.
//
// Initialization (HF GPT2PreTrainedModel._init_weights, nanoGPT's
// _init_weights): every weight matrix and embedding normal(0, 0.02), biases 0,
// norms weight 1 (bias 0); the projections that write into the residual
// stream (attn.c_proj / attn.o_proj, mlp.c_proj / mlp.w_down / mlp.down_proj) normal(0, 0.02 /
// sqrt(2 n_layer)), GPT-2's scaling of residual layers (nanoGPT applies it to
// the attention and MLP c_proj alike; HF only when loading no checkpoint).
// Drawn in the order of named_parameters() after the blocks are built.
//
// forward(tape, tokens [B, T] or [T]) -> logits [B, T, vocab] (or [T, vocab]);
// 1 <= T <= block_size, every id in [0, vocab). forward(tape, tokens, cache)
// runs the rows as the positions cache.length(0) .. (make_cache; no-grad tape;
// counted from each row's start in a padded cache, kv_cache.hpp),
// for incremental decoding: its logits equal those rows of the full forward.
// generate(prompt, n, temperature, top_k, seed): autoregressive sampling
// under no-grad with a KvCache, eval semantics (no dropout) whatever the
// mode. Each step takes the last row of logits, divides it by temperature,
// keeps the top_k largest (ties at the k-th value kept, as torch.topk's
// threshold in nanoGPT), softmaxes in double and draws by inverse CDF with
// u = the top 53 bits of a Generator (init.hpp) seeded with `seed` / 2^53; the
// same seed gives the same tokens. temperature 0 is greedy (the first
// argmax; sampling.hpp). prompt.size() + n must be <= block_size (no
// sliding window). generate(prompts, options) continues a batch of prompts
// of any lengths, with top-p, stop tokens and a sliding window past
// block_size (gpt_generate.hpp).
//
// Sparse mixture of experts (Mixtral, HF MixtralForCausalLM; Qwen2-MoE,
// Qwen2MoeForCausalLM), when num_experts E > 0: the FFN of layer l
// (0-based) is a SparseMoe (moe.hpp) when (l + 1) % decoder_sparse_step == 0
// (Qwen2-MoE's rule: 1, the default, makes every layer sparse as Mixtral; 2
// every second layer, from layer 1); the other layers keep the dense FFN.
// Each token goes to its num_experts_per_tok = k experts of the router's
// softmax, their weights renormalized to sum 1 when norm_topk_prob; each
// expert is a gated FFN of width moe_intermediate_size (default ffn_hidden):
// SwiGLU in the llama style, gelu_tanh-gated in the gpt2 style; capacity_factor
// caps the tokens of each expert (none: dropless). The sparse FFN is the
// block's child "block_sparse_moe" (llama, Mixtral's name) or "mlp" (gpt2;
// transformer_block.hpp), so "h.<l>.block_sparse_moe.gate.weight" [E, C],
// "h.<l>.block_sparse_moe.experts.<j>.w1.weight" [H, C] (w3 the same, w2
// [C, H]). Initialization as above: the router normal(0, 0.02), each
// expert's w2 the residual scaling.
// Auxiliary losses: forward_with_losses(tape, tokens) returns the logits and
//   load_balancing_loss = sum over the sparse layers of SparseMoe's
//                         load_balancing_loss (E * sum_e f_e P_e of each layer)
//   z_loss              = sum over the sparse layers of SparseMoe's z_loss
//   aux_loss            = router_aux_loss_coef * load_balancing_loss
//                         + router_z_loss_coef * z_loss,
// 0-d Vars on the tape; the caller adds aux_loss to its loss (transformers'
// output_router_logits with router_aux_loss_coef; transformers computes the
// balancing loss once over every layer's tokens together, xtgrad per layer
// and sums, as Switch Transformer's per-layer auxiliary loss). A dense GPT
// returns 0 for all three (constant leaves). forward(tape, tokens) records
// no auxiliary loss. router_stats() gives each layer's tokens per expert of
// the last forward (empty for a dense layer). Recomputation
// (set_recompute_every) keeps no auxiliary loss: forward_with_losses of a
// GPT with sparse layers on a recording tape refuses it (std::logic_error).
// The KV cache and generate run the sparse layers as the full forward does
// (a capacity_factor counts the tokens of each forward call, so through a
// cache, a token or a few at a time, it cuts differently from the full
// forward: leave it unset for generation).
// config() records the MoE options only when num_experts > 0: a dense GPT's
// config and checkpoints are unchanged, and a MoE checkpoint refuses to load
// into a dense GPT (Module::load's config mismatch, "num_experts=...").
//
// Activation recomputation: set_recompute_every(k) runs the blocks h in
// groups of k consecutive blocks (the last group may be shorter), each group
// under one recompute (modules/recompute_modules.hpp), as
// Sequential::set_recompute_every does: backward keeps only the groups'
// inputs and outputs ([B, T, C] each) instead of every block's attention
// and MLP intermediates, and re-runs each group once, its dropouts with the
// forward's masks. Gradients are those without it, bit for bit; the cost is
// one more forward of the blocks per step. 0 (the default) turns it off; a
// tape that does not record (infer, generate, a KvCache) never recomputes.
// It is a way of running, not part of the model: config(), state dicts and
// saved weights do not record it.
//
// Errors (std::invalid_argument, before anything changes): zero sizes,
// n_head not dividing n_embd, n_kv_head not dividing n_head (or given for
// gpt2), probabilities and eps out of range; num_experts 1 (a mixture of one
// expert is the dense FFN), num_experts_per_tok 0 or > num_experts,
// decoder_sparse_step 0 or > n_layer (no sparse layer), moe_intermediate_size
// 0, a capacity_factor not finite and > 0, a router loss coefficient not
// finite and >= 0 (the MoE options are read only when num_experts > 0);
// tokens of rank other than 1 or 2, T = 0 or > block_size, ids outside the vocabulary; a cache past its
// capacity or of another shape; generate with an empty prompt, a negative or
// non-finite temperature, top_k = 0, or too many tokens for block_size;
// sizes whose products overflow or whose parameters exceed the machine's
// memory (engine/checked_size.hpp). An allocation below that bound that
// fails throws OutOfMemoryError naming GPT and the bytes.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <variant>
#include <vector>

#include "../engine/errors.hpp"
#include "../engine/indices.hpp"
#include "embedding.hpp"
#include "gpt_generate.hpp"
#include "moe.hpp"
#include "transformer_block.hpp"

namespace xtgrad {

struct GPTConfig {
  std::size_t vocab_size = 0, block_size = 0, n_layer = 0, n_head = 0, n_embd = 0;
  std::optional<std::size_t> n_kv_head;   // llama style: grouped-query attention
  std::optional<std::size_t> ffn_hidden;  // default 4 * n_embd (gpt2), LLaMA's rule (llama)
  GPTStyle style = GPTStyle::gpt2;        // gpt2: learned positions, LayerNorm, gelu_tanh, biases
  double dropout = 0.0;                   // embedding, attention and residual dropout
  bool tie_embeddings = true;             // lm_head shares wte
  double eps = 1e-5;
  double rope_theta = 10000.0;
  bool qkv_bias = false, o_bias = false;  // llama style: attention biases (Qwen2: qkv_bias)
  RopeScaling rope_scaling;               // llama style: rotary frequency scaling
  bool hf_mlp = false;  // llama style: MLPs named and laid out as HF's (transformer_block.hpp)
  // Sparse mixture of experts (see above; Hugging Face's config names).
  std::size_t num_experts = 0;                       // E; 0: every FFN dense
  std::size_t num_experts_per_tok = 2;               // k
  std::size_t decoder_sparse_step = 1;               // layer l sparse when (l + 1) % step == 0
  std::optional<std::size_t> moe_intermediate_size;  // each expert's width; default ffn_hidden
  bool norm_topk_prob = true;                        // renormalize the k weights
  std::optional<double> capacity_factor;             // none: dropless
  double router_aux_loss_coef = 0.001;               // of load_balancing_loss in aux_loss
  double router_z_loss_coef = 0.0;                   // of z_loss in aux_loss
};

// Logits and the auxiliary losses of the sparse layers (see above), 0-d.
template <class T>
struct GPTOutput {
  Var<T> logits;    // [B, T, vocab] or [T, vocab]
  Var<T> aux_loss;  // router_aux_loss_coef * load_balancing_loss + router_z_loss_coef * z_loss
  Var<T> load_balancing_loss;  // summed over the sparse layers
  Var<T> z_loss;               // summed over the sparse layers
};

template <class T>
class GPT : public Module<T> {
  GPTConfig config_;  // n_kv_head and ffn_hidden filled in; first: the members use it

 public:
  GPT(const GPTConfig& config, Generator& generator);
  explicit GPT(const GPTConfig& config);

  Var<T> forward(Tape<T>& tape, const Indices& tokens);
  Var<T> forward(Tape<T>& tape, const Indices& tokens, KvCache<T>& cache);
  // The logits and the MoE's auxiliary losses (see above).
  GPTOutput<T> forward_with_losses(Tape<T>& tape, const Indices& tokens);
  // (A Var input is not a token tensor: these throw std::logic_error.)
  using Module<T>::forward;
  xt::xarray<T> infer(const Indices& tokens) const;  // no-grad, nothing kept, eval semantics

  // An empty cache for `batch` sequences of up to block_size positions.
  KvCache<T> make_cache(std::size_t batch = 1) const;

  std::vector<std::int64_t> generate(const std::vector<std::int64_t>& prompt,
                                     std::size_t max_new_tokens, double temperature = 1.0,
                                     std::optional<std::size_t> top_k = std::nullopt,
                                     std::uint64_t seed = 0) const;
  // Each prompt followed by its new tokens (gpt_generate.hpp).
  std::vector<std::vector<std::int64_t>> generate(
      const std::vector<std::vector<std::int64_t>>& prompts,
      const GenerationOptions& options) const;

  // Recompute every group of k blocks (see above); 0 is off.
  void set_recompute_every(std::size_t k) { recompute_every_ = k; }
  std::size_t recompute_every() const { return recompute_every_; }

  // Whether layer l's FFN is sparse; each layer's tokens per expert in its last forward.
  bool is_sparse_layer(std::size_t l) const;
  std::vector<MoeStats> router_stats() const;

  const GPTConfig& gpt_config() const { return config_; }
  ModuleConfig config() const override;

  Embedding<T> wte;
  std::optional<Embedding<T>> wpe;  // gpt2 style
  Dropout<T> drop;
  std::vector<TransformerBlock<T>> h;
  std::variant<LayerNorm<T>, RMSNorm<T>> ln_f;
  std::optional<Linear<T>> lm_head;  // when !tie_embeddings

 protected:
  void collect_parameters(const std::string& prefix,
                          typename Module<T>::NamedParameters& out) override;

 private:
  void check_tokens(const detail::Check& check, const Indices& tokens, std::size_t past) const;
  void check_cache(const detail::Check& check, const KvCache<T>& cache, std::size_t batch) const;
  Var<T> run(Tape<T>& tape, const Indices& tokens, KvCache<T>* cache,
             GPTOutput<T>* losses = nullptr);
  Var<T> embed(Tape<T>& tape, const Indices& tokens, const KvCache<T>* cache);
  // tokens [B, T] through the cache -> the logits of their last row [B, V] (generate).
  xt::xarray<T> last_logits(Tape<T>& tape, const Indices& tokens, KvCache<T>& cache);
  Var<T> run_blocks(Tape<T>& tape, Var<T> x, KvCache<T>* cache, GPTOutput<T>* losses);
  void initialize(Generator& generator);

  std::size_t recompute_every_ = 0;
};

extern template class GPT<float>;
extern template class GPT<double>;

// The loss of next-token prediction (nanoGPT's GPT.forward with targets):
// the mean cross-entropy of logits [B, T, V] (forward's) against targets
// [B * T] (TokenWindows::targets, data/token_windows.hpp), that is
// cross_entropy(reshape(logits, {-1, V}), targets). std::invalid_argument
// naming next_token_loss for logits that are not [B, T, V]; cross_entropy's
// for targets that do not match them.
template <class T>
Var<T> next_token_loss(const Var<T>& logits, const Indices& targets);

extern template Var<float> next_token_loss(const Var<float>&, const Indices&);
extern template Var<double> next_token_loss(const Var<double>&, const Indices&);

}  // namespace xtgrad

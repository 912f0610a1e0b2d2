#pragma once
// TransformerBlock<T>(n_embd C, TransformerBlockOptions, [generator]): one
// pre-norm decoder layer,
//   x = x + attn(ln_1(x))
//   y = x + dropout(mlp(ln_2(x))),          x, y [B, T, C],
// in one of two styles (GPTStyle):
//   gpt2  (Radford et al. 2019; HF modeling_gpt2.py GPT2Block): LayerNorm(C, eps),
//         CausalSelfAttention in the gpt2 layout (c_attn / c_proj Conv1D, biases,
//         no rotary), mlp = GPT2MLP(C, ffn_hidden) (HF's GPT2MLP: c_fc / c_proj
//         Conv1D, gelu_tanh = HF's "gelu_new"), ffn_hidden default 4 C.
//   llama (Touvron et al. 2023; HF modeling_llama.py LlamaDecoderLayer):
//         RMSNorm(C, eps), CausalSelfAttention in the llama layout (q/k/v/o_proj,
//         no biases unless qkv_bias / o_bias) with rotary embeddings (rope_theta,
//         rope_scaling) and n_kv_heads
//         (grouped-query attention), mlp = GatedFFN(C, ffn_hidden, C, silu)
//         (SwiGLU, no biases), or with hf_mlp the same function as Hugging
//         Face's LlamaMLP, GatedExpert(C, ffn_hidden, silu, ExpertNames::llama)
//         (moe.hpp: gate_proj / up_proj / down_proj, nn.Linear [out, in]);
//         ffn_hidden default LLaMA's rule:
//         256 * ceil(floor(2 * 4C / 3) / 256) (Meta's llama model.py, multiple_of 256).
// Children: "ln_1", "attn", "ln_2", "mlp", "dropout" (p = dropout, on the mlp
// output as HF GPT2MLP's dropout); the attention's attn_dropout and
// resid_dropout are `dropout` too. In the gpt2 style every parameter has HF
// GPT2Block's name and layout ("ln_1.weight", "attn.c_attn.weight" [C, 3C],
// "mlp.c_fc.weight" [C, H], ...), so a GPT-2 block's state dict loads with
// load_state_dict as it is; the llama style uses the FFN modules' own names
// (docs/modules.md lists both).
//
// Sparse FFN (options.moe set): mlp is a SparseMoe(C, ffn_hidden, *options.moe)
// (moe.hpp: router, top-k, gated experts of width ffn_hidden each) instead of
// the dense FFN, the child named as Hugging Face names it:
//   llama style: "block_sparse_moe" (Mixtral's MixtralDecoderLayer), so that
//                "block_sparse_moe.gate.weight", "block_sparse_moe.experts.<j>.w1.weight";
//   gpt2 style:  "mlp" (GPT-2 has no Hugging Face MoE; Qwen2-MoE,
//                SwitchTransformers and Megatron-LM's MoE GPT keep the FFN's
//                name "mlp" and put the router and experts under it):
//                "mlp.gate.weight", "mlp.experts.<j>.w1.weight".
// forward_with_losses(x) also returns the MoE's auxiliary losses (0-d Vars,
// none for a dense block); forward(x) records none. config() holds the
// SparseMoe's config as a child named as the FFN.
//
// forward(x, cache, layer) is the attention's incremental form (attention.hpp).
// Errors (std::invalid_argument): as the children's constructors (zero sizes,
// heads not dividing C, eps, probabilities), a style outside the enumeration,
// n_kv_heads != n_heads in the gpt2 style, the MoE options SparseMoe refuses
// (zero experts or top_k, top_k > num_experts, a capacity factor not finite
// and > 0); forward: an x that is not [B, T, C], before anything is recorded.

#include <cstddef>
#include <optional>
#include <variant>

#include "causal_self_attention.hpp"
#include "gated_ffn.hpp"
#include "gpt2_mlp.hpp"
#include "moe.hpp"
#include "norm.hpp"

namespace xtgrad {

enum class GPTStyle { gpt2, llama };

struct TransformerBlockOptions {
  GPTStyle style = GPTStyle::gpt2;
  std::size_t n_heads = 1;
  std::optional<std::size_t> n_kv_heads;  // llama: grouped-query attention
  std::optional<std::size_t> ffn_hidden;  // default: see above
  double dropout = 0.0;
  double eps = 1e-5;
  double rope_theta = 10000.0;
  bool qkv_bias = false, o_bias = false;  // llama: CausalSelfAttentionOptions'
  RopeScaling rope_scaling;               // llama
  bool hf_mlp = false;                    // llama: GatedExpert instead of GatedFFN
  std::optional<SparseMoeOptions> moe;  // a sparse FFN of experts of width ffn_hidden; none: dense
};

// A block's output and, when its FFN is sparse, the MoE's auxiliary losses
// (moe.hpp's load_balancing_loss and z_loss, 0-d).
template <class T>
struct BlockOutput {
  Var<T> y;
  std::optional<Var<T>> load_balancing_loss;
  std::optional<Var<T>> z_loss;
};

// The default FFN width of a style (see above).
std::size_t default_ffn_hidden(GPTStyle style, std::size_t n_embd);

namespace detail {
// default_ffn_hidden, std::invalid_argument naming `owner` when the width
// overflows std::size_t.
std::size_t default_ffn_hidden(const char* owner, GPTStyle style, std::size_t n_embd);
// The parameter elements of TransformerBlock(n_embd, options), counted
// without wrapping (checked_size.hpp); the options filled in (ffn_hidden,
// n_kv_heads) as the constructor does.
WideCount transformer_block_parameters(std::size_t n_embd, const TransformerBlockOptions& options);

// The attention options that TransformerBlockOptions, GPTConfig and
// LlamaConfig share by name, copied from one to another.
template <class To, class From>
void copy_attention_options(To& to, const From& from) {
  to.rope_theta = from.rope_theta;
  to.qkv_bias = from.qkv_bias;
  to.o_bias = from.o_bias;
  to.rope_scaling = from.rope_scaling;
}

// The tail of a block's and a GPT's config: "eps", "rope_theta", then
// "qkv_bias", "o_bias" and "hf_mlp" only when set and the rope scaling only
// when there is one (add_rope_scaling), so that the configs of models
// without them stay as they were.
template <class Options>
void add_block_options(ModuleConfig& out, const Options& o) {
  out.add("eps", o.eps).add("rope_theta", o.rope_theta);
  if (o.qkv_bias) out.add("qkv_bias", true);
  if (o.o_bias) out.add("o_bias", true);
  add_rope_scaling(out, o.rope_scaling);
  if (o.hf_mlp) out.add("hf_mlp", true);
}
}  // namespace detail
// "gpt2" / "llama".
const char* style_name(GPTStyle style);

template <class T>
class TransformerBlock : public Module<T> {
  std::size_t n_embd_;
  TransformerBlockOptions options_;  // defaults filled in; first: the members use it

 public:
  TransformerBlock(std::size_t n_embd, TransformerBlockOptions options);
  TransformerBlock(std::size_t n_embd, TransformerBlockOptions options, Generator& generator);

  Var<T> forward(const Var<T>& x) override;
  Var<T> forward(const Var<T>& x, KvCache<T>& cache, std::size_t layer = 0);
  BlockOutput<T> forward_with_losses(const Var<T>& x);
  ModuleConfig config() const override;

  // The sparse FFN, null for a dense block.
  SparseMoe<T>* sparse_moe() { return std::get_if<SparseMoe<T>>(&mlp); }
  const SparseMoe<T>* sparse_moe() const { return std::get_if<SparseMoe<T>>(&mlp); }
  // The FFN child's name: "mlp", or "block_sparse_moe" for a sparse llama block.
  const char* mlp_name() const;

  std::size_t n_embd() const { return n_embd_; }
  const TransformerBlockOptions& options() const { return options_; }

  std::variant<LayerNorm<T>, RMSNorm<T>> ln_1;
  CausalSelfAttention<T> attn;
  std::variant<LayerNorm<T>, RMSNorm<T>> ln_2;
  std::variant<GPT2MLP<T>, GatedFFN<T>, GatedExpert<T>, SparseMoe<T>> mlp;
  Dropout<T> dropout;

 protected:
  void collect_parameters(const std::string& prefix,
                          typename Module<T>::NamedParameters& out) override;

 private:
  BlockOutput<T> run(const Var<T>& x, KvCache<T>* cache, std::size_t layer, bool losses);
};

extern template class TransformerBlock<float>;
extern template class TransformerBlock<double>;

}  // namespace xtgrad

#pragma once
// SparseMoe<T>: the sparse mixture-of-experts feed-forward block of Mixtral
// (transformers' MixtralSparseMoeBlock) and Qwen2-MoE (Qwen2MoeSparseMoeBlock),
// x [..., C] -> [..., C]:
//
//   logits = x . gate^T                    [N, E]   router, nn.Linear(C, E, bias=False)
//   p = softmax(logits)                    [N, E]
//   top-k experts of each token by p, ties as torch.topk on the CPU (ops/moe.hpp)
//   w = p at the chosen experts            [N, k];  w /= sum_s w when norm_topk_prob
//   y = sum_s w[t, s] * expert_{e(t,s)}(x[t])   (ops/moe.hpp's moe_experts, fused)
//   y += sigmoid(x . shared_expert_gate^T) * shared_expert(x)   (with a shared expert)
// An expert is the gated FFN down(f(gate(x)) * up(x)), f = options.activation
// (SwiGLU by default). Dropless unless options.capacity_factor: then each
// expert keeps at most ceil(cf * N * k / E) tokens, the first in token order,
// and a dropped choice contributes 0 (Switch Transformer).
//
// Parameter names are Hugging Face's, so that a Mixtral layer's state dict
// loads without renaming under a child named "block_sparse_moe" (a
// Qwen2-MoE layer's under "mlp", with expert_names = ExpertNames::llama):
//   gate.weight                         [E, C]
//   experts.{j}.w1.weight               [H, C]   gate projection (activated)
//   experts.{j}.w3.weight               [H, C]   up projection
//   experts.{j}.w2.weight               [C, H]   down projection
//   (ExpertNames::llama: experts.{j}.gate_proj / up_proj / down_proj.weight)
//   shared_expert.gate_proj.weight      [Hs, C]  (Qwen2MoeMLP)
//   shared_expert.up_proj.weight        [Hs, C]
//   shared_expert.down_proj.weight      [C, Hs]
//   shared_expert_gate.weight           [1, C]
// Initialization: nn.Linear's, uniform in +-1/sqrt(fan_in), from the generator.
//
// Auxiliary losses (forward_with_losses), Vars the caller adds to its loss:
//   load_balancing_loss = E * sum_e f_e * P_e       (transformers'
//     load_balancing_loss_func for one layer, Switch Transformer eq. 4 summed
//     over the k choices): f_e = (choices of expert e, before any capacity
//     cut) / N, no gradient; P_e = mean over tokens of p[:, e]. Uniform
//     routing gives k.
//   z_loss = mean over tokens of logsumexp(logits)^2   (ST-MoE, Zoph et al. 2022)
// Router statistics of the last forward: router_stats().
//
// Memory: the experts op keeps only the two hidden projections of the N * k
// routed rows (2 H values each), never [E, N, H]; see ops/moe.hpp.
//
// Expert parallelism (ops/moe.hpp's MoeExchange; distributed/
// expert_parallel.hpp sets it up over MPI): shard_experts(exchange) keeps
// only rank r's experts [r E/P, (r+1) E/P) of the P ranks, under their
// global names ("experts.5.w1.weight" on the rank holding expert 5). The
// router, the shared expert and its gate stay replicated (data-parallel);
// expert_parameters() lists the routed experts' parameters, the ones a
// gradient synchronizer must leave alone. Forward then is collective: every
// rank routes its own tokens, the rows go to their experts' ranks and back
// (moe_experts with an exchange). So is inference: infer (Module::infer)
// runs the same exchanges, so every rank must call it as often and in the
// same order as the others (each on its own tokens, zero tokens included),
// and not from several threads at once; unsharded, infer is local. The capacity is the global batch's, and
// router_stats() and the auxiliary losses use the global batch's counts
// (one all-gather): each rank's losses are its share, scaled so that their
// mean over the ranks (and the mean of their gradients, what a gradient
// synchronizer computes) equals one process's on the global batch:
//   load_balancing_loss_r = E * sum_e f_e * (P / N) * sum over its tokens of p[t, e]
//   z_loss_r = (P / N) * sum over its tokens of lse^2
// with f_e and N over all ranks: the local means when the shards are equal
// (N = P n_r), and 0 on a rank without tokens.
//
// Errors (std::invalid_argument naming the argument and the values, before
// anything is recorded): num_experts, top_k, hidden_size or
// intermediate_size 0, top_k > num_experts, a capacity factor not finite
// and > 0, an activation outside the enumeration (constructor); x not
// [..., C], a router or expert weight whose shape no longer fits (forward).

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../engine/activation.hpp"
#include "../engine/moe_routing.hpp"
#include "../engine/ops/moe.hpp"
#include "init.hpp"
#include "linear.hpp"
#include "module.hpp"

namespace xtgrad {

// How a GatedExpert names its three projections.
enum class ExpertNames {
  mixtral,  // w1 (gate), w3 (up), w2 (down): MixtralBlockSparseTop2MLP
  llama,    // gate_proj, up_proj, down_proj: LlamaMLP, Qwen2MoeMLP
};

// One expert: y = down(f(gate(x)) * up(x)), three nn.Linear without bias
// (weights [out, in]), x [..., d_model] -> [..., d_model].
template <class T>
class GatedExpert : public Module<T> {
 public:
  GatedExpert(std::size_t d_model, std::size_t d_hidden, Activation activation, ExpertNames names,
              Generator& generator);

  Var<T> forward(const Var<T>& x) override;
  ModuleConfig config() const override;

  Activation activation() const { return activation_; }
  ExpertNames names() const { return names_; }

  Linear<T> gate;  // [d_hidden, d_model], "w1" or "gate_proj"
  Linear<T> up;    // [d_hidden, d_model], "w3" or "up_proj"
  Linear<T> down;  // [d_model, d_hidden], "w2" or "down_proj"

 protected:
  void collect_parameters(const std::string& prefix,
                          typename Module<T>::NamedParameters& out) override;

 private:
  Activation activation_;
  ExpertNames names_;
};

struct SparseMoeOptions {
  std::size_t num_experts = 8;                      // E (Mixtral's num_local_experts)
  std::size_t top_k = 2;                            // k (num_experts_per_tok)
  bool norm_topk_prob = true;                       // renormalize the k weights (Mixtral: always)
  Activation activation = Activation::silu;         // of every expert (SwiGLU)
  std::optional<double> capacity_factor;            // none: dropless
  std::size_t shared_expert_intermediate_size = 0;  // 0: no shared expert (Qwen2-MoE's)
  ExpertNames expert_names = ExpertNames::mixtral;  // llama: Qwen2-MoE's routed experts
};

// Tokens per expert in one forward.
struct MoeStats {
  std::vector<std::size_t> routed;  // [E] choices of each expert (before any capacity cut)
  std::vector<std::size_t> kept;    // [E] tokens each expert computed
  std::size_t tokens = 0;           // N
  std::size_t dropped = 0;          // choices dropped for want of capacity
};

template <class T>
struct MoeOutput {
  Var<T> y;                    // [..., C]
  Var<T> load_balancing_loss;  // 0-d
  Var<T> z_loss;               // 0-d
  MoeStats stats;
};

template <class T>
class SparseMoe : public Module<T> {
 public:
  SparseMoe(std::size_t hidden_size, std::size_t intermediate_size, SparseMoeOptions options = {});
  SparseMoe(std::size_t hidden_size, std::size_t intermediate_size, SparseMoeOptions options,
            Generator& generator);

  // y only (no auxiliary losses recorded).
  Var<T> forward(const Var<T>& x) override;
  // y, both auxiliary losses and the statistics.
  MoeOutput<T> forward_with_losses(const Var<T>& x);
  ModuleConfig config() const override;

  const SparseMoeOptions& options() const { return options_; }
  std::size_t hidden_size() const { return hidden_size_; }
  std::size_t intermediate_size() const { return intermediate_size_; }
  // The routing statistics of the last forward outside infer (empty before the first).
  const MoeStats& router_stats() const { return stats_; }

  // Expert parallelism (see above). Throws std::invalid_argument for a null
  // exchange or num_experts not a multiple of its ranks, std::logic_error
  // when the experts are sharded already. Local: the exchange's ranks must
  // all call it (distributed::shard_experts does, after checking that the
  // ranks hold the same model).
  void shard_experts(std::shared_ptr<const MoeExchange> exchange);
  bool experts_sharded() const { return exchange_ != nullptr; }
  // The global index of experts[0] (0 unless sharded).
  std::size_t first_expert() const { return first_expert_; }
  // The routed experts' parameters (this rank's own when sharded), in
  // named_parameters order; every other parameter is replicated.
  std::vector<Parameter<T>*> expert_parameters();

  Linear<T> gate;                               // the router, [E, C]
  std::vector<GatedExpert<T>> experts;          // E, Mixtral names
  std::optional<GatedExpert<T>> shared_expert;  // Qwen2-MoE names
  std::optional<Linear<T>> shared_expert_gate;  // [1, C]

 protected:
  void collect_parameters(const std::string& prefix,
                          typename Module<T>::NamedParameters& out) override;

 private:
  MoeOutput<T> run(const Var<T>& x, bool losses);

  SparseMoeOptions options_;
  std::size_t hidden_size_;
  std::size_t intermediate_size_;
  MoeStats stats_;
  std::shared_ptr<const MoeExchange> exchange_;  // null: every expert here
  std::size_t first_expert_ = 0;
};

extern template class GatedExpert<float>;
extern template class GatedExpert<double>;
extern template class SparseMoe<float>;
extern template class SparseMoe<double>;

}  // namespace xtgrad

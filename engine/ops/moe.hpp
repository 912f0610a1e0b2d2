#pragma once
// The mixture-of-experts feed-forward of Mixtral and Qwen2-MoE (Shazeer et
// al. 2017; Fedus et al. 2021, Switch Transformer), as two steps: the routing
// (discrete, no gradient) and the experts op (fused, differentiable).
//
//   moe_route(p, k, capacity_factor)    p [..., E] router probabilities, N rows
//     each row's top-k experts, ties broken as torch.topk on the CPU (see
//     kernels/moe_kernels.hpp: not "lowest index first"; with eight equal
//     values torch and xtgrad pick indices 6 and 5), then the counting sort
//     of the N * k choices by expert into a MoeRouting (engine/moe_routing.hpp).
//     Dropless by default; with a capacity factor cf each expert keeps at
//     most ceil(cf * N * k / E) choices, the first in token order, and the
//     others are dropped (Switch Transformer).
//
//   moe_experts(x, weights, routing, w1, w3, w2, f)
//     y[t] = sum over t's kept choices c = t k + s of weights[t, s] * E_e(x[t]),
//     E_e(x) = (f(x W1_e^T) * (x W3_e^T)) W2_e^T      e = routing.expert[c]
//   Shapes: x [..., C] (N rows), weights [..., k] (x's leading axes), w1[e] and
//   w3[e] [H, C], w2[e] [C, H] (nn.Linear's [out, in], Mixtral's w1 = gate,
//   w3 = up, w2 = down), y [..., C]. A dropped choice contributes nothing and
//   its weight's gradient is 0.
//   Derivatives (kernels/moe_kernels.hpp has every line), with o_c = E_e(x[t]):
//     dweights[t, s] = dy[t] . o_c
//     dx[t] = sum over kept c of the gated FFN's input gradient of w[c] dy[t]
//     dW1_e, dW3_e, dW2_e: the gated FFN's over expert e's rows, dy scaled by w
//   The gradient of the router reaches the logits through `weights` (gather
//   and softmax ops before this one).
//
// Cost: the tokens are permuted once, each expert runs as three GEMMs
// forward and six backward over its own contiguous rows (no padding, no
// [E, N, H] tensor); the op keeps g and u (2 H values per kept choice) in
// its node for backward, and there gathers x's and dy's rows again and
// recomputes u * f(g) a block of rows at a time (the weights' gradient
// dy[t] . o = (dy[t] . W2) . (u * f(g)) needs no stored o).
//
// Errors, before anything is recorded: std::invalid_argument naming the op,
// the argument and both shapes or values: k or E zero, k > E, a capacity
// factor not > 0 or not finite (moe_route); w1, w3, w2 of different lengths
// or empty, an expert weight not [H, C] / [C, H], weights not [..., k], a
// routing that is not for these N, k and E or not a valid permutation
// (moe_experts); std::logic_error for Vars of different tapes.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../activation.hpp"
#include "../moe_routing.hpp"
#include "../tape.hpp"

namespace xtgrad {

// Expert parallelism (Lepikhin et al. 2020, GShard; DeepSpeed-MoE): the E
// experts sharded over P processes, rank r holding experts [r E/P,
// (r+1) E/P) (E a multiple of P). The router runs on every rank over its own
// tokens; each kept choice's x row goes to the rank of its expert
// (all-to-all of the per-expert counts, then of the rows), is computed there
// by the same per-expert GEMMs, and its output row comes back for the
// weighted combine. Backward runs the same exchange in reverse: the
// gradient of each output row goes to its expert's rank, the gradient of
// its x row comes back; expert weight gradients stay on their rank.
//
// MoeExchange is the collectives this needs; engine/ knows no MPI, and
// distributed/expert_parallel.hpp implements it over a Communicator. Every
// rank calls them in the same order (forward, and backward, of every
// moe_experts with an exchange are collective).
class MoeExchange {
 public:
  virtual ~MoeExchange() = default;
  virtual std::size_t rank() const = 0;
  virtual std::size_t size() const = 0;
  // Every rank's `values` (n on every rank), rank after rank: [size() * n].
  virtual std::vector<std::uint64_t> all_gather(const std::vector<std::uint64_t>& values) const = 0;
  // send [size() * n]: values [q n, (q + 1) n) go to rank q; returns the n
  // values each rank sent to this one, rank after rank.
  virtual std::vector<std::uint64_t> all_to_all(const std::vector<std::uint64_t>& send,
                                                std::size_t n) const = 0;
  // send_counts[q] elements of `send` (back to back in rank order) to rank
  // q; recv_counts[s] elements from rank s into `recv`, in rank order.
  virtual void all_to_all_v(const float* send, const std::vector<std::size_t>& send_counts,
                            float* recv, const std::vector<std::size_t>& recv_counts) const = 0;
  virtual void all_to_all_v(const double* send, const std::vector<std::size_t>& send_counts,
                            double* recv, const std::vector<std::size_t>& recv_counts) const = 0;
};

// The op name moe_experts records with an exchange: a node whose backward
// makes collective calls (the gradient synchronizer defers its own until it ran).
inline constexpr const char* k_moe_experts_all_to_all = "moe_experts_all_to_all";

template <class T>
MoeRouting moe_route(const xt::xarray<T>& probs, std::size_t k,
                     std::optional<double> capacity_factor = std::nullopt);

template <class T>
Var<T> moe_experts(const Var<T>& x, const Var<T>& weights, const MoeRouting& routing,
                   const std::vector<Var<T>>& w1, const std::vector<Var<T>>& w3,
                   const std::vector<Var<T>>& w2, Activation f = Activation::silu);

// Expert parallelism (see MoeExchange). moe_route over this rank's tokens
// with the global batch's capacity, ceil(cf * N * k / E) for N the tokens of
// all ranks: the ranks' tokens in rank order are the global batch, and each
// expert keeps its first `capacity` choices in that order, as one process
// would (one all-gather of the per-expert counts). The routing's global_*
// fields hold the global batch's statistics.
template <class T>
MoeRouting moe_route(const xt::xarray<T>& probs, std::size_t k,
                     std::optional<double> capacity_factor, const MoeExchange& exchange);

// moe_experts with the experts sharded: w1, w3, w2 are this rank's E / P
// experts (experts [rank E/P, (rank + 1) E/P) of the routing's E), x, weights
// and routing this rank's tokens'. y [..., C] equals moe_experts on all
// experts for these tokens. Gradients: x's and weights' as moe_experts';
// each expert weight's is the sum over every rank's rows of the rank's
// share divided by P (the mean over ranks, as the gradient synchronizer
// averages the replicated parameters: P ranks then give one process's
// gradient of the global batch's mean loss). Recorded as
// k_moe_experts_all_to_all. Errors: as moe_experts, and a routing not for
// (length of w1) * P experts; std::invalid_argument for a null exchange.
template <class T>
Var<T> moe_experts(const Var<T>& x, const Var<T>& weights, const MoeRouting& routing,
                   const std::vector<Var<T>>& w1, const std::vector<Var<T>>& w3,
                   const std::vector<Var<T>>& w2, Activation f,
                   std::shared_ptr<const MoeExchange> exchange);

namespace detail {

class Check;

// The sizes of a moe_experts call.
struct MoeDims {
  std::size_t tokens, c, h, k, experts;
  Shape y_shape;
};

// The shape checks of moe_experts, for a module that checks before it
// records: x [..., C], weights [..., k] (null: not checked, k = 0), and the
// experts' weights; errors name `op` and the arguments `name(role, e)`
// returns ("w1[3]" in moe_experts).
MoeDims check_moe_shapes(const char* op, const Shape& x, const Shape* weights,
                         const std::vector<const Shape*>& w1, const std::vector<const Shape*>& w3,
                         const std::vector<const Shape*>& w2,
                         const std::function<std::string(const char* role, std::size_t e)>& name);

// The checks of moe_experts (with or without an exchange) before the
// routing's: one tape, a valid f, the shapes of x, weights and the experts'
// weights; errors name moe_experts.
template <class T>
MoeDims check_moe_experts(const Var<T>& x, const Var<T>& weights, const std::vector<Var<T>>& w1,
                          const std::vector<Var<T>>& w3, const std::vector<Var<T>>& w2,
                          Activation f);

// std::invalid_argument from `op` unless k and the number of experts are
// positive, k <= experts, and a capacity factor is finite and > 0.
void check_moe_route(const char* op, std::size_t k, std::size_t experts,
                     std::optional<double> capacity_factor);

// moe_experts without its checks (shapes from check_moe_shapes with weights'
// shape, routing checked against them).
template <class T>
Var<T> record_moe_experts(const MoeDims& dims, const Var<T>& x, const Var<T>& weights,
                          const MoeRouting& routing, const std::vector<Var<T>>& w1,
                          const std::vector<Var<T>>& w3, const std::vector<Var<T>>& w2,
                          Activation f);

// The parallel moe_experts without its checks (dims.experts: this rank's
// experts; routing checked against dims with E = dims.experts * P).
template <class T>
Var<T> record_moe_experts_parallel(const MoeDims& dims, const Var<T>& x, const Var<T>& weights,
                                   const MoeRouting& routing, const std::vector<Var<T>>& w1,
                                   const std::vector<Var<T>>& w3, const std::vector<Var<T>>& w2,
                                   Activation f, std::shared_ptr<const MoeExchange> exchange);

// The routing check of moe_experts (sizes against dims, every table consistent).
void check_moe_routing(const Check& check, const MoeRouting& routing, const MoeDims& dims);

}  // namespace detail

}  // namespace xtgrad

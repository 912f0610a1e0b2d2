#pragma once
// training::shard_experts, clip_grad_norm and add_routed_tokens: expert parallelism
// (distributed/expert_parallel.hpp) for a program written with
// training::Parallel (training/data_parallel.hpp), which runs the same code
// as a plain process or under mpirun.
//
//   training::Parallel parallel(argc, argv);
//   Model model(..., generator);                       // the same model on every rank
//   training::shard_experts(parallel, model);          // before the GradientAverager
//   training::GradientAverager<float> gradients(parallel, model, tape);   // the rest
//   optim::AdamW<float> optimizer(model.parameters(), ...);  // replicated + own experts
//   ... tape.backward(loss); gradients.finish();
//   training::clip_grad_norm(parallel, model, max_norm); optimizer.step();
//
// Under mpirun shard_experts shards every SparseMoe's routed experts over
// the ranks (distributed::shard_experts: collective; std::invalid_argument on
// every rank when a num_experts is not a multiple of the ranks) and returns
// true; in a single process it does nothing and returns false, so that one
// command line serves any number of processes. The GradientAverager then
// averages the replicated parameters only; the experts' gradients are the
// global batch's already. Each rank's model.parameters() holds the
// replicated parameters and its own experts: a plain optimizer over them
// steps this rank's share of the one-process model, and its checkpoints are
// per rank (Module::state_dict holds the rank's experts under their global
// names). add_routed_tokens counts the choices of every sparse layer's
// router over the whole job, as a training program reports its routing;
// routed_tokens_by_layer splits those counts into one row per layer.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "../engine/errors.hpp"
#include "../modules/gpt.hpp"
#include "../optim/clip.hpp"
#include "data_parallel.hpp"

namespace xtgrad::training {

template <class T>
bool shard_experts(Parallel& parallel, Module<T>& model) {
#if XTGRAD_HAVE_MPI
  if (!parallel.active()) return false;
  distributed::shard_experts(parallel.world(), model);
  return true;
#else
  (void)parallel, (void)model;
  return false;
#endif
}

// optim::clip_grad_norm (the 2-norm) over every parameter of the
// one-process model: the replicated gradients' squares on this rank plus
// the experts' squares of every rank. Collective under mpirun once the
// experts are sharded; optim::clip_grad_norm over model.parameters()
// otherwise. After GradientAverager::finish(); returns the norm before clipping.
template <class T>
double clip_grad_norm(Parallel& parallel, Module<T>& model, double max_norm) {
  std::vector<Parameter<T>*> params;  // each once (a tied weight is listed under two names)
  for (Parameter<T>* p : model.parameters())
    if (std::find(params.begin(), params.end(), p) == params.end()) params.push_back(p);
#if XTGRAD_HAVE_MPI
  const distributed::NamedParameterList<T> experts_list =
      parallel.active() ? distributed::expert_parameters(model)
                        : distributed::NamedParameterList<T>{};
  if (!experts_list.empty()) {  // the same on every rank
    std::vector<const Parameter<T>*> own;
    for (const auto& named : experts_list) own.push_back(named.second);
    double replicated = 0.0, experts = 0.0;
    for (const Parameter<T>* p : params) {
      if (!p->has_grad) continue;
      double part = 0.0;
      for (const T g : p->grad) part += static_cast<double>(g) * g;
      (std::find(own.begin(), own.end(), p) != own.end() ? experts : replicated) += part;
    }
    const double total =
        std::sqrt(replicated + parallel.mean(experts) * static_cast<double>(parallel.size()));
    // optim::clip_grad_norm's rule: scale by max_norm / (total + 1e-6) when below 1
    if (std::isfinite(total) && max_norm / (total + 1e-6) < 1.0) {
      const T coef = static_cast<T>(max_norm / (total + 1e-6));
      for (Parameter<T>* p : params)
        if (p->has_grad) p->grad *= coef;
    }
    return total;
  }
#else
  (void)parallel;
#endif
  return optim::clip_grad_norm(params, max_norm);
}

// Adds to `tokens` (tokens[l * E + e], grown to the model's layers times
// its E experts) the tokens the last forward of `model` routed to expert e
// of layer l (GPT::router_stats: k choices per token; a dense layer none),
// over the whole job: summed over the processes under mpirun, or, with the
// experts sharded (shard_experts returned true), as they are, every rank's
// routers having counted the global batch already. Collective under mpirun
// unless sharded.
template <class T>
void add_routed_tokens(std::vector<std::size_t>& tokens, const GPT<T>& model,
                       const Parallel& parallel, bool sharded) {
  const double ranks = sharded ? 1.0 : parallel.size();
  const std::vector<MoeStats> stats = model.router_stats();
  const std::size_t experts = model.gpt_config().num_experts;
  tokens.resize(stats.size() * experts, 0);
  for (std::size_t l = 0; l < stats.size(); ++l)
    for (std::size_t e = 0; e < stats[l].routed.size(); ++e)
      tokens[l * experts + e] += static_cast<std::size_t>(
          std::llround((sharded ? static_cast<double>(stats[l].routed[e])
                                : parallel.mean(static_cast<double>(stats[l].routed[e]))) *
                       ranks));
}

// `tokens` as add_routed_tokens counts them (tokens[l * E + e]), one row of
// the E experts' counts per layer. std::invalid_argument naming
// training::routed_tokens_by_layer when `experts` is 0 or does not divide
// the number of counts.
inline std::vector<std::vector<std::size_t>> routed_tokens_by_layer(
    const std::vector<std::size_t>& tokens, std::size_t experts) {
  const detail::Check check("training::routed_tokens_by_layer");
  check.argument(experts != 0 && tokens.size() % experts == 0, "experts", "is ", experts,
                 ", expected a positive divisor of the ", tokens.size(), " counts");
  std::vector<std::vector<std::size_t>> layers;
  for (auto it = tokens.begin(); it != tokens.end(); it += static_cast<std::ptrdiff_t>(experts))
    layers.emplace_back(it, it + static_cast<std::ptrdiff_t>(experts));
  return layers;
}

}  // namespace xtgrad::training

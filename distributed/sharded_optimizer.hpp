#pragma once
// ShardedOptimizer<T>: ZeRO stages 1 and 2 (Rajbhandari et al., "ZeRO:
// Memory Optimizations Toward Training Trillion Parameter Models", 2020;
// DeepSpeed's zero_optimization.stage 1 / 2, PyTorch's
// ZeroRedundancyOptimizer and FSDP's SHARD_GRAD_OP) over a
// GradientSynchronizer: each of the P ranks keeps the optimizer state of
// 1/P of the parameters only and runs the update on that part only.
//
// Layout (shard_layout.hpp): the parameters flattened in the synchronizer's
// bucket order, N elements; rank r owns a contiguous range of N/P of them
// (within one element), which may cut a parameter. Each cut-out range of a
// parameter is a "piece": a Parameter<T> of its own, one-dimensional, that
// the wrapped optimizer (SGD, Adam or AdamW, every option, the same
// parameter groups) steps as it would the whole parameter. Every update
// rule here is elementwise per parameter, with a step count per parameter,
// so a piece gets exactly the update its elements would get in one process.
//
// One step (every rank, in the same order):
//   backward     the synchronizer, switched to reduce-scatter mode, sums
//                each bucket's gradients with MPI_Reduce_scatter during the
//                reverse pass: rank r receives only its part of the sum;
//   finish()     as with data-parallel training (step() calls it too);
//   clip_grad_norm(max_norm)   optional: the norm over all ranks' shards
//                (each rank's sum of |g|^p, all-reduced; max for inf), the
//                rule and return value of optim::clip_grad_norm;
//   step()       grad = sum / P into the pieces (has_grad as in one
//                process: false when no rank reached the parameter), the
//                wrapped optimizer's step on the pieces (with this
//                wrapper's learning rates, so that schedules work), then
//                every bucket's updated values all-gathered
//                (MPI_Allgatherv) into every rank's Parameters.
// Wire traffic per step: a reduce-scatter and an all-gather of N elements,
// what one all-reduce moves. Optimizer state per rank: N/P elements per
// state buffer (Adam: two or three; SGD with momentum: one), instead of N.
//
// ZeroOptions::stage:
//   1  optimizer state sharded; every rank still holds full local gradients
//      in its Parameters (Parameter::grad, as in one process).
//   2  gradients sharded too: the synchronizer releases a Parameter's grad
//      (empty, has_grad false) once copied into its bucket, and a bucket's
//      buffer once reduced; zero_grad() releases instead of zero-filling.
//      Only the owned pieces' gradients live between backward and step
//      (twice N/P: the synchronizer's receive buffers and the pieces'
//      grads). Do not read Parameter::grad after backward. During the
//      backward a Parameter's full gradient lives from its production to its
//      bucket's copy, and a bucket's buffer until its reduce-scatter.
// One backward per step (no accumulation over several backward passes).
// The constructor switches the synchronizer to reduce-scatter mode for good
// (GradientSynchronizer::reduce_scatter): one ShardedOptimizer per
// synchronizer, the synchronizer outliving it.
//
// Across machines nothing changes but the launch (mpirun --hostfile, see
// docs/distributed.md); the sharding is by element count, so ranks should be alike.
// Cost per step beyond data-parallel training: the pieces' values copied
// from the Parameters before the update (N/P) and the all-gathered values
// copied back into them (N), memory-bound passes.
//
// Checkpoints: state_dict() is this rank's shard (the wrapped optimizer's
// state dict over the pieces, plus "zero.world_size", "zero.rank",
// "zero.begin", "zero.end", "zero.elements"), for one file per rank (for
// example a training-state directory per rank, training_state.hpp);
// load_state_dict() takes the same rank's shard back and refuses (every rank
// throws std::invalid_argument, nothing changes) a shard of another rank,
// another world size or another layout. consolidated_state_dict() gathers
// the whole state to rank 0, in the layout of the unsharded optimizer
// (what SGD/Adam/AdamW over the same groups in one process saves and
// loads); load_consolidated_state_dict() loads such a state on any number
// of ranks. The learning rates of the groups are this wrapper's.
//
// Rank-local parameters (ZeroOptions::rank_local): the parameters of the
// groups that the synchronizer does not hold are each rank's own, the
// experts of expert parallelism, whose gradients are the global batch's
// already (ops/moe.hpp). The wrapped optimizer steps them whole on this
// rank, group g's as a group of their own after the pieces' groups (with
// group g's options and learning rate); clip_grad_norm adds each rank's
// rank-local gradients to its shard's sum, so that each is counted once
// over the ranks, and clips them with the same coefficient; state_dict()
// holds their state (per-rank checkpoints). The consolidated pair covers
// the synchronizer's parameters only: with rank-local parameters both throw
// std::logic_error on every rank; checkpoint per rank with state_dict() and
// load_state_dict().
//
// Errors: the constructor throws std::invalid_argument for a stage other
// than 1 or 2, a parameter the synchronizer does not hold (unless
// rank_local) or the other way round, fewer elements than ranks, and whatever the wrapped optimizer's
// constructor refuses; parameters or groups that differ across ranks throw
// on every rank (the synchronizer's check, and one over the groups). The
// collective calls (constructor, step, clip_grad_norm, load_state_dict,
// check_state_dict, the consolidated pair) must be made by every rank in
// the same order; an exception on one rank ends the job through
// Communicator::abort (communicator.hpp), as in data-parallel training.

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../optim/adam.hpp"
#include "../optim/adamw.hpp"
#include "../optim/sgd.hpp"
#include "gradient_synchronizer.hpp"
#include "shard_layout.hpp"

namespace xtgrad::distributed {

struct ZeroOptions {
  int stage = 1;  // 1: optimizer state sharded; 2: gradients too
  // Whether the groups may hold parameters the synchronizer does not: each
  // rank's own (rank-local), such as the experts sharded by expert
  // parallelism (distributed::expert_parameters). See "Rank-local
  // parameters" above.
  bool rank_local = false;
};

// What the last step() took on this rank, for benchmarks.
struct ZeroStepStats {
  double update_seconds = 0.0;      // the gradients into the pieces, the shard's update
  double optimizer_seconds = 0.0;   // of which the wrapped optimizer's step() on the shard
  double all_gather_seconds = 0.0;  // the all-gather and the copies into the Parameters
};

namespace detail {
// The optimizer class of each options class.
template <class T, class Options>
struct OptimizerFor;
template <class T>
struct OptimizerFor<T, optim::SGDOptions> {
  using type = optim::SGD<T>;
};
template <class T>
struct OptimizerFor<T, optim::AdamOptions> {
  using type = optim::Adam<T>;
};
template <class T>
struct OptimizerFor<T, optim::AdamWOptions> {
  using type = optim::AdamW<T>;
};
}  // namespace detail

template <class T>
class ShardedOptimizer : public optim::Optimizer<T> {
 public:
  // The groups of the optimizer to shard (SGD, Adam or AdamW by the options
  // class), over the synchronizer's parameters. Collective.
  template <class Options>
  ShardedOptimizer(GradientSynchronizer<T>& sync,
                   const std::vector<optim::ParamGroup<T, Options>>& groups, ZeroOptions zero = {})
      : ShardedOptimizer(
            sync, optim::detail::group_params(groups), optim::detail::group_lrs(groups), zero,
            [groups](std::vector<std::vector<Parameter<T>*>> pieces) {
              // (the rank-local parameters' groups after the
              // pieces': group g's options again)
              std::vector<optim::ParamGroup<T, Options>> shard;
              for (std::size_t g = 0; g < pieces.size(); ++g)
                shard.push_back({std::move(pieces[g]), groups[g % groups.size()].options});
              return std::unique_ptr<optim::Optimizer<T>>(
                  new typename detail::OptimizerFor<T, Options>::type(shard));
            }) {}
  // One group: every parameter of the synchronizer with `options`.
  template <class Options>
  ShardedOptimizer(GradientSynchronizer<T>& sync, const Options& options, ZeroOptions zero = {})
      : ShardedOptimizer(
            sync, std::vector<optim::ParamGroup<T, Options>>{{sync.parameters(), options}}, zero) {}

  ShardedOptimizer(const ShardedOptimizer&) = delete;
  ShardedOptimizer& operator=(const ShardedOptimizer&) = delete;

  void step() override;
  void zero_grad() override;
  // optim::clip_grad_norm over the gradients of every rank's shard (see
  // above); call after backward, before step(). Collective.
  double clip_grad_norm(double max_norm, double norm_type = 2.0);

  StateDict<T> state_dict() const override;
  void load_state_dict(const StateDict<T>& state) override;
  void check_state_dict(const StateDict<T>& state) const override;

  // Collective; the unsharded optimizer's state on rank 0, empty elsewhere.
  StateDict<T> consolidated_state_dict() const;
  // Collective; every rank passes the same unsharded state.
  void load_consolidated_state_dict(const StateDict<T>& state);

  const ZeroOptions& zero_options() const { return zero_; }
  // The rank-local parameters (ZeroOptions::rank_local), in the groups' order.
  std::size_t rank_local_count() const { return local_.size(); }
  // The wrapped optimizer over this rank's pieces; the elements it steps.
  const optim::Optimizer<T>& shard_optimizer() const { return *inner_; }
  std::size_t shard_elements() const { return layout_.end(rank()) - layout_.begin(rank()); }
  // Bytes of optimizer state on this rank (the arrays of state_dict()).
  std::size_t state_bytes() const;
  const ZeroStepStats& last_step() const { return stats_; }

 private:
  using Factory =
      std::function<std::unique_ptr<optim::Optimizer<T>>(std::vector<std::vector<Parameter<T>*>>)>;
  ShardedOptimizer(GradientSynchronizer<T>& sync, std::vector<std::vector<Parameter<T>*>> groups,
                   std::vector<double> lrs, ZeroOptions zero, const Factory& factory);

  std::size_t rank() const { return static_cast<std::size_t>(sync_.communicator().rank()); }
  // The constructor's steps: index_in_optimizer_ and local_ from the groups
  // and the synchronizer (after their checks); this rank's pieces and
  // rank-local parameters as the wrapped optimizer's groups; the groups'
  // agreement across ranks (collective).
  void match_parameters();
  std::vector<std::vector<Parameter<T>*>> shard_groups();
  void check_groups_agree() const;
  void pull_gradients();  // the synchronizer's sums into the pieces, once per round
  void all_gather();
  // Every rank runs check(); when any throws, every rank throws its message.
  void agree(const std::function<void()>& check, const char* function) const;
  // Throws std::logic_error on every rank when any rank holds rank-local
  // parameters (collective).
  void refuse_rank_local(const char* function) const;
  // Shard <-> unsharded state (sharded_state.cpp).
  StateDict<T> shard_from_full(const StateDict<T>& full, const std::string& function) const;
  StateDict<T> strip_zero_entries(const StateDict<T>& state, const std::string& function) const;

  GradientSynchronizer<T>& sync_;
  ZeroOptions zero_;
  detail::ShardLayout layout_;
  std::vector<detail::ShardPiece> pieces_;  // in the wrapped optimizer's order
  std::vector<std::unique_ptr<Parameter<T>>> piece_params_;
  std::vector<std::size_t> index_in_optimizer_;  // synchronizer index -> this->parameters()
  std::vector<std::size_t> local_;  // this->parameters() indices of the rank-local ones
  std::unique_ptr<optim::Optimizer<T>> inner_;
  std::uint64_t pulled_round_ = 0;
  std::vector<T> gather_;  // one bucket's values for the all-gather
  ZeroStepStats stats_;
};

extern template class ShardedOptimizer<float>;
extern template class ShardedOptimizer<double>;

}  // namespace xtgrad::distributed

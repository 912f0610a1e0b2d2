#pragma once
// training::TrainingOptimizer: the optimizer of a data-parallel training
// loop (training/data_parallel.hpp), by ZeRO stage (a program's --zero).
// 0: the plain optimizer (SGD, Adam or AdamW by the options class)
// over the parameter groups, each rank a full copy under mpirun (today's
// data-parallel training, gradients averaged by the GradientAverager).
// 1 or 2 under mpirun: distributed::ShardedOptimizer over the same groups
// (ZeRO stage 1: optimizer state sharded; 2: gradients too; see
// distributed/sharded_optimizer.hpp), the gradient norm clipped across the
// shards; experts sharded by expert parallelism (training/expert_parallel.hpp)
// are rank-local there, stepped whole by their rank, and such a run saves
// and resumes per rank (optimizer().state_dict(); save() and resume() refuse). In a single process --zero 1|2 is the plain optimizer: the one
// rank's shard is the whole state, as with DeepSpeed's zero_optimization on
// one GPU, so the same command line works with any number of processes.
//
// Checkpoints are always the consolidated state: save() gathers the
// unsharded state to rank 0 (ShardedOptimizer::consolidated_state_dict) and
// hands the writer a plain optimizer holding it, so a run directory has the
// layout of a one-process run whatever --zero and the number of ranks;
// resume() reads it into a plain optimizer (and a schedule over it) on
// every rank and loads it sharded (load_consolidated_state_dict). The
// consolidated state is a copy of the shards' values, so a run resumed
// under the same --zero and ranks continues bit for bit. Both briefly hold
// a full optimizer state (on rank 0 for save()), as any consolidation does.
// save() and resume() are collective under mpirun: every rank calls them.
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "../optim/optim.hpp"
#include "data_parallel.hpp"

namespace xtgrad::training {

template <class T>
class TrainingOptimizer {
  // The optimizer class of each options class.
  template <class Options, class = void>
  struct PlainOptimizer;
  template <class D>
  struct PlainOptimizer<optim::SGDOptions, D> {
    using type = optim::SGD<T>;
  };
  template <class D>
  struct PlainOptimizer<optim::AdamOptions, D> {
    using type = optim::Adam<T>;
  };
  template <class D>
  struct PlainOptimizer<optim::AdamWOptions, D> {
    using type = optim::AdamW<T>;
  };

 public:
  using MakeSchedule = std::function<std::unique_ptr<optim::LRScheduler<T>>(optim::Optimizer<T>&)>;

  // `gradients` is the GradientAverager over the groups' model (it
  // outlives this optimizer); zero is --zero (0, 1 or 2).
  template <class Options>
  TrainingOptimizer(Parallel& parallel, GradientAverager<T>& gradients,
                    const std::vector<optim::ParamGroup<T, Options>>& groups, int zero)
      : parallel_(parallel), gradients_(gradients) {
    if (zero < 0 || zero > 2)
      throw std::invalid_argument("--zero " + std::to_string(zero) + ": expected 0, 1 or 2");
    make_full_ = [groups] {
      using Plain = typename PlainOptimizer<Options>::type;
      return std::unique_ptr<optim::Optimizer<T>>(new Plain(groups));
    };
#if XTGRAD_HAVE_MPI
    if (zero > 0 && gradients.synchronizer() != nullptr) {
      // rank-local: the groups' parameters outside the synchronizer are the
      // experts sharded by expert parallelism, each rank's own
      auto sharded = std::make_unique<distributed::ShardedOptimizer<T>>(
          *gradients.synchronizer(), groups, distributed::ZeroOptions{zero, true});
      sharded_ = sharded.get();
      optimizer_ = std::move(sharded);
      return;
    }
#endif
    optimizer_ = make_full_();
  }

  // What the schedule drives.
  optim::Optimizer<T>& optimizer() {
    return *optimizer_;
  }
  bool sharded() const {
    return sharded_ != nullptr;
  }

  // After the backward pass: the gradients' sums complete (both modes).
  void finish() {
    gradients_.finish();
  }
  // optim::clip_grad_norm over `params`, or over every rank's shard; the
  // norm before clipping. After finish().
  double clip_grad_norm(const std::vector<Parameter<T>*>& params, double max_norm) {
#if XTGRAD_HAVE_MPI
    if (sharded_ != nullptr) return sharded_->clip_grad_norm(max_norm);
#endif
    return optim::clip_grad_norm(params, max_norm);
  }
  void step() {
    optimizer_->step();
  }
  void zero_grad() {
    optimizer_->zero_grad();
  }

  // Collective: write(optimizer) on rank 0 alone, the optimizer holding the
  // whole (unsharded) state.
  void save(const std::function<void(const optim::Optimizer<T>&)>& write) {
#if XTGRAD_HAVE_MPI
    if (sharded_ != nullptr) {
      require_no_rank_local("save");
      const StateDict<T> state = sharded_->consolidated_state_dict();
      if (parallel_.quiet()) return;
      std::unique_ptr<optim::Optimizer<T>> full = make_full_();
      full->load_state_dict(state);
      write(*full);
      return;
    }
#endif
    if (!parallel_.quiet()) write(*optimizer_);
  }

  // Collective: load(optimizer, schedule) reads a saved run into an
  // unsharded optimizer and a schedule over it (made by make_schedule as for
  // the training one), which then go into this optimizer and `schedule`.
  // Returns what load returns.
  template <class Load>
  auto resume(optim::LRScheduler<T>& schedule, const MakeSchedule& make_schedule, Load load) {
#if XTGRAD_HAVE_MPI
    if (sharded_ != nullptr) {
      require_no_rank_local("resume");
      std::unique_ptr<optim::Optimizer<T>> full = make_full_();
      std::unique_ptr<optim::LRScheduler<T>> full_schedule = make_schedule(*full);
      auto loaded = load(*full, *full_schedule);
      sharded_->load_consolidated_state_dict(full->state_dict());
      schedule.load_state_dict(full_schedule->state_dict());
      return loaded;
    }
#endif
    (void)make_schedule;
    return load(*optimizer_, schedule);
  }

 private:
#if XTGRAD_HAVE_MPI
  // The consolidated state covers the synchronizer's parameters only: a
  // model with sharded experts saves and resumes per rank (state_dict()).
  void require_no_rank_local(const char* function) const {
    if (sharded_->rank_local_count() > 0)
      throw std::logic_error(std::string("TrainingOptimizer::") + function +
                             ": the experts are sharded over the ranks; save and resume each "
                             "rank's own state (optimizer().state_dict())");
  }
#endif
  Parallel& parallel_;
  GradientAverager<T>& gradients_;
  std::function<std::unique_ptr<optim::Optimizer<T>>()> make_full_;
  std::unique_ptr<optim::Optimizer<T>> optimizer_;
#if XTGRAD_HAVE_MPI
  distributed::ShardedOptimizer<T>* sharded_ = nullptr;
#else
  void* sharded_ = nullptr;
#endif
};

}  // namespace xtgrad::training

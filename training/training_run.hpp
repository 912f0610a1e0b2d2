#pragma once
// training::TrainingRun: the objects of a program's training loop, built in the
// order they need each other: the tape, the gradients averaged over the job
// (training::GradientAverager: rank 0's parameters broadcast first), the
// optimizer over the parameter groups (sharded by --zero,
// training::TrainingOptimizer) and its schedule; and the run saved and
// resumed with them (run_state.hpp), collectively under mpirun.
//
//   training::TrainingRun run(parallel, model, groups, o.zero, make_schedule);
//   if (!o.resume.empty()) position = position_of(run.resume(o.resume, identity, "train_x", mismatch));
//   for (...) {
//     run.tape.clear(); loss = ...; run.tape.backward(loss);
//     run.optimizer.finish(); run.clip_grad_norm(max_norm); run.step();
//     if (!o.save.empty()) run.save(o.save, extras_of(identity, position));
//   }

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "expert_parallel.hpp"
#include "run_state.hpp"
#include "training_optimizer.hpp"

namespace xtgrad::training {

// The options of a run that its loop reads besides its own: where to save
// and resume it, where to stop it and the ZeRO stage under mpirun.
struct RunOptions {
  std::filesystem::path save;    // saved here while training, when not empty
  std::filesystem::path resume;  // a directory written by --save, when not empty
  std::size_t stop_after = 0;    // stop after this step or epoch (0: run them all)
  int zero = 0;                  // --zero (training/training_optimizer.hpp)

  // The last step (or epoch) of this call: --stop-after's, at most `total`.
  // std::invalid_argument "--resume: the run has <done> <units> done,
  // nothing left to train <until> <last>" when `done` reaches it.
  std::size_t last(std::size_t done, std::size_t total, const std::string& units,
                   const std::string& until) const {
    const std::size_t end = stop_after == 0 ? total : std::min(stop_after, total);
    if (done >= end)
      throw std::invalid_argument("--resume: the run has " + std::to_string(done) + " " + units +
                                  " done, nothing left to train " + until + " " +
                                  std::to_string(end));
    return end;
  }
};

// AdamW's two parameter groups, as nanoGPT makes them: `options` on the
// parameters of rank >= 2 (weight matrices, embeddings), the same without
// weight decay on the others (biases, norm weights); a tied weight once.
inline std::vector<optim::AdamWParamGroup<float>> decay_groups(Module<float>& model,
                                                               const optim::AdamWOptions& options) {
  std::vector<Parameter<float>*> decay, no_decay;
  for (Parameter<float>* p : model.parameters()) {
    std::vector<Parameter<float>*>& group = p->value.dimension() >= 2 ? decay : no_decay;
    if (std::find(group.begin(), group.end(), p) == group.end()) group.push_back(p);
  }
  return {{decay, options}, {no_decay, optim::AdamWOptions(options).weight_decay(0.0)}};
}

// The schedule of nanoGPT and of most Transformer runs: a linear warm-up from 0 over
// `warmup` steps, then a cosine to `eta_min` at step `total`.
inline TrainingOptimizer<float>::MakeSchedule warmup_cosine(std::int64_t warmup, std::int64_t total,
                                                            double eta_min = 0.0) {
  return [=](optim::Optimizer<float>& opt) {
    return std::unique_ptr<optim::LRScheduler<float>>(new optim::WarmupCosineLR<float>(
        opt, warmup, std::max<std::int64_t>(1, total - warmup), 0.0, eta_min));
  };
}

class TrainingRun {
  Parallel& parallel_;
  Module<float>& model_;
  TrainingOptimizer<float>::MakeSchedule make_schedule_;

 public:
  template <class Options>
  TrainingRun(Parallel& parallel, Module<float>& model,
              const std::vector<optim::ParamGroup<float, Options>>& groups, int zero,
              TrainingOptimizer<float>::MakeSchedule make_schedule)
      : parallel_(parallel),
        model_(model),
        make_schedule_(std::move(make_schedule)),
        gradients(parallel, model, tape),
        optimizer(parallel, gradients, groups, zero),
        schedule(make_schedule_(optimizer.optimizer())) {}

  Tape<float> tape;
  GradientAverager<float> gradients;
  TrainingOptimizer<float> optimizer;
  std::unique_ptr<optim::LRScheduler<float>> schedule;
  // Every rank saves and resumes its own state in <dir>/rank<r> (a model
  // whose experts are sharded, training/expert_parallel.hpp).
  bool per_rank = false;

  // After the backward pass and optimizer.finish(): the optimizer's step,
  // its zero_grad and the schedule's step.
  void step() {
    optimizer.step();
    optimizer.zero_grad();
    schedule->step();
  }

  // optim::clip_grad_norm over the whole model: across every ZeRO shard
  // (TrainingOptimizer::clip_grad_norm) or every rank's experts
  // (training::clip_grad_norm), collective under mpirun. After
  // optimizer.finish(); returns the norm before clipping.
  double clip_grad_norm(double max_norm) {
    return optimizer.sharded() ? optimizer.clip_grad_norm({}, max_norm)
                               : training::clip_grad_norm(parallel_, model_, max_norm);
  }

  // Collective: training::resume_run from `dir` into the model, the optimizer
  // and the schedule (the whole state read, then sharded by --zero);
  // returns the saved run's extras.
  template <class Mismatch>
  SavedRun resume(const std::filesystem::path& dir, const TrainingExtras& identity,
                  const std::string& program, Mismatch mismatch,
                  const std::string& first_key = "") {
    if (per_rank) {
      const std::filesystem::path own = rank_dir(dir);
      return {resume_run(own, model_, optimizer.optimizer(), *schedule, identity, program, mismatch,
                         first_key),
              own, program};
    }
    return {optimizer.resume(*schedule, make_schedule_,
                             [&](optim::Optimizer<float>& opt, optim::LRScheduler<float>& sched) {
                               return resume_run(dir, model_, opt, sched, identity, program,
                                                 mismatch, first_key);
                             }),
            dir, program};
  }

  // Collective: the whole state gathered to rank 0, which saves it with
  // `extras` (per_rank: each rank its own).
  void save(const std::filesystem::path& dir, const TrainingExtras& extras) {
    if (per_rank) {
      std::filesystem::create_directories(dir);
      return save_run(rank_dir(dir), model_, optimizer.optimizer(), *schedule, extras);
    }
    optimizer.save([&](const optim::Optimizer<float>& full) {
      save_run(dir, model_, full, *schedule, extras);
    });
  }

 private:
  std::filesystem::path rank_dir(const std::filesystem::path& dir) const {
    return dir / ("rank" + std::to_string(parallel_.rank()));
  }
};

}  // namespace xtgrad::training

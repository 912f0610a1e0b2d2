#pragma once
// save_training_state / load_training_state: a model's parameters, its
// optimizer's state, its learning-rate schedule's state and the training
// loop's own scalars (the step, the epoch, a data cursor) in one
// training-state directory (io/state_directory.hpp), so that a run
// stopped after step k and resumed from the directory continues bit for bit
// as if it had never stopped.
//
// This is the one place that sees both modules/ and optim/ (which never see
// each other): it turns each into plain StateDict data and back. Inside the
// directory the entries are prefixed:
//   model.<parameter name>    arrays, the model's named_parameters()
//   model.config              a string, the model's config() as JSON
//                             (io/module_config.hpp)
//   optimizer.<entry>         Optimizer::state_dict()
//   scheduler.<entry>         LRScheduler::state_dict(), when a schedule is given
//   extra.<name>              the loop's TrainingExtras
//
// save_training_state is atomic (a failed save leaves the previous directory
// whole). load_training_state is all or nothing across the model, the
// optimizer and the schedule: it reads the directory (memory bounded by four
// times the model's and optimizer's parameters: a value and at most three
// state buffers each), checks the model's part (the same names, shapes),
// the optimizer's and the schedule's (their check_state_dict), and only then
// assigns anything. A directory with a schedule's state loaded without one,
// or the other way round, is refused. Errors as load_state_directory and the
// load_state_dict functions; messages start "xtgrad::load_training_state:"
// or name the optimizer / schedule. The model's config must equal the
// recorded one ("... holds <its config>, this module is <config()>"); a
// directory without "model.config" (written before configs were recorded)
// is checked by names and shapes only.
//
// The objects to load into are built as for the first run (same model
// configuration, same groups, same schedule arguments); their initial
// values do not matter.

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "../modules/module.hpp"
#include "../optim/lr_scheduler.hpp"
#include "../optim/optimizer.hpp"

namespace xtgrad {

namespace detail {
// Keeps the schedule argument out of deduction, so that nullptr (no
// schedule) works: T comes from the model and the optimizer.
template <class S>
struct NoDeduceScheduler {
  using type = S;
};
template <class T>
using SchedulerArg = typename NoDeduceScheduler<optim::LRScheduler<T>>::type;
}  // namespace detail

// The training loop's own scalars, saved exactly.
struct TrainingExtras {
  std::map<std::string, std::int64_t> integers;
  std::map<std::string, double> reals;
};

template <class T>
void save_training_state(const std::filesystem::path& dir, const Module<T>& model,
                         const optim::Optimizer<T>& optimizer,
                         const detail::SchedulerArg<T>* scheduler,
                         const TrainingExtras& extras = {});

// Returns the extras that were saved.
template <class T>
TrainingExtras load_training_state(const std::filesystem::path& dir, Module<T>& model,
                                   optim::Optimizer<T>& optimizer,
                                   detail::SchedulerArg<T>* scheduler);

// Just the model's parameters of a training-state directory (to evaluate or
// serve a model saved while training): its config and names and shapes
// checked as load_training_state checks them, the optimizer's, schedule's
// and loop's entries read (memory bounded by four times the model's
// parameters) and ignored. All or nothing.
template <class T>
void load_model_from_training_state(const std::filesystem::path& dir, Module<T>& model);

extern template void save_training_state(const std::filesystem::path&, const Module<float>&,
                                         const optim::Optimizer<float>&,
                                         const optim::LRScheduler<float>*, const TrainingExtras&);
extern template void save_training_state(const std::filesystem::path&, const Module<double>&,
                                         const optim::Optimizer<double>&,
                                         const optim::LRScheduler<double>*, const TrainingExtras&);
extern template TrainingExtras load_training_state(const std::filesystem::path&, Module<float>&,
                                                   optim::Optimizer<float>&,
                                                   optim::LRScheduler<float>*);
extern template TrainingExtras load_training_state(const std::filesystem::path&, Module<double>&,
                                                   optim::Optimizer<double>&,
                                                   optim::LRScheduler<double>*);
extern template void load_model_from_training_state(const std::filesystem::path&, Module<float>&);
extern template void load_model_from_training_state(const std::filesystem::path&, Module<double>&);

}  // namespace xtgrad

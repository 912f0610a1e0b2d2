#pragma once
// Learning-rate schedules, in the shape of torch.optim.lr_scheduler. Each is a
// closed-form function lr_at(t, g) of the epoch (or step) counter t and of
// base_lr(g), the learning rate of the optimizer's parameter group g when the
// schedule was constructed: as torch's LRScheduler keeps one base_lrs entry
// per group (each group's 'initial_lr'), every group follows the same curve
// scaled to its own base lr (eta_min, where a schedule has one, is shared).
//
// Protocol (PyTorch's): construction sets each group's lr to lr_at(0, g); each
// step() (called after optimizer.step()) advances t by one and sets each lr
// to lr_at(t, g). last_lr(g) is the lr last set. Because every value is
// computed from base_lr, a schedule overwrites any lr set by hand or by another
// schedule on the same optimizer (PyTorch's chaining of two schedules on one
// optimizer is not supported; compose with WarmupCosineLR instead).
//
// state_dict() holds "type" (the schedule's class name), "last_epoch",
// "param_groups" and the reals "base_lrs.<g>" and "last_lrs.<g>";
// load_state_dict() checks them all (the type, the optimizer's number of
// groups, last_epoch >= 0, finite rates >= 0) before changing anything, then
// restores them and sets each group's lr to its last_lr, so that loading the
// optimizer and the schedule in either order gives the saved learning rates.
// The schedule's own arguments (T_max, gamma, ...) are the constructor's.
// Schedules work with any Optimizer<T>, which must outlive them. Invalid
// arguments throw std::invalid_argument naming the schedule, the argument and
// its value.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "optimizer.hpp"

namespace xtgrad::optim {

template <class T>
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;

  // Advance one epoch and set each group's learning rate to lr_at(last_epoch(), g).
  void step();

  // Per group (the first by default); std::invalid_argument for a bad group.
  double last_lr(std::size_t group = 0) const;
  double base_lr(std::size_t group = 0) const;
  const std::vector<double>& last_lrs() const { return last_lrs_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  std::int64_t last_epoch() const { return last_epoch_; }
  // The closed form of the schedule at epoch t >= 0 for group `group`.
  // std::invalid_argument for a bad group or t < 0.
  double lr_at(std::int64_t t, std::size_t group = 0) const;
  // The class name: "StepLR", "CosineAnnealingLR", ...
  const std::string& name() const { return name_; }

  StateDict<T> state_dict() const;
  void load_state_dict(const StateDict<T>& state);
  // Throws what load_state_dict(state) would throw, and changes nothing.
  void check_state_dict(const StateDict<T>& state) const;

 protected:
  LRScheduler(std::string name, Optimizer<T>& optimizer);
  // Sets the lr of epoch 0; the constructor of each (final) schedule ends with it.
  void start();
  // The schedule's lr at epoch t for a group whose base lr is base_lr.
  virtual double schedule(std::int64_t t, double base_lr) const = 0;

 private:
  struct Loaded;
  Loaded read_state_dict(const StateDict<T>& state, const std::string& function) const;
  void apply();
  // std::invalid_argument naming <name>::<method>, the group and the number of groups.
  void check_group(const char* method, std::size_t group) const;
  std::string name_;
  Optimizer<T>* optimizer_;
  std::vector<double> base_lrs_;
  std::int64_t last_epoch_ = 0;
  std::vector<double> last_lrs_;
};

// torch.optim.lr_scheduler.StepLR:  lr = base_lr * gamma^floor(t / step_size).
// step_size >= 1; gamma finite and > 0.
template <class T>
class StepLR final : public LRScheduler<T> {
 public:
  StepLR(Optimizer<T>& optimizer, std::int64_t step_size, double gamma = 0.1);

 private:
  double schedule(std::int64_t t, double base_lr) const override;
  std::int64_t step_size_;
  double gamma_;
};

// torch.optim.lr_scheduler.CosineAnnealingLR, in its closed form (SGDR,
// Loshchilov & Hutter 2017, without restarts):
//   lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * t / T_max)) / 2
// As in PyTorch the cosine continues past T_max (the lr rises again, period
// 2 T_max); WarmupCosineLR holds eta_min instead. T_max >= 1; eta_min finite
// and >= 0.
template <class T>
class CosineAnnealingLR final : public LRScheduler<T> {
 public:
  CosineAnnealingLR(Optimizer<T>& optimizer, std::int64_t T_max, double eta_min = 0.0);

 private:
  double schedule(std::int64_t t, double base_lr) const override;
  std::int64_t t_max_;
  double eta_min_;
};

// Linear warm-up, as torch.optim.lr_scheduler.LinearLR(start_factor,
// end_factor = 1, total_iters = warmup_steps):
//   lr = base_lr * (start_factor + (1 - start_factor) * min(t, warmup_steps) / warmup_steps)
// so lr = start_factor * base_lr at t = 0, base_lr from t = warmup_steps on.
// warmup_steps >= 0 (0: constant base_lr); start_factor in [0, 1] (PyTorch
// requires > 0; 0 here warms up from zero).
template <class T>
class LinearWarmup final : public LRScheduler<T> {
 public:
  LinearWarmup(Optimizer<T>& optimizer, std::int64_t warmup_steps, double start_factor);

 private:
  double schedule(std::int64_t t, double base_lr) const override;
  std::int64_t warmup_steps_;
  double start_factor_;
};

// Linear warm-up followed by cosine annealing, the usual Transformer schedule:
//   t <  warmup_steps:  LinearWarmup's ramp from start_factor * base_lr
//   t >= warmup_steps:  s = min(t - warmup_steps, cosine_steps),
//                       lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * s / cosine_steps)) / 2
// This is torch.optim.lr_scheduler.SequentialLR([LinearLR(start_factor,
// total_iters = warmup_steps), CosineAnnealingLR(T_max = cosine_steps, eta_min)],
// milestones = [warmup_steps]), except that after the cosine phase the lr
// stays at eta_min. warmup_steps >= 0; cosine_steps >= 1; start_factor in
// [0, 1]; eta_min finite and >= 0.
template <class T>
class WarmupCosineLR final : public LRScheduler<T> {
 public:
  WarmupCosineLR(Optimizer<T>& optimizer, std::int64_t warmup_steps, std::int64_t cosine_steps,
                 double start_factor = 0.0, double eta_min = 0.0);

 private:
  double schedule(std::int64_t t, double base_lr) const override;
  std::int64_t warmup_steps_;
  std::int64_t cosine_steps_;
  double start_factor_;
  double eta_min_;
};

extern template class LRScheduler<float>;
extern template class LRScheduler<double>;
extern template class StepLR<float>;
extern template class StepLR<double>;
extern template class CosineAnnealingLR<float>;
extern template class CosineAnnealingLR<double>;
extern template class LinearWarmup<float>;
extern template class LinearWarmup<double>;
extern template class WarmupCosineLR<float>;
extern template class WarmupCosineLR<double>;

}  // namespace xtgrad::optim

#pragma once
// Learning-rate schedules, in the shape of torch.optim.lr_scheduler. Each is a
// closed-form function lr_at(t) of the epoch (or step) counter t and of
// base_lr, the optimizer's learning rate when the schedule was constructed.
//
// Protocol (PyTorch's): construction sets the optimizer's lr to lr_at(0); each
// step() (called after optimizer.step()) advances t by one and sets the lr to
// lr_at(t). last_lr() is the lr last set. Because every value is computed
// from base_lr, a schedule overwrites any lr set by hand or by another
// schedule on the same optimizer (PyTorch's chaining of two schedules on one
// optimizer is not supported; compose with WarmupCosineLR instead).
// Schedules work with any Optimizer<T>, which must outlive them. Invalid
// arguments throw std::invalid_argument naming the schedule, the argument and
// its value.

#include <cstdint>

#include "optimizer.hpp"

namespace xtgrad::optim {

template <class T>
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;

  // Advance one epoch and set the optimizer's learning rate to lr_at(last_epoch()).
  void step();

  double last_lr() const { return last_lr_; }
  std::int64_t last_epoch() const { return last_epoch_; }
  double base_lr() const { return base_lr_; }
  // The closed form of the schedule at epoch t >= 0.
  virtual double lr_at(std::int64_t t) const = 0;

 protected:
  explicit LRScheduler(Optimizer<T>& optimizer);
  // Sets the lr of epoch 0; the constructor of each (final) schedule ends with it.
  void start();

 private:
  void apply();
  Optimizer<T>* optimizer_;
  double base_lr_;
  std::int64_t last_epoch_ = 0;
  double last_lr_;
};

// torch.optim.lr_scheduler.StepLR:  lr = base_lr * gamma^floor(t / step_size).
// step_size >= 1; gamma finite and > 0.
template <class T>
class StepLR final : public LRScheduler<T> {
 public:
  StepLR(Optimizer<T>& optimizer, std::int64_t step_size, double gamma = 0.1);
  double lr_at(std::int64_t t) const override;

 private:
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
  double lr_at(std::int64_t t) const override;

 private:
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
  double lr_at(std::int64_t t) const override;

 private:
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
  double lr_at(std::int64_t t) const override;

 private:
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

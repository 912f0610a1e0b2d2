#include "lr_scheduler.hpp"

#include <algorithm>
#include <cmath>

namespace xtgrad::optim {

namespace {

constexpr double k_pi = 3.14159265358979323846;

// eta_min + (base_lr - eta_min) * (1 + cos(pi * t / t_max)) / 2
double cosine_annealing(double base_lr, double eta_min, std::int64_t t, std::int64_t t_max) {
  const double angle = k_pi * static_cast<double>(t) / static_cast<double>(t_max);
  return eta_min + (base_lr - eta_min) * (1.0 + std::cos(angle)) / 2.0;
}

// base_lr * (start_factor + (1 - start_factor) * min(t, warmup) / warmup)
double linear_warmup(double base_lr, double start_factor, std::int64_t t, std::int64_t warmup) {
  if (t >= warmup) return base_lr;
  const double fraction = static_cast<double>(t) / static_cast<double>(warmup);
  return base_lr * (start_factor + (1.0 - start_factor) * fraction);
}

void require_start_factor(const char* owner, double start_factor) {
  detail::require(start_factor >= 0.0 && start_factor <= 1.0, owner, "start_factor", "in [0, 1]",
                  start_factor);
}

}  // namespace

template <class T>
LRScheduler<T>::LRScheduler(Optimizer<T>& optimizer)
    : optimizer_(&optimizer), base_lr_(optimizer.lr()), last_lr_(optimizer.lr()) {}

template <class T>
void LRScheduler<T>::start() {
  last_epoch_ = 0;
  apply();
}

template <class T>
void LRScheduler<T>::step() {
  ++last_epoch_;
  apply();
}

template <class T>
void LRScheduler<T>::apply() {
  last_lr_ = lr_at(last_epoch_);
  optimizer_->set_lr(last_lr_);
}

template <class T>
StepLR<T>::StepLR(Optimizer<T>& optimizer, std::int64_t step_size, double gamma)
    : LRScheduler<T>(optimizer), step_size_(step_size), gamma_(gamma) {
  detail::require_at_least("StepLR", "step_size", step_size, 1);
  detail::require(std::isfinite(gamma) && gamma > 0.0, "StepLR", "gamma", "a finite number > 0",
                  gamma);
  this->start();
}

template <class T>
double StepLR<T>::lr_at(std::int64_t t) const {
  return this->base_lr() * std::pow(gamma_, static_cast<double>(t / step_size_));
}

template <class T>
CosineAnnealingLR<T>::CosineAnnealingLR(Optimizer<T>& optimizer, std::int64_t T_max, double eta_min)
    : LRScheduler<T>(optimizer), t_max_(T_max), eta_min_(eta_min) {
  detail::require_at_least("CosineAnnealingLR", "T_max", T_max, 1);
  detail::require_finite_nonnegative("CosineAnnealingLR", "eta_min", eta_min);
  this->start();
}

template <class T>
double CosineAnnealingLR<T>::lr_at(std::int64_t t) const {
  return cosine_annealing(this->base_lr(), eta_min_, t, t_max_);
}

template <class T>
LinearWarmup<T>::LinearWarmup(Optimizer<T>& optimizer, std::int64_t warmup_steps,
                              double start_factor)
    : LRScheduler<T>(optimizer), warmup_steps_(warmup_steps), start_factor_(start_factor) {
  detail::require_at_least("LinearWarmup", "warmup_steps", warmup_steps, 0);
  require_start_factor("LinearWarmup", start_factor);
  this->start();
}

template <class T>
double LinearWarmup<T>::lr_at(std::int64_t t) const {
  return linear_warmup(this->base_lr(), start_factor_, t, warmup_steps_);
}

template <class T>
WarmupCosineLR<T>::WarmupCosineLR(Optimizer<T>& optimizer, std::int64_t warmup_steps,
                                  std::int64_t cosine_steps, double start_factor, double eta_min)
    : LRScheduler<T>(optimizer),
      warmup_steps_(warmup_steps),
      cosine_steps_(cosine_steps),
      start_factor_(start_factor),
      eta_min_(eta_min) {
  detail::require_at_least("WarmupCosineLR", "warmup_steps", warmup_steps, 0);
  detail::require_at_least("WarmupCosineLR", "cosine_steps", cosine_steps, 1);
  require_start_factor("WarmupCosineLR", start_factor);
  detail::require_finite_nonnegative("WarmupCosineLR", "eta_min", eta_min);
  this->start();
}

template <class T>
double WarmupCosineLR<T>::lr_at(std::int64_t t) const {
  if (t < warmup_steps_) return linear_warmup(this->base_lr(), start_factor_, t, warmup_steps_);
  const std::int64_t s = std::min(t - warmup_steps_, cosine_steps_);
  return cosine_annealing(this->base_lr(), eta_min_, s, cosine_steps_);
}

template class LRScheduler<float>;
template class LRScheduler<double>;
template class StepLR<float>;
template class StepLR<double>;
template class CosineAnnealingLR<float>;
template class CosineAnnealingLR<double>;
template class LinearWarmup<float>;
template class LinearWarmup<double>;
template class WarmupCosineLR<float>;
template class WarmupCosineLR<double>;

}  // namespace xtgrad::optim

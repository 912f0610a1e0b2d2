#include "lr_scheduler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "state_reader.hpp"

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
LRScheduler<T>::LRScheduler(std::string name, Optimizer<T>& optimizer)
    : name_(std::move(name)), optimizer_(&optimizer) {
  for (std::size_t g = 0; g < optimizer.group_count(); ++g) base_lrs_.push_back(optimizer.lr(g));
  last_lrs_ = base_lrs_;
}

template <class T>
void LRScheduler<T>::check_group(const char* method, std::size_t group) const {
  if (group >= base_lrs_.size())
    xtgrad::detail::fail_argument(name_ + "::" + method, "group",
                                  "is " + std::to_string(group) + ", expected less than " +
                                      std::to_string(base_lrs_.size()) + " (the number of groups)");
}

template <class T>
double LRScheduler<T>::last_lr(std::size_t group) const {
  check_group("last_lr", group);
  return last_lrs_[group];
}

template <class T>
double LRScheduler<T>::base_lr(std::size_t group) const {
  check_group("base_lr", group);
  return base_lrs_[group];
}

template <class T>
double LRScheduler<T>::lr_at(std::int64_t t, std::size_t group) const {
  if (t < 0)
    xtgrad::detail::fail_argument(name_ + "::lr_at", "t",
                                  "is " + std::to_string(t) + ", expected an epoch >= 0");
  check_group("lr_at", group);
  return schedule(t, base_lrs_[group]);
}

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
  for (std::size_t g = 0; g < base_lrs_.size(); ++g) {
    last_lrs_[g] = schedule(last_epoch_, base_lrs_[g]);
    optimizer_->set_lr(g, last_lrs_[g]);
  }
}

template <class T>
struct LRScheduler<T>::Loaded {
  std::int64_t last_epoch = 0;
  std::vector<double> base_lrs, last_lrs;
};

template <class T>
StateDict<T> LRScheduler<T>::state_dict() const {
  StateDict<T> out;
  out.strings["type"] = name_;
  out.integers["last_epoch"] = last_epoch_;
  out.integers["param_groups"] = static_cast<std::int64_t>(base_lrs_.size());
  for (std::size_t g = 0; g < base_lrs_.size(); ++g) {
    out.reals["base_lrs." + std::to_string(g)] = base_lrs_[g];
    out.reals["last_lrs." + std::to_string(g)] = last_lrs_[g];
  }
  return out;
}

template <class T>
typename LRScheduler<T>::Loaded LRScheduler<T>::read_state_dict(const StateDict<T>& state,
                                                                const std::string& fn) const {
  detail::StateReader<T> reader(fn, state);
  reader.expect_string("type", name_);
  Loaded out;
  out.last_epoch = reader.integer_in("last_epoch", 0, std::numeric_limits<std::int64_t>::max());
  const auto groups = static_cast<std::int64_t>(base_lrs_.size());
  reader.integer_in("param_groups", groups, groups);
  for (std::size_t g = 0; g < base_lrs_.size(); ++g)
    for (const char* table : {"base_lrs.", "last_lrs."}) {
      const std::string key = table + std::to_string(g);
      const double lr = reader.real(key);
      detail::require_finite_nonnegative(fn, key.c_str(), lr);
      (table[0] == 'b' ? out.base_lrs : out.last_lrs).push_back(lr);
    }
  reader.finish();
  return out;
}

template <class T>
void LRScheduler<T>::check_state_dict(const StateDict<T>& state) const {
  read_state_dict(state, name_ + "::check_state_dict");
}

template <class T>
void LRScheduler<T>::load_state_dict(const StateDict<T>& state) {
  Loaded loaded = read_state_dict(state, name_ + "::load_state_dict");
  last_epoch_ = loaded.last_epoch;
  base_lrs_ = std::move(loaded.base_lrs);
  last_lrs_ = std::move(loaded.last_lrs);
  for (std::size_t g = 0; g < last_lrs_.size(); ++g) optimizer_->set_lr(g, last_lrs_[g]);
}

template <class T>
StepLR<T>::StepLR(Optimizer<T>& optimizer, std::int64_t step_size, double gamma)
    : LRScheduler<T>("StepLR", optimizer), step_size_(step_size), gamma_(gamma) {
  detail::require_at_least("StepLR", "step_size", step_size, 1);
  detail::require(std::isfinite(gamma) && gamma > 0.0, "StepLR", "gamma", "a finite number > 0",
                  gamma);
  this->start();
}

template <class T>
double StepLR<T>::schedule(std::int64_t t, double base_lr) const {
  return base_lr * std::pow(gamma_, static_cast<double>(t / step_size_));
}

template <class T>
CosineAnnealingLR<T>::CosineAnnealingLR(Optimizer<T>& optimizer, std::int64_t T_max, double eta_min)
    : LRScheduler<T>("CosineAnnealingLR", optimizer), t_max_(T_max), eta_min_(eta_min) {
  detail::require_at_least("CosineAnnealingLR", "T_max", T_max, 1);
  detail::require_finite_nonnegative("CosineAnnealingLR", "eta_min", eta_min);
  this->start();
}

template <class T>
double CosineAnnealingLR<T>::schedule(std::int64_t t, double base_lr) const {
  return cosine_annealing(base_lr, eta_min_, t, t_max_);
}

template <class T>
LinearWarmup<T>::LinearWarmup(Optimizer<T>& optimizer, std::int64_t warmup_steps,
                              double start_factor)
    : LRScheduler<T>("LinearWarmup", optimizer),
      warmup_steps_(warmup_steps),
      start_factor_(start_factor) {
  detail::require_at_least("LinearWarmup", "warmup_steps", warmup_steps, 0);
  require_start_factor("LinearWarmup", start_factor);
  this->start();
}

template <class T>
double LinearWarmup<T>::schedule(std::int64_t t, double base_lr) const {
  return linear_warmup(base_lr, start_factor_, t, warmup_steps_);
}

template <class T>
WarmupCosineLR<T>::WarmupCosineLR(Optimizer<T>& optimizer, std::int64_t warmup_steps,
                                  std::int64_t cosine_steps, double start_factor, double eta_min)
    : LRScheduler<T>("WarmupCosineLR", optimizer),
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
double WarmupCosineLR<T>::schedule(std::int64_t t, double base_lr) const {
  if (t < warmup_steps_) return linear_warmup(base_lr, start_factor_, t, warmup_steps_);
  const std::int64_t s = std::min(t - warmup_steps_, cosine_steps_);
  return cosine_annealing(base_lr, eta_min_, s, cosine_steps_);
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

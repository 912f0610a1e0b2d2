#pragma once
// AdamW (Loshchilov & Hutter, "Decoupled Weight Decay Regularization", 2019):
// Adam whose weight decay shrinks the parameter directly instead of entering
// the gradient; the update of torch.optim.AdamW. For each parameter p with
// gradient g, at its step t = 1, 2, ...:
//
//   p <- p * (1 - lr * weight_decay)     (decoupled: never seen by the moments)
//   exp_avg    <- beta1 * exp_avg    + (1 - beta1) * g
//   exp_avg_sq <- beta2 * exp_avg_sq + (1 - beta2) * g^2
//   amsgrad: max_exp_avg_sq <- max(max_exp_avg_sq, exp_avg_sq), used instead of exp_avg_sq below
//   p <- p - lr / (1 - beta1^t) * exp_avg / (sqrt(exp_avg_sq) / sqrt(1 - beta2^t) + eps)
//
// With weight_decay = 0 it is exactly Adam. The moment update is shared with
// Adam (adam_update.hpp), fused with the decay into one pass. Defaults are
// PyTorch's (weight_decay = 1e-2, unlike Adam's 0). The constructor throws
// std::invalid_argument naming "AdamW", the hyperparameter and its value for:
// lr or weight_decay negative or not finite, betas outside [0, 1), eps <= 0 or
// not finite.

#include <cstddef>
#include <optional>
#include <tuple>
#include <vector>

#include "adam_update.hpp"
#include "optimizer.hpp"

namespace xtgrad::optim {

// Options aggregate with fluent setters: AdamWOptions(3e-4).weight_decay(0.1).
class AdamWOptions {
 public:
  AdamWOptions(double lr = 1e-3) : lr_(lr) {}  // NOLINT: implicit, as torch::optim::AdamWOptions

  AdamWOptions& lr(double value) { return set(lr_, value); }
  AdamWOptions& betas(const std::tuple<double, double>& value) {
    betas_ = value;
    return *this;
  }
  AdamWOptions& eps(double value) { return set(eps_, value); }
  AdamWOptions& weight_decay(double value) { return set(weight_decay_, value); }
  AdamWOptions& amsgrad(bool value) {
    amsgrad_ = value;
    return *this;
  }

  double lr() const { return lr_; }
  const std::tuple<double, double>& betas() const { return betas_; }
  double eps() const { return eps_; }
  double weight_decay() const { return weight_decay_; }
  bool amsgrad() const { return amsgrad_; }

 private:
  AdamWOptions& set(double& field, double value) {
    field = value;
    return *this;
  }
  double lr_;
  std::tuple<double, double> betas_{0.9, 0.999};
  double eps_ = 1e-8;
  double weight_decay_ = 1e-2;
  bool amsgrad_ = false;
};

template <class T>
class AdamW : public Optimizer<T> {
 public:
  explicit AdamW(std::vector<Parameter<T>*> params, const AdamWOptions& options = {});

  void step() override;

  // The hyperparameters, with the current learning rate (set_lr, schedules).
  AdamWOptions options() const { return AdamWOptions(options_).lr(this->lr()); }
  // The state of parameter `index`; nullptr before its first update. Throws
  // std::out_of_range for a bad index.
  const AdamParamState<T>* state(std::size_t index) const;

 private:
  AdamWOptions options_;
  std::vector<std::optional<AdamParamState<T>>> state_;
};

extern template class AdamW<float>;
extern template class AdamW<double>;

}  // namespace xtgrad::optim

#pragma once
// Adam (Kingma & Ba, 2015) with L2 weight decay and the AMSGrad variant
// (Reddi et al., 2018); the update of torch.optim.Adam (_single_tensor_adam).
// For each parameter p with gradient g, at its step t = 1, 2, ...:
//
//   g <- g + weight_decay * p            (L2: the decay passes through the moments;
//                                         for decoupled decay use AdamW)
//   exp_avg    <- beta1 * exp_avg    + (1 - beta1) * g
//   exp_avg_sq <- beta2 * exp_avg_sq + (1 - beta2) * g^2
//   amsgrad: max_exp_avg_sq <- max(max_exp_avg_sq, exp_avg_sq), used instead of exp_avg_sq below
//   p <- p - lr / (1 - beta1^t) * exp_avg / (sqrt(exp_avg_sq) / sqrt(1 - beta2^t) + eps)
//
// State per parameter (PyTorch's names): step, exp_avg, exp_avg_sq and, with
// amsgrad, max_exp_avg_sq; see adam_update.hpp. Defaults are PyTorch's.
// The constructor throws std::invalid_argument naming "Adam", the
// hyperparameter and its value for: lr or weight_decay negative or not finite,
// betas outside [0, 1), eps <= 0 or not finite.

#include <cstddef>
#include <optional>
#include <tuple>
#include <vector>

#include "adam_update.hpp"
#include "optimizer.hpp"

namespace xtgrad::optim {

// Options aggregate with fluent setters: AdamOptions(3e-4).betas({0.9, 0.95}).amsgrad(true).
class AdamOptions {
 public:
  AdamOptions(double lr = 1e-3) : lr_(lr) {}  // NOLINT: implicit, as torch::optim::AdamOptions

  AdamOptions& lr(double value) { return set(lr_, value); }
  AdamOptions& betas(const std::tuple<double, double>& value) {
    betas_ = value;
    return *this;
  }
  AdamOptions& eps(double value) { return set(eps_, value); }
  AdamOptions& weight_decay(double value) { return set(weight_decay_, value); }
  AdamOptions& amsgrad(bool value) {
    amsgrad_ = value;
    return *this;
  }

  double lr() const { return lr_; }
  const std::tuple<double, double>& betas() const { return betas_; }
  double eps() const { return eps_; }
  double weight_decay() const { return weight_decay_; }
  bool amsgrad() const { return amsgrad_; }

 private:
  AdamOptions& set(double& field, double value) {
    field = value;
    return *this;
  }
  double lr_;
  std::tuple<double, double> betas_{0.9, 0.999};
  double eps_ = 1e-8;
  double weight_decay_ = 0.0;
  bool amsgrad_ = false;
};

template <class T>
class Adam : public Optimizer<T> {
 public:
  explicit Adam(std::vector<Parameter<T>*> params, const AdamOptions& options = {});

  void step() override;

  // The hyperparameters, with the current learning rate (set_lr, schedules).
  AdamOptions options() const { return AdamOptions(options_).lr(this->lr()); }
  // The state of parameter `index`; nullptr before its first update. Throws
  // std::out_of_range for a bad index.
  const AdamParamState<T>* state(std::size_t index) const;

 private:
  AdamOptions options_;
  std::vector<std::optional<AdamParamState<T>>> state_;
};

extern template class Adam<float>;
extern template class Adam<double>;

}  // namespace xtgrad::optim

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

#include "adam_update.hpp"
#include "optimizer.hpp"

namespace xtgrad::optim {

// Options aggregate with fluent setters: AdamWOptions(3e-4).weight_decay(0.1).
// Defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 1e-2
// (decoupled), amsgrad off.
class AdamWOptions : public detail::AdamOptionsBase<AdamWOptions> {
 public:
  static constexpr const char* k_name = "AdamW";
  static constexpr bool k_decoupled_weight_decay = true;
  AdamWOptions(double lr = 1e-3)  // NOLINT: implicit, as torch::optim::AdamWOptions
      : AdamOptionsBase(lr, 1e-2) {}
};

// A parameter group of AdamW: {params, AdamWOptions}.
template <class T>
using AdamWParamGroup = ParamGroup<T, AdamWOptions>;

template <class T>
class AdamW : public detail::AdamFamily<T, AdamWOptions> {
 public:
  using detail::AdamFamily<T, AdamWOptions>::AdamFamily;
};

namespace detail {
extern template class AdamFamily<float, AdamWOptions>;
extern template class AdamFamily<double, AdamWOptions>;
}  // namespace detail

}  // namespace xtgrad::optim

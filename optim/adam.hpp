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

#include "adam_update.hpp"
#include "optimizer.hpp"

namespace xtgrad::optim {

// Options aggregate with fluent setters: AdamOptions(3e-4).betas({0.9, 0.95}).amsgrad(true).
// Defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0 (L2), amsgrad off.
class AdamOptions : public detail::AdamOptionsBase<AdamOptions> {
 public:
  static constexpr const char* k_name = "Adam";
  static constexpr bool k_decoupled_weight_decay = false;
  AdamOptions(double lr = 1e-3)  // NOLINT: implicit, as torch::optim::AdamOptions
      : AdamOptionsBase(lr, 0.0) {}
};

// A parameter group of Adam: {params, AdamOptions}.
template <class T>
using AdamParamGroup = ParamGroup<T, AdamOptions>;

template <class T>
class Adam : public detail::AdamFamily<T, AdamOptions> {
 public:
  using detail::AdamFamily<T, AdamOptions>::AdamFamily;
};

namespace detail {
extern template class AdamFamily<float, AdamOptions>;
extern template class AdamFamily<double, AdamOptions>;
}  // namespace detail

}  // namespace xtgrad::optim

#pragma once
// The moment update shared by Adam and AdamW (torch.optim.adam._single_tensor_adam;
// AdamW is the same function with decoupled weight decay). Internal: use
// adam.hpp or adamw.hpp.
//
// For each parameter p with a gradient, in one pass over p, at step t (counted
// per parameter, starting at 1):
//
//   g <- g + l2_weight_decay * p                          (Adam's weight_decay)
//   exp_avg    <- beta1 * exp_avg    + (1 - beta1) * g
//   exp_avg_sq <- beta2 * exp_avg_sq + (1 - beta2) * g^2
//   v <- exp_avg_sq, or with amsgrad:
//        max_exp_avg_sq <- max(max_exp_avg_sq, exp_avg_sq); v <- max_exp_avg_sq
//   denom <- sqrt(v) / sqrt(1 - beta2^t) + eps
//   p <- p * (1 - lr * decoupled_weight_decay)            (AdamW's weight_decay)
//   p <- p - lr / (1 - beta1^t) * exp_avg / denom
//
// The scalars (bias corrections, step size) are computed in double, the
// elementwise pass in T: xsimd batches, then the remaining elements one by one.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "optimizer.hpp"

namespace xtgrad::optim {

// Per-parameter state of Adam and AdamW, with PyTorch's names. max_exp_avg_sq
// is allocated only with amsgrad.
template <class T>
struct AdamParamState {
  std::int64_t step = 0;
  xt::xarray<T> exp_avg;
  xt::xarray<T> exp_avg_sq;
  xt::xarray<T> max_exp_avg_sq;
};

namespace detail {

struct AdamStepConfig {
  double lr = 0.0;
  double beta1 = 0.0;
  double beta2 = 0.0;
  double eps = 0.0;
  double l2_weight_decay = 0.0;         // added to the gradient (Adam)
  double decoupled_weight_decay = 0.0;  // shrinks p before the update (AdamW)
  bool amsgrad = false;
};

// One step over every parameter with a gradient; allocates state on first use.
template <class T>
void adam_step(const std::string& owner, const std::vector<Parameter<T>*>& params,
               std::vector<std::optional<AdamParamState<T>>>& state, const AdamStepConfig& config);

// Validates what Adam and AdamW share: betas each in [0, 1), eps finite and
// > 0, weight_decay finite and >= 0 (lr is checked by Optimizer).
void check_adam_hyperparameters(const std::string& owner, double beta1, double beta2, double eps,
                                double weight_decay);

}  // namespace detail

}  // namespace xtgrad::optim

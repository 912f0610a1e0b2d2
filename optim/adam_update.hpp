#pragma once
// What Adam and AdamW share: their options, their optimizer class and the
// moment update (torch.optim.adam._single_tensor_adam; AdamW is the same
// function with decoupled weight decay). Internal: use adam.hpp or adamw.hpp.
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

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <tuple>
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

// The checks of one step over every parameter (gradient and state shapes),
// made before any group is updated so that a failed step changes nothing.
template <class T>
void check_adam_step(const std::string& owner, const std::vector<Parameter<T>*>& params,
                     const std::vector<std::optional<AdamParamState<T>>>& state);

// One step over params[begin, end) (one group) for those with a gradient;
// allocates state on first use. check_adam_step comes first.
template <class T>
void adam_step(const std::vector<Parameter<T>*>& params,
               std::vector<std::optional<AdamParamState<T>>>& state, std::size_t begin,
               std::size_t end, const AdamStepConfig& config);

// Validates what Adam and AdamW share: betas each in [0, 1), eps finite and
// > 0, weight_decay finite and >= 0 (lr is checked by Optimizer).
void check_adam_hyperparameters(const std::string& owner, double beta1, double beta2, double eps,
                                double weight_decay);

// The hyperparameters of AdamOptions and AdamWOptions, with fluent setters
// that return the derived options class. Only the default weight_decay and
// what it means differ between the two.
template <class Self>
class AdamOptionsBase {
 public:
  Self& lr(double value) { return set(lr_, value); }
  Self& betas(const std::tuple<double, double>& value) {
    betas_ = value;
    return self();
  }
  Self& eps(double value) { return set(eps_, value); }
  Self& weight_decay(double value) { return set(weight_decay_, value); }
  Self& amsgrad(bool value) {
    amsgrad_ = value;
    return self();
  }

  double lr() const { return lr_; }
  const std::tuple<double, double>& betas() const { return betas_; }
  double eps() const { return eps_; }
  double weight_decay() const { return weight_decay_; }
  bool amsgrad() const { return amsgrad_; }

 protected:
  AdamOptionsBase(double lr, double weight_decay) : lr_(lr), weight_decay_(weight_decay) {}

 private:
  Self& self() { return static_cast<Self&>(*this); }
  Self& set(double& field, double value) {
    field = value;
    return self();
  }
  double lr_;
  std::tuple<double, double> betas_{0.9, 0.999};
  double eps_ = 1e-8;
  double weight_decay_;
  bool amsgrad_ = false;
};

// The optimizer behind Adam<T> (Options = AdamOptions) and AdamW<T>
// (AdamWOptions): Options::k_name names it in errors, and
// Options::k_decoupled_weight_decay says which weight decay it applies.
//
// The state dict (Optimizer::state_dict) holds, beside "type" (Options::k_name),
// "param_groups" and each group's "param_groups.<g>.params" and ".lr":
//   reals     param_groups.<g>.beta1, .beta2, .eps, .weight_decay
//   integers  param_groups.<g>.amsgrad (0 or 1)
//   integers  state.<i>.step (>= 1), for each parameter i that has state,
//   arrays    with state.<i>.exp_avg, state.<i>.exp_avg_sq and, exactly when
//             its group has amsgrad, state.<i>.max_exp_avg_sq
// (torch keeps step as a float tensor; here it is an exact int64).
template <class T, class Options>
class AdamFamily : public Optimizer<T> {
 public:
  // One group: every parameter with `options`.
  explicit AdamFamily(std::vector<Parameter<T>*> params, const Options& options = {});
  // The same for a braced list, Adam<T>({&w, &b}), which would otherwise be
  // ambiguous with the groups' vector (its iterator-pair constructor).
  explicit AdamFamily(std::initializer_list<Parameter<T>*> params, const Options& options = {})
      : AdamFamily(std::vector<Parameter<T>*>(params), options) {}
  // One group per element, each with its own options.
  explicit AdamFamily(const std::vector<ParamGroup<T, Options>>& groups);

  void step() override;

  // The hyperparameters of a group, with its current learning rate (set_lr,
  // schedules). std::invalid_argument for a bad group.
  Options options(std::size_t group = 0) const;
  // The state of parameter `index`; nullptr before its first update. Throws
  // std::invalid_argument for a bad index.
  const AdamParamState<T>* state(std::size_t index) const;

  StateDict<T> state_dict() const override;
  void load_state_dict(const StateDict<T>& state) override;
  void check_state_dict(const StateDict<T>& state) const override;

 private:
  struct Loaded;
  Loaded read_state_dict(const StateDict<T>& state, const std::string& function) const;

  std::vector<Options> options_;  // per group; the lr lives in Optimizer
  std::vector<std::optional<AdamParamState<T>>> state_;
};

}  // namespace detail

}  // namespace xtgrad::optim

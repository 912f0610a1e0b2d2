#pragma once
// SGD: stochastic gradient descent with momentum, dampening, Nesterov momentum
// and L2 weight decay. The update of torch.optim.SGD (_single_tensor_sgd), for
// each parameter p with gradient g, in one pass over p:
//
//   g <- g + weight_decay * p                   (L2: the decay goes through the
//                                                momentum buffer, as in PyTorch)
//   if momentum != 0:
//     buf <- g                                  on p's first update (no dampening)
//     buf <- momentum * buf + (1 - dampening) * g   afterwards
//     g   <- g + momentum * buf                 if nesterov
//     g   <- buf                                otherwise
//   p <- p - lr * g
//
// State per parameter: momentum_buffer (only when momentum != 0).
//
// Each parameter group has its own SGDOptions (every field may differ). The
// state dict (Optimizer::state_dict) holds, beside "type" = "SGD",
// "param_groups" and each group's "param_groups.<g>.params" and ".lr":
//   reals     param_groups.<g>.momentum, .dampening, .weight_decay
//   integers  param_groups.<g>.nesterov (0 or 1)
//   arrays    state.<i>.momentum_buffer, for each parameter i that has one
// A momentum buffer is refused for a parameter whose group has momentum 0.
//
// Defaults are PyTorch's. lr defaults to 1e-3 as in Python's torch.optim.SGD
// (the C++ frontend's SGDOptions requires it). The constructor throws
// std::invalid_argument naming "SGD", the hyperparameter and its value for:
// lr, momentum or weight_decay negative or not finite; dampening outside [0, 1]
// (PyTorch does not check it); nesterov with momentum <= 0 or dampening != 0.

#include <cstddef>
#include <initializer_list>
#include <optional>
#include <vector>

#include "optimizer.hpp"

namespace xtgrad::optim {

// Options aggregate with fluent setters: SGDOptions(0.1).momentum(0.9).nesterov(true).
class SGDOptions {
 public:
  SGDOptions(double lr = 1e-3) : lr_(lr) {}  // NOLINT: implicit, as torch::optim::SGDOptions

  SGDOptions& lr(double value) { return set(lr_, value); }
  SGDOptions& momentum(double value) { return set(momentum_, value); }
  SGDOptions& dampening(double value) { return set(dampening_, value); }
  SGDOptions& weight_decay(double value) { return set(weight_decay_, value); }
  SGDOptions& nesterov(bool value) {
    nesterov_ = value;
    return *this;
  }

  double lr() const { return lr_; }
  double momentum() const { return momentum_; }
  double dampening() const { return dampening_; }
  double weight_decay() const { return weight_decay_; }
  bool nesterov() const { return nesterov_; }

 private:
  SGDOptions& set(double& field, double value) {
    field = value;
    return *this;
  }
  double lr_;
  double momentum_ = 0.0;
  double dampening_ = 0.0;
  double weight_decay_ = 0.0;
  bool nesterov_ = false;
};

template <class T>
struct SGDParamState {
  xt::xarray<T> momentum_buffer;
};

template <class T>
using SGDParamGroup = ParamGroup<T, SGDOptions>;

template <class T>
class SGD : public Optimizer<T> {
 public:
  // One group: every parameter with `options`.
  explicit SGD(std::vector<Parameter<T>*> params, const SGDOptions& options = {});
  // The same for a braced list, SGD<T>({&w, &b}), which would otherwise be
  // ambiguous with the groups' vector (its iterator-pair constructor).
  explicit SGD(std::initializer_list<Parameter<T>*> params, const SGDOptions& options = {})
      : SGD(std::vector<Parameter<T>*>(params), options) {}
  // One group per element, each with its own options.
  explicit SGD(const std::vector<SGDParamGroup<T>>& groups);

  void step() override;

  // The hyperparameters of a group, with its current learning rate (set_lr,
  // schedules). std::invalid_argument for a bad group.
  SGDOptions options(std::size_t group = 0) const;
  // The state of parameter `index`; nullptr before its first update and always
  // when momentum == 0. Throws std::invalid_argument for a bad index.
  const SGDParamState<T>* state(std::size_t index) const;

  StateDict<T> state_dict() const override;
  void load_state_dict(const StateDict<T>& state) override;
  void check_state_dict(const StateDict<T>& state) const override;

 private:
  struct Loaded;
  Loaded read_state_dict(const StateDict<T>& state, const std::string& function) const;

  std::vector<SGDOptions> options_;  // per group; the lr lives in Optimizer
  std::vector<std::optional<SGDParamState<T>>> state_;
};

extern template class SGD<float>;
extern template class SGD<double>;

}  // namespace xtgrad::optim

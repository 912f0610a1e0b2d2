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
// Defaults are PyTorch's. lr defaults to 1e-3 as in Python's torch.optim.SGD
// (the C++ frontend's SGDOptions requires it). The constructor throws
// std::invalid_argument naming "SGD", the hyperparameter and its value for:
// lr, momentum or weight_decay negative or not finite; dampening outside [0, 1]
// (PyTorch does not check it); nesterov with momentum <= 0 or dampening != 0.

#include <cstddef>
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
class SGD : public Optimizer<T> {
 public:
  explicit SGD(std::vector<Parameter<T>*> params, const SGDOptions& options = {});

  void step() override;

  // The hyperparameters, with the current learning rate (set_lr, schedules).
  SGDOptions options() const { return SGDOptions(options_).lr(this->lr()); }
  // The state of parameter `index`; nullptr before its first update and always
  // when momentum == 0. Throws std::out_of_range for a bad index.
  const SGDParamState<T>* state(std::size_t index) const;

 private:
  SGDOptions options_;
  std::vector<std::optional<SGDParamState<T>>> state_;
};

extern template class SGD<float>;
extern template class SGD<double>;

}  // namespace xtgrad::optim

#pragma once
// Sequential<T>: torch.nn.Sequential, a list of modules applied in order,
//   y = m_{k-1}(... m_1(m_0(x))),   an empty Sequential returns x itself.
// Children are named "0", "1", ... by position, so the parameter names are
// torch's for the same structure ("0.weight", "2.bias").
//
// The children are held as std::unique_ptr<Module<T>> (any mix of module
// types), so a Sequential is move-only: copying one would need every child
// to know how to copy itself. Moving keeps every child where it is.
//
//   Sequential<double> net;
//   net.emplace_back<Linear<double>>(784, 256, true, generator);
//   net.push_back(ActivationLayer<double>(Activation::relu));
//   Linear<double>& head = net.emplace_back<Linear<double>>(256, 10, true, generator);
//
// Activation recomputation (torch.utils.checkpoint.checkpoint_sequential):
// net.set_recompute_every(k) runs the children in groups of k consecutive
// modules (the last group may be shorter), each group under one recompute
// (modules/recompute_modules.hpp): backward keeps only the groups' inputs
// and outputs and re-runs each group once, Dropouts with their forward's
// masks. Gradients are those without it, bit for bit. 0 (the default) turns
// it off; a tape that does not record never recomputes. It is a way of
// running, not part of the model: config(), state dicts and checkpoints of
// the weights do not record it.

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "../engine/activation.hpp"
#include "module.hpp"

namespace xtgrad {

template <class T>
class Sequential : public Module<T> {
 public:
  Sequential() = default;
  Sequential(Sequential&&) noexcept = default;
  Sequential& operator=(Sequential&&) noexcept = default;

  // Appends a module built in place from args; returns it (it stays where it is).
  template <class M, class... Args>
  M& emplace_back(Args&&... args) {
    static_assert(std::is_base_of_v<Module<T>, M>, "a child of Sequential<T> is a Module<T>");
    auto child = std::make_unique<M>(std::forward<Args>(args)...);
    M& ref = *child;
    children_.push_back(std::move(child));
    return ref;
  }
  // Appends a module moved (or copied) in; returns it.
  template <class M, class = std::enable_if_t<std::is_base_of_v<Module<T>, std::decay_t<M>>>>
  std::decay_t<M>& push_back(M&& module) {
    return emplace_back<std::decay_t<M>>(std::forward<M>(module));
  }
  // Appends an owned module; std::invalid_argument for a null one.
  Module<T>& push_back(std::unique_ptr<Module<T>> module);

  std::size_t size() const { return children_.size(); }
  bool empty() const { return children_.empty(); }
  // Child i; std::out_of_range naming i and size() when i >= size().
  Module<T>& at(std::size_t i);
  const Module<T>& at(std::size_t i) const;
  Module<T>& operator[](std::size_t i) { return at(i); }

  Var<T> forward(const Var<T>& x) override;
  ModuleConfig config() const override;

  // Checkpoint every group of k children (see above); 0 is off.
  void set_recompute_every(std::size_t k) { recompute_every_ = k; }
  std::size_t recompute_every() const { return recompute_every_; }

 protected:
  void collect_parameters(const std::string& prefix,
                          typename Module<T>::NamedParameters& out) override;

 private:
  std::vector<std::unique_ptr<Module<T>>> children_;
  std::size_t recompute_every_ = 0;
};

// ActivationLayer<T>(f): y = f(x) (ops/activations.hpp), the module form of
// an activation: torch.nn.ReLU, GELU (approximate='none'), GELU('tanh'),
// SiLU; gelu_sigmoid has no torch module. No parameters. std::invalid_argument
// for an Activation outside its enumeration.
template <class T>
class ActivationLayer : public Module<T> {
 public:
  explicit ActivationLayer(Activation activation);
  Var<T> forward(const Var<T>& x) override;
  ModuleConfig config() const override;
  Activation activation() const { return activation_; }

 protected:
  void collect_parameters(const std::string&, typename Module<T>::NamedParameters&) override {}

 private:
  Activation activation_;
};

extern template class Sequential<float>;
extern template class Sequential<double>;
extern template class ActivationLayer<float>;
extern template class ActivationLayer<double>;

}  // namespace xtgrad

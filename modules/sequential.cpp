#include "sequential.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "../engine/errors.hpp"
#include "../engine/ops/activations.hpp"
#include "recompute_modules.hpp"

namespace xtgrad {

template <class T>
Module<T>& Sequential<T>::push_back(std::unique_ptr<Module<T>> module) {
  if (!module) detail::fail_argument("Sequential::push_back", "module", "is null");
  children_.push_back(std::move(module));
  return *children_.back();
}

template <class T>
Module<T>& Sequential<T>::at(std::size_t i) {
  return const_cast<Module<T>&>(static_cast<const Sequential<T>&>(*this).at(i));
}

template <class T>
const Module<T>& Sequential<T>::at(std::size_t i) const {
  if (i >= children_.size())
    throw std::out_of_range("xtgrad::Sequential::at: index " + std::to_string(i) +
                            " is out of range for a Sequential of " +
                            std::to_string(children_.size()) + " modules");
  return *children_[i];
}

template <class T>
Var<T> Sequential<T>::forward(const Var<T>& x) {
  const Tape<T>& tape = x.tape_for("Sequential", "x");
  Var<T> y = x;
  if (recompute_every_ == 0 || !tape.grad_enabled()) {
    for (const auto& child : children_) y = child->forward(y);
    return y;
  }
  for (std::size_t first = 0; first < children_.size(); first += recompute_every_) {
    std::vector<Module<T>*> group;
    for (std::size_t i = first; i < std::min(first + recompute_every_, children_.size()); ++i)
      group.push_back(children_[i].get());
    y = recompute_modules(group, y);
  }
  return y;
}

template <class T>
void Sequential<T>::collect_parameters(const std::string& prefix,
                                       typename Module<T>::NamedParameters& out) {
  for (std::size_t i = 0; i < children_.size(); ++i)
    this->add_child(prefix, std::to_string(i), *children_[i], out);
}

template <class T>
ActivationLayer<T>::ActivationLayer(Activation activation) : activation_(activation) {
  detail::activation_name(activation, "ActivationLayer", "activation");
}

template <class T>
Var<T> ActivationLayer<T>::forward(const Var<T>& x) {
  x.tape_for("ActivationLayer", "x");
  return xtgrad::activation(x, activation_);
}

template <class T>
ModuleConfig Sequential<T>::config() const {
  return this->children_config("Sequential");
}

template <class T>
ModuleConfig ActivationLayer<T>::config() const {
  return ModuleConfig("ActivationLayer").add("activation", std::string(to_string(activation_)));
}

template class Sequential<float>;
template class Sequential<double>;
template class ActivationLayer<float>;
template class ActivationLayer<double>;

}  // namespace xtgrad

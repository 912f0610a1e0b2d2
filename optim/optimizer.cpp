#include "optimizer.hpp"

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "../engine/errors.hpp"

namespace xtgrad::optim {

template <class T>
Optimizer<T>::Optimizer(std::string name, std::vector<Parameter<T>*> params, double lr)
    : name_(std::move(name)), params_(std::move(params)), lr_(lr) {
  detail::require_finite_nonnegative(name_, "lr", lr);
  if (params_.empty())
    xtgrad::detail::fail_argument(name_, "params",
                                  "is empty; an optimizer needs at least one Parameter");
  std::unordered_map<const Parameter<T>*, std::size_t> position;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (params_[i] == nullptr)
      xtgrad::detail::fail_argument(name_, "params",
                                    "holds a null pointer at position " + std::to_string(i));
    const auto [it, inserted] = position.emplace(params_[i], i);
    if (!inserted)
      xtgrad::detail::fail_argument(name_, "params",
                                    "holds parameter '" + params_[i]->name + "' twice (positions " +
                                        std::to_string(it->second) + " and " + std::to_string(i) +
                                        "); its update would be applied twice");
  }
}

template <class T>
void Optimizer<T>::check_state_index(std::size_t index) const {
  if (index >= params_.size())
    throw std::out_of_range("xtgrad::" + name_ + "::state: argument 'index' is " +
                            std::to_string(index) + ", expected less than " +
                            std::to_string(params_.size()) + " (the number of parameters)");
}

template <class T>
void Optimizer<T>::zero_grad() {
  for (Parameter<T>* p : params_) p->zero_grad();
}

template <class T>
void Optimizer<T>::set_lr(double lr) {
  detail::require_finite_nonnegative(name_ + "::set_lr", "lr", lr);
  lr_ = lr;
}

template class Optimizer<float>;
template class Optimizer<double>;

namespace detail {

void require(bool ok, const std::string& owner, const char* argument, const char* expectation,
             double value) {
  if (!ok)
    xtgrad::detail::fail_argument(
        owner, argument,
        std::string("must be ") + expectation + ", got " + xtgrad::detail::number_str(value));
}

void require_finite_nonnegative(const std::string& owner, const char* argument, double value) {
  require(std::isfinite(value) && value >= 0.0, owner, argument, "a finite number >= 0", value);
}

void require_at_least(const std::string& owner, const char* argument, std::int64_t value,
                      std::int64_t minimum) {
  if (value < minimum)
    xtgrad::detail::fail_argument(
        owner, argument,
        "must be >= " + std::to_string(minimum) + ", got " + std::to_string(value));
}

template <class T>
void check_gradient(const std::string& function, std::size_t index, const Parameter<T>& p) {
  if (p.grad.shape() != p.value.shape())
    xtgrad::detail::fail_value(
        function, "parameter " + std::to_string(index) + " (" + xtgrad::detail::quoted(p.name) +
                      ") has a gradient of shape " + xtgrad::detail::shape_str(p.grad.shape()) +
                      ", expected its value's shape " + xtgrad::detail::shape_str(p.value.shape()));
}

template <class T>
void check_state_shape(const std::string& function, std::size_t index, const Parameter<T>& p,
                       const xt::xarray<T>& state) {
  if (state.shape() != p.value.shape())
    xtgrad::detail::fail_logic(
        function, "parameter " + std::to_string(index) + " (" + xtgrad::detail::quoted(p.name) +
                      ") has shape " + xtgrad::detail::shape_str(p.value.shape()) +
                      " but its optimizer state was created for shape " +
                      xtgrad::detail::shape_str(state.shape()) +
                      "; a parameter must keep its shape while an optimizer holds it");
}

template void check_gradient(const std::string&, std::size_t, const Parameter<float>&);
template void check_gradient(const std::string&, std::size_t, const Parameter<double>&);
template void check_state_shape(const std::string&, std::size_t, const Parameter<float>&,
                                const xt::xarray<float>&);
template void check_state_shape(const std::string&, std::size_t, const Parameter<double>&,
                                const xt::xarray<double>&);

}  // namespace detail

}  // namespace xtgrad::optim

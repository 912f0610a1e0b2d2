#include "optimizer.hpp"

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "../engine/errors.hpp"
#include "state_reader.hpp"

namespace xtgrad::optim {

template <class T>
Optimizer<T>::Optimizer(std::string name, std::vector<std::vector<Parameter<T>*>> groups,
                        std::vector<double> lrs)
    : name_(std::move(name)), group_lrs_(std::move(lrs)) {
  group_begin_.push_back(0);
  for (std::size_t g = 0; g < groups.size(); ++g) {
    params_.insert(params_.end(), groups[g].begin(), groups[g].end());
    group_begin_.push_back(params_.size());
  }
  for (std::size_t g = 0; g < group_lrs_.size(); ++g)
    detail::require_finite_nonnegative(group_owner(g), "lr", group_lrs_[g]);
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
    xtgrad::detail::fail_argument(name_ + "::state", "index",
                                  "is " + std::to_string(index) + ", expected less than " +
                                      std::to_string(params_.size()) +
                                      " (the number of parameters)");
}

template <class T>
std::string Optimizer<T>::group_owner(std::size_t group) const {
  return group_lrs_.size() > 1 ? name_ + " param group " + std::to_string(group) : name_;
}

template <class T>
std::size_t Optimizer<T>::group_of(std::size_t index) const {
  std::size_t g = 0;
  while (group_begin_[g + 1] <= index) ++g;
  return g;
}

template <class T>
void Optimizer<T>::zero_grad() {
  for (Parameter<T>* p : params_) p->zero_grad();
}

template <class T>
void Optimizer<T>::check_group(const char* method, std::size_t group) const {
  if (group >= group_lrs_.size())
    xtgrad::detail::fail_argument(name_ + "::" + method, "group",
                                  "is " + std::to_string(group) + ", expected less than " +
                                      std::to_string(group_lrs_.size()) +
                                      " (the number of groups)");
}

template <class T>
double Optimizer<T>::lr(std::size_t group) const {
  check_group("lr", group);
  return group_lrs_[group];
}

template <class T>
void Optimizer<T>::set_lr(double lr) {
  detail::require_finite_nonnegative(name_ + "::set_lr", "lr", lr);
  for (double& group_lr : group_lrs_) group_lr = lr;
}

template <class T>
void Optimizer<T>::set_lr(std::size_t group, double lr) {
  check_group("set_lr", group);
  detail::require_finite_nonnegative(name_ + "::set_lr", "lr", lr);
  group_lrs_[group] = lr;
}

template <class T>
std::size_t Optimizer<T>::group_begin(std::size_t group) const {
  lr(group);  // the range check
  return group_begin_[group];
}

template <class T>
std::size_t Optimizer<T>::group_end(std::size_t group) const {
  lr(group);
  return group_begin_[group + 1];
}

template <class T>
void Optimizer<T>::write_common_state(StateDict<T>& state) const {
  state.strings["type"] = name_;
  state.integers["param_groups"] = static_cast<std::int64_t>(group_count());
  for (std::size_t g = 0; g < group_count(); ++g) {
    state.integers[detail::group_key(g, "params")] =
        static_cast<std::int64_t>(group_begin_[g + 1] - group_begin_[g]);
    state.reals[detail::group_key(g, "lr")] = group_lrs_[g];
  }
}

template <class T>
std::vector<double> Optimizer<T>::read_common_state(detail::StateReader<T>& reader) const {
  reader.expect_string("type", name_);
  const auto groups = static_cast<std::int64_t>(group_count());
  reader.integer_in("param_groups", groups, groups);
  std::vector<double> lrs;
  for (std::size_t g = 0; g < group_count(); ++g) {
    const auto count = static_cast<std::int64_t>(group_begin_[g + 1] - group_begin_[g]);
    reader.integer_in(detail::group_key(g, "params"), count, count);
    const std::string key = detail::group_key(g, "lr");
    lrs.push_back(reader.real(key));
    detail::require_finite_nonnegative(reader.function(), key.c_str(), lrs.back());
  }
  return lrs;
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

std::string group_key(std::size_t group, const char* key) {
  return "param_groups." + std::to_string(group) + "." + key;
}

std::string state_key(std::size_t index, const char* key) {
  return "state." + std::to_string(index) + "." + key;
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

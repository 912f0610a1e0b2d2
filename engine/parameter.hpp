#pragma once
// Parameter<T>: a persistent, named tensor with its gradient, owned by a module
// (or by the user) and shared between the tape (which accumulates into `grad`)
// and an optimizer (which reads `grad` and updates `value`).
//
// Gradient convention (PyTorch's): backward accumulates into `grad` until
// zero_grad(). `has_grad` is false until the first backward that reaches this
// parameter and after zero_grad(); optimizers skip parameters without a
// gradient, as PyTorch skips `p.grad is None`.

#include <string>
#include <type_traits>
#include <utility>

#include <xtensor/xarray.hpp>

namespace xtgrad {

template <class T>
struct Parameter {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "xtgrad::Parameter<T>: T must be float or double");

  std::string name;
  xt::xarray<T> value;
  xt::xarray<T> grad;  // value's shape; all zeros while !has_grad
  bool has_grad = false;

  Parameter() = default;
  Parameter(std::string name_, xt::xarray<T> value_)
      : name(std::move(name_)), value(std::move(value_)), grad(xt::zeros<T>(value.shape())) {}

  // Forget the gradient. The buffer keeps its size (no reallocation per step).
  void zero_grad() {
    grad.resize(value.shape());
    grad.fill(T(0));
    has_grad = false;
  }
};

}  // namespace xtgrad

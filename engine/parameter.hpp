#pragma once
// Parameter<T>: a persistent, named tensor with its gradient, owned by a module
// (or by the user) and shared between the tape (which accumulates into `grad`)
// and an optimizer (which reads `grad` and updates `value`).
//
// Gradient convention (PyTorch's): backward accumulates into `grad` until
// zero_grad(). `has_grad` is false until the first backward that reaches this
// parameter and after zero_grad(); optimizers skip parameters without a
// gradient, as PyTorch skips `p.grad is None`.
//
// Freezing (torch's p.requires_grad_(False)): set_requires_grad(false) makes
// the tape record the parameter as a constant (Tape::param), so backward
// never writes into it, and releases the gradient buffer (grad becomes an
// empty [0] array, has_grad stays false): a frozen parameter costs no
// gradient memory, and an optimizer never steps it nor allocates its state
// (optimizers skip parameters without has_grad). It stays a named parameter
// (state dicts, checkpoints and parameters() list it, as torch's do).

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
  bool requires_grad = true;  // false: frozen; change it with set_requires_grad

  Parameter() = default;
  Parameter(std::string name_, xt::xarray<T> value_)
      : name(std::move(name_)), value(std::move(value_)), grad(xt::zeros<T>(value.shape())) {}

  // Forget the gradient. The buffer keeps its size (no reallocation per step);
  // a frozen parameter's stays released.
  void zero_grad() {
    has_grad = false;
    if (!requires_grad) {
      if (grad.size() != 0) grad = xt::xarray<T>::from_shape({0});
      return;
    }
    grad.resize(value.shape());
    grad.fill(T(0));
  }

  // Freeze (false) or unfreeze (true). Freezing drops the gradient and its
  // buffer; unfreezing allocates a zero gradient of value's shape.
  void set_requires_grad(bool on) {
    requires_grad = on;
    if (on) grad = xt::zeros<T>(value.shape());
    zero_grad();
  }
};

}  // namespace xtgrad

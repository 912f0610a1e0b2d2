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
//
// Version (torch's tensor._version): version() counts the writes to `value`,
// and id() names this object's value lineage: unique in the process, never
// reused (not an address: a Parameter destroyed and another constructed at
// the same place get different ids). (id(), version()) is what caches
// derived from the value are keyed on, such as the packed copies of a weight
// that float GEMMs keep (kernels/onednn_packed_weights.hpp): a cache holding
// an older version never serves it. Every write xtgrad makes bumps the
// version: the optimizers' step, Module::load_state_dict and load, module
// initialization, set_requires_grad, broadcast and sharded optimizers,
// LoRA merges, training-state resume. A user who writes `value` does it
// through set_value(array), or writes `value` in place (p.value *= 2,
// p.value.fill(0), a view, a raw pointer) and then calls mark_changed()
// before the next forward; when weight packing is on (weight_packing.hpp, off
// by default), writing `value` without either may let a forward read a packed
// copy of the old value. Copying or moving a Parameter gives
// the new object a new id; assigning to one bumps its version, and a
// Parameter moved from is bumped too (its value is gone).

#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include <xtensor/xarray.hpp>

namespace xtgrad {

namespace detail {

// The next Parameter id: 1, 2, ... (0 names no Parameter), one counter for
// the process.
inline std::uint64_t next_parameter_id() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace detail

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

  // A copy or a move is a new Parameter (new id, version 0); assignment
  // replaces the value (version bumped); the source of a move is bumped.
  Parameter(const Parameter& o)
      : name(o.name),
        value(o.value),
        grad(o.grad),
        has_grad(o.has_grad),
        requires_grad(o.requires_grad) {}
  Parameter(Parameter&& o) noexcept
      : name(std::move(o.name)),
        value(std::move(o.value)),
        grad(std::move(o.grad)),
        has_grad(o.has_grad),
        requires_grad(o.requires_grad) {
    o.mark_changed();
  }
  Parameter& operator=(const Parameter& o) {
    if (this != &o) assign(o.name, o.value, o.grad, o.has_grad, o.requires_grad);
    return *this;
  }
  Parameter& operator=(Parameter&& o) noexcept {
    if (this != &o) {
      assign(std::move(o.name), std::move(o.value), std::move(o.grad), o.has_grad, o.requires_grad);
      o.mark_changed();
    }
    return *this;
  }
  ~Parameter() = default;

  // Which value this is: (id(), version()) differ for any two values a cache
  // could hold (see the top of the file).
  std::uint64_t id() const { return id_; }
  std::uint64_t version() const { return version_; }

  // Call after writing `value` in place (or through value.data()): the next
  // use reads the new value, never a cached form of the old one.
  void mark_changed() { ++version_; }

  // value = v, and the version bumped: the documented way to replace the value.
  void set_value(xt::xarray<T> v) {
    value = std::move(v);
    mark_changed();
  }

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
    mark_changed();
  }

 private:
  template <class Name, class Value, class Grad>
  void assign(Name&& name_, Value&& value_, Grad&& grad_, bool has_grad_, bool requires_grad_) {
    name = std::forward<Name>(name_);
    value = std::forward<Value>(value_);
    grad = std::forward<Grad>(grad_);
    has_grad = has_grad_;
    requires_grad = requires_grad_;
    mark_changed();
  }

  std::uint64_t id_ = detail::next_parameter_id();
  std::uint64_t version_ = 0;
};

}  // namespace xtgrad

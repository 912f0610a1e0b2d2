#pragma once
// Optimizer<T>: the base of SGD, Adam and AdamW, in the shape of the PyTorch C++
// frontend's torch::optim::Optimizer with a single parameter group.
//
// An optimizer holds pointers to Parameters it does not own (they must outlive
// it), one learning rate (read and written by the schedules of lr_scheduler.hpp)
// and, in the derived class, per-parameter state keyed by the parameter's
// position in the constructor's vector. State is allocated on the first step()
// that finds a gradient for that parameter.
//
// step() skips a parameter whose has_grad is false, as PyTorch skips
// `p.grad is None`: neither its value nor its state changes (no weight decay
// either). A gradient whose shape differs from its value's is an error.
//
// Construction throws std::invalid_argument for an empty vector (as
// torch.optim does), a null pointer, a parameter listed twice (its update would
// be applied twice) or an invalid learning rate. Learning rates must be finite
// and >= 0.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "../engine/parameter.hpp"

namespace xtgrad::optim {

template <class T>
class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // One update of every parameter that has a gradient.
  virtual void step() = 0;

  // Forget every parameter's gradient (Parameter::zero_grad).
  void zero_grad();

  double lr() const { return lr_; }
  // Throws std::invalid_argument unless lr is finite and >= 0.
  void set_lr(double lr);

  const std::vector<Parameter<T>*>& parameters() const { return params_; }
  // The class name used in error messages ("SGD", "Adam", "AdamW").
  const std::string& name() const { return name_; }

 protected:
  Optimizer(std::string name, std::vector<Parameter<T>*> params, double lr);

  // For state(index) of the derived classes: std::out_of_range naming the
  // optimizer, the index and the number of parameters.
  void check_state_index(std::size_t index) const;

 private:
  std::string name_;
  std::vector<Parameter<T>*> params_;
  double lr_;
};

extern template class Optimizer<float>;
extern template class Optimizer<double>;

namespace detail {

// Unless ok, throws std::invalid_argument
//   "xtgrad::<owner>: argument '<argument>' must be <expectation>, got <value>".
void require(bool ok, const std::string& owner, const char* argument, const char* expectation,
             double value);
void require_finite_nonnegative(const std::string& owner, const char* argument, double value);
void require_at_least(const std::string& owner, const char* argument, std::int64_t value,
                      std::int64_t minimum);

// Throws std::invalid_argument naming `function` ("Adam::step",
// "clip_grad_norm") unless p.grad has p.value's shape.
template <class T>
void check_gradient(const std::string& function, std::size_t index, const Parameter<T>& p);

// Throws std::logic_error naming `function` when p.value no longer has the
// shape its optimizer state was created with.
template <class T>
void check_state_shape(const std::string& function, std::size_t index, const Parameter<T>& p,
                       const xt::xarray<T>& state);

}  // namespace detail

}  // namespace xtgrad::optim

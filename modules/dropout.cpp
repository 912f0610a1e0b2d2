#include "dropout.hpp"

#include <string>

#include "../engine/errors.hpp"

namespace xtgrad {

void detail::check_probability(const char* owner, const char* arg, double p) {
  if (!(p >= 0.0 && p <= 1.0))
    fail_argument(owner, arg, "is " + number_str(p) + ", expected a probability in [0, 1]");
}

template <class T>
Dropout<T>::Dropout(double p, std::uint64_t seed) : p_(p), seed_(seed) {
  detail::check_probability("Dropout", "p", p);
}

template <class T>
Dropout<T>::Dropout(double p, Generator& generator) : p_(p), seed_(0) {
  detail::check_probability("Dropout", "p", p);
  if (p > 0.0) seed_ = detail::draw_seed(generator);
}

template <class T>
std::optional<DropoutKey> Dropout<T>::next_key(std::uint64_t elements_per_row) {
  if (p_ == 0.0 || !this->training_forward()) return std::nullopt;
  return DropoutKey{seed_, step_++, row_offset_ * elements_per_row};
}

template <class T>
Var<T> Dropout<T>::forward(const Var<T>& x) {
  x.tape_for("Dropout", "x");
  const Shape& shape = x.shape();
  const std::optional<DropoutKey> key =
      next_key(detail::elements_per_row(shape, shape.empty() ? 1 : shape.back()));
  if (!key) return x;
  return dropout(x, p_, true, *key);
}

template <class T>
ModuleConfig Dropout<T>::config() const {
  return ModuleConfig("Dropout").add("p", p_);
}

template class Dropout<float>;
template class Dropout<double>;

}  // namespace xtgrad

#include "norm.hpp"

#include <cmath>
#include <optional>
#include <string>

#include "../engine/checked_size.hpp"
#include "../engine/errors.hpp"

namespace xtgrad {

namespace {

void check_norm_options(const char* owner, std::size_t d, double eps) {
  detail::check_positive_size(owner, "normalized_shape", d);
  if (!(eps >= 0.0 && std::isfinite(eps)))
    detail::fail_argument(owner, "eps",
                          "is " + detail::number_str(eps) + ", expected a finite eps >= 0");
}

// x's last axis must be D: checked before any Parameter is recorded, so a bad
// x leaves the tape as it was. The message names the op, as the ops' own.
void check_width(const char* op, const Shape& x, std::size_t d) {
  if (x.empty() || x.back() != d)
    detail::fail_shape(op, "x", x, "[..., " + std::to_string(d) + "]");
}

}  // namespace

template <class T>
LayerNorm<T>::LayerNorm(std::size_t normalized_shape, double eps, bool elementwise_affine,
                        bool bias)
    : d_(normalized_shape),
      eps_(eps),
      affine_(elementwise_affine),
      bias_on_(elementwise_affine && bias) {
  check_norm_options("LayerNorm", normalized_shape, eps);
  detail::checked_allocation<T>("LayerNorm", "argument 'normalized_shape'", {normalized_shape});
  if (affine_) weight = Parameter<T>("weight", xt::ones<T>({d_}));
  if (bias_on_) this->bias = Parameter<T>("bias", xt::zeros<T>({d_}));
}

template <class T>
Var<T> LayerNorm<T>::forward(const Var<T>& x) {
  Tape<T>& tape = x.tape_for("LayerNorm", "x");
  check_width("layer_norm", x.shape(), d_);
  std::optional<Var<T>> w, b;
  if (affine_) w = tape.param(weight);
  if (bias_on_) b = tape.param(bias);
  return layer_norm(x, w, b, eps_);
}

template <class T>
void LayerNorm<T>::collect_parameters(const std::string& prefix,
                                      typename Module<T>::NamedParameters& out) {
  if (affine_) this->add_parameter(prefix, weight, out);
  if (bias_on_) this->add_parameter(prefix, bias, out);
}

template <class T>
RMSNorm<T>::RMSNorm(std::size_t normalized_shape, double eps, bool elementwise_affine)
    : d_(normalized_shape), eps_(eps), affine_(elementwise_affine) {
  check_norm_options("RMSNorm", normalized_shape, eps);
  detail::checked_allocation<T>("RMSNorm", "argument 'normalized_shape'", {normalized_shape});
  if (affine_) weight = Parameter<T>("weight", xt::ones<T>({d_}));
}

template <class T>
Var<T> RMSNorm<T>::forward(const Var<T>& x) {
  Tape<T>& tape = x.tape_for("RMSNorm", "x");
  check_width("rms_norm", x.shape(), d_);
  std::optional<Var<T>> w;
  if (affine_) w = tape.param(weight);
  return rms_norm(x, w, eps_);
}

template <class T>
void RMSNorm<T>::collect_parameters(const std::string& prefix,
                                    typename Module<T>::NamedParameters& out) {
  if (affine_) this->add_parameter(prefix, weight, out);
}

template <class T>
ModuleConfig LayerNorm<T>::config() const {
  return ModuleConfig("LayerNorm")
      .add("normalized_shape", d_)
      .add("eps", eps_)
      .add("elementwise_affine", affine_)
      .add("bias", bias_on_);
}

template <class T>
ModuleConfig RMSNorm<T>::config() const {
  return ModuleConfig("RMSNorm")
      .add("normalized_shape", d_)
      .add("eps", eps_)
      .add("elementwise_affine", affine_);
}

template class LayerNorm<float>;
template class LayerNorm<double>;
template class RMSNorm<float>;
template class RMSNorm<double>;

}  // namespace xtgrad

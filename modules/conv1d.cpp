#include "conv1d.hpp"

#include <cmath>

#include "../engine/checked_size.hpp"
#include "../engine/errors.hpp"
#include "../engine/ops/elementwise.hpp"

namespace xtgrad {

void detail::check_std(const char* owner, const char* arg, double std) {
  if (!(std >= 0.0 && std::isfinite(std)))
    fail_argument(owner, arg,
                  "is " + number_str(std) + ", expected a finite standard deviation >= 0");
}

template <class T>
Conv1D<T>::Conv1D(std::size_t nf, std::size_t nx)
    : Conv1D(nf, nx, detail::lvalue(Generator(k_default_seed))) {}

template <class T>
Conv1D<T>::Conv1D(std::size_t nf, std::size_t nx, Generator& generator, double std) {
  detail::check_positive_size("Conv1D", "nf", nf);
  detail::check_positive_size("Conv1D", "nx", nx);
  detail::check_std("Conv1D", "std", std);
  detail::checked_allocation<T>("Conv1D", "arguments 'nf' and 'nx'", {nx, nf});
  weight = Parameter<T>("weight", detail::normal<T>({nx, nf}, std, generator));
  bias = Parameter<T>("bias", xt::zeros<T>({nf}));
}

template <class T>
Var<T> Conv1D<T>::forward(const Var<T>& x) {
  Tape<T>& tape = x.tape_for("Conv1D", "x");
  // Every shape is checked before the Parameters are recorded: a bad x leaves the tape as it was.
  const Shape bias_shape = bias.value.shape();
  const detail::LinearDims dims = detail::check_linear_shapes(
      "linear", "x", x.shape(), weight.value.shape(), &bias_shape, WeightLayout::in_out);
  const Var<T> w = tape.param(weight), b = tape.param(bias);
  if (lora && !lora->merged())  // x W + b + (dropout(x) A^T B^T) * scaling, one node
    return lora->forward(x, w, b, WeightLayout::in_out);
  return detail::record_linear<T>(dims, x, w, b, WeightLayout::in_out);
}

template <class T>
void Conv1D<T>::collect_parameters(const std::string& prefix,
                                   typename Module<T>::NamedParameters& out) {
  this->add_parameter(prefix, weight, out);
  this->add_parameter(prefix, bias, out);
  if (lora) {  // PEFT's names, under the layer's
    this->add_parameter(prefix, lora->lora_A, out);
    this->add_parameter(prefix, lora->lora_B, out);
    this->add_child(prefix, "lora_dropout", lora->lora_dropout, out);
  }
}

template <class T>
ModuleConfig Conv1D<T>::config() const {
  ModuleConfig config = ModuleConfig("Conv1D").add("nf", nf()).add("nx", nx());
  return lora ? detail::with_lora(std::move(config), *lora) : config;
}

template class Conv1D<float>;
template class Conv1D<double>;

}  // namespace xtgrad

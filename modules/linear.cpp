#include "linear.hpp"

#include <stdexcept>
#include <string>

#include "../engine/checked_size.hpp"
#include "../engine/ops/elementwise.hpp"

namespace xtgrad {

template <class T>
Linear<T>::Linear(std::size_t in_features, std::size_t out_features, bool bias)
    : Linear(in_features, out_features, bias, detail::lvalue(Generator(k_default_seed))) {}

template <class T>
Linear<T>::Linear(std::size_t in_features, std::size_t out_features, bool bias,
                  Generator& generator)
    : has_bias_(bias) {
  detail::check_positive_size("Linear", "in_features", in_features);
  detail::check_positive_size("Linear", "out_features", out_features);
  detail::checked_allocation<T>("Linear", "arguments 'in_features' and 'out_features'",
                                {out_features, in_features});
  weight = Parameter<T>(
      "weight", detail::uniform_fan_in<T>({out_features, in_features}, in_features, generator));
  if (bias)
    this->bias =
        Parameter<T>("bias", detail::uniform_fan_in<T>({out_features}, in_features, generator));
}

template <class T>
Var<T> Linear<T>::forward(const Var<T>& x) {
  Tape<T>& tape = x.tape_for("Linear", "x");
  // Every shape is checked before the Parameters are recorded: a bad x leaves the tape as it was.
  const Shape bias_shape = has_bias_ ? bias.value.shape() : Shape{};
  const detail::LinearDims dims =
      detail::check_linear_shapes("linear", "x", x.shape(), weight.value.shape(),
                                  has_bias_ ? &bias_shape : nullptr, WeightLayout::out_in);
  const Var<T> w = tape.param(weight);
  const std::optional<Var<T>> b = has_bias_ ? std::optional(tape.param(bias)) : std::nullopt;
  if (lora && !lora->merged())  // x W^T + b + (dropout(x) A^T B^T) * scaling, one node
    return lora->forward(x, w, b, WeightLayout::out_in);
  return detail::record_linear<T>(dims, x, w, b, WeightLayout::out_in);
}

template <class T>
void Linear<T>::collect_parameters(const std::string& prefix,
                                   typename Module<T>::NamedParameters& out) {
  this->add_parameter(prefix, weight, out);
  if (has_bias_) this->add_parameter(prefix, bias, out);
  if (lora) {  // PEFT's names, under the layer's
    this->add_parameter(prefix, lora->lora_A, out);
    this->add_parameter(prefix, lora->lora_B, out);
    this->add_child(prefix, "lora_dropout", lora->lora_dropout, out);
  }
}

template <class T>
ModuleConfig Linear<T>::config() const {
  ModuleConfig config = ModuleConfig("Linear")
                            .add("in_features", in_features())
                            .add("out_features", out_features())
                            .add("bias", has_bias());
  return lora ? detail::with_lora(std::move(config), *lora) : config;
}

template class Linear<float>;
template class Linear<double>;

}  // namespace xtgrad

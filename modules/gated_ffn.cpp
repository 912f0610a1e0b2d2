#include "gated_ffn.hpp"

#include <optional>

#include "../engine/checked_size.hpp"
#include "functional.hpp"

namespace xtgrad {

template <class T>
GatedFFN<T>::GatedFFN(std::size_t d_in, std::size_t d_hidden, std::size_t d_out,
                      Activation activation, GatedBias bias)
    : GatedFFN(d_in, d_hidden, d_out, activation, bias, detail::lvalue(Generator(k_default_seed))) {
}

template <class T>
GatedFFN<T>::GatedFFN(std::size_t d_in, std::size_t d_hidden, std::size_t d_out,
                      Activation activation, GatedBias bias, Generator& generator)
    : GatedFFN(d_in, d_hidden, d_out, activation, bias, 0.0, generator) {}

template <class T>
GatedFFN<T>::GatedFFN(std::size_t d_in, std::size_t d_hidden, std::size_t d_out,
                      Activation activation, GatedBias bias, double dropout, Generator& generator)
    : activation_(activation), bias_(bias) {
  detail::check_positive_size("GatedFFN", "d_in", d_in);
  detail::check_positive_size("GatedFFN", "d_hidden", d_hidden);
  detail::check_positive_size("GatedFFN", "d_out", d_out);
  detail::activation_name(activation, "GatedFFN", "activation");
  detail::check_probability("GatedFFN", "dropout", dropout);
  detail::checked_allocation<T>("GatedFFN", "arguments 'd_in' and 'd_hidden'", {d_in, d_hidden});
  detail::checked_allocation<T>("GatedFFN", "arguments 'd_hidden' and 'd_out'", {d_hidden, d_out});
  w_up = Parameter<T>("w_up", detail::uniform_fan_in<T>({d_in, d_hidden}, d_in, generator));
  w_gate = Parameter<T>("w_gate", detail::uniform_fan_in<T>({d_in, d_hidden}, d_in, generator));
  w_down =
      Parameter<T>("w_down", detail::uniform_fan_in<T>({d_hidden, d_out}, d_hidden, generator));
  if (bias.up) b_up = Parameter<T>("b_up", detail::uniform_fan_in<T>({d_hidden}, d_in, generator));
  if (bias.gate)
    b_gate = Parameter<T>("b_gate", detail::uniform_fan_in<T>({d_hidden}, d_in, generator));
  if (bias.down)
    b_down = Parameter<T>("b_down", detail::uniform_fan_in<T>({d_out}, d_hidden, generator));
  this->dropout = Dropout<T>(dropout, generator);
}

template <class T>
Var<T> GatedFFN<T>::forward(const Var<T>& x) {
  Tape<T>& tape = x.tape_for("GatedFFN", "x");
  // Every shape is checked before the Parameters are recorded: a bad x leaves the tape as it was.
  const auto bias_shape = [](bool present, const Parameter<T>& p) {
    return present ? &p.value.shape() : nullptr;
  };
  const detail::GatedDims dims =
      detail::check_gated(x.shape(), w_up.value.shape(), w_gate.value.shape(), w_down.value.shape(),
                          bias_shape(bias_.up, b_up), bias_shape(bias_.gate, b_gate),
                          bias_shape(bias_.down, b_down), activation_);
  const auto optional_param = [&tape](bool present, Parameter<T>& p) -> std::optional<Var<T>> {
    if (!present) return std::nullopt;
    return tape.param(p);
  };
  const Var<T> up = tape.param(w_up), gate = tape.param(w_gate), down = tape.param(w_down);
  const std::optional<Var<T>> up_bias = optional_param(bias_.up, b_up);
  const std::optional<Var<T>> gate_bias = optional_param(bias_.gate, b_gate);
  const std::optional<Var<T>> down_bias = optional_param(bias_.down, b_down);
  const std::optional<DropoutKey> key =
      dropout.next_key(detail::elements_per_row(x.shape(), w_down.value.shape()[0]));
  const std::optional<HiddenDropout> hidden =
      key ? std::optional(HiddenDropout{dropout.p(), *key}) : std::nullopt;
  return detail::record_gated(dims, x, up, gate, down, up_bias, gate_bias, down_bias, activation_,
                              hidden);
}

template <class T>
void GatedFFN<T>::collect_parameters(const std::string& prefix,
                                     typename Module<T>::NamedParameters& out) {
  this->add_parameter(prefix, w_up, out);
  this->add_parameter(prefix, w_gate, out);
  this->add_parameter(prefix, w_down, out);
  if (bias_.up) this->add_parameter(prefix, b_up, out);
  if (bias_.gate) this->add_parameter(prefix, b_gate, out);
  if (bias_.down) this->add_parameter(prefix, b_down, out);
  this->add_child(prefix, "dropout", dropout, out);
}

template <class T>
ModuleConfig GatedFFN<T>::config() const {
  return ModuleConfig("GatedFFN")
      .add("d_in", w_up.value.shape()[0])
      .add("d_hidden", w_up.value.shape()[1])
      .add("d_out", w_down.value.shape()[1])
      .add("activation", std::string(to_string(activation_)))
      .add("bias_up", bias_.up)
      .add("bias_gate", bias_.gate)
      .add("bias_down", bias_.down)
      .add("dropout", dropout.p());
}

template class GatedFFN<float>;
template class GatedFFN<double>;

}  // namespace xtgrad

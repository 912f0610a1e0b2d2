#include "feed_forward.hpp"

#include "../engine/ops/activations.hpp"
#include "functional.hpp"

namespace xtgrad {

template <class T>
FeedForward<T>::FeedForward(std::size_t d_model, std::size_t d_ff, Activation activation)
    : FeedForward("FeedForward", d_model, d_ff, activation, 0.0,
                  detail::lvalue(Generator(k_default_seed))) {}

namespace {

// Every argument checked, in order, before any parameter is built; returns d_model.
std::size_t checked(const char* owner, std::size_t d_model, std::size_t d_ff, Activation activation,
                    double dropout) {
  detail::check_positive_size(owner, "d_model", d_model);
  detail::check_positive_size(owner, "d_ff", d_ff);
  detail::activation_name(activation, owner, "activation");
  detail::check_probability(owner, "dropout", dropout);
  return d_model;
}

}  // namespace

template <class T>
FeedForward<T>::FeedForward(std::size_t d_model, std::size_t d_ff, Activation activation,
                            Generator& generator)
    : FeedForward("FeedForward", d_model, d_ff, activation, 0.0, generator) {}

template <class T>
FeedForward<T>::FeedForward(std::size_t d_model, std::size_t d_ff, Activation activation,
                            double dropout, Generator& generator)
    : FeedForward("FeedForward", d_model, d_ff, activation, dropout, generator) {}

template <class T>
FeedForward<T>::FeedForward(const char* owner, std::size_t d_model, std::size_t d_ff,
                            Activation activation, double dropout, Generator& generator)
    : w1(checked(owner, d_model, d_ff, activation, dropout), d_ff, true, generator),
      w2(d_ff, d_model, true, generator),
      dropout(dropout, generator),
      activation_(activation) {}

template <class T>
Var<T> FeedForward<T>::forward(const Var<T>& x) {
  Tape<T>& tape = x.tape_for("FeedForward", "x");
  // Every shape is checked before the Parameters are recorded: a bad x leaves the tape as it was.
  const detail::TwoLayerDims dims =
      detail::check_two_layer("feedforward", {"x", "w1.weight", "w1.bias", "w2.weight", "w2.bias"},
                              x.shape(), w1.weight.value.shape(), w1.bias.value.shape(),
                              w2.weight.value.shape(), w2.bias.value.shape(), activation_);
  if ((w1.lora && !w1.lora->merged()) || (w2.lora && !w2.lora->merged()))
    // A LoRA adapter adds to a layer's output, which the fused op never
    // forms: the same function composed from the layers' own forwards.
    return w2.forward(dropout.forward(xtgrad::activation(w1.forward(x), activation_)));
  const Var<T> w1_weight = tape.param(w1.weight), w1_bias = tape.param(w1.bias);
  const Var<T> w2_weight = tape.param(w2.weight), w2_bias = tape.param(w2.bias);
  const std::optional<DropoutKey> key =
      dropout.next_key(detail::elements_per_row(x.shape(), w1.weight.value.shape()[0]));
  const std::optional<HiddenDropout> hidden =
      key ? std::optional(HiddenDropout{dropout.p(), *key}) : std::nullopt;
  return detail::record_two_layer(dims, x, w1_weight, w1_bias, w2_weight, w2_bias, activation_,
                                  hidden);
}

template <class T>
void FeedForward<T>::collect_parameters(const std::string& prefix,
                                        typename Module<T>::NamedParameters& out) {
  this->add_child(prefix, "w1", w1, out);
  this->add_child(prefix, "w2", w2, out);
  this->add_child(prefix, "dropout", dropout, out);
}

template <class T>
ModuleConfig FeedForward<T>::config() const {
  return ModuleConfig("FeedForward")
      .add("d_model", d_model())
      .add("d_ff", d_ff())
      .add("activation", std::string(to_string(activation_)))
      .add("bias", true)
      .add("dropout", dropout.p());
}

template class FeedForward<float>;
template class FeedForward<double>;

}  // namespace xtgrad

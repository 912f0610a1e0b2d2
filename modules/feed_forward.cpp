#include "feed_forward.hpp"

#include "functional.hpp"

namespace xtgrad {

template <class T>
FeedForward<T>::FeedForward(std::size_t d_model, std::size_t d_ff, Activation activation)
    : FeedForward(d_model, d_ff, activation, detail::lvalue(Generator(k_default_seed))) {}

template <class T>
FeedForward<T>::FeedForward(std::size_t d_model, std::size_t d_ff, Activation activation,
                            Generator& generator)
    : w1(d_model, d_ff, true, generator),
      w2(d_ff, d_model, true, generator),
      activation_(activation) {}

template <class T>
Var<T> FeedForward<T>::operator()(const Var<T>& x) {
  Tape<T>& tape = x.tape_for("FeedForward", "x");
  return feedforward(x, tape.param(w1.weight), tape.param(w1.bias), tape.param(w2.weight),
                     tape.param(w2.bias), activation_);
}

template <class T>
void FeedForward<T>::collect_parameters(const std::string& prefix,
                                        typename Module<T>::NamedParameters& out) {
  this->add_child(prefix, "w1", w1, out);
  this->add_child(prefix, "w2", w2, out);
}

template class FeedForward<float>;
template class FeedForward<double>;

}  // namespace xtgrad

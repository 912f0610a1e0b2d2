#pragma once
// FeedForward<T>(d_model, d_ff, activation = gelu): the Transformer's
// position-wise feed-forward block with any activation f,
//   y = f(x W1^T + b1) W2^T + b2,   x [..., d_model] -> [..., d_model].
// With the default exact GELU it computes feedforward_sublayer; with relu it
// is PositionwiseFFN. Parameters: w1.weight [d_ff, d_model], w1.bias [d_ff],
// w2.weight [d_model, d_ff], w2.bias [d_model].
//
// Hidden dropout (optional, `dropout` p, default 0): in a training forward,
//   y = Dropout(f(x W1^T + b1)) W2^T + b2,
// the dropout applied inside the fused second layer (ops/fused_linear.hpp:
// the mask is recomputed in backward, never stored). Its p, seed and step
// are the child module "dropout" (a Dropout, no parameters); built from a
// Generator, its seed is drawn from it when p > 0.
//
// With a LoRA adapter on w1 or w2 (Linear::lora, not merged) forward is
// composed from w1.forward, the activation, dropout and w2.forward instead of
// the fused op: the same function plus the adapters' terms.

#include "../engine/activation.hpp"
#include "dropout.hpp"
#include "linear.hpp"

namespace xtgrad {

template <class T>
class FeedForward : public Module<T> {
 public:
  FeedForward(std::size_t d_model, std::size_t d_ff, Activation activation = Activation::gelu);
  FeedForward(std::size_t d_model, std::size_t d_ff, Activation activation, Generator& generator);
  FeedForward(std::size_t d_model, std::size_t d_ff, Activation activation, double dropout,
              Generator& generator);

  Var<T> forward(const Var<T>& x) override;
  ModuleConfig config() const override;

  Activation activation() const { return activation_; }
  std::size_t d_model() const { return w1.in_features(); }
  std::size_t d_ff() const { return w1.out_features(); }

  Linear<T> w1;        // d_model -> d_ff
  Linear<T> w2;        // d_ff -> d_model
  Dropout<T> dropout;  // on the hidden f(x W1^T + b1)

 protected:
  void collect_parameters(const std::string& prefix,
                          typename Module<T>::NamedParameters& out) override;

 protected:
  // For PositionwiseFFN: errors name `owner` instead of FeedForward.
  FeedForward(const char* owner, std::size_t d_model, std::size_t d_ff, Activation activation,
              double dropout, Generator& generator);

 private:
  Activation activation_;
};

extern template class FeedForward<float>;
extern template class FeedForward<double>;

}  // namespace xtgrad

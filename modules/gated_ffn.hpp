#pragma once
// GatedFFN<T>(d_in, d_hidden, d_out, activation = silu, biases): the gated
// feed-forward block (Shazeer 2020, "GLU Variants Improve Transformer"),
//   y = (u * f(g)) W_down + b_down,  u = x W_up + b_up,  g = x W_gate + b_gate,
// x [..., d_in] -> [..., d_out], weights input-channel-first: w_up and w_gate
// [d_in, d_hidden], w_down [d_hidden, d_out]. Only the gate is activated.
// Each bias is optional and off by default (as in LLaMA-style SwiGLU).
// Initialization: uniform in +-1/sqrt(fan_in), as nn.Linear would.
// Hidden dropout (optional, `dropout` p, default 0): in a training forward the
// product u * f(g) goes through a dropout inside the fused down projection
// (ops/fused_linear.hpp: the mask is recomputed in backward, never stored);
// p, seed and step are the child module "dropout" (see FeedForward).
// Named constructors: swiglu (silu), geglu (exact GELU), geglu_tanh, reglu.

#include "../engine/activation.hpp"
#include "../engine/tape.hpp"
#include "dropout.hpp"
#include "init.hpp"
#include "module.hpp"

namespace xtgrad {

struct GatedBias {
  bool up = false;
  bool gate = false;
  bool down = false;
  static GatedBias all() { return {true, true, true}; }
  static GatedBias none() { return {}; }
};

template <class T>
class GatedFFN : public Module<T> {
 public:
  GatedFFN(std::size_t d_in, std::size_t d_hidden, std::size_t d_out,
           Activation activation = Activation::silu, GatedBias bias = {});
  GatedFFN(std::size_t d_in, std::size_t d_hidden, std::size_t d_out, Activation activation,
           GatedBias bias, Generator& generator);
  GatedFFN(std::size_t d_in, std::size_t d_hidden, std::size_t d_out, Activation activation,
           GatedBias bias, double dropout, Generator& generator);

  static GatedFFN swiglu(std::size_t d_in, std::size_t d_hidden, std::size_t d_out,
                         GatedBias bias = {}) {
    return GatedFFN(d_in, d_hidden, d_out, Activation::silu, bias);
  }
  static GatedFFN geglu(std::size_t d_in, std::size_t d_hidden, std::size_t d_out,
                        GatedBias bias = {}) {
    return GatedFFN(d_in, d_hidden, d_out, Activation::gelu, bias);
  }
  static GatedFFN geglu_tanh(std::size_t d_in, std::size_t d_hidden, std::size_t d_out,
                             GatedBias bias = {}) {
    return GatedFFN(d_in, d_hidden, d_out, Activation::gelu_tanh, bias);
  }
  static GatedFFN reglu(std::size_t d_in, std::size_t d_hidden, std::size_t d_out,
                        GatedBias bias = {}) {
    return GatedFFN(d_in, d_hidden, d_out, Activation::relu, bias);
  }

  Var<T> forward(const Var<T>& x) override;
  ModuleConfig config() const override;

  Activation activation() const { return activation_; }
  GatedBias bias() const { return bias_; }

  Parameter<T> w_up;    // [d_in, d_hidden]
  Parameter<T> w_gate;  // [d_in, d_hidden]
  Parameter<T> w_down;  // [d_hidden, d_out]
  Parameter<T> b_up;    // [d_hidden] when bias().up
  Parameter<T> b_gate;  // [d_hidden] when bias().gate
  Parameter<T> b_down;  // [d_out] when bias().down
  Dropout<T> dropout;   // on the hidden u * f(g)

 protected:
  void collect_parameters(const std::string& prefix,
                          typename Module<T>::NamedParameters& out) override;

 private:
  Activation activation_;
  GatedBias bias_;
};

extern template class GatedFFN<float>;
extern template class GatedFFN<double>;

}  // namespace xtgrad

#pragma once
// PositionwiseFFN<T>(d_model, d_ff): "Attention Is All You Need" section 3.3,
//   FFN(x) = relu(x W1^T + b1) W2^T + b2,
// applied to every position of x [..., d_model] independently (the base
// model uses d_model = 512, d_ff = 2048). Parameters: w1.weight [d_ff,
// d_model], w1.bias [d_ff], w2.weight [d_model, d_ff], w2.bias [d_model],
// initialized as PyTorch's nn.Linear.

#include "feed_forward.hpp"

namespace xtgrad {

template <class T>
class PositionwiseFFN : public FeedForward<T> {
 public:
  PositionwiseFFN(std::size_t d_model, std::size_t d_ff)
      : PositionwiseFFN(d_model, d_ff, detail::lvalue(Generator(k_default_seed))) {}
  PositionwiseFFN(std::size_t d_model, std::size_t d_ff, Generator& generator)
      : FeedForward<T>("PositionwiseFFN", d_model, d_ff, Activation::relu, 0.0, generator) {}
  // With a dropout on the hidden relu(x W1^T + b1) (see FeedForward).
  PositionwiseFFN(std::size_t d_model, std::size_t d_ff, double dropout, Generator& generator)
      : FeedForward<T>("PositionwiseFFN", d_model, d_ff, Activation::relu, dropout, generator) {}

  ModuleConfig config() const override {
    return ModuleConfig("PositionwiseFFN")
        .add("d_model", this->d_model())
        .add("d_ff", this->d_ff())
        .add("dropout", this->dropout.p());
  }
};

}  // namespace xtgrad

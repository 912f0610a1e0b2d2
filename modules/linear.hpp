#pragma once
// Linear<T>(in_features, out_features, bias): y = x W^T + b, PyTorch's
// nn.Linear layout (weight [out, in], bias [out]) and default initialization
// (both uniform in +-1/sqrt(in_features)). Parameters: "weight", "bias".
//
// LoRA: with `lora` set (modules/lora.hpp: LoRALinear, apply_lora), forward
// returns x W^T + b + lora->forward(x) (lora_layer.hpp) unless the adapter is
// merged into W; the adapter's parameters follow the layer's
// ("lora_A.weight", "lora_B.weight") and its dropout is the child
// "lora_dropout". config() then records the adapter's options.

#include <cstddef>
#include <optional>

#include "../engine/ops/linear.hpp"
#include "init.hpp"
#include "lora_layer.hpp"
#include "module.hpp"

namespace xtgrad {

template <class T>
class Linear : public Module<T> {
 public:
  Linear(std::size_t in_features, std::size_t out_features, bool bias = true);
  Linear(std::size_t in_features, std::size_t out_features, bool bias, Generator& generator);

  // x [..., in] -> [..., out], recorded on x's tape.
  Var<T> forward(const Var<T>& x) override;
  ModuleConfig config() const override;

  std::size_t in_features() const { return weight.value.shape()[1]; }
  std::size_t out_features() const { return weight.value.shape()[0]; }
  bool has_bias() const { return has_bias_; }

  Parameter<T> weight;
  Parameter<T> bias;                 // empty and not a parameter when !has_bias()
  std::optional<LoRALayer<T>> lora;  // a LoRA adapter, when attached

 protected:
  void collect_parameters(const std::string& prefix,
                          typename Module<T>::NamedParameters& out) override;

 private:
  bool has_bias_;
};

extern template class Linear<float>;
extern template class Linear<double>;

}  // namespace xtgrad

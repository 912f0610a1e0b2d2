#pragma once
// Conv1D<T>(nf, nx): Hugging Face's GPT-2 "Conv1D" (transformers/pytorch_utils.py),
// which is a linear layer whose weight is stored input-channel-first,
//   y = x W + b,   x [..., nx] -> [..., nf],   W [nx, nf],  b [nf]
// (ops/linear.hpp with WeightLayout::in_out; derivatives there). Parameters
// "weight" [nx, nf] and "bias" [nf], initialized as HF's GPT-2 does
// (GPT2PreTrainedModel._init_weights): weight normal(0, std), std = 0.02 by
// default, bias 0. The argument order (nf before nx) is HF's.
// LoRA: as Linear's `lora` (linear.hpp), with A [r, nx] and B [nf, r] (PEFT's
// fan_in_fan_out layers: the adapter keeps nn.Linear's layout, a merge adds
// the transposed update).
// Throws std::invalid_argument for a zero size or a std that is negative or
// not finite; forward for an x whose last axis is not nx.

#include <cstddef>
#include <optional>

#include "../engine/ops/linear.hpp"
#include "init.hpp"
#include "lora_layer.hpp"
#include "module.hpp"

namespace xtgrad {

template <class T>
class Conv1D : public Module<T> {
 public:
  Conv1D(std::size_t nf, std::size_t nx);
  Conv1D(std::size_t nf, std::size_t nx, Generator& generator, double std = 0.02);

  Var<T> forward(const Var<T>& x) override;
  ModuleConfig config() const override;

  std::size_t nx() const { return weight.value.shape()[0]; }
  std::size_t nf() const { return weight.value.shape()[1]; }

  Parameter<T> weight;               // [nx, nf]
  Parameter<T> bias;                 // [nf]
  std::optional<LoRALayer<T>> lora;  // a LoRA adapter, when attached

 protected:
  void collect_parameters(const std::string& prefix,
                          typename Module<T>::NamedParameters& out) override;
};

namespace detail {
// normal(0, std) values: torch.nn.init.normal_(tensor, 0, std). std >= 0 and finite.
template <class T>
xt::xarray<T> normal(const std::vector<std::size_t>& shape, double std, Generator& generator) {
  std::normal_distribution<double> normal(0.0, std);
  xt::xarray<T> values = xt::empty<T>(shape);
  for (auto& v : values) v = static_cast<T>(std == 0.0 ? 0.0 : normal(generator));
  return values;
}
// std::invalid_argument from `owner` naming `arg` unless std is finite and >= 0.
void check_std(const char* owner, const char* arg, double std);
}  // namespace detail

extern template class Conv1D<float>;
extern template class Conv1D<double>;

}  // namespace xtgrad

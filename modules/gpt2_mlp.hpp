#pragma once
// GPT2MLP<T>(n_embd C, n_inner H, [generator]): the MLP of a gpt2-style
// TransformerBlock, Hugging Face's GPT2MLP (transformers/models/gpt2/
// modeling_gpt2.py) with its names and layouts, so that a GPT-2 state dict
// loads into it as it is:
//   y = c_proj(gelu_tanh(c_fc(x))),   x, y [..., C]
//   c_fc   Conv1D(H, C): "c_fc.weight" [C, H], "c_fc.bias" [H]
//   c_proj Conv1D(C, H): "c_proj.weight" [H, C], "c_proj.bias" [C]
// (Conv1D stores its weight [in, out]: conv1d.hpp). gelu_tanh is HF's
// "gelu_new" (activation.hpp). HF's dropout after c_proj is the block's own
// "dropout" child. Forward records c_fc, then the activation and c_proj as
// one fused op (ops/fused_linear.hpp: the activation is recomputed in
// backward, never stored); with a LoRA adapter on c_proj (not merged) it
// composes c_proj's own forward instead, the same function plus the
// adapter's term. Initialization: Conv1D's normal(0, 0.02), biases 0.
// Errors (std::invalid_argument): a zero size (from Conv1D, naming 'nf' or
// 'nx'); forward: an x whose last axis is not C.

#include <cstddef>

#include "conv1d.hpp"
#include "tensor_dict.hpp"

namespace xtgrad {

template <class T>
class GPT2MLP : public Module<T> {
 public:
  GPT2MLP(std::size_t n_embd, std::size_t n_inner);
  GPT2MLP(std::size_t n_embd, std::size_t n_inner, Generator& generator);

  Var<T> forward(const Var<T>& x) override;
  ModuleConfig config() const override;

  std::size_t n_embd() const { return c_fc.nx(); }
  std::size_t n_inner() const { return c_fc.nf(); }

  Conv1D<T> c_fc;    // C -> H
  Conv1D<T> c_proj;  // H -> C

 protected:
  void collect_parameters(const std::string& prefix,
                          typename Module<T>::NamedParameters& out) override;
};

// A gpt2-style GPT's (or TransformerBlock's) state dict with the MLP under
// its former names and layouts, FeedForward's "<p>mlp.w1.weight" [H, C],
// "<p>mlp.w1.bias", "<p>mlp.w2.weight" [C, H] and "<p>mlp.w2.bias", as
// GPT2MLP's "<p>mlp.c_fc.weight" [C, H], "<p>mlp.c_fc.bias",
// "<p>mlp.c_proj.weight" [H, C] and "<p>mlp.c_proj.bias" (the weights
// transposed, every other entry as it is, in the same order): what
// load_state_dict takes from a checkpoint saved before the MLP had GPT-2's
// names. Loading such a checkpoint directly is refused, the message naming
// this function: a training-state directory also holds the optimizer's
// moments in the former layout, which no rename of the model's names fixes.
template <class T>
TensorDict<T> rename_legacy_gpt2_mlp(const TensorDict<T>& state);

extern template class GPT2MLP<float>;
extern template class GPT2MLP<double>;
extern template TensorDict<float> rename_legacy_gpt2_mlp(const TensorDict<float>&);
extern template TensorDict<double> rename_legacy_gpt2_mlp(const TensorDict<double>&);

}  // namespace xtgrad

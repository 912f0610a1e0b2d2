#pragma once
// LoRALayer<T>: the low-rank adapter of LoRA (Hu et al. 2021, "LoRA:
// Low-Rank Adaptation of Large Language Models"), as Hugging Face PEFT's
// LoraLayer, attached to a Linear or Conv1D through their `lora` member
// (modules/lora.hpp builds and attaches them: LoRALinear, apply_lora).
// It adds to the layer's output
//   delta = (dropout(x) A^T B^T) * scaling,   scaling = lora_alpha / r,
//   x [..., in] -> [..., out],  A = lora_A [r, in],  B = lora_B [out, r].
// Derivatives (through linear and scale, ops/linear.hpp): with
// g = dy * scaling [N, out] and h = dropout(x) A^T [N, r],
//   dB[out, r] = g^T . h,   dA[r, in] = (g . B)^T . dropout(x),
//   dx[N, in] += dropout'(g . B . A).
// Initialization as PEFT's (init_lora_weights=True): A kaiming_uniform(a =
// sqrt(5)), which is uniform in +-1/sqrt(in) (nn.Linear's), and B = 0, so a
// fresh adapter changes nothing. Parameter names "lora_A.weight" and
// "lora_B.weight" (PEFT's without its adapter name "default"); the dropout is
// the child module "lora_dropout" (no parameters), drawn from the generator
// when lora_dropout > 0.
//
// Merged (merge_into): the base weight holds W + scaling B A (or its
// transpose for a Conv1D's [in, out] weight), and forward adds nothing, as
// PEFT's merged layer; unmerge_from subtracts it again (exact up to rounding).

#include <cstddef>
#include <optional>

#include "../engine/ops/linear.hpp"
#include "dropout.hpp"
#include "init.hpp"

namespace xtgrad {

// PEFT LoraConfig's hyperparameters, with its names and defaults.
struct LoRAOptions {
  std::size_t r = 8;          // rank, >= 1
  double lora_alpha = 8.0;    // scaling = lora_alpha / r; finite and > 0
  double lora_dropout = 0.0;  // probability in [0, 1]
};

namespace detail {
// std::invalid_argument from `function` naming 'r', 'lora_alpha' or
// 'lora_dropout' when an option is out of range.
void check_lora_options(const char* function, const LoRAOptions& options);
}  // namespace detail

template <class T>
class LoRALayer;
namespace detail {
// A layer's config with its adapter's options added ("lora_r", "lora_alpha",
// "lora_dropout"), so that a checkpoint of an adapted model is told apart
// from one of the plain model.
template <class T>
ModuleConfig with_lora(ModuleConfig config, const LoRALayer<T>& layer);
}  // namespace detail

template <class T>
class LoRALayer {
 public:
  // An adapter for a layer with `in_features` inputs and `out_features` outputs.
  LoRALayer(std::size_t in_features, std::size_t out_features, const LoRAOptions& options,
            Generator& generator);

  // delta = (dropout(x) A^T B^T) * scaling, recorded on x's tape; x [..., in].
  // The dropout applies in a training forward (lora_dropout's mode).
  Var<T> forward(const Var<T>& x);
  // The adapted layer's output x op(weight) + bias + delta as one node
  // (ops/low_rank_linear.hpp), with weight and bias recorded by the layer:
  // the values of add(linear(x, weight, bias, layout), forward(x)) without
  // their [..., out] intermediates on the tape.
  Var<T> forward(const Var<T>& x, const Var<T>& weight, const std::optional<Var<T>>& bias,
                 WeightLayout layout);

  const LoRAOptions& options() const { return options_; }
  double scaling() const { return options_.lora_alpha / static_cast<double>(options_.r); }
  bool merged() const { return merged_; }

  // The adapter's weight update scaling * B A, [out, in].
  xt::xarray<T> delta_weight() const;
  // weight += delta_weight() (out_in) or its transpose (in_out); marks merged.
  // std::logic_error when already merged.
  void merge_into(xt::xarray<T>& weight, WeightLayout layout);
  // The inverse of merge_into; std::logic_error when not merged.
  void unmerge_from(xt::xarray<T>& weight, WeightLayout layout);

  Parameter<T> lora_A;  // "lora_A.weight" [r, in]
  Parameter<T> lora_B;  // "lora_B.weight" [out, r]
  Dropout<T> lora_dropout;

 private:
  LoRAOptions options_;
  bool merged_ = false;
};

extern template class LoRALayer<float>;
extern template class LoRALayer<double>;

}  // namespace xtgrad

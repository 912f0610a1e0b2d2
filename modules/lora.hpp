#pragma once
// LoRA fine-tuning (Hu et al. 2021), in the shape of Hugging Face PEFT's
// get_peft_model / LoraModel: low-rank adapters (lora_layer.hpp) attached to
// the Linear and Conv1D layers of a model, the rest of the model frozen.
//
//   GPT<float> model(config);
//   apply_lora(model, {"q_proj", "v_proj"}, LoRAOptions{8, 16.0, 0.05}, generator);
//   AdamW<float> optimizer(model.parameters(), ...);   // only A and B get gradients
//   ... train ...
//   save_lora_adapter(model, "adapter/");  // PEFT's adapter_model.safetensors + adapter_config.json
//   merge_lora(model);                      // W += scaling B A, for export
//
// Freezing (Parameter::set_requires_grad, engine/parameter.hpp): a frozen
// parameter is recorded as a constant, holds no gradient buffer and is
// never stepped by an optimizer, which allocates no state for it; it stays
// in parameters() and the state dicts, as torch's frozen parameters do.
//
// Layers and names: an adapter lives in its layer (Linear::lora,
// Conv1D::lora), so a model keeps its members and every existing parameter
// name; the adapter adds "<layer>.lora_A.weight" [r, in] and
// "<layer>.lora_B.weight" [out, r] and the child "<layer>.lora_dropout". A
// target name matches a layer as PEFT's target_modules do: the layer's
// dotted name equals it or ends with "." + it ("q_proj" matches
// "h.0.attn.q_proj"; "attn.c_attn" matches "h.3.attn.c_attn"). Layers whose
// owner fuses their weights into a larger op and never calls their forward
// (Mlp's layers, the projections of a SparseMoe's routed experts) are
// refused; FeedForward and GatedExpert (LLaMA's MLP: "gate_proj", "up_proj",
// "down_proj") fall back to their layers' forwards when one has an adapter.
// An adapted Linear or Conv1D records its output as one node
// (ops/low_rank_linear.hpp), so that an adapter keeps only its rank-r
// intermediate on the tape, not three more arrays of the layer's outputs.
// Parameters that are
// not Linear or Conv1D layers (MultiheadAttention's in_proj_weight,
// GatedFFN's w_up) cannot be targeted.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "conv1d.hpp"
#include "linear.hpp"
#include "lora_layer.hpp"

namespace xtgrad {

// A Linear with a LoRA adapter attached and its own weight and bias frozen
// (PEFT's lora.Linear with bias "none"): y = x W^T + b + (dropout(x) A^T B^T)
// * lora_alpha / r. It is a Linear (the adapter is Linear::lora), so its
// parameters are "weight", "bias", "lora_A.weight", "lora_B.weight".
template <class T>
class LoRALinear : public Linear<T> {
 public:
  LoRALinear(std::size_t in_features, std::size_t out_features, bool bias,
             const LoRAOptions& options, Generator& generator);
  // Wraps `base` (its values kept); the adapter is drawn from `generator`.
  LoRALinear(Linear<T> base, const LoRAOptions& options, Generator& generator);

  LoRALayer<T>& adapter() { return *this->lora; }
  const LoRALayer<T>& adapter() const { return *this->lora; }
};

// get_peft_model: freezes every parameter of `model`, then attaches a fresh
// adapter (A from `generator`, B = 0) to every Linear or Conv1D layer whose
// dotted name matches one of `target_modules`, in named_modules() order.
// Returns the dotted names of the layers it wrapped. std::invalid_argument
// naming the argument, before anything changes: an empty target_modules or
// an empty name in it, no layer matched, a matched module that is not a
// Linear or Conv1D (or one whose owner fuses it, see above) or that already
// has an adapter; r = 0, lora_alpha not finite and > 0, lora_dropout outside
// [0, 1].
template <class T>
std::vector<std::string> apply_lora(Module<T>& model,
                                    const std::vector<std::string>& target_modules,
                                    const LoRAOptions& options, Generator& generator);
// The same with the options as arguments and the adapters drawn from a
// generator seeded with `seed`.
template <class T>
std::vector<std::string> apply_lora(Module<T>& model,
                                    const std::vector<std::string>& target_modules, std::size_t r,
                                    double lora_alpha, double lora_dropout = 0.0,
                                    std::uint64_t seed = k_default_seed);

// The dotted names of the layers of `model` that hold an adapter, in order.
template <class T>
std::vector<std::string> lora_layers(Module<T>& model);

// merge_and_unload without the unload: folds every unmerged adapter into its
// layer's weight (W += scaling B A; W += scaling (B A)^T for a Conv1D), after
// which forward adds nothing for it. unmerge_lora subtracts them again
// (equal to the weights before the merge up to rounding). Both return the
// names of the layers they changed.
template <class T>
std::vector<std::string> merge_lora(Module<T>& model);
template <class T>
std::vector<std::string> unmerge_lora(Module<T>& model);

// The adapters' tensors under PEFT's names, "base_model.model.<layer>.lora_A.weight"
// and "...lora_B.weight", with the values as T.
template <class T>
TensorDict<T> lora_state_dict(Module<T>& model);

// PEFT's save_pretrained: writes, into the directory `dir` (created when
// missing), "adapter_model.safetensors" (lora_state_dict, metadata format
// "pt") and "adapter_config.json" (peft_type "LORA", r, lora_alpha,
// lora_dropout, target_modules = the sorted distinct last names of the
// adapted layers, bias "none", fan_in_fan_out true when a Conv1D is
// adapted). Each file is written atomically. The adapters must share one
// LoRAOptions and none may be merged; otherwise std::invalid_argument.
template <class T>
void save_lora_adapter(Module<T>& model, const std::filesystem::path& dir);

// PeftModel.from_pretrained, onto a model that matches the adapter's base:
// reads dir's adapter_config.json and adapter_model.safetensors; if `model`
// has no adapter yet, applies apply_lora with the config's target_modules and
// options first (freezing the model); then loads every adapter tensor. The
// names must be exactly the model's adapters' (PEFT's names), with equal
// shapes; F32 / F64 / F16 / BF16 values are converted to T as
// Module::load_state_dict converts. All or nothing: std::invalid_argument
// (a bad config, bias other than "none", missing or unexpected tensors,
// shapes, adapters whose options differ from the config's) before the
// model changes.
template <class T>
void load_lora_adapter(Module<T>& model, const std::filesystem::path& dir);

}  // namespace xtgrad

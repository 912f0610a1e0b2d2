#include "gpt2_mlp.hpp"

#include <string>
#include <utility>

#include <xtensor/xmanipulation.hpp>

#include "../engine/ops/activations.hpp"
#include "../engine/ops/fused_linear.hpp"

namespace xtgrad {

template <class T>
GPT2MLP<T>::GPT2MLP(std::size_t n_embd, std::size_t n_inner)
    : GPT2MLP(n_embd, n_inner, detail::lvalue(Generator(k_default_seed))) {}

template <class T>
GPT2MLP<T>::GPT2MLP(std::size_t n_embd, std::size_t n_inner, Generator& generator)
    : c_fc(n_inner, n_embd, generator), c_proj(n_embd, n_inner, generator) {}

template <class T>
Var<T> GPT2MLP<T>::forward(const Var<T>& x) {
  Tape<T>& tape = x.tape_for("GPT2MLP", "x");
  const Var<T> h = c_fc.forward(x);  // h[..., H] = x[..., C] . W_fc[C, H] + b_fc
  if (c_proj.lora && !c_proj.lora->merged())
    return c_proj.forward(activation(h, Activation::gelu_tanh));
  // y[..., C] = gelu_tanh(h)[..., H] . W_proj[H, C] + b_proj
  return activation_linear(h, Activation::gelu_tanh, tape.param(c_proj.weight),
                           std::optional<Var<T>>(tape.param(c_proj.bias)), WeightLayout::in_out);
}

template <class T>
void GPT2MLP<T>::collect_parameters(const std::string& prefix,
                                    typename Module<T>::NamedParameters& out) {
  this->add_child(prefix, "c_fc", c_fc, out);
  this->add_child(prefix, "c_proj", c_proj, out);
}

template <class T>
ModuleConfig GPT2MLP<T>::config() const {
  return ModuleConfig("GPT2MLP").add("n_embd", n_embd()).add("n_inner", n_inner());
}

template <class T>
TensorDict<T> rename_legacy_gpt2_mlp(const TensorDict<T>& state) {
  // former suffix -> GPT-2's; the 2-D values (the weights) are transposed
  static const std::pair<const char*, const char*> renames[] = {
      {"mlp.w1.weight", "mlp.c_fc.weight"},
      {"mlp.w1.bias", "mlp.c_fc.bias"},
      {"mlp.w2.weight", "mlp.c_proj.weight"},
      {"mlp.w2.bias", "mlp.c_proj.bias"}};
  TensorDict<T> out;
  for (const auto& [name, value] : state) {
    std::string renamed = name;
    bool weight = false;
    for (const auto& [old_suffix, new_suffix] : renames) {
      const std::string tail = old_suffix;
      const bool at_end = name.size() >= tail.size() &&
                          name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
      // the whole last components: "h.0.mlp.w1.weight" or "mlp.w1.weight", not "xmlp.w1.weight"
      if (at_end && (name.size() == tail.size() || name[name.size() - tail.size() - 1] == '.')) {
        renamed = name.substr(0, name.size() - tail.size()) + new_suffix;
        weight = value.dimension() == 2;
      }
    }
    // [H, C] -> [C, H] and [C, H] -> [H, C]: nn.Linear's [out, in] to Conv1D's [in, out]
    out.insert(renamed, weight ? xt::xarray<T>(xt::transpose(value)) : value);
  }
  return out;
}

template class GPT2MLP<float>;
template class GPT2MLP<double>;
template TensorDict<float> rename_legacy_gpt2_mlp(const TensorDict<float>&);
template TensorDict<double> rename_legacy_gpt2_mlp(const TensorDict<double>&);

}  // namespace xtgrad

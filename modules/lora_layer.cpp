#include "lora_layer.hpp"

#include <cmath>

#include "../engine/errors.hpp"
#include "../engine/ops/elementwise.hpp"
#include "../engine/ops/low_rank_linear.hpp"

namespace xtgrad {

void detail::check_lora_options(const char* function, const LoRAOptions& options) {
  const Check check(function);
  check.argument(options.r >= 1, "r", "is 0, expected a rank >= 1");
  check.argument(std::isfinite(options.lora_alpha) && options.lora_alpha > 0.0, "lora_alpha", "is ",
                 options.lora_alpha, ", expected a finite value > 0");
  check.argument(options.lora_dropout >= 0.0 && options.lora_dropout <= 1.0, "lora_dropout", "is ",
                 options.lora_dropout, ", expected a probability in [0, 1]");
}

namespace {
// Every argument checked, before the dropout draws its seed from the
// generator; then the dropout probability.
template <class T>
double checked_dropout(std::size_t in_features, std::size_t out_features,
                       const LoRAOptions& options) {
  detail::check_lora_options("LoRALayer", options);
  detail::check_positive_size("LoRALayer", "in_features", in_features);
  detail::check_positive_size("LoRALayer", "out_features", out_features);
  detail::checked_allocation<T>("LoRALayer", "arguments 'in_features' and 'r'",
                                {options.r, in_features});
  detail::checked_allocation<T>("LoRALayer", "arguments 'out_features' and 'r'",
                                {out_features, options.r});
  return options.lora_dropout;
}
}  // namespace

template <class T>
LoRALayer<T>::LoRALayer(std::size_t in_features, std::size_t out_features,
                        const LoRAOptions& options, Generator& generator)
    : lora_dropout(checked_dropout<T>(in_features, out_features, options), generator),
      options_(options) {
  // PEFT's reset_lora_parameters: kaiming_uniform_(A, a = sqrt(5)) is uniform
  // in +-1/sqrt(fan_in), fan_in = in; B = 0.
  lora_A = Parameter<T>(
      "lora_A.weight", detail::uniform_fan_in<T>({options.r, in_features}, in_features, generator));
  lora_B = Parameter<T>("lora_B.weight", xt::zeros<T>({out_features, options.r}));
}

template <class T>
Var<T> LoRALayer<T>::forward(const Var<T>& x) {
  Tape<T>& tape = x.tape_for("LoRALayer", "x");
  const Var<T> a = tape.param(lora_A), b = tape.param(lora_B);
  // h[..., r] = dropout(x)[..., in] . A^T;  d[..., out] = h . B^T
  const Var<T> h = linear(lora_dropout.forward(x), a);
  return scale(linear(h, b), static_cast<T>(scaling()));
}

template <class T>
Var<T> LoRALayer<T>::forward(const Var<T>& x, const Var<T>& weight,
                             const std::optional<Var<T>>& bias, WeightLayout layout) {
  Tape<T>& tape = x.tape_for("LoRALayer", "x");
  const Var<T> a = tape.param(lora_A), b = tape.param(lora_B);
  // h[..., r] = dropout(x)[..., in] . A^T;  y = x op(W) + bias + (h . B^T) * scaling
  const Var<T> h = linear(lora_dropout.forward(x), a);
  return low_rank_linear(x, weight, bias, layout, h, b, static_cast<T>(scaling()));
}

template <class T>
xt::xarray<T> LoRALayer<T>::delta_weight() const {
  // delta[out, in] = scaling * B[out, r] . A[r, in], as PEFT's get_delta_weight.
  const std::size_t out = lora_B.value.shape()[0], r = options_.r, in = lora_A.value.shape()[1];
  xt::xarray<T> delta = xt::zeros<T>({out, in});
  const T* a = lora_A.value.data();
  const T* b = lora_B.value.data();
  T* d = delta.data();
  for (std::size_t o = 0; o < out; ++o)
    for (std::size_t k = 0; k < r; ++k) {
      const T bk = b[o * r + k];
      for (std::size_t i = 0; i < in; ++i) d[o * in + i] += bk * a[k * in + i];
    }
  const T s = static_cast<T>(scaling());
  for (T& v : delta) v *= s;
  return delta;
}

namespace {
// weight += sign * delta (out_in) or sign * delta^T (in_out), delta [out, in].
template <class T>
void add_delta(xt::xarray<T>& weight, const xt::xarray<T>& delta, WeightLayout layout, T sign) {
  const std::size_t out = delta.shape()[0], in = delta.shape()[1];
  T* w = weight.data();
  const T* d = delta.data();
  for (std::size_t o = 0; o < out; ++o)
    for (std::size_t i = 0; i < in; ++i)
      w[layout == WeightLayout::out_in ? o * in + i : i * out + o] += sign * d[o * in + i];
}

template <class T>
void check_weight(const char* function, const xt::xarray<T>& weight, const Parameter<T>& a,
                  const Parameter<T>& b, WeightLayout layout) {
  const std::size_t in = a.value.shape()[1], out = b.value.shape()[0];
  const Shape expected = layout == WeightLayout::out_in ? Shape{out, in} : Shape{in, out};
  detail::Check(function).shape(weight.shape() == expected, "weight", weight.shape(), expected);
}
}  // namespace

template <class T>
void LoRALayer<T>::merge_into(xt::xarray<T>& weight, WeightLayout layout) {
  const detail::Check check("LoRALayer::merge");
  check.logic(!merged_, "the adapter is already merged into its layer's weight");
  check_weight("LoRALayer::merge", weight, lora_A, lora_B, layout);
  add_delta(weight, delta_weight(), layout, T(1));
  merged_ = true;
}

template <class T>
void LoRALayer<T>::unmerge_from(xt::xarray<T>& weight, WeightLayout layout) {
  const detail::Check check("LoRALayer::unmerge");
  check.logic(merged_, "the adapter is not merged into its layer's weight");
  check_weight("LoRALayer::unmerge", weight, lora_A, lora_B, layout);
  add_delta(weight, delta_weight(), layout, T(-1));
  merged_ = false;
}

template <class T>
ModuleConfig detail::with_lora(ModuleConfig config, const LoRALayer<T>& layer) {
  return config.add("lora_r", layer.options().r)
      .add("lora_alpha", layer.options().lora_alpha)
      .add("lora_dropout", layer.options().lora_dropout);
}

template class LoRALayer<float>;
template class LoRALayer<double>;
template ModuleConfig detail::with_lora(ModuleConfig, const LoRALayer<float>&);
template ModuleConfig detail::with_lora(ModuleConfig, const LoRALayer<double>&);

}  // namespace xtgrad

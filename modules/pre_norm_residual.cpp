#include "pre_norm_residual.hpp"

#include <cmath>
#include <string>
#include <type_traits>

#include "../engine/errors.hpp"
#include "../engine/ops/elementwise.hpp"
#include "recompute_modules.hpp"

namespace xtgrad {

namespace {

constexpr const char* k_residual_owner = "PreNormResidual";

// The options with their defaults filled in, every one checked before any
// module is built (the norm and the FFN check their own again, naming
// themselves: these name the block).
PreNormResidualOptions resolved(std::size_t d_model, std::size_t d_ff, PreNormResidualOptions o) {
  detail::check_positive_size(k_residual_owner, "d_model", d_model);
  detail::check_positive_size(k_residual_owner, "d_ff", d_ff);
  if (o.norm != NormKind::layer_norm && o.norm != NormKind::rms_norm)
    detail::fail_argument(k_residual_owner, "norm",
                          "is NormKind(" + std::to_string(static_cast<int>(o.norm)) +
                              "), expected layer_norm or rms_norm");
  if (o.ffn != FFNKind::feed_forward && o.ffn != FFNKind::positionwise && o.ffn != FFNKind::gated)
    detail::fail_argument(k_residual_owner, "ffn",
                          "is FFNKind(" + std::to_string(static_cast<int>(o.ffn)) +
                              "), expected feed_forward, positionwise or gated");
  if (!o.eps) o.eps = o.norm == NormKind::layer_norm ? 1e-5 : 1e-6;
  if (!(*o.eps >= 0.0 && std::isfinite(*o.eps)))
    detail::fail_argument(k_residual_owner, "eps",
                          "is " + detail::number_str(*o.eps) + ", expected a finite eps >= 0");
  if (!o.activation)
    o.activation = o.ffn == FFNKind::positionwise ? Activation::relu
                   : o.ffn == FFNKind::gated      ? Activation::silu
                                                  : Activation::gelu;
  detail::activation_name(*o.activation, k_residual_owner, "activation");
  if (o.ffn == FFNKind::positionwise && *o.activation != Activation::relu)
    detail::fail_argument(k_residual_owner, "activation",
                          "is " + std::string(to_string(*o.activation)) +
                              ", but FFNKind::positionwise is relu; use FFNKind::feed_forward");
  detail::check_probability(k_residual_owner, "dropout", o.dropout);
  detail::check_probability(k_residual_owner, "ffn_dropout", o.ffn_dropout);
  return o;
}

template <class T>
std::variant<LayerNorm<T>, RMSNorm<T>> make_norm(std::size_t d, const PreNormResidualOptions& o) {
  if (o.norm == NormKind::layer_norm) return LayerNorm<T>(d, *o.eps);
  return RMSNorm<T>(d, *o.eps);
}

template <class T>
std::variant<FeedForward<T>, PositionwiseFFN<T>, GatedFFN<T>> make_ffn(
    std::size_t d, std::size_t d_ff, const PreNormResidualOptions& o, Generator& generator) {
  switch (o.ffn) {
    case FFNKind::positionwise:
      return PositionwiseFFN<T>(d, d_ff, o.ffn_dropout, generator);
    case FFNKind::gated:
      return GatedFFN<T>(d, d_ff, d, *o.activation, o.gated_bias, o.ffn_dropout, generator);
    case FFNKind::feed_forward:
      break;
  }
  return FeedForward<T>(d, d_ff, *o.activation, o.ffn_dropout, generator);
}

}  // namespace

template <class T>
PreNormResidual<T>::PreNormResidual(std::size_t d_model, std::size_t d_ff,
                                    PreNormResidualOptions options)
    : PreNormResidual(d_model, d_ff, options, detail::lvalue(Generator(k_default_seed))) {}

template <class T>
PreNormResidual<T>::PreNormResidual(std::size_t d_model, std::size_t d_ff,
                                    PreNormResidualOptions options, Generator& generator)
    : d_model_(d_model),
      options_(resolved(d_model, d_ff, options)),
      norm(make_norm<T>(d_model, options_)),
      ffn(make_ffn<T>(d_model, d_ff, options_, generator)),
      dropout(options_.dropout, generator) {}

template <class T>
Var<T> PreNormResidual<T>::forward(const Var<T>& x) {
  x.tape_for(k_residual_owner, "x");
  // The only input that can misfit: checked before anything is recorded.
  const Shape& shape = x.shape();
  if (shape.empty() || shape.back() != d_model_)
    detail::fail_shape(k_residual_owner, "x", shape, "[..., " + std::to_string(d_model_) + "]");
  if (recompute_ && x.tape().grad_enabled())
    return recompute_module<T>(
        *this, [this](const Var<T>& h) { return block(h); }, x);
  return block(x);
}

template <class T>
Var<T> PreNormResidual<T>::block(const Var<T>& x) {
  const Var<T> normed = std::visit([&x](auto& m) { return m.forward(x); }, norm);
  const Var<T> f = std::visit([&normed](auto& m) { return m.forward(normed); }, ffn);
  return x + dropout(f);
}

template <class T>
void PreNormResidual<T>::collect_parameters(const std::string& prefix,
                                            typename Module<T>::NamedParameters& out) {
  std::visit([&](auto& m) { this->add_child(prefix, "norm", m, out); }, norm);
  std::visit([&](auto& m) { this->add_child(prefix, "ffn", m, out); }, ffn);
  this->add_child(prefix, "dropout", dropout, out);
}

template <class T>
ModuleConfig PreNormResidual<T>::config() const {
  const std::size_t d_ff = std::visit(
      [](const auto& f) {
        if constexpr (std::is_same_v<std::decay_t<decltype(f)>, GatedFFN<T>>)
          return f.w_up.value.shape()[1];
        else
          return f.d_ff();
      },
      ffn);
  const char* ffn_kind = options_.ffn == FFNKind::gated          ? "gated"
                         : options_.ffn == FFNKind::positionwise ? "positionwise"
                                                                 : "feed_forward";
  ModuleConfig out("PreNormResidual");
  out.add("d_model", d_model_)
      .add("d_ff", d_ff)
      .add("norm", options_.norm == NormKind::rms_norm ? "rms_norm" : "layer_norm")
      .add("eps", *options_.eps)
      .add("ffn", ffn_kind)
      .add("activation", std::string(to_string(*options_.activation)));
  if (options_.ffn == FFNKind::gated)
    out.add("bias_up", options_.gated_bias.up)
        .add("bias_gate", options_.gated_bias.gate)
        .add("bias_down", options_.gated_bias.down);
  return out.add("dropout", options_.dropout).add("ffn_dropout", options_.ffn_dropout);
}

template class PreNormResidual<float>;
template class PreNormResidual<double>;

}  // namespace xtgrad

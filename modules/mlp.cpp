#include "mlp.hpp"

#include <optional>
#include <string>

#include "../engine/errors.hpp"
#include "../engine/ops/fused_linear.hpp"
#include "../engine/ops/linear.hpp"
#include "recompute_modules.hpp"

namespace xtgrad {

template <class T>
Mlp<T>::Mlp(std::size_t in_features, std::vector<std::size_t> hidden_features,
            std::size_t out_features, MlpOptions options)
    : Mlp(in_features, std::move(hidden_features), out_features, options,
          detail::lvalue(Generator(k_default_seed))) {}

template <class T>
Mlp<T>::Mlp(std::size_t in_features, std::vector<std::size_t> hidden_features,
            std::size_t out_features, MlpOptions options, Generator& generator)
    : options_(options) {
  // Every option checked before any layer is built.
  detail::check_positive_size("Mlp", "in_features", in_features);
  for (std::size_t i = 0; i < hidden_features.size(); ++i)
    detail::check_positive_size("Mlp", ("hidden_features[" + std::to_string(i) + "]").c_str(),
                                hidden_features[i]);
  detail::check_positive_size("Mlp", "out_features", out_features);
  detail::activation_name(options.activation, "Mlp", "activation");
  detail::check_probability("Mlp", "dropout", options.dropout);
  std::size_t width = in_features;
  for (const std::size_t h : hidden_features) {
    linears_.emplace_back(width, h, options.bias, generator);
    activations_.emplace_back(options.activation);
    width = h;
  }
  linears_.emplace_back(width, out_features, options.bias, generator);
  // The dropout seeds after every weight: the weights do not depend on p.
  for (std::size_t i = 0; i < hidden_features.size(); ++i)
    dropouts_.emplace_back(options.dropout, generator);
}

template <class T>
Linear<T>& Mlp<T>::layer(std::size_t i) {
  const detail::Check check("Mlp::layer");
  check.argument(i < linears_.size(), "i", "is ", i, ", expected less than ", linears_.size(),
                 " (the number of Linear layers)");
  return linears_[i];
}

template <class T>
Dropout<T>& Mlp<T>::dropout(std::size_t i) {
  const detail::Check check("Mlp::dropout");
  check.argument(i < dropouts_.size(), "i", "is ", i, ", expected less than ", dropouts_.size(),
                 " (a Dropout follows each hidden layer's activation)");
  return dropouts_[i];
}

template <class T>
Var<T> Mlp<T>::forward(const Var<T>& x) {
  const Tape<T>& tape = x.tape_for("Mlp", "x");
  // x is the only input that can misfit (every layer fits the next by
  // construction): checked here, before anything is recorded.
  const Shape& shape = x.shape();
  if (shape.empty() || shape.back() != in_features())
    detail::fail_shape("Mlp", "x", shape, "[..., " + std::to_string(in_features()) + "]");
  if (recompute_ && tape.grad_enabled())
    return recompute_module<T>(
        *this, [this](const Var<T>& h) { return layers(h); }, x);
  return layers(x);
}

template <class T>
Var<T> Mlp<T>::layers(const Var<T>& x) {
  Tape<T>& tape = x.tape();
  Var<T> h = linears_.front()(x);
  for (std::size_t i = 1; i < linears_.size(); ++i) {
    Linear<T>& next = linears_[i];
    const std::optional<DropoutKey> key =
        dropouts_[i - 1].next_key(detail::elements_per_row(h.shape(), h.shape().back()));
    const std::optional<HiddenDropout> hidden =
        key ? std::optional(HiddenDropout{options_.dropout, *key}) : std::nullopt;
    // h[..., out_i] = Dropout(f(h)) W_i^T + b_i, f(h) never stored
    const Var<T> w = tape.param(next.weight);
    const std::optional<Var<T>> b =
        next.has_bias() ? std::optional(tape.param(next.bias)) : std::nullopt;
    h = activation_linear(h, options_.activation, w, b, WeightLayout::out_in, hidden);
  }
  return h;
}

template <class T>
void Mlp<T>::collect_parameters(const std::string& prefix,
                                typename Module<T>::NamedParameters& out) {
  for (std::size_t i = 0; i < linears_.size(); ++i) {
    this->add_child(prefix, std::to_string(3 * i), linears_[i], out);
    if (i + 1 < linears_.size()) {
      this->add_child(prefix, std::to_string(3 * i + 1), activations_[i], out);
      this->add_child(prefix, std::to_string(3 * i + 2), dropouts_[i], out);
    }
  }
}

template <class T>
ModuleConfig Mlp<T>::config() const {
  std::string hidden = "[";
  for (std::size_t i = 0; i + 1 < linears_.size(); ++i)
    hidden += (i ? ", " : "") + std::to_string(linears_[i].out_features());
  return ModuleConfig("Mlp")
      .add("in_features", in_features())
      .add("hidden_features", hidden + "]")
      .add("out_features", out_features())
      .add("activation", std::string(to_string(options_.activation)))
      .add("dropout", options_.dropout)
      .add("bias", options_.bias);
}

template class Mlp<float>;
template class Mlp<double>;

}  // namespace xtgrad

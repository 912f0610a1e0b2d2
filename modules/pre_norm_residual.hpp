#pragma once
// PreNormResidual<T>(d_model, d_ff, options): the pre-norm residual
// feed-forward sublayer of a Transformer (Xiong et al. 2020, "On Layer
// Normalization in the Transformer Architecture"; the MLP-Mixer block's
// channel-mixing half),
//
//   y = x + Dropout(FFN(Norm(x))),   x, y [..., d_model],
//
// with the norm and the FFN chosen by the options:
//   norm: NormKind::layer_norm (LayerNorm, eps 1e-5) or rms_norm (RMSNorm, eps 1e-6)
//   ffn:  FFNKind::feed_forward (FeedForward, activation default exact GELU),
//         positionwise (PositionwiseFFN: relu), or
//         gated (GatedFFN(d_model, d_ff, d_model), activation default silu: SwiGLU)
// Children "norm", "ffn", "dropout", so the parameter names are
// "norm.weight", "norm.bias", "ffn.w1.weight", "ffn.w1.bias", "ffn.w2.weight",
// "ffn.w2.bias" (or "ffn.w_up", "ffn.w_gate", "ffn.w_down" and the chosen
// gated biases), as the PyTorch module of the same structure
// (tests/support/fixtures/make_modules.py).
//
// dropout is the p of the "dropout" child on the FFN output; ffn_dropout the
// FFN's own hidden dropout ("ffn.dropout", fused). The generator initializes
// the FFN as its constructor does, then draws the seed of "dropout".
// Constructors throw std::invalid_argument for a zero size, an eps or p out
// of range, an Activation outside its enumeration, and an activation other
// than relu with FFNKind::positionwise. forward refuses an x whose last
// axis is not d_model before anything is recorded.
//
// set_recompute(true): the whole block (norm, FFN, dropout, residual) runs
// under one activation recompute (modules/recompute_modules.hpp): backward
// keeps only x and y and re-runs the block once, with the same dropout
// masks; the gradients are those without it, bit for bit. Off by default; not
// part of config(). (In a Sequential of blocks, Sequential::set_recompute_every
// does the same for all of them; do not turn on both, or each block re-runs twice.)

#include <cstddef>
#include <optional>
#include <variant>

#include "../engine/activation.hpp"
#include "dropout.hpp"
#include "feed_forward.hpp"
#include "gated_ffn.hpp"
#include "norm.hpp"
#include "positionwise_ffn.hpp"

namespace xtgrad {

enum class NormKind { layer_norm, rms_norm };
enum class FFNKind { feed_forward, positionwise, gated };

struct PreNormResidualOptions {
  NormKind norm = NormKind::layer_norm;
  std::optional<double> eps;  // default: 1e-5 (layer_norm), 1e-6 (rms_norm)
  FFNKind ffn = FFNKind::feed_forward;
  std::optional<Activation> activation;  // default: gelu, relu (positionwise), silu (gated)
  GatedBias gated_bias = {};             // FFNKind::gated only
  double dropout = 0.0;                  // on FFN(Norm(x)), before the residual add
  double ffn_dropout = 0.0;              // on the FFN's hidden activation
};

template <class T>
class PreNormResidual : public Module<T> {
  // First: the members below are built from them.
  std::size_t d_model_;
  PreNormResidualOptions options_;  // with the defaults filled in

 public:
  PreNormResidual(std::size_t d_model, std::size_t d_ff, PreNormResidualOptions options = {});
  PreNormResidual(std::size_t d_model, std::size_t d_ff, PreNormResidualOptions options,
                  Generator& generator);

  Var<T> forward(const Var<T>& x) override;
  ModuleConfig config() const override;

  std::size_t d_model() const { return d_model_; }
  // The options, eps and activation filled in with their defaults.
  const PreNormResidualOptions& options() const { return options_; }
  void set_recompute(bool on) { recompute_ = on; }
  bool recomputing() const { return recompute_; }
  // The chosen modules: LayerNorm<T> or RMSNorm<T>; FeedForward<T>,
  // PositionwiseFFN<T> or GatedFFN<T> (std::get<...>(block.ffn) for the type).
  std::variant<LayerNorm<T>, RMSNorm<T>> norm;
  std::variant<FeedForward<T>, PositionwiseFFN<T>, GatedFFN<T>> ffn;
  Dropout<T> dropout;

 protected:
  void collect_parameters(const std::string& prefix,
                          typename Module<T>::NamedParameters& out) override;

 private:
  Var<T> block(const Var<T>& x);  // forward after the check of x
  bool recompute_ = false;
};

extern template class PreNormResidual<float>;
extern template class PreNormResidual<double>;

}  // namespace xtgrad

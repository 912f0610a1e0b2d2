#pragma once
// The normalization modules.
//
// LayerNorm<T>(normalized_shape D, eps = 1e-5, elementwise_affine = true,
// bias = true): torch.nn.LayerNorm([D], eps, elementwise_affine, bias), the
// normalization of ops/norm.hpp's layer_norm over the last axis of x [..., D].
// Parameters (when elementwise_affine): "weight" [D] = 1 and, when bias too,
// "bias" [D] = 0, torch's initialization.
//
// RMSNorm<T>(D, eps = 1e-6, elementwise_affine = true): rms_norm of
// ops/norm.hpp (LLaMA's RMSNorm; torch.nn.RMSNorm from torch 2.4, whose
// default eps differs). Parameter (when elementwise_affine): "weight" [D] = 1.
//
// Constructors throw std::invalid_argument for D == 0 and for an eps that is
// negative, NaN or infinite; forward throws as layer_norm / rms_norm do for an
// x whose last axis is not D.

#include <cstddef>

#include "../engine/ops/norm.hpp"
#include "module.hpp"

namespace xtgrad {

template <class T>
class LayerNorm : public Module<T> {
 public:
  explicit LayerNorm(std::size_t normalized_shape, double eps = 1e-5,
                     bool elementwise_affine = true, bool bias = true);

  Var<T> forward(const Var<T>& x) override;
  ModuleConfig config() const override;

  std::size_t normalized_shape() const { return d_; }
  double eps() const { return eps_; }
  bool elementwise_affine() const { return affine_; }
  bool has_bias() const { return bias_on_; }

  Parameter<T> weight;  // [D], when elementwise_affine()
  Parameter<T> bias;    // [D], when has_bias()

 protected:
  void collect_parameters(const std::string& prefix,
                          typename Module<T>::NamedParameters& out) override;

 private:
  std::size_t d_;
  double eps_;
  bool affine_, bias_on_;
};

template <class T>
class RMSNorm : public Module<T> {
 public:
  explicit RMSNorm(std::size_t normalized_shape, double eps = 1e-6, bool elementwise_affine = true);

  Var<T> forward(const Var<T>& x) override;
  ModuleConfig config() const override;

  std::size_t normalized_shape() const { return d_; }
  double eps() const { return eps_; }
  bool elementwise_affine() const { return affine_; }

  Parameter<T> weight;  // [D], when elementwise_affine()

 protected:
  void collect_parameters(const std::string& prefix,
                          typename Module<T>::NamedParameters& out) override;

 private:
  std::size_t d_;
  double eps_;
  bool affine_;
};

extern template class LayerNorm<float>;
extern template class LayerNorm<double>;
extern template class RMSNorm<float>;
extern template class RMSNorm<double>;

}  // namespace xtgrad

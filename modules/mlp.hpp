#pragma once
// Mlp<T>(in_features, hidden_features {h_0, ..., h_{k-1}}, out_features,
// options): a multilayer perceptron, the structure and names of
// torchvision.ops.MLP(in_features, [h_0, ..., h_{k-1}, out_features],
// activation_layer, dropout=p) without its final Dropout on the output:
//
//   "0" Linear(in, h_0), "1" activation, "2" Dropout(p),
//   "3" Linear(h_0, h_1), "4" activation, "5" Dropout(p), ...,
//   "3k" Linear(h_{k-1}, out)
//
// so the parameter names are "0.weight", "0.bias", "3.weight", ..., "3k.bias".
// No hidden sizes is one Linear(in, out); in != out is allowed. Each Linear
// is initialized as nn.Linear, in order, from the generator; then each
// Dropout draws its seed from it (when p > 0), so the weights do not depend
// on p.
//
// forward computes Linear_{i+1}(Dropout(f(Linear_i(...)))) with the
// activation and the dropout fused into the next layer (activation_linear
// with a hidden dropout, ops/fused_linear.hpp), so the activated hidden is
// never stored; the values are those of the composition of linear,
// activation and dropout (to the rounding of the weight gradients' sums).
// x [..., in] -> [..., out]; a bad x is refused before anything is recorded.
// Copying an Mlp copies its layers and its dropouts' seeds and steps.
//
// set_recompute(true): the whole forward runs under one activation
// recompute (modules/recompute_modules.hpp): backward keeps only x and the
// output and re-runs the layers once, with the same dropout masks; the
// gradients are those without it, bit for bit. Off by default; not part of
// config().

#include <cstddef>
#include <vector>

#include "../engine/activation.hpp"
#include "dropout.hpp"
#include "linear.hpp"
#include "sequential.hpp"

namespace xtgrad {

struct MlpOptions {
  Activation activation = Activation::relu;  // torchvision's default, nn.ReLU
  double dropout = 0.0;                      // after every activation
  bool bias = true;                          // of every Linear
};

template <class T>
class Mlp : public Module<T> {
 public:
  Mlp(std::size_t in_features, std::vector<std::size_t> hidden_features, std::size_t out_features,
      MlpOptions options = {});
  Mlp(std::size_t in_features, std::vector<std::size_t> hidden_features, std::size_t out_features,
      MlpOptions options, Generator& generator);

  Var<T> forward(const Var<T>& x) override;
  ModuleConfig config() const override;

  // The k + 1 Linear layers, in order (child "3i" is layer(i)); an i >=
  // num_layers() is a std::invalid_argument naming i and the range.
  std::size_t num_layers() const { return linears_.size(); }
  Linear<T>& layer(std::size_t i);
  // The Dropout after layer(i)'s activation, i < num_layers() - 1 (child
  // "3i+2"); another i is a std::invalid_argument naming i and the range.
  Dropout<T>& dropout(std::size_t i);
  std::size_t in_features() const { return linears_.front().in_features(); }
  std::size_t out_features() const { return linears_.back().out_features(); }
  const MlpOptions& options() const { return options_; }
  void set_recompute(bool on) { recompute_ = on; }
  bool recomputing() const { return recompute_; }

 protected:
  void collect_parameters(const std::string& prefix,
                          typename Module<T>::NamedParameters& out) override;

 private:
  Var<T> layers(const Var<T>& x);  // forward after the check of x

  MlpOptions options_;
  std::vector<Linear<T>> linears_;
  std::vector<ActivationLayer<T>> activations_;
  std::vector<Dropout<T>> dropouts_;
  bool recompute_ = false;
};

extern template class Mlp<float>;
extern template class Mlp<double>;

}  // namespace xtgrad

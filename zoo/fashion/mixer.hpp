#pragma once
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/modules.hpp>
namespace fashion {
using namespace xtgrad;
struct TokenMixing : Module<float> {  // x + FFN(LayerNorm(x)^T)^T over x's [tokens] axis
  TokenMixing(std::size_t tokens, std::size_t width, std::size_t hidden, Generator& g)
      : norm(width), ffn(tokens, hidden, Activation::gelu, g) {}
  Var<float> forward(const Var<float>& x) override {
    return add(x, transpose(ffn(transpose(norm(x), 1, 2)), 1, 2));
  }
  void collect_parameters(const std::string& prefix, NamedParameters& out) override {
    add_child(prefix, "norm", norm, out), add_child(prefix, "ffn", ffn, out);
  }
  ModuleConfig config() const override { return children_config("TokenMixing"); }
  LayerNorm<float> norm;
  FeedForward<float> ffn;
};
// MLP-Mixer (Tolstikhin et al. 2021): patches, Linear, mixing blocks, LayerNorm, mean, head.
struct Mixer : Sequential<float> {
  Mixer(std::int64_t p, std::size_t width, std::size_t blocks, std::size_t token_hidden,
        std::size_t channel_hidden, Generator& g)
      : p(p), n(28 / p), head(width, 10, true, g) {
    emplace_back<Linear<float>>(p * p, width, true, g);
    for (std::size_t b = 0; b < blocks; ++b)
      emplace_back<TokenMixing>(n * n, width, token_hidden, g),
          emplace_back<PreNormResidual<float>>(width, channel_hidden, PreNormResidualOptions{}, g);
    emplace_back<LayerNorm<float>>(width);
  }
  Var<float> forward(const Var<float>& x) override {  // [B, 784] -> t [B, 49, 16] -> [B, 10]
    auto t = reshape(permute(reshape(x, {-1, n, p, n, p}), {0, 1, 3, 2, 4}), {-1, n * n, p * p});
    return head(mean(Sequential<float>::forward(t), std::int64_t{1}));
  }
  void collect_parameters(const std::string& prefix, NamedParameters& out) override {
    Sequential<float>::collect_parameters(prefix, out), add_child(prefix, "head", head, out);
  }
  ModuleConfig config() const override { return children_config("Mixer"); }
  std::int64_t p, n;  // patch side, patches per side
  Linear<float> head;
};
}  // namespace fashion

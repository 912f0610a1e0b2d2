#pragma once
// The classifiers of train_fashion: images [B, 784] (28 x 28, row-major,
// normalized) to logits [B, 10], built from xtgrad's modules. The demo
// (demos/train_fashion) trains them and bench_xtgrad times their steps.
//
//   mlp    Mlp(784, {hidden, hidden}, 10) with exact GELU and Dropout(dropout)
//          after each hidden layer (modules/mlp.hpp: torchvision.ops.MLP's
//          structure and names "0.weight", "3.weight", "6.weight", ...).
//   mixer  MLP-Mixer (Tolstikhin et al. 2021, "MLP-Mixer: An all-MLP
//          Architecture for Vision", section 2), mixer.hpp: 4 x 4 patches ->
//          49 tokens of 16 pixels, a linear patch embedding to `width`
//          channels, then `blocks` blocks of
//            x = x + TokenFFN(LayerNorm(x)^T)^T     (TokenMixing: mixes the 49 tokens)
//            x = x + ChannelFFN(LayerNorm(x))       (PreNormResidual: mixes the channels)
//          with exact-GELU FFNs, a final LayerNorm, the mean over tokens and
//          a linear head. No dropout.
//
// A model is a Module<float>: train() / eval() switch its dropout on and
// off; each Dropout module draws its seed from the model's Generator and
// counts its own steps (Dropout::step, saved by --save).

#include <cstddef>
#include <memory>
#include <string>

#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/modules.hpp>

namespace fashion {

inline constexpr std::size_t k_image_side = 28;
inline constexpr std::size_t k_pixels = k_image_side * k_image_side;
inline constexpr std::size_t k_classes = 10;

struct ModelConfig {
  std::string kind = "mlp";  // "mlp" or "mixer"
  // mlp
  std::size_t hidden = 256;
  double dropout = 0.1;
  // mixer
  std::size_t patch = 4;
  std::size_t width = 128;
  std::size_t blocks = 4;
  std::size_t token_hidden = 64;
  std::size_t channel_hidden = 256;
};

// The model `config` describes, initialized from `generator` (PyTorch's
// default initialization of each layer). std::invalid_argument for an
// unknown kind or sizes the model cannot have.
std::unique_ptr<xtgrad::Module<float>> make_model(const ModelConfig& config,
                                                  xtgrad::Generator& generator);

}  // namespace fashion

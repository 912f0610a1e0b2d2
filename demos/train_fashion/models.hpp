#pragma once
// The classifiers of train_fashion: images [B, 784] (28 x 28, row-major,
// normalized) to logits [B, 10].
//
//   mlp    784 -> hidden -> hidden -> 10, exact GELU and dropout after each
//          hidden layer.
//   mixer  MLP-Mixer (Tolstikhin et al. 2021, "MLP-Mixer: An all-MLP
//          Architecture for Vision", section 2): 4 x 4 patches -> 49 tokens
//          of 16 pixels, a linear patch embedding to `width` channels, then
//          `blocks` blocks of
//            x = x + TokenMLP(LayerNorm(x)^T)^T     (mixes the 49 tokens)
//            x = x + ChannelMLP(LayerNorm(x))       (mixes the channels)
//          with GELU FFNs, a final LayerNorm, the mean over tokens and a
//          linear head.
//
// Both are built from xtgrad's Linear and FeedForward modules and its ops.
// A model is trained (dropout on) or evaluated (dropout off, the default)
// according to set_training; the dropout masks of step s are those of the
// keys (seed, s * k_dropout_sites + site, 0).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/modules.hpp>

namespace fashion {

inline constexpr std::size_t k_image_side = 28;
inline constexpr std::size_t k_pixels = k_image_side * k_image_side;
inline constexpr std::size_t k_classes = 10;
inline constexpr std::uint64_t k_dropout_sites = 8;  // dropout calls per step, at most

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

// The common interface of the two classifiers.
class Classifier : public xtgrad::Module<float> {
 public:
  void set_training(bool training) { training_ = training; }
  bool training() const { return training_; }
  // The dropout masks of the next forward: those of training step `step`.
  void set_dropout_key(std::uint64_t seed, std::uint64_t step) {
    seed_ = seed;
    step_ = step;
  }

 protected:
  xtgrad::DropoutKey dropout_key(std::uint64_t site) const {
    return {seed_, step_ * k_dropout_sites + site, 0};
  }
  bool training_ = false;

 private:
  std::uint64_t seed_ = 0, step_ = 0;
};

// The model `config` describes, initialized from `generator` (PyTorch's
// default initialization of each layer). std::invalid_argument for an
// unknown kind or sizes the model cannot have.
std::unique_ptr<Classifier> make_model(const ModelConfig& config, xtgrad::Generator& generator);

// Number of trainable values.
std::size_t parameter_count(Classifier& model);

}  // namespace fashion

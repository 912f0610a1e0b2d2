// make_model of models.hpp: the MLP is xtgrad's Mlp, the Mixer is mixer.hpp's.

#include "models.hpp"

#include <stdexcept>

#include "mixer.hpp"

namespace fashion {

std::unique_ptr<xtgrad::Module<float>> make_model(const ModelConfig& config,
                                                  xtgrad::Generator& generator) {
  if (config.kind == "mlp") {
    if (config.hidden == 0) throw std::invalid_argument("--hidden must be positive");
    if (!(config.dropout >= 0.0 && config.dropout < 1.0))
      throw std::invalid_argument("--dropout must be in [0, 1)");
    xtgrad::MlpOptions options;
    options.activation = xtgrad::Activation::gelu;
    options.dropout = config.dropout;
    return std::make_unique<xtgrad::Mlp<float>>(
        k_pixels, std::vector<std::size_t>{config.hidden, config.hidden}, k_classes, options,
        generator);
  }
  if (config.kind == "mixer") {
    if (config.patch == 0 || k_image_side % config.patch != 0)
      throw std::invalid_argument("--patch must divide 28 (1, 2, 4, 7, 14 or 28)");
    if (config.width == 0 || config.token_hidden == 0 || config.channel_hidden == 0)
      throw std::invalid_argument("--width, --token-hidden and --channel-hidden must be positive");
    return std::make_unique<Mixer>(static_cast<std::int64_t>(config.patch), config.width,
                                   config.blocks, config.token_hidden, config.channel_hidden,
                                   generator);
  }
  throw std::invalid_argument("unknown model '" + config.kind + "', expected mlp or mixer");
}

}  // namespace fashion

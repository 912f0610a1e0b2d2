// The MLP and the MLP-Mixer of models.hpp.

#include "models.hpp"

#include <stdexcept>
#include <utility>
#include <vector>

namespace fashion {

namespace {

using namespace xtgrad;
using Params = Module<float>::NamedParameters;

class Mlp final : public Classifier {
 public:
  Mlp(const ModelConfig& c, Generator& g)
      : fc1(k_pixels, c.hidden, true, g),
        fc2(c.hidden, c.hidden, true, g),
        fc3(c.hidden, k_classes, true, g),
        p_(c.dropout) {}

  Var<float> forward(const Var<float>& x) override {                              // x [B, 784]
    const Var<float> h1 = dropout(gelu(fc1(x)), p_, training_, dropout_key(0));   // [B, hidden]
    const Var<float> h2 = dropout(gelu(fc2(h1)), p_, training_, dropout_key(1));  // [B, hidden]
    return fc3(h2);                                                               // [B, 10]
  }

  Linear<float> fc1, fc2, fc3;

 protected:
  void collect_parameters(const std::string& prefix, Params& out) override {
    add_child(prefix, "fc1", fc1, out);
    add_child(prefix, "fc2", fc2, out);
    add_child(prefix, "fc3", fc3, out);
  }

 private:
  double p_;
};

// LayerNorm over the last axis with its affine Parameters (PyTorch's
// nn.LayerNorm: weight 1, bias 0, eps 1e-5).
struct Norm {
  explicit Norm(std::size_t d)
      : weight("weight", xt::ones<float>({d})), bias("bias", xt::zeros<float>({d})) {}
  Var<float> operator()(const Var<float>& x) {
    Tape<float>& tape = x.tape();
    return layer_norm(x, tape.param(weight), tape.param(bias));
  }
  Parameter<float> weight, bias;
};

class MixerBlock {
 public:
  MixerBlock(const ModelConfig& c, std::size_t tokens, Generator& g)
      : token_norm(c.width),
        token_mlp(tokens, c.token_hidden, Activation::gelu, g),
        channel_norm(c.width),
        channel_mlp(c.width, c.channel_hidden, Activation::gelu, g) {}

  Var<float> operator()(const Var<float>& x) {  // x [B, tokens, width]
    // Token mixing acts on each channel's column of tokens: [B, width, tokens].
    const Var<float> t = transpose(token_mlp(transpose(token_norm(x), 1, 2)), 1, 2);
    const Var<float> y = add(x, t);               // [B, tokens, width]
    return add(y, channel_mlp(channel_norm(y)));  // [B, tokens, width]
  }

  void collect(const std::string& prefix, Params& out) {
    out.emplace_back(prefix + "token_norm.weight", &token_norm.weight);
    out.emplace_back(prefix + "token_norm.bias", &token_norm.bias);
    token_mlp_params(prefix + "token_mlp.", token_mlp, out);
    out.emplace_back(prefix + "channel_norm.weight", &channel_norm.weight);
    out.emplace_back(prefix + "channel_norm.bias", &channel_norm.bias);
    token_mlp_params(prefix + "channel_mlp.", channel_mlp, out);
  }

  Norm token_norm;
  FeedForward<float> token_mlp;
  Norm channel_norm;
  FeedForward<float> channel_mlp;

 private:
  static void token_mlp_params(const std::string& prefix, FeedForward<float>& ffn, Params& out) {
    for (auto& [name, p] : ffn.named_parameters()) out.emplace_back(prefix + name, p);
  }
};

class Mixer final : public Classifier {
 public:
  Mixer(const ModelConfig& c, Generator& g)
      : patch_(c.patch),
        grid_(k_image_side / c.patch),
        embed(c.patch * c.patch, c.width, true, g),
        final_norm(c.width),
        head(c.width, k_classes, true, g) {
    for (std::size_t b = 0; b < c.blocks; ++b) blocks.emplace_back(c, grid_ * grid_, g);
  }

  Var<float> forward(const Var<float>& x) override {  // x [B, 784]
    const auto n = static_cast<std::int64_t>(x.shape()[0]);
    const auto p = static_cast<std::int64_t>(patch_), g = static_cast<std::int64_t>(grid_);
    // [B, 784] -> [B, gy, py, gx, px] -> [B, gy, gx, py, px] -> [B, tokens, p*p]
    const Var<float> patches =
        reshape(permute(reshape(x, {n, g, p, g, p}), {0, 1, 3, 2, 4}), {n, g * g, p * p});
    Var<float> h = embed(patches);  // [B, tokens, width]
    for (MixerBlock& block : blocks) h = block(h);
    const Var<float> pooled = mean(final_norm(h), std::int64_t{1});  // [B, width]
    return head(pooled);                                             // [B, 10]
  }

  std::size_t patch_, grid_;
  Linear<float> embed;
  std::vector<MixerBlock> blocks;
  Norm final_norm;
  Linear<float> head;

 protected:
  void collect_parameters(const std::string& prefix, Params& out) override {
    add_child(prefix, "embed", embed, out);
    for (std::size_t b = 0; b < blocks.size(); ++b)
      blocks[b].collect(prefix + "blocks." + std::to_string(b) + ".", out);
    out.emplace_back(prefix + "final_norm.weight", &final_norm.weight);
    out.emplace_back(prefix + "final_norm.bias", &final_norm.bias);
    add_child(prefix, "head", head, out);
  }
};

}  // namespace

std::unique_ptr<Classifier> make_model(const ModelConfig& config, Generator& generator) {
  if (config.kind == "mlp") {
    if (config.hidden == 0) throw std::invalid_argument("--hidden must be positive");
    if (!(config.dropout >= 0.0 && config.dropout < 1.0))
      throw std::invalid_argument("--dropout must be in [0, 1)");
    return std::make_unique<Mlp>(config, generator);
  }
  if (config.kind == "mixer") {
    if (config.patch == 0 || k_image_side % config.patch != 0)
      throw std::invalid_argument("--patch must divide 28 (1, 2, 4, 7, 14 or 28)");
    if (config.width == 0 || config.token_hidden == 0 || config.channel_hidden == 0)
      throw std::invalid_argument("--width, --token-hidden and --channel-hidden must be positive");
    return std::make_unique<Mixer>(config, generator);
  }
  throw std::invalid_argument("unknown model '" + config.kind + "', expected mlp or mixer");
}

std::size_t parameter_count(Classifier& model) {
  std::size_t n = 0;
  for (const xtgrad::Parameter<float>* p : model.parameters()) n += p->value.size();
  return n;
}

}  // namespace fashion

// Module::state_dict and Module::load_state_dict (module.hpp, tensor_dict.hpp):
// torch's names (the fixtures of make_modules.py), torch's strict and
// non-strict rules and messages, dtype conversion as torch's copy_, and
// all-or-nothing loading.

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/modules.hpp>

#include "support/fixtures/modules_fixtures.hpp"
#include "support/module_fixtures.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fx = xtgrad::fixtures::modules;

namespace {

template <std::size_t N>
std::vector<std::string> torch_names(const fx::Tensor (&params)[N]) {
  std::vector<std::string> out;
  for (const fx::Tensor& t : params) out.push_back(t.name);
  return out;
}

template <class T>
std::vector<std::string> dict_names(const Module<T>& module) {
  return module.state_dict().keys();
}

}  // namespace

TEST_CASE_TEMPLATE("state dict: the names are torch's state_dict names, in its order", T, float,
                   double) {
  CHECK(dict_names(LayerNorm<T>(5)) == torch_names(fx::layer_norm_params));
  CHECK(dict_names(RMSNorm<T>(5)) == torch_names(fx::rms_norm_params));
  Sequential<T> net;
  net.template emplace_back<Linear<T>>(4, 6);
  net.push_back(ActivationLayer<T>(Activation::relu));
  net.template emplace_back<Linear<T>>(6, 3);
  CHECK(dict_names(net) == torch_names(fx::sequential_params));
  MlpOptions gelu;
  gelu.activation = Activation::gelu;
  gelu.dropout = 0.25;
  CHECK(dict_names(Mlp<T>(4, {6, 5}, 3, gelu)) == torch_names(fx::mlp_params));
  CHECK(dict_names(PreNormResidual<T>(5, 7)) == torch_names(fx::block_ln_ff_params));
  PreNormResidualOptions gated;
  gated.norm = NormKind::rms_norm;
  gated.ffn = FFNKind::gated;
  gated.gated_bias = GatedBias{true, false, true};
  CHECK(dict_names(PreNormResidual<T>(5, 6, gated)) == torch_names(fx::block_rms_gated_params));
  PreNormResidualOptions relu;
  relu.ffn = FFNKind::positionwise;
  CHECK(dict_names(PreNormResidual<T>(5, 6, relu)) == torch_names(fx::block_ln_relu_params));
  // nn.Linear and nn.Embedding: "weight", "bias" / "weight".
  CHECK(dict_names(Linear<T>(3, 2)) == std::vector<std::string>{"weight", "bias"});
  CHECK(dict_names(Linear<T>(3, 2, false)) == std::vector<std::string>{"weight"});
  CHECK(dict_names(Embedding<T>(5, 3)) == std::vector<std::string>{"weight"});
  CHECK(dict_names(Dropout<T>(0.1)).empty());
}

TEST_CASE_TEMPLATE("state dict: values are copies - a round trip restores every bit", T, float,
                   double) {
  Generator g1(1), g2(2);
  FeedForward<T> a(4, 16, Activation::gelu, g1), b(4, 16, Activation::gelu, g2);
  TensorDict<T> dict = a.state_dict();
  REQUIRE(dict.size() == 4);
  CHECK(bit_equal(std::vector<xt::xarray<T>>{dict.at("w1.weight")},
                  std::vector<xt::xarray<T>>{a.w1.weight.value}));
  dict.at("w1.bias").fill(T(7));  // a copy: the module keeps its value
  CHECK(a.w1.bias.value(0) != T(7));
  dict.at("w1.bias") = a.w1.bias.value;
  CHECK_FALSE(bit_equal(snapshot(a), snapshot(b)));
  b.zero_grad();
  b.w2.bias.grad.fill(T(3));
  const IncompatibleKeys keys = b.load_state_dict(dict);
  CHECK(keys.missing_keys.empty());
  CHECK(keys.unexpected_keys.empty());
  CHECK(bit_equal(snapshot(a), snapshot(b)));
  CHECK(b.w2.bias.grad(0) == T(3));  // gradients untouched
}

TEST_CASE("state dict: TensorDict keeps insertion order and refuses a name twice") {
  TensorDict<double> dict;
  dict.insert("b", xt::xarray<double>{1});
  dict.insert("a", xt::xarray<double>{2});
  CHECK(dict.keys() == std::vector<std::string>{"b", "a"});
  CHECK(dict.contains("a"));
  CHECK_FALSE(dict.contains("c"));
  CHECK_THROWS_WITH_PARTS(dict.insert("a", xt::xarray<double>{3}), std::invalid_argument,
                          {"TensorDict::insert", "'name'", "'a' is already in the dict"});
  CHECK_THROWS_WITH_PARTS(dict.at("c"), std::invalid_argument,
                          {"TensorDict::at", "'c' is not in the dict"});
}

TEST_CASE("state dict: strict loading lists missing and unexpected keys as torch does") {
  FeedForward<double> target(4, 16);
  const auto before = snapshot(target);
  FeedForward<double> source(4, 16, Activation::gelu, detail::lvalue(Generator(5)));
  TensorDict<double> dict;
  dict.insert("w1.weight", source.w1.weight.value);
  dict.insert("w1.bias", source.w1.bias.value);
  dict.insert("w3.weight", source.w2.weight.value);
  dict.insert("w3.bias", source.w2.bias.value);
  CHECK(message_of([&] { target.load_state_dict(dict); }) ==
        "xtgrad::Module::load_state_dict: Error(s) in loading state_dict for FeedForward:\n"
        "\tMissing key(s) in state_dict: \"w2.weight\", \"w2.bias\". \n"
        "\tUnexpected key(s) in state_dict: \"w3.weight\", \"w3.bias\". ");
  CHECK(bit_equal(snapshot(target), before));

  TensorDict<double> only_missing;
  only_missing.insert("w1.weight", source.w1.weight.value);
  CHECK(message_of([&] { target.load_state_dict(only_missing); }) ==
        "xtgrad::Module::load_state_dict: Error(s) in loading state_dict for FeedForward:\n"
        "\tMissing key(s) in state_dict: \"w1.bias\", \"w2.weight\", \"w2.bias\". ");
  CHECK(bit_equal(snapshot(target), before));
}

TEST_CASE("state dict: non-strict loading returns the lists and loads the rest") {
  FeedForward<double> target(4, 16);
  FeedForward<double> source(4, 16, Activation::gelu, detail::lvalue(Generator(5)));
  const xt::xarray<double> w2_weight = target.w2.weight.value, w2_bias = target.w2.bias.value;
  TensorDict<double> dict;
  dict.insert("extra.a", xt::xarray<double>{1});
  dict.insert("w1.bias", source.w1.bias.value);
  dict.insert("w1.weight", source.w1.weight.value);
  dict.insert("extra.b", xt::xarray<double>{2, 3});
  const IncompatibleKeys keys = target.load_state_dict(dict, false);
  CHECK(keys.missing_keys == std::vector<std::string>{"w2.weight", "w2.bias"});
  CHECK(keys.unexpected_keys == std::vector<std::string>{"extra.a", "extra.b"});
  CHECK(bit_equal(std::vector<xt::xarray<double>>{target.w1.weight.value, target.w1.bias.value,
                                                  target.w2.weight.value, target.w2.bias.value},
                  {source.w1.weight.value, source.w1.bias.value, w2_weight, w2_bias}));
}

TEST_CASE("state dict: a shape mismatch names the key and both shapes, strict or not") {
  FeedForward<double> target(4, 16);
  const auto before = snapshot(target);
  TensorDict<double> dict = FeedForward<double>(4, 16).state_dict();
  dict.at("w1.weight") = xt::zeros<double>({4, 16});
  dict.at("w2.bias") = xt::zeros<double>({5});
  const std::string expected =
      "xtgrad::Module::load_state_dict: Error(s) in loading state_dict for FeedForward:\n"
      "\tsize mismatch for w1.weight: copying a param with shape [4, 16] from checkpoint, the "
      "shape in current model is [16, 4].\n"
      "\tsize mismatch for w2.bias: copying a param with shape [5] from checkpoint, the shape in "
      "current model is [4].";
  CHECK(message_of([&] { target.load_state_dict(dict); }) == expected);
  CHECK(message_of([&] { target.load_state_dict(dict, false); }) == expected);
  CHECK(bit_equal(snapshot(target), before));
  // Strict: the key lists come first, then the size mismatches.
  dict.insert("extra", xt::xarray<double>{1});
  CHECK(message_of([&] { target.load_state_dict(dict); }) ==
        "xtgrad::Module::load_state_dict: Error(s) in loading state_dict for FeedForward:\n"
        "\tUnexpected key(s) in state_dict: \"extra\". \n" +
            expected.substr(expected.find("\tsize mismatch")));
  CHECK(bit_equal(snapshot(target), before));
}

TEST_CASE("state dict: a long list of keys is cut at 50 names") {
  Linear<double> target(2, 3);
  TensorDict<double> dict = target.state_dict();
  for (int i = 0; i < 60; ++i) dict.insert("x" + std::to_string(i), xt::xarray<double>{1});
  const std::string what = message_of([&] { target.load_state_dict(dict); });
  CHECK(what.find("\"x49\", ... (60 in all). ") != std::string::npos);
  CHECK(what.find("\"x50\"") == std::string::npos);
  CHECK(target.load_state_dict(dict, false).unexpected_keys.size() == 60);
}

TEST_CASE("state dict: a TensorMap converts dtypes as torch's copy_ does") {
  // float64 -> float32 rounds to nearest (0.1 is not a float; 1 + 2^-30 rounds to 1).
  const double tiny = std::ldexp(1.0, -30);
  const xt::xarray<double> weight = {{0.1, 1.0 + tiny, -2.5}, {1e-40, 3.4e38, -0.0}};
  const xt::xarray<double> bias = {0.3, -7.0};
  TensorMap tensors = {{"weight", StoredTensor(weight)}, {"bias", StoredTensor(bias)}};
  Linear<float> f(3, 2);
  f.load_state_dict(tensors);
  const std::vector<float> want = {0.1f, 1.0f, -2.5f, static_cast<float>(1e-40), 3.4e38f, -0.0f};
  for (std::size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    CHECK(std::memcmp(&f.weight.value.data()[i], &want[i], sizeof(float)) == 0);
  }
  CHECK(f.bias.value(0) == 0.3f);
  CHECK(f.bias.value(1) == -7.0f);
  // F32, F16 and BF16 (read as float) -> float64 is exact.
  const xt::xarray<float> w32 = {{0.1f, 1.5f, -2.0f}, {65504.0f, 0.00006103515625f, 3.0f}};
  tensors = {{"weight", StoredTensor(w32, SafetensorsDtype::F16)},
             {"bias", StoredTensor(xt::xarray<float>{0.1f, -0.25f}, SafetensorsDtype::BF16)}};
  Linear<double> d(3, 2);
  d.load_state_dict(tensors);
  CHECK(d.weight.value(0, 0) == static_cast<double>(0.1f));
  CHECK(d.weight.value(1, 0) == 65504.0);
  CHECK(d.weight.value(1, 1) == 0.00006103515625);
  CHECK(d.bias.value(0) == static_cast<double>(0.1f));
  CHECK(d.bias.value(1) == -0.25);
  // A mismatch in a TensorMap is refused as for a TensorDict, naming the key.
  tensors = {{"weight", StoredTensor(xt::xarray<float>(xt::zeros<float>({3, 2})))}};
  const auto before = snapshot(d);
  CHECK(message_of([&] { d.load_state_dict(tensors, false); }) ==
        "xtgrad::Module::load_state_dict: Error(s) in loading state_dict for Linear:\n"
        "\tsize mismatch for weight: copying a param with shape [3, 2] from checkpoint, the shape "
        "in current model is [2, 3].");
  CHECK(bit_equal(snapshot(d), before));
}

TEST_CASE_TEMPLATE("state dict: load_state_dict(read_safetensors(path)) loads a file", T, float,
                   double) {
  TempDir dir("state-dict");
  Generator g1(3), g2(4);
  GatedFFN<T> a(4, 8, 3, Activation::silu, GatedBias::all(), g1);
  GatedFFN<T> b(4, 8, 3, Activation::silu, GatedBias::all(), g2);
  write_safetensors(dir / "m.safetensors", to_tensor_map(a), {{"format", "pt"}});
  b.load_state_dict(read_safetensors(dir / "m.safetensors"));
  CHECK(bit_equal(snapshot(a), snapshot(b)));
  // In the other dtype (converted exactly from float to double; rounded the other way).
  using Other = std::conditional_t<std::is_same_v<T, float>, double, float>;
  GatedFFN<Other> c(4, 8, 3, Activation::silu, GatedBias::all());
  c.load_state_dict(read_safetensors(dir / "m.safetensors"));
  CHECK(c.w_up.value(1, 2) == static_cast<Other>(a.w_up.value(1, 2)));
  CHECK(c.b_down.value(2) == static_cast<Other>(a.b_down.value(2)));
}

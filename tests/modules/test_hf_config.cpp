// The activation of a Hugging Face config.json (modules/pretrained/hf_config.hpp) and
// the MLP loaders that check a module's activation against it: GPT-2 needs
// gelu_tanh, and a FeedForward with its default exact GELU is refused.

#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <xtgrad/modules/feed_forward.hpp>
#include <xtgrad/modules/gated_ffn.hpp>
#include <xtgrad/modules/pretrained/hf_config.hpp>
#include <xtgrad/modules/pretrained/hf_mlp.hpp>

#include "support/fixtures/hf_mlp_fixtures.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fs = std::filesystem;
namespace fx = xtgrad::fixtures::hf_mlp;

namespace {

fs::path fixture_file(const std::string& model) {
  return fs::path(XTGRAD_SOURCE_DIR) / "tests" / "support" / "fixtures" / "hf_mlp" /
         (model + "_mlp_f64.safetensors");
}

// A config.json with `json` in `dir`.
fs::path config(const TempDir& dir, const std::string& name, const std::string& json) {
  const fs::path path = dir / (name + ".json");
  write_file(path, json);
  return path;
}

FeedForward<double> gpt2(Activation activation) {
  return FeedForward<double>(fx::n_embd, 4 * fx::n_embd, activation);
}

GatedFFN<double> llama(Activation activation) {
  return GatedFFN<double>(fx::hidden, fx::intermediate, fx::hidden, activation);
}

}  // namespace

TEST_CASE("hf_config: Hugging Face activation names map to xtgrad's activations") {
  const std::vector<std::pair<std::string, Activation>> names = {
      {"gelu_new", Activation::gelu_tanh}, {"gelu_pytorch_tanh", Activation::gelu_tanh},
      {"gelu", Activation::gelu},          {"quick_gelu", Activation::gelu_sigmoid},
      {"relu", Activation::relu},          {"silu", Activation::silu},
      {"swish", Activation::silu}};
  for (const auto& [name, activation] : names) CHECK(hf_activation(name) == activation);
  CHECK_THROWS_WITH_PARTS(hf_activation("gelu_fast"), std::invalid_argument,
                          {"xtgrad::hf_activation: the Hugging Face activation 'gelu_fast' is "
                           "not one xtgrad computes, expected one of gelu_new, gelu_pytorch_tanh"});
  CHECK_THROWS_WITH_PARTS(hf_activation("GELU"), std::invalid_argument, {"'GELU'"});
}

TEST_CASE("hf_config: GPT-2's activation_function is checked against the FeedForward's") {
  TempDir dir("hf-config");
  const fs::path gelu_new =
      config(dir, "gelu_new", R"({"model_type": "gpt2", "activation_function": "gelu_new"})");
  // A FeedForward built with its default (the exact GELU) would compute
  // slightly different outputs: refused, naming both, before anything changes.
  FeedForward<double> exact = gpt2(Activation::gelu);
  const xt::xarray<double> w1 = exact.w1.weight.value;
  CHECK_THROWS_WITH_PARTS(
      load_gpt2_mlp(exact, fixture_file("gpt2"), gpt2_mlp_prefix(1), gelu_new),
      std::invalid_argument,
      {"xtgrad::load_gpt2_mlp: the FeedForward's activation is gelu, but config '",
       "gelu_new.json' (\"activation_function\") asks for gelu_tanh: construct the FeedForward "
       "with Activation::gelu_tanh"});
  CHECK(exact.w1.weight.value == w1);
  // The tanh one loads, from a file and from a state dict, and equals the
  // load without a config.
  FeedForward<double> plain = gpt2(Activation::gelu_tanh);
  load_gpt2_mlp(plain, fixture_file("gpt2"), gpt2_mlp_prefix(1));
  for (const char* json :
       {R"({"activation_function": "gelu_new"})", R"({"activation_function": "gelu_pytorch_tanh"})",
        R"({"model_type": "gpt2", "n_embd": 8})", R"({})"}) {
    INFO(json);
    const fs::path path = config(dir, "tanh", json);
    FeedForward<double> from_file = gpt2(Activation::gelu_tanh);
    load_gpt2_mlp(from_file, fixture_file("gpt2"), gpt2_mlp_prefix(1), path);
    CHECK(from_file.w1.weight.value == plain.w1.weight.value);
    FeedForward<double> from_map = gpt2(Activation::gelu_tanh);
    load_gpt2_mlp(from_map, read_safetensors(fixture_file("gpt2")).tensors, "h.1.mlp", path);
    CHECK(from_map.w2.bias.value == plain.w2.bias.value);
    fs::remove(path);
  }
  // "gelu" is the exact one: then the tanh module is the wrong one.
  const fs::path exact_config = config(dir, "exact", R"({"activation_function": "gelu"})");
  load_gpt2_mlp(exact, fixture_file("gpt2"), gpt2_mlp_prefix(1), exact_config);
  CHECK(exact.w1.weight.value == plain.w1.weight.value);
  FeedForward<double> tanh = gpt2(Activation::gelu_tanh);
  CHECK_THROWS_WITH_PARTS(load_gpt2_mlp(tanh, fixture_file("gpt2"), "h.1.mlp", exact_config),
                          std::invalid_argument,
                          {"activation is gelu_tanh", "asks for gelu:", "Activation::gelu"});
  FeedForward<double> relu = gpt2(Activation::relu);
  load_gpt2_mlp(relu, fixture_file("gpt2"), "h.1.mlp",
                config(dir, "relu", R"({"activation_function": "relu"})"));
  CHECK(relu.w1.weight.value == plain.w1.weight.value);
}

TEST_CASE("hf_config: LLaMA's hidden_act is checked against the GatedFFN's") {
  TempDir dir("hf-config");
  GatedFFN<double> plain = llama(Activation::silu);
  load_llama_mlp(plain, fixture_file("llama"), llama_mlp_prefix(1));
  for (const char* json : {R"({"model_type": "llama", "hidden_act": "silu"})",
                           R"({"hidden_act": "swish"})", R"({"model_type": "llama"})"}) {
    INFO(json);
    const fs::path path = config(dir, "silu", json);
    GatedFFN<double> ffn = llama(Activation::silu);
    load_llama_mlp(ffn, fixture_file("llama"), llama_mlp_prefix(1), path);
    CHECK(ffn.w_down.value == plain.w_down.value);
    GatedFFN<double> from_map = llama(Activation::silu);
    load_llama_mlp(from_map, read_safetensors(fixture_file("llama")).tensors, "model.layers.1.mlp",
                   path);
    CHECK(from_map.w_gate.value == plain.w_gate.value);
    fs::remove(path);
  }
  GatedFFN<double> gelu = llama(Activation::gelu);
  const xt::xarray<double> before = gelu.w_up.value;
  CHECK_THROWS_WITH_PARTS(
      load_llama_mlp(gelu, fixture_file("llama"), llama_mlp_prefix(1),
                     config(dir, "llama", R"({"hidden_act": "silu"})")),
      std::invalid_argument,
      {"xtgrad::load_llama_mlp: the GatedFFN's activation is gelu, but config '",
       "(\"hidden_act\") asks for silu: construct the GatedFFN with Activation::silu"});
  CHECK(gelu.w_up.value == before);
}

TEST_CASE("hf_config: a config.json that names no usable activation is refused") {
  TempDir dir("hf-config");
  FeedForward<double> ffn = gpt2(Activation::gelu_tanh);
  const xt::xarray<double> before = ffn.w1.weight.value;
  const std::vector<std::pair<std::string, std::vector<std::string>>> bad = {
      {R"({"activation_function": "gelu_fast"})",
       {"json': \"activation_function\": the Hugging Face activation 'gelu_fast' is not "
        "one xtgrad computes"}},
      {R"({"activation_function": 3})",
       {"\"activation_function\" is number, expected a string such as \"gelu_new\""}},
      {R"({"activation_function": null})", {"is null, expected a string"}},
      {R"({"model_type": "llama", "hidden_act": "silu"})",
       {"has no \"activation_function\" and its model_type is \"llama\", not \"gpt2\""}},
      {R"(["gelu_new"])", {"is not a JSON object, expected a Hugging Face config.json"}},
      {R"({"activation_function": "gelu_new")", {"is not valid JSON"}},
      {std::string("{\"activation_function\": \"gelu\"}\0{}", 34),
       {"byte 31 is a NUL byte, expected JSON text"}},
  };
  for (std::size_t i = 0; i < bad.size(); ++i) {
    INFO(bad[i].first);
    const fs::path path = config(dir, "bad" + std::to_string(i), bad[i].first);
    std::vector<std::string> parts = {"xtgrad::load_gpt2_mlp: ",
                                      "bad" + std::to_string(i) + ".json"};
    parts.insert(parts.end(), bad[i].second.begin(), bad[i].second.end());
    CHECK_THROWS_WITH_PARTS(load_gpt2_mlp(ffn, fixture_file("gpt2"), "h.1.mlp", path),
                            std::invalid_argument, (parts));
  }
  CHECK_THROWS_WITH_PARTS(load_gpt2_mlp(ffn, fixture_file("gpt2"), "h.1.mlp", dir / "absent.json"),
                          std::runtime_error, {"load_gpt2_mlp", "absent.json", "No such file"});
  CHECK(ffn.w1.weight.value == before);
}

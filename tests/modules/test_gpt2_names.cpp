// The gpt2-style GPT under GPT-2's own names and layouts: a Hugging Face
// GPT2LMHeadModel state dict (tests/support/fixtures/make_transformer.py)
// loads with load_state_dict after stripping "transformer.", and a state dict
// with the MLP's former names (mlp.w1 / mlp.w2, nn.Linear [out, in]) is
// refused with a message that says how to convert it, and converts.

#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include <xtensor/xmanipulation.hpp>

#include <xtgrad/modules/gpt.hpp>
#include <xtgrad/modules/gpt2_mlp.hpp>
#include <xtgrad/modules/pretrained/hf_gpt2.hpp>

#include "support/fixture_files.hpp"
#include "support/fixtures/fixture_array.hpp"
#include "support/fixtures/transformer_fixtures.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fs = std::filesystem;
namespace fx = xtgrad::fixtures::transformer;

namespace {

// The GPT-2 file's state dict as a user has it from torch: names without
// "transformer.", float64.
TensorDict<double> hf_state_dict() {
  const std::string prefix = "transformer.";
  TensorDict<double> out;
  for (const auto& [name, t] :
       read_safetensors(transformer_fixture_file("gpt2_tiny.safetensors")).tensors) {
    const std::string key =
        name.compare(0, prefix.size(), prefix) == 0 ? name.substr(prefix.size()) : name;
    out.insert(key, xt::xarray<double>(xt::cast<double>(t.get<float>())));
  }
  return out;
}

// `state` with the gpt2 MLP under the names and layouts GPT used before.
TensorDict<double> with_former_names(const TensorDict<double>& state) {
  TensorDict<double> out;
  for (const auto& [name, value] : state) {
    std::string key = name;
    for (const auto& [now, before] : {std::pair<std::string, std::string>{"c_fc", "w1"},
                                      std::pair<std::string, std::string>{"c_proj", "w2"}}) {
      const std::string part = ".mlp." + now + ".";
      const std::size_t at = key.find(part);
      if (at != std::string::npos) key.replace(at, part.size(), ".mlp." + before + ".");
    }
    const bool transpose = key != name && value.dimension() == 2;
    out.insert(key, transpose ? xt::xarray<double>(xt::transpose(value)) : value);
  }
  return out;
}

}  // namespace

TEST_CASE("GPT names: a Hugging Face GPT-2 state dict loads with load_state_dict") {
  GPT<double> model(gpt2_config_from_json(transformer_fixture_file("gpt2_tiny_config.json")));
  const TensorDict<double> state = hf_state_dict();
  // Not strict: the file also holds HF's causal-mask buffers, which are not parameters.
  const IncompatibleKeys keys = model.load_state_dict(state, false);
  CHECK(keys.missing_keys.empty());
  for (const std::string& name : keys.unexpected_keys) {
    INFO(name);
    CHECK((name.find(".attn.bias") != std::string::npos ||
           name.find(".attn.masked_bias") != std::string::npos));
  }
  CHECK(keys.unexpected_keys.size() == 4);  // two buffers in each of the two blocks
  const xt::xarray<double> ids_logits =
      model.infer(fixture_array<std::int64_t>(fx::gpt2_ids_shape, fx::gpt2_ids));
  check_close(ids_logits, fixture_array<double>(fx::gpt2_logits_shape, fx::gpt2_logits_f64), 1e-12,
              1e-12);
  // export_gpt2 is the state dict: GPT-2's names and layouts
  const TensorDict<double> exported = export_gpt2(model);
  CHECK(exported.keys() == model.state_dict().keys());
  CHECK(std::get<GPT2MLP<double>>(model.h[0].mlp).c_fc.weight.value.shape() == Shape{32, 128});
}

TEST_CASE(
    "GPT names: a state dict with the former MLP names is refused, saying how - it converts") {
  GPT<double> model(gpt2_config_from_json(transformer_fixture_file("gpt2_tiny_config.json")));
  GPT<double> reference(gpt2_config_from_json(transformer_fixture_file("gpt2_tiny_config.json")));
  reference.load_state_dict(hf_state_dict(), false);
  const TensorDict<double> current = reference.state_dict();
  const TensorDict<double> former = with_former_names(current);
  CHECK(former.keys() != current.keys());
  const TensorDict<double> before = model.state_dict();
  CHECK_THROWS_WITH_PARTS(
      model.load_state_dict(former), std::invalid_argument,
      {"Missing key(s) in state_dict: \"h.0.mlp.c_fc.weight\"", "Unexpected key(s)",
       "\"h.0.mlp.w1.weight\" is the gpt2-style MLP's former name (nn.Linear [out, in]); it is "
       "now \"h.0.mlp.c_fc.weight\" (GPT-2's Conv1D [in, out]): load "
       "rename_legacy_gpt2_mlp(state) instead (modules/gpt2_mlp.hpp)."});
  CHECK(model.state_dict().keys() == before.keys());
  CHECK(model.state_dict().at("h.0.mlp.c_fc.weight") == before.at("h.0.mlp.c_fc.weight"));

  const TensorDict<double> converted = rename_legacy_gpt2_mlp(former);
  CHECK(converted.keys() == current.keys());
  model.load_state_dict(converted);
  for (const auto& entry : current) {
    const std::string& name = entry.first;
    INFO(name);
    CHECK(model.state_dict().at(name) == entry.second);
  }
  // A name that only ends like the MLP's is left alone.
  TensorDict<double> other;
  other.insert("xmlp.w1.weight", xt::xarray<double>{{1.0, 2.0}});
  CHECK(rename_legacy_gpt2_mlp(other).keys() == std::vector<std::string>{"xmlp.w1.weight"});
}

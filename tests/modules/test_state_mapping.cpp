// Renaming state dicts (modules/state_mapping.hpp): a PyTorch model's
// nn.Sequential MLPs (tests/support/fixtures/make_state_mapping.py) load into
// FeedForward and Mlp and give PyTorch's outputs; the helpers on TensorDict
// and TensorMap, and what they refuse.

#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <xtgrad/modules/feed_forward.hpp>
#include <xtgrad/modules/mlp.hpp>
#include <xtgrad/modules/safetensors_checkpoint.hpp>
#include <xtgrad/modules/state_mapping.hpp>

#include "support/fixtures/fixture_array.hpp"
#include "support/fixtures/state_mapping_fixtures.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fs = std::filesystem;
namespace fx = xtgrad::fixtures::state_mapping;

namespace {

TensorMap sequential_file() {
  return read_safetensors(fs::path(XTGRAD_SOURCE_DIR) / "tests" / "support" / "fixtures" /
                          "state_mapping" / "sequential.safetensors")
      .tensors;
}

std::vector<std::string> names_of(const TensorMap& map) {
  std::vector<std::string> out;
  for (const auto& entry : map) out.push_back(entry.first);
  return out;
}

}  // namespace

TEST_CASE_TEMPLATE(
    "state_mapping: nn.Sequential MLPs saved by PyTorch load into FeedForward and Mlp", T, float,
    double) {
  const TensorMap file = sequential_file();
  const xt::xarray<T> x = from_fixture<T>(fx::x, {3, 4});
  const double tol = std::is_same_v<T, float> ? 2e-6 : 1e-13;
  // nn.Sequential(Linear(4, 6), GELU(), Linear(6, 4)) -> FeedForward(4, 6, gelu).
  const TensorMap ffn_state = strip_prefix(file, "ffn.");
  CHECK(names_of(ffn_state) ==
        std::vector<std::string>{"0.bias", "0.weight", "2.bias", "2.weight"});
  FeedForward<T> ffn(4, 6, Activation::gelu);
  const IncompatibleKeys keys =
      ffn.load_state_dict(rename_prefixes(ffn_state, sequential_to_feed_forward()));
  CHECK(keys.missing_keys.empty());
  CHECK(keys.unexpected_keys.empty());
  check_close(ffn.infer(x), from_fixture<double>(fx::ffn_y, {3, 4}), tol, tol);
  // The same MLP as an Mlp(4, {6}, 4): Linears "0" and "3".
  Mlp<T> mlp(4, {6}, 4, MlpOptions{Activation::gelu});
  mlp.load_state_dict(rename_prefixes(ffn_state, sequential_to_mlp(2)));
  check_close(mlp.infer(x), from_fixture<double>(fx::ffn_y, {3, 4}), tol, tol);
  // Three Linears: "0", "2", "4" -> "0", "3", "6".
  Mlp<T> deep(4, {6, 5}, 3);
  deep.load_state_dict(rename_prefixes(strip_prefix(file, "deep."), sequential_to_mlp(3)));
  check_close(deep.infer(x), from_fixture<double>(fx::deep_y, {3, 3}), tol, tol);
  // Without the renaming, torch's names are not the module's.
  FeedForward<T> unmapped(4, 6);
  CHECK_THROWS_WITH_PARTS(unmapped.load_state_dict(ffn_state), std::invalid_argument,
                          {"Missing key(s) in state_dict: \"w1.weight\"",
                           "Unexpected key(s) in state_dict: \"0.bias\""});
}

TEST_CASE("state_mapping: the helpers on a TensorDict keep its order and copy its values") {
  FeedForward<double> ffn(3, 5);
  const TensorDict<double> state = ffn.state_dict();
  const TensorDict<double> model = add_prefix(state, "encoder.ffn.");
  CHECK(model.keys() == std::vector<std::string>{"encoder.ffn.w1.weight", "encoder.ffn.w1.bias",
                                                 "encoder.ffn.w2.weight", "encoder.ffn.w2.bias"});
  CHECK(model.at("encoder.ffn.w2.bias") == state.at("w2.bias"));
  const TensorDict<double> back = strip_prefix(model, "encoder.ffn.");
  CHECK(back.keys() == state.keys());
  // To torch's nn.Sequential names and back.
  const TensorDict<double> torch_names =
      rename_keys(state, std::map<std::string, std::string>{{"w1.weight", "0.weight"},
                                                            {"w1.bias", "0.bias"},
                                                            {"w2.weight", "2.weight"},
                                                            {"w2.bias", "2.bias"}});
  CHECK(torch_names.keys() == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  Generator generator(7);
  FeedForward<double> other(3, 5, Activation::gelu, generator);
  CHECK_FALSE(other.w1.weight.value == ffn.w1.weight.value);
  other.load_state_dict(rename_prefixes(torch_names, sequential_to_feed_forward()));
  CHECK(other.w1.weight.value == ffn.w1.weight.value);
  CHECK(other.w2.bias.value == ffn.w2.bias.value);
  // A function: every name through it; names no rule matches are kept.
  const TensorDict<double> upper = rename_keys(
      state, std::function<std::string(const std::string&)>(
                 [](const std::string& name) { return name == "w1.bias" ? "b1" : name; }));
  CHECK(upper.keys() == std::vector<std::string>{"w1.weight", "b1", "w2.weight", "w2.bias"});
  const TensorDict<double> partly = rename_prefixes(state, {{"w2.", "second."}});
  CHECK(partly.keys() ==
        std::vector<std::string>{"w1.weight", "w1.bias", "second.weight", "second.bias"});
  CHECK(sequential_to_mlp(3) == PrefixRules{{"0.", "0."}, {"2.", "3."}, {"4.", "6."}});
}

TEST_CASE("state_mapping: renamings that would lose or merge entries are refused") {
  FeedForward<double> ffn(3, 5);
  const TensorDict<double> state = ffn.state_dict();
  const TensorMap map = to_tensor_map(ffn);
  CHECK_THROWS_WITH_PARTS(strip_prefix(state, "encoder."), std::invalid_argument,
                          {"xtgrad::strip_prefix: argument 'prefix' 'encoder.' starts no name of "
                           "the dict, expected the prefix of some (it has 4 entries: "
                           "'w1.weight', 'w1.bias', 'w2.weight', ...)"});
  CHECK_THROWS_WITH_PARTS(strip_prefix(map, "w1.weight"), std::invalid_argument,
                          {"xtgrad::strip_prefix: renames 'w1.weight' to an empty name"});
  CHECK_THROWS_WITH_PARTS(
      rename_keys(state, std::map<std::string, std::string>{{"w1.weight", "w2.weight"}}),
      std::invalid_argument,
      {"xtgrad::rename_keys: renames both", "'w1.weight' and 'w2.weight' to 'w2.weight'"});
  CHECK_THROWS_WITH_PARTS(
      rename_keys(map, std::map<std::string, std::string>{{"w3.weight", "x"}}),
      std::invalid_argument,
      {"xtgrad::rename_keys: argument 'names' renames 'w3.weight', which is not in the dict"});
  CHECK_THROWS_WITH_PARTS(rename_prefixes(map, {{"w1.", "w2."}}), std::invalid_argument,
                          {"xtgrad::rename_prefixes: renames both 'w1.bias' and 'w2.bias' to "
                           "'w2.bias'"});
  CHECK_THROWS_WITH_PARTS(rename_keys(map, std::function<std::string(const std::string&)>()),
                          std::invalid_argument,
                          {"xtgrad::rename_keys: argument 'rename' is empty"});
  CHECK_THROWS_WITH_PARTS(sequential_to_mlp(0), std::invalid_argument,
                          {"xtgrad::sequential_to_mlp: argument 'num_linears' is 0"});
}

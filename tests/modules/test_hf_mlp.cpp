// Loading the MLPs of Hugging Face LLaMA and GPT-2 layers saved by PyTorch
// (tests/support/fixtures/make_hf_mlp.py): xtgrad's outputs equal PyTorch's
// on the same input, and what xtgrad saves of them loads in Python.

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <type_traits>
#include <vector>

#include <xtensor/xmanipulation.hpp>
#include <xtgrad/modules/feed_forward.hpp>
#include <xtgrad/modules/gated_ffn.hpp>
#include <xtgrad/modules/pretrained/hf_mlp.hpp>
#include <xtgrad/modules/safetensors_checkpoint.hpp>

#include "support/bad_input.hpp"
#include "support/fixtures/fixture_array.hpp"
#include "support/fixtures/hf_mlp_fixtures.hpp"
#include "support/python.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fs = std::filesystem;
namespace fx = xtgrad::fixtures::hf_mlp;

namespace {

fs::path fixture(const std::string& name) {
  return fs::path(XTGRAD_SOURCE_DIR) / "tests" / "support" / "fixtures" / "hf_mlp" / name;
}

template <class T>
fs::path fixture_file(const std::string& model) {
  return fixture(model + (std::is_same_v<T, float> ? "_mlp_f32" : "_mlp_f64") + ".safetensors");
}

// PyTorch computed the float32 outputs in float32: only the summation order differs.
template <class T>
double tol() {
  return std::is_same_v<T, float> ? 2e-6 : 1e-13;
}

template <class T>
GatedFFN<T> llama_module() {
  return GatedFFN<T>(fx::hidden, fx::intermediate, fx::hidden, Activation::silu);
}

template <class T>
FeedForward<T> gpt2_module() {
  return FeedForward<T>(fx::n_embd, 4 * fx::n_embd, Activation::gelu_tanh);
}

template <class T>
State parameters_of(const Module<T>& module) {
  State s;
  for (const auto& [name, p] : module.named_parameters()) {
    s.add(name);
    s.add(*p);
  }
  return s;
}

}  // namespace

TEST_CASE_TEMPLATE("hf_mlp: a LLaMA MLP saved by PyTorch gives PyTorch's outputs", T, float,
                   double) {
  const xt::xarray<T> x = fixture_array<T>(fx::x_shape, fx::x);
  const auto& y = std::is_same_v<T, float> ? fx::llama_y_f32 : fx::llama_y_f64;
  const xt::xarray<double> expected = fixture_array<double>(fx::x_shape, y);
  // From the file, reading only layer 1's tensors.
  GatedFFN<T> from_file = llama_module<T>();
  load_llama_mlp(from_file, fixture_file<T>("llama"), llama_mlp_prefix(1));
  check_close(from_file.infer(x), expected, tol<T>(), tol<T>());
  // From a state dict, with the prefix's trailing '.'.
  const TensorMap tensors = read_safetensors(fixture_file<T>("llama")).tensors;
  GatedFFN<T> from_map = llama_module<T>();
  load_llama_mlp(from_map, tensors, "model.layers.1.mlp.");
  check_close(from_map.infer(x), expected, tol<T>(), tol<T>());
  // The layout: w_up [d_in, d_hidden] is nn.Linear's up_proj.weight [d_hidden, d_in] transposed.
  const xt::xarray<T> up =
      from_fixture<T>(fx::llama_up_proj_weight, {fx::intermediate, fx::hidden});
  CHECK(from_map.w_up.value == xt::xarray<T>(xt::transpose(up)));
  // Layer 0 is another MLP: other outputs.
  GatedFFN<T> layer0 = llama_module<T>();
  load_llama_mlp(layer0, tensors, llama_mlp_prefix(0));
  CHECK_FALSE(xt::allclose(layer0.infer(x), from_map.infer(x)));
}

TEST_CASE_TEMPLATE("hf_mlp: a GPT-2 MLP saved by PyTorch gives PyTorch's outputs", T, float,
                   double) {
  const xt::xarray<T> x = fixture_array<T>(fx::x_shape, fx::x);
  const auto& y = std::is_same_v<T, float> ? fx::gpt2_y_f32 : fx::gpt2_y_f64;
  const xt::xarray<double> expected = fixture_array<double>(fx::x_shape, y);
  FeedForward<T> from_file = gpt2_module<T>();
  load_gpt2_mlp(from_file, fixture_file<T>("gpt2"), gpt2_mlp_prefix(1));
  check_close(from_file.infer(x), expected, tol<T>(), tol<T>());
  FeedForward<T> from_map = gpt2_module<T>();
  load_gpt2_mlp(from_map, read_safetensors(fixture_file<T>("gpt2")).tensors, "h.1.mlp");
  check_close(from_map.infer(x), expected, tol<T>(), tol<T>());
  // Conv1D stores c_fc.weight [in, out]; Linear's w1.weight is [out, in].
  const xt::xarray<T> c_fc = from_fixture<T>(fx::gpt2_c_fc_weight, {fx::n_embd, 4 * fx::n_embd});
  CHECK(from_map.w1.weight.value == xt::xarray<T>(xt::transpose(c_fc)));
  // The exact GELU is another function: GPT-2's outputs need the tanh one.
  FeedForward<T> exact(fx::n_embd, 4 * fx::n_embd, Activation::gelu);
  load_gpt2_mlp(exact, fixture_file<T>("gpt2"), gpt2_mlp_prefix(1));
  CHECK_FALSE(xt::allclose(exact.infer(x), expected, 1e-7, 1e-7));
}

TEST_CASE("hf_mlp: biases of a LLaMA MLP with mlp_bias load into the GatedFFN's biases") {
  TensorMap tensors = read_safetensors(fixture_file<double>("llama")).tensors;
  const std::string p = llama_mlp_prefix(1) + ".";
  tensors.emplace(p + "up_proj.bias", StoredTensor(random_array<double>({fx::intermediate}, 1)));
  tensors.emplace(p + "gate_proj.bias", StoredTensor(random_array<double>({fx::intermediate}, 2)));
  tensors.emplace(p + "down_proj.bias", StoredTensor(random_array<double>({fx::hidden}, 3)));
  GatedFFN<double> ffn(fx::hidden, fx::intermediate, fx::hidden, Activation::silu,
                       GatedBias::all());
  load_llama_mlp(ffn, tensors, llama_mlp_prefix(1));
  CHECK(ffn.b_up.value == random_array<double>({fx::intermediate}, 1));
  CHECK(ffn.b_gate.value == random_array<double>({fx::intermediate}, 2));
  CHECK(ffn.b_down.value == random_array<double>({fx::hidden}, 3));
  CHECK(llama_mlp_prefix(7) == "model.layers.7.mlp");
  CHECK(gpt2_mlp_prefix(11) == "h.11.mlp");
}

TEST_CASE(
    "hf_mlp: a checkpoint that does not fit is refused, naming the tensor, and changes "
    "nothing") {
  const TensorMap llama = read_safetensors(fixture_file<double>("llama")).tensors;
  const TensorMap gpt2 = read_safetensors(fixture_file<double>("gpt2")).tensors;
  TensorMap with_bias = llama;
  with_bias.emplace("model.layers.1.mlp.gate_proj.bias",
                    StoredTensor(xt::xarray<double>(xt::zeros<double>({fx::intermediate}))));
  GatedFFN<double> gated = llama_module<double>();
  GatedFFN<double> wide(fx::hidden, fx::intermediate + 1, fx::hidden);
  GatedFFN<double> biased(fx::hidden, fx::intermediate, fx::hidden, Activation::silu,
                          GatedBias{false, false, true});
  FeedForward<double> ff = gpt2_module<double>();
  FeedForward<double> narrow(fx::n_embd, 3 * fx::n_embd, Activation::gelu_tanh);
  const std::vector<std::pair<const Module<double>*, State>> before = {
      {&gated, parameters_of(gated)},
      {&wide, parameters_of(wide)},
      {&biased, parameters_of(biased)},
      {&ff, parameters_of(ff)},
      {&narrow, parameters_of(narrow)}};

  CHECK_THROWS_WITH_PARTS(load_llama_mlp(wide, llama, llama_mlp_prefix(1)), std::invalid_argument,
                          {"load_llama_mlp", "'model.layers.1.mlp.up_proj.weight'",
                           "has shape [12, 8]", "expected [13, 8]", "[out, in]"});
  CHECK_THROWS_WITH_PARTS(load_llama_mlp(gated, llama, llama_mlp_prefix(2)), std::invalid_argument,
                          {"load_llama_mlp",
                           "no tensor under 'model.layers.2.mlp.' (looking for "
                           "'model.layers.2.mlp.up_proj.weight') in the state dict"});
  CHECK_THROWS_WITH_PARTS(
      load_llama_mlp(gated, llama, "layers.1.mlp"), std::invalid_argument,
      {"no tensor under 'layers.1.mlp.'", "'model.layers.0.mlp', 'model.layers.1.mlp' (2 in all)"});
  CHECK_THROWS_WITH_PARTS(
      load_llama_mlp(gated, with_bias, llama_mlp_prefix(1)), std::invalid_argument,
      {"'model.layers.1.mlp.gate_proj.bias' is in the state dict", "no b_gate"});
  CHECK_THROWS_WITH_PARTS(load_llama_mlp(biased, llama, llama_mlp_prefix(1)), std::invalid_argument,
                          {"no tensor 'model.layers.1.mlp.down_proj.bias'"});
  CHECK_THROWS_WITH_PARTS(load_gpt2_mlp(narrow, gpt2, gpt2_mlp_prefix(1)), std::invalid_argument,
                          {"load_gpt2_mlp", "'h.1.mlp.c_fc.weight'", "has shape [8, 32]",
                           "expected [8, 24]", "Conv1D's [in, out]"});
  CHECK_THROWS_WITH_PARTS(load_gpt2_mlp(ff, llama, gpt2_mlp_prefix(1)), std::invalid_argument,
                          {"load_gpt2_mlp", "no tensor under 'h.1.mlp.'",
                           "no name ending in '.c_fc.weight', so no GPT-2 MLP layer, among its 7 "
                           "tensors: 'model.layers.0.mlp.down_proj.weight'"});
  CHECK_THROWS_WITH_PARTS(load_gpt2_mlp(ff, fixture("absent.safetensors"), "h.1.mlp"),
                          std::runtime_error, {"read_safetensors", "absent.safetensors"});
  // c_proj.bias is the last tensor checked: the weights before it are not assigned either.
  TensorMap no_bias = gpt2;
  no_bias.erase("h.1.mlp.c_proj.bias");
  CHECK_THROWS_WITH_PARTS(load_gpt2_mlp(ff, no_bias, gpt2_mlp_prefix(1)), std::invalid_argument,
                          {"no tensor 'h.1.mlp.c_proj.bias' in the state dict; under 'h.1.mlp.' it "
                           "has 'h.1.mlp.c_fc.bias', 'h.1.mlp.c_fc.weight', "
                           "'h.1.mlp.c_proj.weight' (3 in all)"});
  for (const auto& [module, state] : before) CHECK(parameters_of(*module) == state);
}

TEST_CASE(
    "hf_mlp: xtgrad's safetensors of the loaded MLPs load in Python with the same names, "
    "shapes and values") {
  TempDir dir;
  TensorMap all;
  const auto add = [&all](const std::string& prefix, const TensorMap& tensors) {
    for (const auto& [name, tensor] : tensors) all.emplace(prefix + name, tensor);
  };
  GatedFFN<double> llama = llama_module<double>();
  load_llama_mlp(llama, fixture_file<double>("llama"), llama_mlp_prefix(1));
  FeedForward<double> gpt2 = gpt2_module<double>();
  load_gpt2_mlp(gpt2, fixture_file<double>("gpt2"), gpt2_mlp_prefix(1));
  GatedFFN<float> llama_f32 = llama_module<float>();
  load_llama_mlp(llama_f32, fixture_file<float>("llama"), llama_mlp_prefix(1));
  FeedForward<float> gpt2_f32 = gpt2_module<float>();
  load_gpt2_mlp(gpt2_f32, fixture_file<float>("gpt2"), gpt2_mlp_prefix(1));
  add("llama.", to_tensor_map(llama));
  add("gpt2.", to_tensor_map(gpt2));
  add("llama_f32.", to_tensor_map(llama_f32));
  add("gpt2_f32.", to_tensor_map(gpt2_f32));
  const fs::path written = dir / "xtgrad_mlps.safetensors";
  write_safetensors(written, all, {{"source", "xtgrad"}});
  // The checked-in copy, which check_xtgrad_safetensors.py verifies, is what the writer writes.
  CHECK(read_file(written) == read_file(fixture("xtgrad_mlps.safetensors")));

  const std::string python = python_with_numpy();
  if (python.empty()) {
    MESSAGE("SKIPPED: no python3 with numpy (tried /usr/bin/python3 and python3)");
    return;
  }
  const fs::path script = fs::path(XTGRAD_SOURCE_DIR) / "tests" / "support" / "fixtures" /
                          "check_xtgrad_safetensors.py";
  const std::string command = python + " '" + script.string() + "' '" + written.string() + "'";
  CHECK(std::system(command.c_str()) == 0);
}

TEST_CASE("hf_mlp: a layer that is not there is refused naming the layers that are") {
  // The path overloads read only the layer's tensors, but name the file's layers.
  GatedFFN<double> gated = llama_module<double>();
  const State before = parameters_of(gated);
  CHECK_THROWS_WITH_PARTS(
      load_llama_mlp(gated, fixture_file<double>("llama"), llama_mlp_prefix(7)),
      std::invalid_argument,
      {"xtgrad::load_llama_mlp: no tensor under 'model.layers.7.mlp.' (looking for "
       "'model.layers.7.mlp.up_proj.weight') in file '",
       "llama_mlp_f64.safetensors'; the LLaMA MLP layers it has are 'model.layers.0.mlp', "
       "'model.layers.1.mlp' (2 in all)"});
  FeedForward<double> ff = gpt2_module<double>();
  CHECK_THROWS_WITH_PARTS(load_gpt2_mlp(ff, fixture_file<double>("gpt2"), "transformer.h.0.mlp"),
                          std::invalid_argument,
                          {"load_gpt2_mlp", "no tensor under 'transformer.h.0.mlp.'",
                           "gpt2_mlp_f64.safetensors'; the GPT-2 MLP layers it has are "
                           "'h.0.mlp', 'h.1.mlp' (2 in all)"});
  // A missing tensor of a layer that is there: the layer's names, not the layers.
  CHECK_THROWS_WITH_PARTS(
      load_llama_mlp(gated, fixture_file<double>("llama"), "model.layers.1"), std::invalid_argument,
      {"no tensor 'model.layers.1.up_proj.weight' in file '",
       "under 'model.layers.1.' it has 'model.layers.1.mlp.down_proj.weight', "
       "'model.layers.1.mlp.gate_proj.weight', 'model.layers.1.mlp.up_proj.weight' (3 in all)"});
  CHECK(parameters_of(gated) == before);
  // Many layers: in numeric order, at most six shown.
  TensorMap deep;
  for (std::size_t layer = 0; layer < 12; ++layer)
    deep.emplace(llama_mlp_prefix(layer) + ".up_proj.weight",
                 StoredTensor(xt::xarray<float>(xt::zeros<float>({1}))));
  CHECK_THROWS_WITH_PARTS(
      load_llama_mlp(gated, deep, llama_mlp_prefix(12)), std::invalid_argument,
      {"the LLaMA MLP layers it has are 'model.layers.0.mlp', 'model.layers.1.mlp', "
       "'model.layers.2.mlp', 'model.layers.3.mlp', ..., 'model.layers.11.mlp' (12 in all)"});
}

TEST_CASE("hf_mlp: dtypes convert as Module::load_state_dict converts them") {
  const xt::xarray<double> up64 =
      xt::transpose(from_fixture<double>(fx::llama_up_proj_weight, {fx::intermediate, fx::hidden}));
  // F32 into double: exactly the float values.
  const TensorMap f32 = read_safetensors(fixture_file<float>("llama")).tensors;
  const xt::xarray<float>& up32 = f32.at("model.layers.1.mlp.up_proj.weight").get<float>();
  GatedFFN<double> wide = llama_module<double>();
  load_llama_mlp(wide, fixture_file<float>("llama"), llama_mlp_prefix(1));
  CHECK(wide.w_up.value == xt::xarray<double>(xt::transpose(xt::cast<double>(up32))));
  GatedFFN<double> by_state_dict = llama_module<double>();
  by_state_dict.w_up.value = xt::zeros<double>(by_state_dict.w_up.value.shape());
  by_state_dict.load_state_dict(
      TensorMap{{"w_up", StoredTensor(xt::xarray<float>(xt::transpose(up32)))}}, false);
  CHECK(wide.w_up.value == by_state_dict.w_up.value);
  // The double module computes PyTorch's float32 outputs to float32's rounding.
  const xt::xarray<double> x = fixture_array<double>(fx::x_shape, fx::x);
  check_close(wide.infer(x), fixture_array<double>(fx::x_shape, fx::llama_y_f32), 2e-6, 2e-6);
  // F64 into float: each value rounded to the nearest float.
  GatedFFN<float> narrow = llama_module<float>();
  load_llama_mlp(narrow, read_safetensors(fixture_file<double>("llama")).tensors,
                 llama_mlp_prefix(1));
  for (std::size_t i = 0; i < up64.size(); ++i)
    CHECK(narrow.w_up.value.flat(i) == static_cast<float>(up64.flat(i)));
  FeedForward<float> gpt2 = gpt2_module<float>();
  load_gpt2_mlp(gpt2, fixture_file<double>("gpt2"), gpt2_mlp_prefix(1));
  check_close(gpt2.infer(fixture_array<float>(fx::x_shape, fx::x)),
              fixture_array<double>(fx::x_shape, fx::gpt2_y_f64), 2e-6, 2e-6);
}

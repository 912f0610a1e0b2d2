// Hugging Face GPT-2 checkpoints (tests/support/fixtures/make_transformer.py):
// one GPT2Block against PyTorch (values and gradients), a tiny
// GPT2LMHeadModel's logits from its safetensors file and config.json, the
// export back to HF names, and every refusal of the loader and config reader.

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <xtgrad/modules/gpt.hpp>
#include <xtgrad/modules/pretrained/hf_gpt2.hpp>

#include "support/bad_input.hpp"
#include "support/fixture_files.hpp"
#include "support/fixtures/fixture_array.hpp"
#include "support/fixtures/transformer_fixtures.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fs = std::filesystem;
namespace fx = xtgrad::fixtures::transformer;

namespace {

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::path(XTGRAD_BINARY_DIR) / "test_hf_gpt2_scratch";
  fs::create_directories(dir);
  fs::remove_all(dir / name);
  return dir / name;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

const TensorMap& tiny_file() {
  static const TensorMap tensors =
      read_safetensors(transformer_fixture_file("gpt2_tiny.safetensors")).tensors;
  return tensors;
}

// The fixture's tensors widened to double (F64), names optionally renamed.
TensorMap widened(const TensorMap& in, const std::string& strip = "") {
  TensorMap out;
  for (const auto& [name, t] : in) {
    const std::string key =
        name.compare(0, strip.size(), strip) == 0 ? name.substr(strip.size()) : name;
    out.emplace(key, StoredTensor(xt::xarray<double>(xt::cast<double>(t.get<float>()))));
  }
  return out;
}

Indices fixture_ids() {
  return fixture_array<std::int64_t>(fx::gpt2_ids_shape, fx::gpt2_ids);
}

template <class T>
State parameters_of(GPT<T>& model) {
  State s;
  for (const auto& [name, p] : model.named_parameters()) s.add(*p);
  return s;
}

}  // namespace

TEST_CASE("gpt2_config_from_json: the fixture's config.json") {
  const GPTConfig c = gpt2_config_from_json(transformer_fixture_file("gpt2_tiny_config.json"));
  CHECK(c.vocab_size == 50);
  CHECK(c.block_size == 16);
  CHECK(c.n_embd == 32);
  CHECK(c.n_layer == 2);
  CHECK(c.n_head == 4);
  CHECK(c.eps == 1e-5);
  CHECK(!c.ffn_hidden);
  CHECK(c.tie_embeddings);
  CHECK(c.dropout == 0.1);
  CHECK(c.style == GPTStyle::gpt2);
}

TEST_CASE("GPT2Block: xtgrad's gpt2 block equals PyTorch's, forward and every gradient") {
  const TensorMap tensors =
      read_safetensors(transformer_fixture_file("gpt2_block.safetensors")).tensors;
  TransformerBlockOptions o;
  o.n_heads = fx::block_n_head;
  TransformerBlock<double> block(fx::block_n_embd, o);
  load_gpt2_block(block, tensors, "h.0");
  Tape<double> tape;
  const Var<double> x = tape.leaf(get_tensor<double>(tensors, "x"));
  const Var<double> y = block.forward(x);
  check_close(y.value(), get_tensor<double>(tensors, "y"), 1e-12, 1e-12);
  tape.backward(y, get_tensor<double>(tensors, "dy"));
  check_close(x.grad(), get_tensor<double>(tensors, "grad.x"), 1e-10, 1e-12);
  // Parameter gradients, in HF names and layouts (Conv1D [in, out]).
  const auto& mlp = std::get<GPT2MLP<double>>(block.mlp);
  const auto grad = [&](const std::string& name) {
    return get_tensor<double>(tensors, "grad.h.0." + name);
  };
  check_close(block.attn.c_attn->weight.grad, grad("attn.c_attn.weight"), 1e-10, 1e-12);
  check_close(block.attn.c_attn->bias.grad, grad("attn.c_attn.bias"), 1e-10, 1e-12);
  check_close(block.attn.c_proj->weight.grad, grad("attn.c_proj.weight"), 1e-10, 1e-12);
  check_close(std::get<LayerNorm<double>>(block.ln_1).weight.grad, grad("ln_1.weight"), 1e-10,
              1e-12);
  check_close(std::get<LayerNorm<double>>(block.ln_2).bias.grad, grad("ln_2.bias"), 1e-10, 1e-12);
  check_close(mlp.c_fc.weight.grad, grad("mlp.c_fc.weight"), 1e-10, 1e-12);
  check_close(mlp.c_proj.weight.grad, grad("mlp.c_proj.weight"), 1e-10, 1e-12);
  check_close(mlp.c_proj.bias.grad, grad("mlp.c_proj.bias"), 1e-10, 1e-12);
}

TEST_CASE("load_gpt2: a tiny GPT2LMHeadModel file reproduces PyTorch's float32 logits") {
  GPT<float> model(gpt2_config_from_json(transformer_fixture_file("gpt2_tiny_config.json")));
  load_gpt2(model, transformer_fixture_file("gpt2_tiny.safetensors"));
  // float32 on both sides; only the summation order differs. Logits are of order 1-10.
  check_close(model.infer(fixture_ids()),
              fixture_array<double>(fx::gpt2_logits_shape, fx::gpt2_logits_f32), 2e-5, 2e-5);
}

TEST_CASE("load_gpt2: the same values in double, with or without the 'transformer.' prefix") {
  const xt::xarray<double> expected =
      fixture_array<double>(fx::gpt2_logits_shape, fx::gpt2_logits_f64);
  for (const std::string strip : {"", "transformer."}) {
    INFO("stripped: '" << strip << "'");
    GPT<double> model(gpt2_config_from_json(transformer_fixture_file("gpt2_tiny_config.json")));
    load_gpt2(model, widened(tiny_file(), strip));
    check_close(model.infer(fixture_ids()), expected, 1e-12, 1e-12);
  }
}

TEST_CASE("export_gpt2: HF names and layouts, and it loads back unchanged") {
  GPT<double> model(gpt2_config_from_json(transformer_fixture_file("gpt2_tiny_config.json")));
  const TensorMap file = widened(tiny_file(), "transformer.");
  load_gpt2(model, file);
  const TensorDict<double> exported = export_gpt2(model);
  std::vector<std::string> expected_names;
  for (const auto& [name, t] : file)
    if (name.find(".attn.bias") == std::string::npos &&
        name.find(".attn.masked_bias") == std::string::npos)
      expected_names.push_back(name);
  std::vector<std::string> names = exported.keys();
  std::sort(names.begin(), names.end());
  CHECK(names == expected_names);
  for (const auto& entry : exported) {
    // not structured bindings: doctest's message macros capture them in lambdas (not C++17)
    const auto& name = std::get<0>(entry);
    const auto& value = std::get<1>(entry);
    INFO(name);
    CHECK(value == file.at(name).get<double>());
  }
  // Saved as a file, it loads into a fresh model bit for bit.
  const fs::path path = scratch("exported.safetensors");
  save_gpt2(model, path);
  GPT<double> fresh(gpt2_config_from_json(transformer_fixture_file("gpt2_tiny_config.json")));
  load_gpt2(fresh, path);
  CHECK(parameters_of(fresh) == parameters_of(model));
}

TEST_CASE("load_llama_attention and load_gpt2: every refusal leaves the model unchanged") {
  GPTConfig config = gpt2_config_from_json(transformer_fixture_file("gpt2_tiny_config.json"));
  GPT<double> model(config);
  const TensorMap good = widened(tiny_file());
  std::vector<Row> rows;
  const auto bad = row_adder(rows);
  TensorMap missing = good;
  missing.erase("transformer.h.1.mlp.c_fc.bias");
  bad("missing tensor", [&] { load_gpt2(model, missing); }, Expect::invalid_argument,
      {"load_gpt2", "no tensor", "transformer.h.1.mlp.c_fc.bias"});
  TensorMap wrong_shape = good;
  wrong_shape.erase("transformer.h.0.mlp.c_fc.weight");
  wrong_shape.emplace("transformer.h.0.mlp.c_fc.weight",
                      StoredTensor(xt::xarray<double>(xt::zeros<double>({128, 32}))));
  bad("transposed c_fc", [&] { load_gpt2(model, wrong_shape); }, Expect::invalid_argument,
      {"load_gpt2", "transformer.h.0.mlp.c_fc.weight", "[128, 32]", "expected [32, 128]",
       "Conv1D"});
  TensorMap unexpected = good;
  unexpected.emplace("transformer.h.2.ln_1.weight", StoredTensor(xt::xarray<double>({1.0})));
  bad("a third layer", [&] { load_gpt2(model, unexpected); }, Expect::invalid_argument,
      {"load_gpt2", "transformer.h.2.ln_1.weight", "not a parameter or buffer", "n_layer 2"});
  TensorMap head = good;
  head.emplace("lm_head.weight", StoredTensor(xt::xarray<double>(xt::zeros<double>({50, 32}))));
  bad("lm_head differs from wte", [&] { load_gpt2(model, head); }, Expect::invalid_argument,
      {"load_gpt2", "lm_head.weight", "differs", "tie_embeddings"});
  bad("float32 file into double", [&] { load_gpt2(model, tiny_file()); }, Expect::invalid_argument,
      {"load_gpt2", "transformer."});
  GPTConfig llama_config = config;
  llama_config.style = GPTStyle::llama;
  GPT<double> llama(llama_config);
  bad("llama style", [&] { load_gpt2(llama, good); }, Expect::invalid_argument,
      {"load_gpt2", "'model'", "llama style"});
  bad("a missing file", [&] { load_gpt2(model, scratch("absent.safetensors")); },
      Expect::runtime_error, {"xtgrad::load_gpt2: cannot open", "absent.safetensors"});
  CausalSelfAttentionOptions gpt2_layout;
  gpt2_layout.n_heads = 4;
  CausalSelfAttention<double> not_llama(16, gpt2_layout);
  bad("llama weights into the gpt2 layout",
      [&] {
        load_llama_attention(not_llama, transformer_fixture_file("llama_attention.safetensors"),
                             llama_attention_prefix(0));
      },
      Expect::invalid_argument, {"load_llama_attention", "'attention'", "gpt2 layout"});
  CausalSelfAttentionOptions mha_layout;
  mha_layout.n_heads = 4;
  mha_layout.layout = AttentionLayout::llama;
  mha_layout.rotary = true;
  CausalSelfAttention<double> no_gqa(16, mha_layout);
  bad("llama weights with other kv heads",
      [&] {
        load_llama_attention(no_gqa, transformer_fixture_file("llama_attention.safetensors"),
                             llama_attention_prefix(0));
      },
      Expect::invalid_argument,
      {"load_llama_attention", "k_proj.weight", "[8, 16]", "expected [16, 16]"});
  const auto snapshot = [&] {
    State s = parameters_of(model);
    for (const auto& [name, p] : no_gqa.named_parameters()) s.add(*p);
    return s;
  };
  report("load_gpt2", run_rows(rows, snapshot));
}

TEST_CASE("gpt2_config_from_json: refuses what GPT does not compute") {
  const std::string base =
      R"("vocab_size": 50, "n_positions": 16, "n_embd": 32, "n_layer": 2, "n_head": 4)";
  const auto refused = [&](const std::string& name, const std::string& body,
                           std::vector<std::string> parts) {
    INFO(name);
    const fs::path path = scratch(name + ".json");
    write_text(path, body);
    parts.insert(parts.begin(), "gpt2_config_from_json");
    bool thrown = false;
    try {
      gpt2_config_from_json(path);
    } catch (const std::invalid_argument& e) {
      thrown = true;
      CHECK(message_contains(e, parts));
    }
    CHECK(thrown);
  };
  refused("relu", "{" + base + R"(, "activation_function": "relu"})",
          {"\"activation_function\" is \"relu\"", "gelu_new"});
  refused("exact_gelu", "{" + base + R"(, "activation_function": "gelu"})", {"\"gelu\""});
  refused("no_n_embd", R"({"vocab_size": 50, "n_positions": 16, "n_layer": 2, "n_head": 4})",
          {"has no \"n_embd\""});
  refused("zero_layers", "{" + base + R"(, "n_layer": 0})", {"\"n_layer\" is 0", "positive"});
  refused("inverse_layer_idx", "{" + base + R"(, "scale_attn_by_inverse_layer_idx": true})",
          {"scale_attn_by_inverse_layer_idx"});
  refused("not_json", "{" + base, {"not valid JSON"});
  refused("heads",
          R"({"vocab_size": 50, "n_positions": 16, "n_embd": 30, "n_layer": 2, "n_head": 4})",
          {"\"n_head\" 4 does not divide \"n_embd\" 30"});
  refused("llama", "{" + base + R"(, "model_type": "llama"})", {"\"model_type\" is \"llama\""});
  // A NUL byte would end the parser's input: what follows it is not hidden.
  const std::string valid = "{" + base + "}";
  refused(
      "nul", valid + std::string("\0", 1) + R"({"n_layer": 0})",
      {"nul.json' byte " + std::to_string(valid.size()) + " is a NUL byte, expected JSON text"});
  refused("trailing", valid + "}", {"is not valid JSON", "expected end of input"});
  // n_vocab / n_ctx spellings and gelu_pytorch_tanh are accepted.
  const fs::path old = scratch("old.json");
  write_text(old, R"({"n_vocab": 7, "n_ctx": 5, "n_embd": 4, "n_layer": 1, "n_head": 2,
                      "activation_function": "gelu_pytorch_tanh", "n_inner": 10})");
  const GPTConfig c = gpt2_config_from_json(old);
  CHECK(c.vocab_size == 7);
  CHECK(c.block_size == 5);
  CHECK(*c.ffn_hidden == 10);
  CHECK_THROWS_AS(gpt2_config_from_json(scratch("absent.json")), std::runtime_error);
}
